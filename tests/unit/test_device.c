/* test_device.c: device choice.  On a machine without a GPU (this one, CI), a CUDA build
 * must start, report why, and fall back to the CPU for "auto"; "cuda" must be an error.
 * The check of a backend against the CPU passes for a correct one and names the stage a
 * broken one fails at; the "sim" stand-in for a GPU keeps device memory from the host. */
#include "check.h"
#include "device.h"

#include <cblas.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "blas.h"

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

/* OpenBLAS's own idle threads take a buffer the first time they run, at a moment nobody
 * chooses: the CPU backend ends them as it starts (a BLAS without them is left as it is). */
extern int blas_thread_shutdown_(void) __attribute__((weak));

static int tasks(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void test_blas_threads(void)
{
    int idle = blas_thread_shutdown_ ? openblas_get_num_threads() - 1 : 0;
    int before = tasks();
    struct tfm_error err;
    struct tfm_backend *be = tfm_backend_cpu(1, &err);
    CHECK(be != NULL);
    if (!be)
        return;
    printf("# %d threads before, %d of them OpenBLAS's idle ones; %d after\n", before, idle,
           tasks());
    CHECK_EQ_INT(tasks(), before - idle);
    be->destroy(be);
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

/* ---- the bf16 pass ----------------------------------------------------------------------- */

/* Faults of the bf16 path only: at fp32 the op is right, at bf16 a few elements of its
 * result are off by a few per cent (a vector path's tail, a wrongly scaled epilogue). */
static float bf16_fault;
/* every 16th element of C, r * 7 + c apart (not whole rows: a layer norm after the op would
 * hide rows scaled as a whole) */
static void bf16_perturb(const struct tfm_backend *be, float *C, int M, int N, int ldc)
{
    if (be->precision != TFM_PRECISION_BF16)
        return;
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            if ((r * 7 + c) % 16 == 0)
                C[(size_t)r * ldc + c] *= bf16_fault;
}
static void bf16_bad_gemm_bias(struct tfm_backend *be, int ta, int tb, int M, int N, int K,
                               const float *A, int lda, const float *B, int ldb,
                               const float *bias, int relu, float *C, int ldc)
{
    real.gemm_bias(be, ta, tb, M, N, K, A, lda, B, ldb, bias, relu, C, ldc);
    bf16_perturb(be, C, M, N, ldc);
}
static void bf16_bad_gemm(struct tfm_backend *be, int ta, int tb, int M, int N, int K,
                          float alpha, const float *A, int lda, const float *B, int ldb,
                          float beta, float *C, int ldc)
{
    real.gemm(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    bf16_perturb(be, C, M, N, ldc);
}
static void bf16_bad_bias_bwd(struct tfm_backend *be, float *db, const float *dy, int N, int M)
{
    real.bias_bwd(be, db, dy, N, M);
    bf16_perturb(be, db, 1, M, M);
}
static void bf16_bad_attn_decode(struct tfm_backend *be, int R, int H, int dk, float scale,
                                 const float *q, int ldq, const float *k, const float *v,
                                 int ld, int64_t bstride, const int32_t *blk,
                                 const int32_t *slot, int sstride, const int32_t *len, float *o,
                                 int ldo)
{
    real.attn_decode(be, R, H, dk, scale, q, ldq, k, v, ld, bstride, blk, slot, sstride, len,
                     o, ldo);
    if (be->precision == TFM_PRECISION_BF16)     /* decoding is less sensitive: more */
        for (int r = 0; r < R; r++)
            for (int j = 3; j < H * dk; j += 4)
                o[(size_t)r * ldo + j] *= bf16_fault;
}

/* A correct backend of another summation order: gemm summing in double, last term first. */
static double elem(const float *X, int t, int ld, int r, int c)
{
    return t ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
}
static void reordered_gemm(struct tfm_backend *be, int ta, int tb, int M, int N, int K,
                           float alpha, const float *A, int lda, const float *B, int ldb,
                           float beta, float *C, int ldc)
{
    (void)be;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double sum = 0;
            for (int k = K - 1; k >= 0; k--)
                sum += elem(A, ta, lda, i, k) * elem(B, tb, ldb, k, j);
            float *c = C + (size_t)i * ldc + j;
            *c = (float)(alpha * sum + (beta == 0 ? 0 : beta * (double)*c));
        }
}

static void set_bf16_fault(struct tfm_backend *be, const char *op)
{
    *be = real;
    if (!strcmp(op, "gemm_bias"))
        be->gemm_bias = bf16_bad_gemm_bias;
    else if (!strcmp(op, "gemm"))
        be->gemm = bf16_bad_gemm;
    else if (!strcmp(op, "bias_bwd"))
        be->bias_bwd = bf16_bad_bias_bwd;
    else
        be->attn_decode = bf16_bad_attn_decode;
}

static void test_check_bf16(void)
{
    struct tfm_error err;
    char note[1024];
    /* a correct stand-in for a GPU passes at bf16, packed and in fp32 words */
    for (int packed = 1; packed >= 0; packed--) {
        setenv("TFM_SIM_PACKED", packed ? "1" : "0", 1);
        struct tfm_backend *sim = tfm_backend_sim(1, &err);
        unsetenv("TFM_SIM_PACKED");
        CHECK(sim != NULL);
        if (!sim)
            return;
        CHECK(tfm_device_check_bf16(sim, note, sizeof note, &err) == 0);
        printf("# sim%s: %s\n", packed ? "" : " (TFM_SIM_PACKED=0)", note);
        CHECK(strstr(note, "at bf16 against the CPU's emulation: within 0, 0, 0, 0") != NULL);
        CHECK_EQ_INT(sim->precision, TFM_PRECISION_FP32);   /* left as it was */
        CHECK_EQ_INT(sim->act_size, (int)sizeof(float));
        /* asked for bf16: both passes, in one note */
        CHECK(tfm_device_check_for(sim, TFM_PRECISION_BF16, note, sizeof note, &err) == 0);
        CHECK(strstr(note, "checked against the CPU") != NULL);
        CHECK(strstr(note, "; at bf16 against the CPU's emulation") != NULL);
        /* auto on the sim device is fp32: no bf16 pass */
        CHECK(tfm_device_check_for(sim, TFM_PRECISION_AUTO, note, sizeof note, &err) == 0);
        CHECK(strstr(note, "bf16") == NULL);
        sim->destroy(sim);
    }

    /* faults of the bf16 path: the fp32 pass cannot see them, the bf16 pass names them */
    struct tfm_backend *be = tfm_backend_cpu(2, &err);
    CHECK(be != NULL);
    if (!be)
        return;
    real = *be;
    CHECK(tfm_device_check_bf16(be, note, sizeof note, &err) == 0);
    printf("# cpu: %s\n", note);
    be->gemm = reordered_gemm;      /* the products in another order: both passes pass */
    CHECK(tfm_device_check(be, note, sizeof note, &err) == 0);
    printf("# products summed in another order: %s\n", note);
    CHECK(tfm_device_check_bf16(be, note, sizeof note, &err) == 0);
    printf("# products summed in another order: %s\n", note);
    static const struct {
        const char *op;
        float fault;
        const char *want;
    } cases[] = {
        {"gemm_bias", 1.05f, "cpu at bf16: the gradient of "},
        {"gemm", 1.05f, "cpu at bf16: the gradient of "},
        {"bias_bwd", 1.05f, "cpu at bf16: the gradient of "},
        {"attn_decode", 1.1f, "cpu at bf16: decoding step 1: log-probabilities differ"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        set_bf16_fault(be, cases[i].op);
        bf16_fault = cases[i].fault;
        CHECK(tfm_device_check(be, note, sizeof note, &err) == 0);
        CHECK(tfm_device_check_bf16(be, note, sizeof note, &err) == -1);
        printf("#   bf16 broken %s: %s\n", cases[i].op, err.msg);
        CHECK(strstr(err.msg, cases[i].want) != NULL);
        CHECK_EQ_INT(be->precision, TFM_PRECISION_FP32);
    }

    /* the outcomes: auto (bf16 where the backend's auto is) falls back to fp32 on the
     * device, saying why; bf16 asked is an error naming the stage; fp32 does not look */
    set_bf16_fault(be, "gemm");
    bf16_fault = 1.05f;
    be->auto_precision = TFM_PRECISION_BF16;       /* as on CUDA */
    CHECK(tfm_device_check_for(be, TFM_PRECISION_AUTO, note, sizeof note, &err) == 0);
    printf("# auto: %s\n", note);
    CHECK(strstr(note, "checked against the CPU") != NULL);
    CHECK(strstr(note, "; bf16 failed its check (cpu at bf16: the gradient of ") != NULL);
    CHECK(strstr(note, "): computing in fp32") != NULL);
    CHECK_EQ_INT(be->auto_precision, TFM_PRECISION_FP32);
    be->auto_precision = TFM_PRECISION_BF16;
    CHECK(tfm_device_check_for(be, TFM_PRECISION_BF16, note, sizeof note, &err) == -2);
    printf("# bf16: %s\n", err.msg);
    CHECK(strstr(err.msg, "precision bf16: cpu at bf16: the gradient of ") != NULL);
    CHECK(tfm_device_check_for(be, TFM_PRECISION_FP32, note, sizeof note, &err) == 0);
    CHECK(strstr(note, "bf16") == NULL);
    CHECK_EQ_INT(be->auto_precision, TFM_PRECISION_BF16);
    /* a correct backend: auto at bf16 checks both and keeps bf16 */
    *be = real;
    be->auto_precision = TFM_PRECISION_BF16;
    CHECK(tfm_device_check_for(be, TFM_PRECISION_AUTO, note, sizeof note, &err) == 0);
    CHECK(strstr(note, "; at bf16 against the CPU's emulation") != NULL);
    CHECK_EQ_INT(be->auto_precision, TFM_PRECISION_BF16);
    /* the fp32 pass still comes first: its failure is -1, whatever the precision */
    be->gemm = bad_gemm;
    CHECK(tfm_device_check_for(be, TFM_PRECISION_BF16, note, sizeof note, &err) == -1);
    CHECK(strstr(err.msg, "cpu: the gradient of ") != NULL);
    *be = real;
    be->destroy(be);

    /* opening: the CPU is not checked, at any precision; sim at bf16 asked checks both
     * passes; at auto, fp32's only */
    struct tfm_gpus g;
    CHECK(tfm_device_open_gpus("cpu", TFM_PRECISION_BF16, 1, 0, 0, &g, &err) == 0);
    CHECK_EQ_INT(g.count, 0);
    CHECK_EQ_INT(g.fallback, 0);
    char cpu_note[sizeof g.note];
    snprintf(cpu_note, sizeof cpu_note, "device: cpu (as asked); %s", tfm_blas_fit());
    CHECK_STR(g.note, cpu_note);
    CHECK(tfm_device_open_gpus("sim", TFM_PRECISION_BF16, 1, 0, 0, &g, &err) == 0);
    CHECK_EQ_INT(g.count, 1);
    CHECK_EQ_INT(g.fallback, 0);
    printf("# %s\n", g.note);
    CHECK(strstr(g.note, "; sim checked against the CPU") != NULL);
    CHECK(strstr(g.note, "; at bf16 against the CPU's emulation") != NULL);
    for (int i = 0; i < g.count; i++)
        g.be[i]->destroy(g.be[i]);
    CHECK(tfm_device_open_gpus("sim", TFM_PRECISION_AUTO, 1, 0, 2, &g, &err) == 0);
    CHECK_EQ_INT(g.count, 2);
    CHECK(strstr(g.note, "bf16") == NULL);
    for (int i = 0; i < g.count; i++)
        g.be[i]->destroy(g.be[i]);
}

/* ---- the sim device ---------------------------------------------------------------------- */

static void test_open(void)
{
    struct tfm_error err;
    struct tfm_gpus g;
    CHECK(tfm_device_open_gpus("cpu", TFM_PRECISION_AUTO, 1, 0, 0, &g, &err) == 0);
    CHECK_EQ_INT(g.count, 0);
    CHECK(tfm_device_open_gpus("tpu", TFM_PRECISION_AUTO, 1, 0, 0, &g, &err) == -1);
    CHECK(strstr(err.msg, "unknown device 'tpu' (auto, cpu, cuda or sim)") != NULL);
    /* sim: one by default, or as many as asked, each checked */
    CHECK(tfm_device_open_gpus("sim", TFM_PRECISION_AUTO, 1, 0, 0, &g, &err) == 0);
    CHECK_EQ_INT(g.count, 1);
    printf("# %s\n", g.note);
    CHECK(strstr(g.note, "; sim checked against the CPU") != NULL);
    for (int i = 0; i < g.count; i++) {
        CHECK(g.be[i]->host_memory == 0);
        g.be[i]->destroy(g.be[i]);
    }
    CHECK(tfm_device_open_gpus("sim", TFM_PRECISION_AUTO, 2, 0, 3, &g, &err) == 0);
    CHECK_EQ_INT(g.count, 3);
    CHECK(strstr(g.note, "3 sim devices, each checked") != NULL);
    for (int i = 0; i < g.count; i++)
        g.be[i]->destroy(g.be[i]);
    CHECK(tfm_device_open_gpus("sim", TFM_PRECISION_AUTO, 1, 0, TFM_DEVICE_MAX + 1, &g,
                               &err) == -1);
    CHECK(strstr(err.msg, "GPUs wanted") != NULL);
    char msg[384];
    if (tfm_device_cuda_count(msg, sizeof msg) == 0) {
        /* no GPU at all is no fallback */
        CHECK(tfm_device_open_gpus("auto", TFM_PRECISION_AUTO, 1, 0, 0, &g, &err) == 0);
        CHECK_EQ_INT(g.count, 0);
        CHECK_EQ_INT(g.fallback, 0);
        CHECK(strstr(g.note, "device: cpu, no GPU found") != NULL);
        CHECK(tfm_device_open_gpus("cuda", TFM_PRECISION_AUTO, 1, 0, 0, &g, &err) == -1);
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
    t_run("the CPU backend ends OpenBLAS's idle threads (first: no backend before)",
          test_blas_threads);
    t_run("device cpu and bad names", test_cpu);
    t_run("device auto falls back to cpu without a GPU", test_auto);
    t_run("the check against the CPU passes a correct backend, names a broken op's stage",
          test_check);
    t_run("the bf16 pass: passes the sim device, catches faults of the bf16 path only, "
          "auto falls back to fp32 and bf16 asked fails", test_check_bf16);
    t_run("opening a device: cpu, auto and cuda without a GPU, sim", test_open);
    t_run("sim: the host cannot touch device memory, ops refuse host memory", test_sim);
    return t_done();
}
