/* test_dist_nccl.c: what of the GPU ranks' NCCL sums runs without a GPU: process 0's
 * unique id reaching every process over the rendezvous, byte for byte; the time limit's
 * variable; and the refusal, saying why, to open NCCL where CUDA cannot be loaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "dist.h"
#include "dist_nccl.h"

/* 128 distinct byte values in an order that is not the identity, 0 and 255 among them. */
static void make_id(unsigned char *id)
{
    for (int i = 0; i < TFM_GPU_COMM_ID_BYTES; i++)
        id[i] = (unsigned char)(i * 37 + 255);
    id[5] = 0;      /* 5 * 37 + 255 = 440 = 184 mod 256, which no other i < 128 gives */
}

/* One process of W: join, share, and exit 0 iff the id arrived whole. */
static int child(int rank, int world)
{
    struct tfm_error err;
    struct tfm_comm *c = tfm_comm_procs(rank, world, NULL, &err);
    if (!c) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        return 2;
    }
    unsigned char want[TFM_GPU_COMM_ID_BYTES], id[TFM_GPU_COMM_ID_BYTES];
    make_id(want);
    memset(id, rank == 0 ? 0 : 0xa5, sizeof id);   /* the others start with garbage */
    if (rank == 0)
        memcpy(id, want, sizeof id);
    int rc = tfm_gpu_comm_share_id(c, rank == 0, id, &err);
    if (rc)
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
    tfm_comm_free(c);
    return rc ? 3 : memcmp(id, want, sizeof id) ? 4 : 0;
}

static void test_share(int world)
{
    char rdv[] = "/tmp/tfm-test-nccl.XXXXXX";
    int fd = mkstemp(rdv);
    CHECK(fd >= 0);
    close(fd);
    unlink(rdv);    /* process 0 writes it, the others wait for it */
    setenv("TFM_RENDEZVOUS", rdv, 1);
    setenv("TFM_RENDEZVOUS_TIMEOUT", "30", 1);
    pid_t pid[8];
    for (int r = 0; r < world; r++) {
        fflush(NULL);
        if ((pid[r] = fork()) == 0)
            _exit(child(r, world));
        CHECK(pid[r] > 0);
    }
    for (int r = 0; r < world; r++) {
        int st = 0;
        CHECK(waitpid(pid[r], &st, 0) == pid[r]);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st))
            printf("# process %d of %d: status %d\n", r, world, st);
    }
    unlink(rdv);
    unsetenv("TFM_RENDEZVOUS");
}

static void test_share_2(void) { test_share(2); }
static void test_share_3(void) { test_share(3); }

static void test_timeout(void)
{
    struct tfm_error err;
    double s = 0;
    unsetenv("TFM_COLLECTIVE_TIMEOUT");
    CHECK(tfm_gpu_comm_timeout(&s, &err) == 0 && s == 300);
    setenv("TFM_COLLECTIVE_TIMEOUT", "2.5", 1);
    CHECK(tfm_gpu_comm_timeout(&s, &err) == 0 && s == 2.5);
    setenv("TFM_COLLECTIVE_TIMEOUT", "0", 1);
    CHECK(tfm_gpu_comm_timeout(&s, &err) == -1);
    CHECK(strstr(err.msg, "TFM_COLLECTIVE_TIMEOUT=0") != NULL);
    setenv("TFM_COLLECTIVE_TIMEOUT", "10s", 1);
    CHECK(tfm_gpu_comm_timeout(&s, &err) == -1);
    unsetenv("TFM_COLLECTIVE_TIMEOUT");
}

/* Without a usable GPU, making an id fails saying why (it needs the CUDA plugin). */
static void test_no_cuda(void)
{
    struct tfm_error err;
    unsigned char id[TFM_GPU_COMM_ID_BYTES];
    setenv("TFM_CUDA_LIB", "", 1);
    CHECK(tfm_gpu_comm_id(NULL, 1, id, &err) == -1);
    CHECK(strstr(err.msg, "NCCL: CUDA turned off") || strstr(err.msg, "NCCL: built without CUDA"));
    unsetenv("TFM_CUDA_LIB");
}

int main(void)
{
    t_run("the NCCL id reaches the other process over the rendezvous", test_share_2);
    t_run("the NCCL id reaches two other processes, 0 and 255 and 126 more values intact", test_share_3);
    t_run("TFM_COLLECTIVE_TIMEOUT: default 300 s, a positive number", test_timeout);
    t_run("no CUDA: opening NCCL fails saying why", test_no_cuda);
    return t_done();
}
