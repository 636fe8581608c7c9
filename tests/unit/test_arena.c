/* test_arena.c: under an address-space limit the CPU backend keeps malloc to one arena, so
 * that a thread's first malloc cannot reserve a 64 MiB arena of its own after the backend
 * measured the room OpenBLAS's buffers need (backend_cpu.c, "address-space limits": that
 * reservation, coming after the check, left OpenBLAS spinning).  Each case runs in a child
 * process, whose limit and malloc settings die with it. */
#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"

/* The process's address space (statm's first field), bytes. */
static double vm_size(void)
{
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%llu", &pages) != 1)
        pages = 0;
    if (f)
        fclose(f);
    return (double)pages * (double)sysconf(_SC_PAGESIZE);
}

static void *first_malloc(void *arg)
{
    void *p = malloc(4096);
    *(void **)arg = p;
    return NULL;
}

/* The growth of the address space across a new thread's first malloc (the thread joined),
 * in MiB; with a backend made first when backend is set.  -1 when a step fails. */
static double growth(int backend)
{
    int fd[2];
    if (pipe(fd))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        double mib = -1;
        struct rlimit rl = {(rlim_t)vm_size() + ((rlim_t)4 << 30),
                            (rlim_t)vm_size() + ((rlim_t)4 << 30)};
        struct tfm_error err;
        struct tfm_backend *be = NULL;
        if (setrlimit(RLIMIT_AS, &rl) == 0 && (!backend || (be = tfm_backend_cpu(2, &err)))) {
            pthread_t t;
            void *p = NULL;
            double before = vm_size();
            if (pthread_create(&t, NULL, first_malloc, &p) == 0 && pthread_join(t, NULL) == 0)
                mib = (vm_size() - before) / 1048576.0;
            free(p);
        }
        if (be)
            be->destroy(be);
        ssize_t w = write(fd[1], &mib, sizeof mib);
        _exit(w == (ssize_t)sizeof mib ? 0 : 1);
    }
    close(fd[1]);
    double mib = -1;
    if (pid < 0 || read(fd[0], &mib, sizeof mib) != (ssize_t)sizeof mib)
        mib = -1;
    close(fd[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return mib;
}

static void test_one_arena(void)
{
#if defined(__SANITIZE_ADDRESS__)
    t_skip("AddressSanitizer has its own allocator and reserves terabytes: no limit fits");
    return;
#endif
    double plain = growth(0), with = growth(1);
    /* glibc alone: a thread arena (64 MiB reserved) beside the thread's stack */
    printf("# a thread's first malloc under a limit: %.1f MiB without a backend, %.1f MiB "
           "with one\n", plain, with);
    CHECK(with >= 0);
    /* the stack (8 MiB, RLIMIT_STACK's default) may stay cached; no 64 MiB arena */
    CHECK(with < 32);
}

int main(void)
{
    t_run("under an address-space limit a thread's first malloc reserves no arena", test_one_arena);
    return t_done();
}
