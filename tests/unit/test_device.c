/* test_device.c: device choice.  On a machine without a GPU (this one, CI), a CUDA build
 * must start, report why, and fall back to the CPU for "auto"; "cuda" must be an error.
 * The check of a backend against the CPU passes for a correct one and names the stage a
 * broken one fails at; the "sim" stand-in for a GPU keeps device memory from the host. */
#include "check.h"
#include "device.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"

static void test_cpu(void)
{
    struct tfm_device d;
    struct tfm_error err;
    CHECK(tfm_device_choose("cpu", &d, &err) == 0);
    CHECK_EQ_INT(d.kind, TFM_BACKEND_CPU);
    CHECK(tfm_device_choose("tpu", &d, &err) == -1);
    CHECK(strstr(err.msg, "unknown device 'tpu'") != NULL);
}

static void test_auto(void)
{
    struct tfm_device d;
    struct tfm_error err;
    char msg[384];
    int n = tfm_device_cuda_count(msg, sizeof msg);
    printf("# %s\n", msg);
    CHECK(tfm_device_choose("auto", &d, &err) == 0);
    printf("# %s\n", d.note);
    if (n == 0) {
        CHECK_EQ_INT(d.kind, TFM_BACKEND_CPU);
        CHECK(strstr(d.note, "device: cpu, no GPU found") != NULL);
        CHECK(tfm_device_choose("cuda", &d, &err) == -1);
        CHECK(strstr(err.msg, "no CUDA device") != NULL);
    } else {
        CHECK_EQ_INT(d.kind, TFM_BACKEND_CUDA);
        CHECK_EQ_INT(d.count, n);
    }
#ifdef TFM_CUDA
    /* the plugin's probe line when the driver let it load, else why it was not loaded */
    CHECK(strstr(msg, "CUDA runtime") != NULL || strstr(msg, "NVIDIA driver") != NULL ||
          strstr(msg, "CUDA code") != NULL || strstr(msg, "CUDA turned off") != NULL);
    CHECK(strstr(msg, "built without CUDA") == NULL);
#else
    CHECK(strstr(msg, "built without CUDA") != NULL);
#endif
}

/* ---- the check against the CPU ---------------------------------------------------------- */

/* A CPU backend with one op made slightly wrong: what a faulty GPU kernel looks like. */
static struct tfm_backend real;
static void bad_gemm(struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc)
{
    real.gemm(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (M > 8 && N > 8)
        C[(size_t)5 * ldc + 7] += 0.01f;
}
static void bad_gemm_bias(struct tfm_backend *be, int ta, int tb, int M, int N, int K,
                          const float *A, int lda, const float *B, int ldb, const float *bias,
                          int relu, float *C, int ldc)
{
    real.gemm_bias(be, ta, tb, M, N, K, A, lda, B, ldb, bias, relu, C, ldc);
    if (M > 8 && N > 8)
        C[(size_t)5 * ldc + 7] += 0.01f;
}
static void bad_adam(struct tfm_backend *be, float *p, float *grad, float *m, float *v,
                     size_t n, float lr, float b1, float b2, float eps, float gscale,
                     int64_t step)
{
    real.adam(be, p, grad, m, v, n, lr, b1, b2, eps, gscale, step);
    p[n / 2] += 1e-3f;
}
static void bad_attn_decode(struct tfm_backend *be, int R, int H, int dk, float scale,
                            const float *q, int ldq, const float *k, const float *v, int ld,
                            int64_t bstride, const int32_t *blk, const int32_t *slot,
                            int sstride, const int32_t *len, float *o, int ldo)
{
    real.attn_decode(be, R, H, dk, scale, q, ldq, k, v, ld, bstride, blk, slot, sstride, len,
                     o, ldo);
    o[1] *= 1.01f;
}
static void bad_bias_bwd(struct tfm_backend *be, float *db, const float *dy, int N, int M)
{
    real.bias_bwd(be, db, dy, N, M);
    db[M - 1] += 0.01f;
}
static void bad_upload(struct tfm_backend *be, void *dst, const void *host, size_t bytes)
{
    real.upload(be, dst, host, bytes);
    if (bytes > 4096)
        ((float *)dst)[100] = 0.5f;
}

static void test_check(void)
{
    struct tfm_error err;
    char note[256];
    struct tfm_backend *be = tfm_backend_cpu(2, &err);
    CHECK(be != NULL);
    if (!be)
        return;
    real = *be;
    CHECK(tfm_device_check(be, note, sizeof note, &err) == 0);
    printf("# %s\n", note);
    CHECK(strstr(note, "checked against the CPU") != NULL);
    static const struct {
        const char *op, *want;
    } cases[] = {
        {"upload", "parameters differ from the CPU's after upload and download"},
        {"gemm_bias", "cpu: the loss of a training batch is "},
        {"gemm", "cpu: the gradient of "},      /* the forward's products are gemm_bias */
        {"bias_bwd", "cpu: the gradient of "},
        {"adam", "after an Adam step differ from the CPU's"},
        {"attn_decode", "decoding step 1: log-probabilities differ"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        *be = real;
        if (!strcmp(cases[i].op, "upload"))
            be->upload = bad_upload;
        else if (!strcmp(cases[i].op, "gemm_bias"))
            be->gemm_bias = bad_gemm_bias;
        else if (!strcmp(cases[i].op, "gemm"))
            be->gemm = bad_gemm;
        else if (!strcmp(cases[i].op, "bias_bwd"))
            be->bias_bwd = bad_bias_bwd;
        else if (!strcmp(cases[i].op, "adam"))
            be->adam = bad_adam;
        else
            be->attn_decode = bad_attn_decode;
        CHECK(tfm_device_check(be, note, sizeof note, &err) == -1);
        printf("#   broken %s: %s\n", cases[i].op, err.msg);
        CHECK(strstr(err.msg, cases[i].want) != NULL);
    }
    *be = real;
    be->destroy(be);
}

/* ---- the sim device ---------------------------------------------------------------------- */

static void test_open(void)
{
    struct tfm_error err;
    char note[1024];
    struct tfm_backend *gpus[4];
    int n = -1;
    CHECK(tfm_device_open_gpus("cpu", 1, 0, 0, gpus, &n, note, sizeof note, &err) == 0);
    CHECK_EQ_INT(n, 0);
    CHECK(tfm_device_open_gpus("tpu", 1, 0, 0, gpus, &n, note, sizeof note, &err) == -1);
    CHECK(strstr(err.msg, "unknown device 'tpu' (auto, cpu, cuda or sim)") != NULL);
    /* sim: one by default, or as many as asked, each checked */
    CHECK(tfm_device_open_gpus("sim", 1, 0, 0, gpus, &n, note, sizeof note, &err) == 0);
    CHECK_EQ_INT(n, 1);
    printf("# %s\n", note);
    CHECK(strstr(note, "; sim checked against the CPU") != NULL);
    for (int i = 0; i < n; i++) {
        CHECK(gpus[i]->host_memory == 0);
        gpus[i]->destroy(gpus[i]);
    }
    CHECK(tfm_device_open_gpus("sim", 2, 0, 3, gpus, &n, note, sizeof note, &err) == 0);
    CHECK_EQ_INT(n, 3);
    CHECK(strstr(note, "3 sim devices, each checked") != NULL);
    for (int i = 0; i < n; i++)
        gpus[i]->destroy(gpus[i]);
    CHECK(tfm_device_open_gpus("sim", 1, 0, TFM_DEVICE_MAX + 1, gpus, &n, note, sizeof note,
                               &err) == -1);
    CHECK(strstr(err.msg, "GPUs wanted") != NULL);
    char msg[384];
    if (tfm_device_cuda_count(msg, sizeof msg) == 0) {
        CHECK(tfm_device_open_gpus("auto", 1, 0, 0, gpus, &n, note, sizeof note, &err) == 0);
        CHECK_EQ_INT(n, 0);
        CHECK(strstr(note, "device: cpu, no GPU found") != NULL);
        CHECK(tfm_device_open_gpus("cuda", 1, 0, 0, gpus, &n, note, sizeof note, &err) == -1);
        CHECK(strstr(err.msg, "--device cuda: no CUDA device") != NULL);
    }
}

/* Run fn in a child: the signal that ended it, or 0 when it exited with status 0, -1 when
 * with another (a sanitizer's handler turns the expected SIGSEGV into exit status 1). */
static int child_signal(void (*fn)(struct tfm_backend *), struct tfm_backend *be)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        fn(be);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void host_reads_device(struct tfm_backend *be)
{
    struct tfm_error err;
    volatile float *x = be->alloc(be, 1024, &err);
    freopen("/dev/null", "w", stderr);      /* a sanitizer's report of the fault */
    signal(SIGSEGV, SIG_DFL);   /* the expected fault, not a sanitizer's finding */
    (void)x[3];
}

static void op_gets_host(struct tfm_backend *be)
{
    float host[16] = {0};
    freopen("/dev/null", "w", stderr);      /* the abort's message is expected */
    be->axpy(be, host, 1.0f, host, 16);
}

static void op_gets_device(struct tfm_backend *be)
{
    struct tfm_error err;
    float *x = be->alloc(be, 64 * sizeof(float), &err), h[64];
    for (int i = 0; i < 64; i++)
        h[i] = (float)i;
    be->upload(be, x, h, sizeof h);
    be->axpy(be, x, 1.0f, x, 64);     /* x *= 2 */
    be->download(be, h, x, sizeof h);
    _exit(h[63] == 126.0f ? 0 : 1);
}

static void test_sim(void)
{
    struct tfm_error err;
    struct tfm_backend *be = tfm_backend_sim(1, &err);
    CHECK(be != NULL);
    if (!be)
        return;
    CHECK_STR(be->name, "sim");
    CHECK_EQ_INT(be->host_memory, 0);
    CHECK_EQ_INT(child_signal(op_gets_device, be), 0);      /* the device path works */
    int sig = child_signal(host_reads_device, be);
    CHECK(sig == SIGSEGV || sig == -1);
    sig = child_signal(op_gets_host, be);
    CHECK(sig == SIGABRT || sig == -1);
    be->destroy(be);
}

int main(void)
{
    t_run("device cpu and bad names", test_cpu);
    t_run("device auto falls back to cpu without a GPU", test_auto);
    t_run("the check against the CPU passes a correct backend, names a broken op's stage",
          test_check);
    t_run("opening a device: cpu, auto and cuda without a GPU, sim", test_open);
    t_run("sim: the host cannot touch device memory, ops refuse host memory", test_sim);
    return t_done();
}
