/* test_output: outputs that appear whole or not at all (src/output.h): where links lead,
 * what is written in place, and the temporaries a signal removes. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "output.h"

/* Write s to path through output.c; 0 or -1 (err set). */
static int put(const char *path, const char *s, struct tfm_error *err)
{
    struct tfm_output o;
    if (tfm_output_open(&o, path, err))
        return -1;
    if (tfm_output_write(&o, s, strlen(s), err)) {
        tfm_output_abort(&o);
        return -1;
    }
    return tfm_output_commit(&o, err);
}

/* The first bytes of path, or "" when it cannot be read (valid until the next call). */
static const char *contents(const char *path)
{
    static char buf[256];
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        buf[fread(buf, 1, sizeof buf - 1, f)] = '\0';
        fclose(f);
    }
    return buf;
}

static int is_link(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

/* The temporary a process pid would write for path. */
static const char *tmp_of(const char *path, long pid)
{
    static char p[600];
    snprintf(p, sizeof p, "%s.tmp.%ld", path, pid);
    return p;
}

static void test_regular(void)
{
    struct tfm_error err;
    const char *a = t_path("a");
    CHECK(put(a, "one", &err) == 0);
    CHECK_STR(contents(a), "one");
    CHECK(put(a, "two", &err) == 0);
    CHECK_STR(contents(a), "two");
    CHECK(access(tmp_of(a, getpid()), F_OK) != 0);
    /* aborted: the old file stays, no temporary */
    struct tfm_output o;
    CHECK(tfm_output_open(&o, a, &err) == 0);
    CHECK(tfm_output_write(&o, "three", 5, &err) == 0);
    CHECK(access(tmp_of(a, getpid()), F_OK) == 0);
    tfm_output_abort(&o);
    tfm_output_abort(&o);
    CHECK_STR(contents(a), "two");
    CHECK(access(tmp_of(a, getpid()), F_OK) != 0);
}

static void test_links(void)
{
    struct tfm_error err;
    /* a chain of links, one relative to its own directory: the end is replaced */
    CHECK(mkdir(t_path("d"), 0777) == 0);
    CHECK(put(t_path("target"), "old", &err) == 0);
    CHECK(symlink("../target", t_path("d/rel")) == 0);
    CHECK(symlink("d/rel", t_path("link")) == 0);
    CHECK(put(t_path("link"), "new", &err) == 0);
    CHECK(is_link(t_path("link")) && is_link(t_path("d/rel")));
    CHECK_STR(contents(t_path("target")), "new");
    CHECK(access(tmp_of(t_path("link"), getpid()), F_OK) != 0);
    CHECK(access(tmp_of(t_path("target"), getpid()), F_OK) != 0);
    /* a link to a file not yet made, in a directory that exists: made there */
    CHECK(symlink("d/later", t_path("dangling")) == 0);
    CHECK(put(t_path("dangling"), "made", &err) == 0);
    CHECK(is_link(t_path("dangling")));
    CHECK_STR(contents(t_path("d/later")), "made");
    /* ... in a directory that does not: an error naming the path given */
    CHECK(symlink("nodir/x", t_path("nowhere")) == 0);
    CHECK(put(t_path("nowhere"), "x", &err) == -1);
    CHECK(strstr(err.msg, "nowhere: No such file or directory") != NULL);
    CHECK(is_link(t_path("nowhere")));
    /* a loop, a directory, an empty path: refused */
    CHECK(symlink("loop", t_path("loop")) == 0);
    CHECK(put(t_path("loop"), "x", &err) == -1);
    CHECK(strstr(err.msg, strerror(ELOOP)) != NULL);
    CHECK(symlink("d", t_path("dirlink")) == 0);
    CHECK(put(t_path("dirlink"), "x", &err) == -1);
    CHECK(strstr(err.msg, "is a directory") != NULL);
    CHECK(put(t_path("d"), "x", &err) == -1);
    CHECK(strstr(err.msg, "is a directory") != NULL);
    CHECK(put("", "x", &err) == -1);
    CHECK(strstr(err.msg, "empty") != NULL);
}

static void test_in_place(void)
{
    struct tfm_error err;
    /* a device: written, not replaced (as root, a regression would rename a file over
     * /dev/null itself: not risked there) */
    struct stat st;
    if (access("/dev", W_OK) != 0) {
        CHECK(put("/dev/null", "x", &err) == 0);
        CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
    }
    /* a FIFO with a reader: what is written comes out of it */
    const char *fifo = t_path("fifo");
    CHECK(mkfifo(fifo, 0666) == 0);
    int r = open(fifo, O_RDONLY | O_NONBLOCK);
    CHECK(r >= 0);
    CHECK(put(fifo, "piped", &err) == 0);
    char buf[16] = {0};
    CHECK(read(r, buf, sizeof buf - 1) == 5);
    CHECK_STR(buf, "piped");
    close(r);
    CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    CHECK(access(tmp_of(fifo, getpid()), F_OK) != 0);
}

/* dup2 fd onto target (1, open when the program started), saving the old one in *saved. */
static int swap_in(int fd, int target, int *saved)
{
    fflush(stdout);
    *saved = dup(target);
    return *saved >= 0 && dup2(fd, target) == target ? 0 : -1;
}

static void swap_out(int target, int saved)
{
    dup2(saved, target);
    close(saved);
}

static void test_own_fds(void)
{
    struct tfm_error err;
    struct stat st;
    if (access("/proc/self/fd/0", F_OK) != 0) {
        t_skip("no /proc");
        return;
    }
    /* a descriptor opened since the program started (as an input is, before the output):
     * refused, whatever the name, the file untouched */
    const char *p = t_path("opened");
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0666);
    CHECK(fd >= 0 && write(fd, "input", 5) == 5);
    char proc[64], devfd[64], pid[64], want[128];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    snprintf(devfd, sizeof devfd, "/dev/fd/%d", fd);
    snprintf(pid, sizeof pid, "/proc/%ld/fd/%d", (long)getpid(), fd);
    snprintf(want, sizeof want, "descriptor %d was not open when the program started", fd);
    CHECK(symlink(proc, t_path("via")) == 0);
    const char *names[] = {proc, devfd, pid, "/proc/thread-self/fd/999", t_path("via")};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        CHECK(put(names[i], "output", &err) == -1);
        if (i != 3)
            CHECK(strstr(err.msg, want) != NULL);
    }
    CHECK(strstr(err.msg, t_path("via")) != NULL);
    CHECK(is_link(t_path("via")));
    CHECK_STR(contents(p), "input");
    close(fd);

    /* standard output, open at start and redirected to a file: written through the
     * descriptor, at the offset shared with what is written before and after it (a shell's
     * `{ echo AAAA; tool -o /dev/stdout; echo BBBB; } > f`), under every name */
    if (fcntl(1, F_GETFD) == -1) {
        t_skip("standard output closed");
        return;
    }
    const char *g = t_path("group");
    int saved = -1, out = open(g, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    CHECK(out >= 0 && swap_in(out, 1, &saved) == 0);
    close(out);
    CHECK(write(1, "AAAA,", 5) == 5);
    snprintf(pid, sizeof pid, "/proc/%ld/fd/1", (long)getpid());
    CHECK(symlink("/dev/stdout", t_path("via1")) == 0);
    int ok = put("/dev/stdout", "a,", &err) == 0 && put("/dev/fd/1", "b,", &err) == 0 &&
             put("/proc/self/fd/1", "c,", &err) == 0 && put(pid, "d,", &err) == 0 &&
             put("/proc/thread-self/fd/1", "e,", &err) == 0 &&
             put(t_path("via1"), "f,", &err) == 0;
    int w = write(1, "BBBB", 4) == 4;
    int stdout_ok = fcntl(1, F_GETFD) != -1;    /* the tool's copy closed, not fd 1 */
    swap_out(1, saved);
    CHECK(ok && w && stdout_ok);
    if (!ok)
        printf("# %s\n", err.msg);
    CHECK_STR(contents(g), "AAAA,a,b,c,d,e,f,BBBB");
    CHECK(is_link(t_path("via1")));
    CHECK(stat("/dev/stdout", &st) == 0);

    /* a socket, which cannot be opened through /proc: written to all the same */
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    CHECK(swap_in(sv[0], 1, &saved) == 0);
    close(sv[0]);
    ok = put("/proc/self/fd/1", "sock", &err) == 0;
    swap_out(1, saved);
    CHECK(ok);
    char buf[16] = {0};
    CHECK(read(sv[1], buf, sizeof buf - 1) == 4);
    CHECK_STR(buf, "sock");
    close(sv[1]);
}

/* ---- signals: each case in a child, which the signal ends ------------------------- */

static void *wait_for_signal(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

/* The child: an output open, then SIGTERM, taken by another thread (the main thread
 * blocks it).  It must die of the signal, the temporary gone. */
static void child_thread_signal(const char *path)
{
    struct tfm_error err;
    struct tfm_output o;
    tfm_output_catch_signals();
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    if (tfm_output_open(&o, path, &err) || tfm_output_write(&o, "partial", 7, &err) ||
        access(o.tmp, F_OK) != 0)
        _exit(3);
    sigset_t none;
    sigemptyset(&none);
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_sigmask(SIG_SETMASK, &none, &set);  /* the thread is born with SIGTERM open */
    int rc = pthread_create(&th, &attr, wait_for_signal, NULL);
    pthread_sigmask(SIG_SETMASK, &set, NULL);
    if (rc)
        _exit(4);
    kill(getpid(), SIGTERM);
    sleep(10);
    _exit(5);                           /* not reached: the signal ends the process */
}

/* The child forks: the grandchild dies of SIGINT, and must leave the child's temporary
 * alone; the child then commits it and exits 0. */
static void child_fork(const char *path)
{
    struct tfm_error err;
    struct tfm_output o;
    tfm_output_catch_signals();
    if (tfm_output_open(&o, path, &err) || tfm_output_write(&o, "whole", 5, &err))
        _exit(3);
    pid_t g = fork();
    if (g == 0) {
        raise(SIGINT);
        _exit(6);
    }
    int st;
    if (g < 0 || waitpid(g, &st, 0) != g || !WIFSIGNALED(st) || WTERMSIG(st) != SIGINT)
        _exit(4);
    if (access(o.tmp, F_OK) != 0)
        _exit(5);
    _exit(tfm_output_commit(&o, &err) ? 7 : 0);
}

/* SIGHUP ignored before (nohup): still ignored after, the output finished. */
static void child_ignored(const char *path)
{
    struct tfm_error err;
    struct tfm_output o;
    signal(SIGHUP, SIG_IGN);
    tfm_output_catch_signals();
    if (tfm_output_open(&o, path, &err))
        _exit(3);
    raise(SIGHUP);
    _exit(tfm_output_write(&o, "kept", 4, &err) || tfm_output_commit(&o, &err) ? 4 : 0);
}

/* Run child(path) in a child process; its wait status; *pid its pid. */
static int in_child(void (*child)(const char *), const char *path, pid_t *pid)
{
    fflush(stdout);
    *pid = fork();
    if (*pid == 0)
        child(path);
    int st = -1;
    if (*pid < 0 || waitpid(*pid, &st, 0) != *pid)
        return -1;
    return st;
}

static void test_signals(void)
{
    pid_t pid;
    const char *a = t_path("killed");
    int st = in_child(child_thread_signal, a, &pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
    CHECK(access(tmp_of(a, pid), F_OK) != 0);
    CHECK(access(a, F_OK) != 0);

    const char *b = t_path("forked");
    st = in_child(child_fork, b, &pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_STR(contents(b), "whole");
    CHECK(access(tmp_of(b, pid), F_OK) != 0);

    const char *c = t_path("nohup");
    st = in_child(child_ignored, c, &pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_STR(contents(c), "kept");
}

/* SIGBUS: a file mapped (two pages), cut to nothing, then read in its second page, with
 * the map entered (0), not entered (1), shrunk to its first page (2) or forgotten (3)
 * first.  stderr goes to PATH.err. */
static int bus_mode;

static void child_bus(const char *path)
{
    char err_path[600];
    snprintf(err_path, sizeof err_path, "%s.err", path);
    int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (e < 0 || dup2(e, 2) < 0)
        _exit(3);
    tfm_output_catch_bus_error("prog");
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    int fd = open(path, O_RDWR);
    const char *m = fd < 0 ? MAP_FAILED : mmap(NULL, 2 * page, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        _exit(4);
    int slot = bus_mode == 1 ? 0 : tfm_output_mapped(m, 2 * page, path);
    if (bus_mode != 1 && slot <= 0)
        _exit(5);
    if (bus_mode == 2)
        tfm_output_mapped_shrink(slot, page);
    if (bus_mode == 3)
        tfm_output_mapped_forget(slot);
    if (ftruncate(fd, 0))
        _exit(6);
    volatile char c = m[page + 1];
    (void)c;
    _exit(7);                           /* not reached: the read faults */
}

static void test_bus_error(void)
{
    if (getenv("TFM_SANITIZE"))
        return t_skip("the sanitizers take SIGBUS for themselves");
    const char *path = t_path("mapped");
    char err_path[600], want[1024], got[1024];
    snprintf(err_path, sizeof err_path, "%s.err", path);
    static const char advice[] = "replace a file in use by renaming a new one over it, as "
                                 "tfm-train and tfm-avg do\n";
    for (bus_mode = 0; bus_mode < 4; bus_mode++) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        CHECK(fd >= 0 && ftruncate(fd, (off_t)(2 * page)) == 0);
        close(fd);
        pid_t pid;
        int st = in_child(child_bus, path, &pid);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS);
        if (bus_mode == 0)      /* in the map entered: named */
            snprintf(want, sizeof want, "prog: %s: bus error: the file was truncated while "
                     "it was mapped into memory; %s", path, advice);
        else                    /* in no map entered: said without a name */
            snprintf(want, sizeof want, "prog: bus error: a file it had mapped into memory "
                     "(an input or a checkpoint) was truncated while in use; %s", advice);
        got[0] = '\0';
        FILE *f = fopen(err_path, "r");
        if (f) {
            got[fread(got, 1, sizeof got - 1, f)] = '\0';
            fclose(f);
        }
        CHECK_STR(got, want);
    }
}

int main(void)
{
    t_run("a regular file: replaced whole, an abort leaves the old one", test_regular);
    t_run("links: followed to their end, which is replaced; the links stay", test_links);
    t_run("devices and FIFOs: written in place", test_in_place);
    t_run("a descriptor named (/dev/stdout, /dev/fd/N): written through it if open at start",
          test_own_fds);
    t_run("signals: the temporary removed, the process dies of the signal", test_signals);
    t_run("SIGBUS names the file whose map the address is in, if any", test_bus_error);
    return t_done();
}
