/* test_gpu_ops.c: every op of the CUDA backend against the CPU backend (the reference) on
 * random inputs, at small shapes, at the big model's (d_model 1024, 16 heads, d_ff 4096,
 * vocabulary 37000, batches of 10240 tokens) and at the paper's (batches of 25000 tokens,
 * parsing's 1024-token sentences and beam 21: test_paper); the CUDA ops' determinism (the same bits on a
 * second run); that no training step grows the workspace after reserve_step
 * (tfm_backend_cuda_work_grows); the check the tools run before using a GPU
 * (tfm_device_check); one training batch of a whole 6-layer model of the big shapes
 * against the CPU; and the optional log_softmax_top against the GPU's own log_softmax
 * plus the host's selection.
 * `make check-gpu` runs it.  Without a GPU (this machine, CI) every test that needs one
 * skips itself; the first checks that asking for the CUDA backend there fails with a
 * reason, the second checks this file's own comparisons.
 *
 * Environment:
 *   TFM_GPU_OPS_QUICK=1     the small shapes only (every kernel variant still runs: the
 *                           sanitizers' run); the big-shape tests say SKIP
 *   TFM_GPU_OPS_PAPER=0     not the paper's shapes ("cuda paper": 25000-token batches,
 *                           logits of 25000 x 37000, parsing's max_len 1024 and beam 21),
 *                           which need some 12 GB of host memory and a minute: tests/gpu/
 *                           report.sh runs them apart (its stage "paper"), so that a time
 *                           limit on one run does not cost the other's results
 *   TFM_GPU_OPS_ONLY=TEXT   only the tests whose name contains TEXT (the others SKIP)
 *   TFM_GPU_OPS_DEVICE=sim  test the stand-in for a GPU (backend_sim.c, the CPU's bits)
 *                           instead of CUDA: runs this program's every path on any machine
 *   TFM_GPU_OPS_PRECISION=bf16  both backends in bf16 (the CPU emulating it: backend.h,
 *                           "precision"); bounds below; the model-level tests skip (they
 *                           compare against fp32)
 *
 * Attention runs on both paths (kernels/cuda_attn.cu: flash, the online-softmax kernels,
 * and mm, the batched products of cuda_attn_mm.cu), at every shape below.  The flash
 * kernels' forms (cuda_attn.cu picks the form by the head size dk: tiled with
 * C = 1, 2, 4, 8 columns per lane for dk <= 32, 64, 128, 256; the rows form above 256):
 *   C = 1: small dk 8, 16, 32;  C = 2: small dk 64, big dk 64 (16 heads);
 *   C = 4: small dk 100, big dk 128 (8 heads);  C = 8: small dk 200, big dk 256 (4 heads);
 *   rows:  small dk 257, big dk 320 (4 heads, forward, backward, decoding).
 *
 * Bounds.  Small shapes: |gpu - cpu| <= TOL * max(1, |cpu|) element by element (the
 * library's tfm_device_diff), TOL = 2e-5: fp32 with sums in another order, inputs in
 * [-1, 1], sums of at most a few hundred terms (rounding differences ~1e-6).
 * Big shapes: |gpu - cpu| <= bound * max(|cpu|, rms(cpu)), rms over the whole output: a
 * value that lands near 0 is judged against the typical size of the sums that made it,
 * not against 1 (which would pass anything for small values) nor against itself (which
 * would fail on cancellation).  A result that is a sum of n fp32 terms, added in one order
 * by the CPU and in another by the GPU, carries a rounding error of at most u = 2^-24 of
 * the partial sum at each addition; with terms of random sign the errors add like a
 * random walk, to a standard deviation of about 0.4 u sqrt(n) of the typical result for
 * each side, 0.6 u sqrt(n) for the difference of the two.  sum_bound(n) = 32 u sqrt(n)
 * (at least TOL; 1.9e-4 for n = 10240) is some 50 such deviations: room for the largest
 * of millions of results (6 deviations), for the other rounding an op adds (exp,
 * products: ~1e-7 each) and for chains of sums (a score, then a weighted sum); a wrong
 * kernel (a missing term, a wrong index, a wrong mask) is off by 1e-3 of the typical size
 * or far more (one term of 256 in a softmax: ~1e-2; one row of 10240 in a column sum:
 * ~1e-2).
 * Dropout, gathers and copies must agree bit for bit, NaN-ness for NaN (a GPU returns its
 * canonical NaN, 0x7fffffff, where the CPU keeps the input's payload).
 *
 * bf16 (TFM_GPU_OPS_PRECISION=bf16).  Every activation an op reads is made here as random
 * floats rounded to bf16 (rnda), uploaded with upload_act (a no-op rounding of bf16 values),
 * so the CPU's emulation and the GPU start from the same values; activations come back
 * with download_act.  Both sides then compute in fp32 from those values (the GPU's kernels
 * widen bf16 as they read it) and round each activation they store once, to nearest even.
 *  - An activation an op stores: its fp32 bound above plus ulp16 = 2^-7 relative.  Two
 *    fp32 results a and b that differ by d round to bf16 values that differ by at most d
 *    plus one bf16 unit in the last place (a rounding boundary may lie between them), and
 *    one unit is at most 2^-7 of the value (8 significant bits: a value in [2^e, 2^(e+1))
 *    has a unit of 2^(e-7)).  The element-wise ops give the CPU's bits at bf16 as at fp32
 *    (the same fp32 operations on the same inputs, one rounding): the unit is room only.
 *  - An fp32 output (statistics: mean, rstd, lse, loss, nll; parameter gradients:
 *    gemm_grad, embed_bwd, dg, db, bias_bwd; sumsq and Adam; the step's statistics,
 *    doubles): its fp32 bound alone; the
 *    inputs are the same bf16 values on both sides, and nothing is rounded to bf16.
 *  - Products (gemm, gemm_grad, gemm_bias): tensor cores with bf16 inputs multiply exactly
 *    (8 x 8 significant bits fit in fp32) and accumulate in fp32, but align the products
 *    of a step to the largest exponent and truncate rather than round (Fasi, Higham,
 *    Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021): up
 *    to one fp32 unit of the partial sum an addition, all of one sign in the worst case,
 *    so K 2^-24 on top of sum_bound(K) (tc_extra; 6e-4 for K = 10240, against the 1e-2
 *    of one missing term of 10240).  gemm_bias's bias and ReLU add nothing to that
 *    (gemm_bias_case says why).
 *  - Outputs one op computes from another's (layer-norm dx accumulating into the dx of the
 *    call before) are given the CPU's input first, so that a unit of difference is not
 *    counted twice.
 *  - Attention runs on both of the CUDA backend's paths (kernels/cuda_attn.cu), each
 *    opened with its TFM_CUDA_ATTN: mm (the products, the default at bf16) and flash (the
 *    online-softmax kernels, the default at fp32).  At fp32 both have the bounds above.
 *    At bf16 the CPU's emulation rounds the weights P' and their gradients dS to bf16
 *    where mm does (backend.h, precision), so:
 *    mm: + 2 ulp16 on o, dq, dk, dv.  The two sides' fp32 scores differ by the order of
 *      their sums, so now and then a P' or dS lies near a rounding boundary and rounds to
 *      neighbouring bf16 values on the two sides: one term of a weighted sum off by one
 *      unit of that weight, at most 2^-7 of the term, at most about the typical size of
 *      the sum in a sharp row (one weight near 1); two such terms in one row is room.
 *    flash: + 4 ulp16 (2^-5).  It does not round P' nor dS, the CPU does: every weight
 *      differs by its rounding error, at most 2^-8 of it, of either sign.  A weighted sum
 *      of n terms is then off by at most 2^-8 of the sum of the terms' sizes: 2^-8 of the
 *      result in a sharp row, and in a diffuse row (errors independent of the values) a
 *      random walk, about 2^-8 / sqrt(3) = 2.3e-3 of the result's typical size a standard
 *      deviation; 2^-5 is 8 times the first and 14 deviations of the second.  A wrong
 *      kernel shows at fp32 and on mm, whose bounds are tight.
 */
#include "check.h"

#include "backend.h"
#include "config.h"
#include "device.h"
#include "beam.h"
#include "decode.h"
#include "model.h"
#include "optim.h"
#include "cuda_plugin.h"
#include "topk.h"

#include <stdint.h>
#include <time.h>

#define TOL 2e-5
#define U32 0x1p-24             /* fp32's unit roundoff */

static struct tfm_backend *cpu, *gpu;
static char why[200];
static int quick;               /* TFM_GPU_OPS_QUICK */
static int paper = 1;           /* TFM_GPU_OPS_PAPER (0: the paper's shapes skip) */
/* TFM_GPU_OPS_PRECISION=bf16: 2^-7, one bf16 unit in the last place relative to the
 * value (the header), added to the bound of every activation an op stores; 0 at fp32. */
static double ulp16;

/* The attention paths (kernels/cuda_attn.cu): a CUDA backend opened with each value of
 * TFM_CUDA_ATTN, flash and mm, at the precision under test (the sim device: itself, the
 * one path); extra is what the path adds to the attention bounds at bf16 (the header). */
static struct attn_path {
    struct tfm_backend *be;
    const char *name;
    double extra;
} path[2];
static int npaths;

static uint64_t rs = 4242;
static float frand(void)
{
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rs >> 40) / 16777216.0 * 2.0 - 1.0);
}

static float *rnd(size_t n, float s)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    if (!x) {
        printf("# out of memory (%zu floats)\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        x[i] = s * frand();
    return x;
}

/* A random integer in [0, n). */
static int irand(int n)
{
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int)((rs >> 33) % (uint64_t)n);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* A device copy of n bytes of host data (NULL host: zeros). */
static void *dev(const void *host, size_t bytes)
{
    struct tfm_error err;
    void *d = gpu->alloc(gpu, bytes, &err);
    if (!d) {
        printf("# %s\n", err.msg);
        exit(1);
    }
    if (host)
        gpu->upload(gpu, d, host, bytes);
    return d;
}

/* A host copy of n floats of device data (free it). */
static float *host(const void *d, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof(float));
    if (!h) {
        printf("# out of memory (%zu floats)\n", n);
        exit(1);
    }
    gpu->download(gpu, h, d, n * sizeof(float));
    return h;
}

/* ---- activations (backend.h, "precision"): act_size bytes an element on the GPU side,
 * bf16 values in floats on the host at bf16 -------------------------------------------------- */

/* x (n) rounded to bf16 in place at bf16 (what the CPU's emulation holds); as is at fp32. */
static void round_act(float *x, size_t n)
{
    if (ulp16 > 0)
        for (size_t i = 0; i < n; i++)
            x[i] = tfm_bf16_round(x[i]);
}

/* Random activations: rnd rounded to the precision. */
static float *rnda(size_t n, float s)
{
    float *x = rnd(n, s);
    round_act(x, n);
    return x;
}

/* n activations on the GPU from host floats (upload_act; NULL host: zeros). */
static void *dact(const float *h, size_t n)
{
    struct tfm_error err;
    void *d = gpu->alloc(gpu, (n ? n : 1) * gpu->act_size, &err);
    if (!d) {
        printf("# %s\n", err.msg);
        exit(1);
    }
    if (h)
        gpu->upload_act(gpu, d, h, n);
    return d;
}

/* A host copy of n activations (download_act; free it). */
static float *hact(const void *d, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof(float));
    if (!h) {
        printf("# out of memory (%zu floats)\n", n);
        exit(1);
    }
    gpu->download_act(gpu, h, d, n);
    return h;
}

/* The GPU activation n elements past d. */
static void *gact(const void *d, int64_t n) { return tfm_act(gpu, d, n); }

/* n activations from h (NULL: zeros) `off` elements into a fresh buffer of n + off, which
 * *base keeps for freeing.  off 1 puts every element off the 16-byte boundaries that the
 * CUDA kernels' vector loads need (kernels/cuda.h, "16-byte vectors"), so they take their
 * element-by-element path; off 0 is dact. */
static void *dact_off(const float *h, size_t n, int off, void **base)
{
    *base = dact(NULL, n + (size_t)off);
    void *d = gact(*base, off);
    if (h)
        gpu->upload_act(gpu, d, h, n);
    return d;
}

/* Free device buffers. */
static void gfree(void **p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        gpu->free(gpu, p[i]);
}
#define GFREE(...)                                                                     \
    do {                                                                               \
        void *a_[] = {__VA_ARGS__};                                                    \
        gfree(a_, sizeof a_ / sizeof a_[0]);                                           \
    } while (0)

/* ---- comparisons -------------------------------------------------------------------------- */

/* Largest |a - b| / max(1, |b|); NaN where they disagree on NaN-ness. */
#define maxerr tfm_device_diff

/* The bound for results that are sums of n fp32 terms (the header). */
static double sum_bound(double n)
{
    double b = 32 * U32 * sqrt(n);
    return b > TOL ? b : TOL;
}

/* What a product of inner dimension K adds to its fp32 bound at bf16 (tensor cores: the
 * header): K 2^-24; 0 at fp32 (cuBLAS's fp32 product rounds to nearest). */
static double tc_extra(double K) { return ulp16 > 0 ? K * U32 : 0; }

static uint32_t bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* The first element where a and b differ, or n: different bits, unless both are NaN. */
static size_t first_diff(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (bits(a[i]) != bits(b[i]) && !(isnan(a[i]) && isnan(b[i])))
            return i;
    return n;
}

/* Root mean square of the finite values of x (0 if none). */
static double rms(const float *x, size_t n)
{
    double s = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i])) {
            s += (double)x[i] * x[i];
            k++;
        }
    return k ? sqrt(s / (double)k) : 0;
}

/* Largest |a - b| / max(|b|, floor) and where (*at); NaN where a and b disagree on NaN or
 * on Inf (tfm_device_diff's rule). */
static double diff_floor(const float *a, const float *b, size_t n, double floor, size_t *at)
{
    double e = 0;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i]) || isinf(a[i]) != isinf(b[i])) {
            *at = i;
            return NAN;
        }
        if (!isfinite(b[i]))
            continue;
        double s = fabs(b[i]) > floor ? fabs(b[i]) : floor, d = fabs((double)a[i] - b[i]) / s;
        if (d > e) {
            e = d;
            *at = i;
        }
    }
    return e;
}

/* Host result h against the reference ref (n floats), relative to max(|ref|, rms(ref))
 * (the header), within bound; prints the difference either way. */
static void near_host(const char *what, const float *h, const float *ref, size_t n, double bound)
{
    double floor = rms(ref, n);
    size_t at;
    double e = diff_floor(h, ref, n, floor > 0 ? floor : 1, &at);
    int ok = e <= bound;
    printf("#   %s: %.3g of max(|cpu|, rms %.3g) (bound %.3g)%s", what, e, floor, bound,
           ok ? "\n" : "");
    if (!ok) {
        printf(", worst at [%zu]: gpu %.9g, cpu %.9g\n", at, h[at], ref[at]);
        t_fail(__FILE__, __LINE__, what);
    }
}

/* The same for device data d: fp32 (near) or activations (near_act: one bf16 unit more at
 * bf16). */
static void near(const char *what, const void *d, const float *ref, size_t n, double bound)
{
    float *h = host(d, n);
    near_host(what, h, ref, n, bound);
    free(h);
}

static void near_act(const char *what, const void *d, const float *ref, size_t n, double bound)
{
    float *h = hact(d, n);
    near_host(what, h, ref, n, bound + ulp16);
    free(h);
}

/* Host data h must equal ref bit for bit (NaN-ness for NaN). */
static void exact_host(const char *what, const float *h, const float *ref, size_t n)
{
    size_t i = first_diff(h, ref, n);
    if (i < n) {
        printf("#   %s: element %zu is %.9g (0x%08x), the CPU's %.9g (0x%08x)\n", what, i,
               h[i], (unsigned)bits(h[i]), ref[i], (unsigned)bits(ref[i]));
        t_fail(__FILE__, __LINE__, what);
    }
}

/* The same for device data d: fp32 (exact) or activations (exact_act). */
static void exact(const char *what, const void *d, const float *ref, size_t n)
{
    float *h = host(d, n);
    exact_host(what, h, ref, n);
    free(h);
}

static void exact_act(const char *what, const void *d, const float *ref, size_t n)
{
    float *h = hact(d, n);
    exact_host(what, h, ref, n);
    free(h);
}

/* Compare device result d (n elements, read by get: host or hact) with host reference ref
 * within tol. */
#define SAME_BY(get, d, ref, n, tol)                                                   \
    do {                                                                               \
        float *h_ = get((d), (n));                                                     \
        double e_ = maxerr(h_, (ref), (n)), t_ = (tol);                                \
        if (!(e_ <= t_))                                                               \
            printf("#   %s: max relative difference %.3g (bound %g)\n", #d, e_, t_);     \
        CHECK(e_ <= t_);                                                               \
        free(h_);                                                                      \
    } while (0)
/* fp32 outputs */
#define SAME(d, ref, n, tol) SAME_BY(host, d, ref, n, tol)
/* activations: one bf16 unit more at bf16 */
#define SAME_ACT(d, ref, n, tol) SAME_BY(hact, d, ref, n, (tol) + ulp16)

#define EXACT(d, ref, n) exact(#d, (d), (ref), (n))
#define EXACT_ACT(d, ref, n) exact_act(#d, (d), (ref), (n))

#define NEED_GPU()                                                                     \
    do {                                                                               \
        if (!gpu) {                                                                    \
            t_skip(why);                                                               \
            return;                                                                    \
        }                                                                              \
    } while (0)

#define NEED_BIG()                                                                     \
    do {                                                                               \
        NEED_GPU();                                                                    \
        if (quick) {                                                                   \
            t_skip("TFM_GPU_OPS_QUICK: small shapes only");                            \
            return;                                                                    \
        }                                                                              \
    } while (0)

#define NEED_PAPER()                                                                   \
    do {                                                                               \
        NEED_BIG();                                                                    \
        if (!paper) {                                                                  \
            t_skip("TFM_GPU_OPS_PAPER=0: the paper's shapes run apart");               \
            return;                                                                    \
        }                                                                              \
    } while (0)

/* ---- the backend itself ------------------------------------------------------------------ */

static int sim;                 /* TFM_GPU_OPS_DEVICE=sim */

static void test_create(void)
{
    struct tfm_error err;
    if (gpu && sim) {
        CHECK(gpu->kind == TFM_BACKEND_SIM && !gpu->host_memory);
        return;
    }
    if (gpu) {
        CHECK_STR(gpu->name, "cuda");
        CHECK(gpu->kind == TFM_BACKEND_CUDA && !gpu->host_memory);
        /* auto is bf16 on CUDA, stored in 2 bytes; fp32 in 4 */
        CHECK(gpu->auto_precision == TFM_PRECISION_BF16 && gpu->set_bf16 != NULL);
        CHECK(gpu->act_size == (ulp16 > 0 ? 2u : 4u));
        CHECK(gpu->precision == (ulp16 > 0 ? TFM_PRECISION_BF16 : TFM_PRECISION_FP32));
        CHECK(tfm_backend_cuda(1 << 20, &err) == NULL);
        CHECK(strstr(err.msg, "no such device") != NULL);
        /* an attention path that does not exist: no backend, a reason */
        char *was = getenv("TFM_CUDA_ATTN") ? strdup(getenv("TFM_CUDA_ATTN")) : NULL;
        setenv("TFM_CUDA_ATTN", "fast", 1);
        struct tfm_backend *bad = tfm_backend_cuda(0, &err);
        CHECK(bad == NULL);
        if (bad)
            bad->destroy(bad);
        else
            CHECK(strstr(err.msg, "TFM_CUDA_ATTN=fast") != NULL);
        if (was)
            setenv("TFM_CUDA_ATTN", was, 1);
        else
            unsetenv("TFM_CUDA_ATTN");
        free(was);
        return;
    }
    /* no GPU: a clear reason, no crash */
    CHECK(strncmp(why, "the CUDA backend: ", 18) == 0 && strlen(why) > 18);
}

/* This file's comparisons can fail, and fail for the right reasons (no GPU needed). */
static void test_compare(void)
{
    float cnan, gnan, one = 1.0f, z = 0.0f, nz = -0.0f;
    uint32_t c = 0x7fc00000u, g = 0x7fffffffu;           /* the CPU's NaN, a GPU's NaN */
    memcpy(&cnan, &c, 4);
    memcpy(&gnan, &g, 4);
    float a[4] = {one, gnan, z, 2.0f}, b[4] = {one, cnan, z, 2.0f};
    CHECK(first_diff(a, b, 4) == 4);                      /* NaN against NaN: the same */
    a[2] = nz;
    CHECK(first_diff(a, b, 4) == 2);                      /* -0 is not +0, bit for bit */
    a[2] = z;
    a[3] = nextafterf(2.0f, 3.0f);
    CHECK(first_diff(a, b, 4) == 3);                      /* one ulp */
    a[3] = 2.0f;
    a[0] = cnan;
    CHECK(first_diff(a, b, 4) == 0);                      /* NaN against a number */
    size_t at;
    float x[3] = {1e-3f, 100.0f, -50.0f}, y[3] = {1e-3f, 100.0f, -50.0f};
    CHECK(diff_floor(x, y, 3, 1, &at) == 0);
    x[0] = 2e-3f;                                         /* off by 1e-3 of a floor of 1 */
    CHECK_NEAR(diff_floor(x, y, 3, 1, &at), 1e-3, 1e-9);
    CHECK(at == 0);
    x[0] = 1e-3f;
    x[1] = 100.01f;                                       /* relative above the floor */
    CHECK_NEAR(diff_floor(x, y, 3, 1, &at), 1e-4, 1e-6);
    CHECK(at == 1);
    x[1] = NAN;
    CHECK(isnan(diff_floor(x, y, 3, 1, &at)) && at == 1);
    x[1] = INFINITY;
    CHECK(isnan(diff_floor(x, y, 3, 1, &at)));
    CHECK_NEAR(rms(y, 3), sqrt((1e-6 + 1e4 + 2500) / 3), 1e-6);
    CHECK_NEAR(sum_bound(10240), 32 * 0x1p-24 * sqrt(10240.0), 1e-12);
    CHECK(sum_bound(1) == TOL);
}

/* Uploads and downloads through the CUDA backend's pinned staging ring (4 segments of 2
 * MiB; backend_cuda.cu, "staging"): 60 uploads of 1 to 600000 floats, 72 MB in all, nine
 * times round the ring, each host buffer overwritten as soon as upload returns (the
 * device must hold what was there when it was called); uploads of more than a segment
 * (split) and more than the ring (from pageable memory); small downloads between them
 * (through the ring) and large ones (not).  Any segment reused before its copies finished,
 * or a copy queued from the wrong place, shows as a wrong value. */
static void test_staging(void)
{
    enum { PIECES = 60 };
    size_t len[PIECES + 2], off[PIECES + 3], total = 0;
    for (int p = 0; p < PIECES; p++)
        len[p] = 1 + (size_t)p * 7919u * 13u % 600000u;
    len[PIECES] = 700001;                 /* 2.8 MB: two segments and a piece */
    len[PIECES + 1] = 2500003;            /* 10 MB: more than the ring */
    for (int p = 0; p < PIECES + 2; p++) {
        off[p] = total;
        total += len[p];
    }
    off[PIECES + 2] = total;
    float *d = dev(NULL, total * sizeof(float));
    float *want = malloc(total * sizeof(float)), *h = malloc(len[PIECES + 1] * sizeof(float));
    float small[1000];
    for (int p = 0; p < PIECES + 2; p++) {
        for (size_t i = 0; i < len[p]; i++)
            h[i] = (float)(p + 1) * 1e-3f + (float)i;
        memcpy(want + off[p], h, len[p] * sizeof(float));
        gpu->upload(gpu, (float *)d + off[p], h, len[p] * sizeof(float));
        for (size_t i = 0; i < len[p]; i++)
            h[i] = NAN;
        if (p % 7 == 3 && len[p] >= 1000) {     /* a small download through the ring */
            gpu->download(gpu, small, (float *)d + off[p] + len[p] - 1000, sizeof small);
            exact_host("staged download", small, want + off[p] + len[p] - 1000, 1000);
        }
    }
    EXACT(d, want, total);
    free(want);
    free(h);
    GFREE(d);
}

static void test_memory(void)
{
    NEED_GPU();
    size_t n = 100003;
    float *z = dev(NULL, n * sizeof(float)), *x = rnd(n, 1), *zeros = calloc(n, sizeof(float));
    EXACT(z, zeros, n);                                  /* alloc is zero-filled */
    gpu->upload(gpu, z, x, n * sizeof(float));
    EXACT(z, x, n);
    float *y = dev(NULL, n * sizeof(float));
    gpu->copy(gpu, y, z, n * sizeof(float));
    EXACT(y, x, n);
    gpu->zero(gpu, y, n * sizeof(float));
    gpu->sync(gpu);
    EXACT(y, zeros, n);
    /* The special values of a rounding to bf16: NaN, infinities, a finite value past
     * bf16's largest (to infinity), fp32's smallest subnormal (to 0), a tie (1 + 2^-8: to
     * even, 1), one past a tie (to 1 + 2^-7), -0. */
    x[0] = NAN;
    x[1] = INFINITY;
    x[2] = -INFINITY;
    x[3] = 3.4e38f;
    x[4] = 0x1p-149f;
    x[5] = 1.0f + 0x1p-8f;
    x[6] = -0.0f;
    x[7] = 1.0f + 0x1p-8f + 0x1p-23f;
    gpu->upload(gpu, z, x, n * sizeof(float));
    /* the compute copy of the weights (an activation): the same bits at fp32, rounded at
     * bf16 (the CPU's tfm_bf16_round, to nearest even: bit for bit, NaN-ness for NaN) */
    float *w = malloc(n * sizeof(float));
    float *wc = dact(NULL, n);
    cpu->weights_copy(cpu, w, x, n);
    gpu->weights_copy(gpu, wc, z, n);
    EXACT_ACT(wc, w, n);
    /* off the 16-byte boundary, source and copy (element by element), and the copy alone */
    float *wo = dact(NULL, n + 1);
    gpu->weights_copy(gpu, gact(wo, 1), z + 1, n - 1);
    EXACT_ACT(gact(wo, 1), w + 1, n - 1);
    gpu->weights_copy(gpu, gact(wo, 1), z, n - 2);
    EXACT_ACT(gact(wo, 1), w, n - 2);
    GFREE(wo);
    /* upload_act and download_act: host floats in, rounded to the precision as the CPU
     * rounds them (bit for bit, NaN-ness for NaN), the same values out; more than one of
     * the CUDA backend's upload chunks (16384), an odd count at an odd offset */
    cpu->upload_act(cpu, w, x, n);
    float *ac = dact(NULL, n + 1);
    gpu->upload_act(gpu, gact(ac, 1), x, n - 2);
    float *back = malloc(n * sizeof(float));
    gpu->download_act(gpu, back, gact(ac, 1), n - 2);
    exact_host("upload_act, download_act", back, w, n - 2);
    CHECK(ulp16 == 0 || (back[5] == 1.0f && isinf(back[3]) && back[7] == 1.0f + 0x1p-7f));
    free(back);
    free(w);
    GFREE(z, y, wc, ac);
    free(x);
    free(zeros);
    test_staging();
}

/* ---- gemm ---------------------------------------------------------------------------------- */

/* grad: through gemm_grad, the product into a parameter gradient (fp32 at every
 * precision; gemm's C is an activation).  Leading dimensions off every alignment (bf16
 * rows at odd element offsets: cuBLAS picks kernels that allow them). */
static void gemm_case(int grad, int ta, int tb, int M, int N, int K, float beta)
{
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb,
           nc = (size_t)M * ldc;
    float *A = rnda(na, 1), *Bm = rnda(nb, 1), *C = grad ? rnd(nc, 1) : rnda(nc, 1);
    float *dA = dact(A, na), *dB = dact(Bm, nb), *dC = grad ? dev(C, nc * 4) : dact(C, nc);
    if (beta == 0) {                                      /* C must not be read */
        float *nan = malloc(nc * 4);
        for (size_t i = 0; i < nc; i++)
            nan[i] = NAN;
        if (grad)
            gpu->upload(gpu, dC, nan, nc * 4);
        else
            gpu->upload_act(gpu, dC, nan, nc);
        for (int i = 0; i < M; i++)                       /* the padding keeps its value */
            for (int j = N; j < ldc; j++)
                C[(size_t)i * ldc + j] = NAN;
        free(nan);
    }
    (grad ? cpu->gemm_grad : cpu->gemm)(cpu, ta, tb, M, N, K, 0.5f, A, lda, Bm, ldb, beta, C,
                                        ldc);
    (grad ? gpu->gemm_grad : gpu->gemm)(gpu, ta, tb, M, N, K, 0.5f, dA, lda, dB, ldb, beta, dC,
                                        ldc);
    if (grad)
        SAME(dC, C, nc, TOL + tc_extra(K));
    else
        SAME_ACT(dC, C, nc, TOL + tc_extra(K));
    GFREE(dA, dB, dC);
    free(A);
    free(Bm);
    free(C);
}

static void test_gemm(void)
{
    NEED_GPU();
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gemm_case(0, ta, tb, 37, 53, 129, 0);
            gemm_case(0, ta, tb, 64, 17, 300, 1);
            gemm_case(1, ta, tb, 33, 65, 150, 1);
        }
    gemm_case(1, 1, 0, 48, 96, 700, 0);
    /* K = 0: C = beta C (not read when beta is 0) */
    gemm_case(0, 0, 0, 9, 11, 0, 0);
    gemm_case(0, 0, 1, 9, 11, 0, 0.5f);
    gemm_case(1, 1, 0, 9, 11, 0, 0.5f);
}

/* gemm_bias (backend.h): C = act(op(A) op(B) + bias), against the CPU's.  The CUDA backend
 * runs it on cuBLASLt with the bias (and ReLU) in the epilogue when every pointer is
 * 16-byte aligned and every leading dimension a multiple of 16 bytes, and falls back to
 * gather + gemm + ReLU otherwise (or when cuBLASLt has no algorithm).  pad elements are
 * added to every leading dimension and off > 0 moves A, B, C and the bias by off elements:
 * with M, N, K and pad multiples of 8 every leading dimension is a multiple of 8 elements
 * (16 bytes at bf16, 32 at fp32), the cuBLASLt path; an odd dimension, an odd pad or an
 * offset of 1 takes the fallback, and every aligned case must take cuBLASLt
 * (tfm_backend_cuda_bias_fallbacks counts the others).  C's padding is set
 * to NaN on the GPU and must stay NaN (not written); C itself is NaN before (not read).
 * Bound: gemm's (TOL + tc_extra(K)) plus, at bf16, one unit for the one rounding of the
 * stored value (ulp16): the bias is one more fp32 addition (2^-24 relative, inside
 * TOL) and the ReLU is exact and moves no two values further apart.
 * what: NULL for these cases; a name for the big ones (test_big_gemm_bias). */
static void gemm_bias_run(const char *what, int ta, int tb, int M, int N, int K, int relu,
                          int off, int pad)
{
    const int big = what != NULL;
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb,
           nc = (size_t)M * ldc;
    float *A = rnda(na, 1), *Bm = rnda(nb, big ? sqrtf(3.0f / (float)K) : 1),
          *bias = rnda((size_t)N, 1), *C = malloc(nc * 4);
    for (size_t i = 0; i < nc; i++)
        C[i] = NAN;
    float *dA = dact(NULL, na + off), *dB = dact(NULL, nb + off),
          *db = dact(NULL, (size_t)N + off), *dC = dact(NULL, nc + off);
    gpu->upload_act(gpu, gact(dA, off), A, na);
    gpu->upload_act(gpu, gact(dB, off), Bm, nb);
    gpu->upload_act(gpu, gact(db, off), bias, (size_t)N);
    gpu->upload_act(gpu, gact(dC, off), C, nc);
    long fell = tfm_backend_cuda_bias_fallbacks(gpu);
    double t0 = now();
    cpu->gemm_bias(cpu, ta, tb, M, N, K, A, lda, Bm, ldb, bias, relu, C, ldc);
    double t1 = now();
    gpu->gemm_bias(gpu, ta, tb, M, N, K, gact(dA, off), lda, gact(dB, off), ldb,
                   gact(db, off), relu, gact(dC, off), ldc);
    gpu->sync(gpu);
    double t2 = now();
    if (big) {
        /* a second call: the plan is made; the product alone */
        gpu->gemm_bias(gpu, ta, tb, M, N, K, gact(dA, off), lda, gact(dB, off), ldb,
                       gact(db, off), relu, gact(dC, off), ldc);
        gpu->sync(gpu);
        double t3 = now();
        char w[200];
        snprintf(w, sizeof w, "%s: (%d,%d) = %s(%d,%d) %s(%d,%d) + bias%s, offset %d, "
                 "padding %d, cpu %.2f s, gpu %.4f s (first call %.4f s)", what, M, N,
                 ta ? "T" : "", ta ? K : M, ta ? M : K, tb ? "T" : "", tb ? N : K,
                 tb ? K : N, relu ? ", ReLU" : "", off, pad, t1 - t0, t3 - t2, t2 - t1);
        near_act(w, gact(dC, off), C, nc, sum_bound(K) + tc_extra(K));
    } else {
        float *h = hact(gact(dC, off), nc);
        double e = maxerr(h, C, nc), bound = TOL + tc_extra(K) + ulp16;
        if (!(e <= bound))
            printf("#   gemm_bias (%d,%d,%d)%s%s%s, offset %d, padding %d: max relative "
                   "difference %.3g (bound %g)\n", M, N, K, ta ? " ta" : "", tb ? " tb" : "",
                   relu ? " relu" : "", off, pad, e, bound);
        CHECK(e <= bound);
        free(h);
    }
    /* the path taken: cuBLASLt's epilogue exactly when every operand is 16-byte aligned
     * (a fallback there is cuBLASLt without an algorithm: right numbers, three launches
     * where one does) */
    if (fell >= 0) {
        size_t as = gpu->act_size;
        int aligned = K > 0 && (off * as) % 16 == 0 && (lda * as) % 16 == 0 &&
                      (ldb * as) % 16 == 0 && (ldc * as) % 16 == 0;
        long took = tfm_backend_cuda_bias_fallbacks(gpu) - fell;
        if (took != (aligned ? 0 : big ? 2 : 1))
            printf("#   gemm_bias (%d,%d,%d)%s%s%s, offset %d, padding %d: %ld fallbacks, "
                   "operands %saligned\n", M, N, K, ta ? " ta" : "", tb ? " tb" : "",
                   relu ? " relu" : "", off, pad, took, aligned ? "" : "not ");
        CHECK(took == (aligned ? 0 : big ? 2 : 1));
    }
    GFREE(dA, dB, db, dC);
    free(A);
    free(Bm);
    free(bias);
    free(C);
}

static void gemm_bias_case(int ta, int tb, int M, int N, int K, int relu, int off, int pad)
{
    gemm_bias_run(NULL, ta, tb, M, N, K, relu, off, pad);
}

static void test_gemm_bias(void)
{
    NEED_GPU();
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int relu = 0; relu < 2; relu++) {
                gemm_bias_case(ta, tb, 64, 96, 128, relu, 0, 0);     /* cuBLASLt */
                gemm_bias_case(ta, tb, 40, 48, 296, relu, 0, 8);     /* padded, aligned */
                gemm_bias_case(ta, tb, 37, 53, 129, relu, 0, 0);     /* odd: fallback */
                gemm_bias_case(ta, tb, 64, 96, 128, relu, 1, 0);     /* misaligned */
                gemm_bias_case(ta, tb, 64, 96, 128, relu, 0, 3);     /* odd ld */
            }
    /* the model's shapes, small: one row (a decoding step), K = 0 (the bias alone) */
    gemm_bias_case(0, 0, 1, 256, 64, 1, 0, 0);
    gemm_bias_case(0, 0, 9, 16, 0, 1, 0, 0);
    gemm_bias_case(0, 0, 9, 16, 0, 0, 0, 0);
}

/* ---- embeddings and layer norm ------------------------------------------------------------ */

/* N tokens of sentences of L positions (N need not be a multiple of L: the last sentence
 * is cut short; N < L: a part of one) from positions pos0 on, rows of D.  The table, the
 * output and the table's gradient start off elements into their buffers (dact_off; the
 * gradient off floats), the positions and dout at their start. */
static void embed_case(int N, int L, int D, int off)
{
    int V = 13, P = 16, pos0 = 3;
    int32_t ids[64];
    printf("#  N %d, L %d, D %d, offset %d\n", N, L, D, off);
    for (int i = 0; i < N; i++)
        ids[i] = (i * 7) % 5 == 0 ? 2 : (i * 5) % V;       /* id 2 repeated many times */
    float *table = rnda((size_t)V * D, 1), *pos = rnda((size_t)P * D, 1);
    float *out = rnd((size_t)N * D, 1), *dout = rnda((size_t)N * D, 1);
    float *dtable = rnd((size_t)V * D, 1), *dpos = rnd((size_t)P * D, 1);
    int32_t *did = dev(ids, (size_t)N * sizeof *ids);
    void *bT, *bO;
    float *dt = dact_off(table, V * D, off, &bT), *dp = dact(pos, P * D),
          *dO = dact_off(NULL, N * D, off, &bO), *ddo = dact(dout, N * D),
          *bdt = dev(NULL, (V * D + off) * 4), *ddt = bdt + off, *ddp = dev(dpos, P * D * 4);
    gpu->upload(gpu, ddt, dtable, V * D * 4);
    for (int with_pos = 0; with_pos < 2; with_pos++) {
        cpu->embed_fwd(cpu, out, table, ids, N, D, 2.5f, with_pos ? pos : NULL, L, pos0);
        gpu->embed_fwd(gpu, dO, dt, did, N, D, 2.5f, with_pos ? dp : NULL, L, pos0);
        SAME_ACT(dO, out, (size_t)N * D, TOL);
        cpu->embed_bwd(cpu, dtable, with_pos ? dpos : NULL, dout, ids, N, D, V, 2.5f, L, pos0);
        gpu->embed_bwd(gpu, ddt, with_pos ? ddp : NULL, ddo, did, N, D, V, 2.5f, L, pos0);
        SAME(ddt, dtable, (size_t)V * D, TOL);
        SAME(ddp, dpos, (size_t)P * D, TOL);
    }
    GFREE(did, bT, dp, bO, ddo, bdt, ddp);
    free(table); free(pos); free(out); free(dout); free(dtable); free(dpos);
}

static void test_embed(void)
{
    NEED_GPU();
    embed_case(40, 10, 24, 0);
    embed_case(43, 10, 24, 0);                            /* a last sentence of 3 */
    embed_case(7, 10, 24, 0);                             /* fewer tokens than positions */
    /* the vector paths (kernels/cuda.h): rows of whole vectors, off the boundary, rows
     * that end in a partial group */
    embed_case(40, 10, 1024, 0);
    embed_case(40, 10, 1024, 1);
    embed_case(43, 10, 1023, 0);
    embed_case(9, 10, 7, 1);
}

/* Layer norm of N rows of D, forward and backward (accumulating or not) against the CPU:
 * big 0 with the small shapes' bound; big 1 with sum_bound: sums over D along rows (mean,
 * variance, dx), over N down columns (dg, db).  x, g, y and dy start off elements into
 * their buffers (dact_off; b, dx at the start: some arrays on the vector path, some off
 * it). */
static void layernorm_case(int N, int D, int big, int off)
{
    size_t nd = (size_t)N * D;
    float *x = rnda(nd, 2), *g = rnda(D, 1), *b = rnda(D, 1), *dy = rnda(nd, 1);
    float *y = malloc(nd * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
    float *dx = rnda(nd, 1), *dg = rnd(D, 1), *db = rnd(D, 1);
    void *bX, *bG, *bY, *bDY;
    float *dX = dact_off(x, nd, off, &bX), *dG = dact_off(g, D, off, &bG), *dB = dact(b, D),
          *dY = dact_off(NULL, nd, off, &bY), *dM = dev(NULL, N * 4), *dR = dev(NULL, N * 4),
          *dDY = dact_off(dy, nd, off, &bDY), *dDX = dact(dx, nd), *dDG = dev(dg, D * 4),
          *dDB = dev(db, D * 4);
    double rows = big ? sum_bound(D) : TOL, cols = big ? sum_bound(N) : TOL;
    char w[64];
    printf("#  N %d, D %d, offset %d\n", N, D, off);
    cpu->layernorm_fwd(cpu, y, mean, rstd, x, g, b, N, D, 1e-5f);
    gpu->layernorm_fwd(gpu, dY, dM, dR, dX, dG, dB, N, D, 1e-5f);
    if (big) {
        near_act("y", dY, y, nd, rows);
        near("mean", dM, mean, N, rows);
        near("rstd", dR, rstd, N, rows);
    } else {
        SAME_ACT(dY, y, nd, TOL);
        SAME(dM, mean, N, TOL);
        SAME(dR, rstd, N, TOL);
    }
    for (int acc = 0; acc < 2; acc++) {
        if (acc && ulp16 > 0)   /* accumulate onto the same dx (the header) */
            gpu->upload_act(gpu, dDX, dx, nd);
        cpu->layernorm_bwd(cpu, dx, dg, db, dy, x, mean, rstd, g, N, D, acc);
        gpu->layernorm_bwd(gpu, dDX, dDG, dDB, dDY, dX, dM, dR, dG, N, D, acc);
        if (big) {
            snprintf(w, sizeof w, "dx (accumulate %d)", acc);
            near_act(w, dDX, dx, nd, rows);
            snprintf(w, sizeof w, "dg (accumulate %d)", acc);
            near(w, dDG, dg, D, cols);
            snprintf(w, sizeof w, "db (accumulate %d)", acc);
            near(w, dDB, db, D, cols);
        } else {
            SAME_ACT(dDX, dx, nd, TOL);
            SAME(dDG, dg, D, TOL);
            SAME(dDB, db, D, TOL);
        }
    }
    GFREE(bX, bG, dB, bY, dM, dR, bDY, dDX, dDG, dDB);
    free(x); free(g); free(b); free(dy); free(y); free(mean); free(rstd); free(dx); free(dg);
    free(db);
}

static void test_layernorm(void)
{
    NEED_GPU();
    layernorm_case(77, 200, 0, 0);
    layernorm_case(5, 1000, 0, 0);                        /* D > 256: several per thread */
    layernorm_case(3, 7, 0, 0);                           /* D < 32: most lanes idle */
    /* the vector paths (kernels/cuda.h): whole rows of vectors; rows that start off the
     * 16-byte boundary and end in a partial group; arrays offset by one element */
    layernorm_case(6, 1024, 0, 0);
    layernorm_case(5, 1023, 0, 0);
    layernorm_case(4, 1025, 0, 0);
    layernorm_case(6, 1024, 0, 1);
    layernorm_case(3, 7, 0, 1);
}

/* ---- attention ------------------------------------------------------------------------------ */

/* Attention forward and backward of B sentences, H heads of dk, Tq queries, Tk keys
 * (klen: keys per sentence or NULL; causal; dropout on the weights) against the CPU, on
 * each attention path (the header; the CPU's once).  q's rows are D + qpad apart (qpad 5:
 * gaps the kernels must skip, and rows that are not 16-byte aligned, so that mm's products
 * of Q and dQ take its per-head strided calls; qpad 0: all its products the pointer
 * arrays, as the model's), k and v are the halves of one (Tk, 2D) matrix as in the model.
 * big 0: the small shapes' bound; big 1: sum_bound over the longest chain of sums (dk
 * for a score or dO.v, Tk for the weighted sum and D_i, Tq for dk, dv); both plus the
 * path's extra at bf16.  qs scales q (sharper softmax rows for qs > 1). */
static void attn_case(int B, int H, int Tq, int Tk, int dk, const int32_t *klen, int causal,
                      float dropout, int big, float qs, int qpad)
{
    struct tfm_attn a = {B, H, Tq, Tk, dk, NULL, causal, 1.0f / sqrtf((float)dk), dropout,
                         tfm_rng_key(3, 4, 5)};
    int D = H * dk, ldq = D + qpad, ldk = 2 * D, ldo = D;
    size_t nq = (size_t)B * Tq * ldq, nk = (size_t)B * Tk * ldk, no = (size_t)B * Tq * ldo,
           nl = (size_t)B * H * Tq;
    float *q = rnda(nq, qs), *kv = rnda(nk, 1), *dout = rnda(no, 1);
    float *o = malloc(no * 4), *lse = malloc(nl * 4);
    float *dq = calloc(nq, 4), *dkv = calloc(nk, 4);
    if (big)
        printf("#  B %d, H %d, Tq %d, Tk %d, dk %d, %s%s, dropout %g\n", B, H, Tq, Tk, dk,
               klen ? "padding" : "no padding", causal ? ", causal" : "", dropout);
    a.klen = klen;
    cpu->reserve(cpu, Tq, Tk, NULL);
    double t0 = now();
    cpu->attn_fwd(cpu, &a, q, ldq, kv, ldk, kv + D, ldk, o, ldo, lse);
    cpu->attn_bwd(cpu, &a, q, ldq, kv, ldk, kv + D, ldk, o, ldo, lse, dout, ldo, dq, ldq, dkv,
                  ldk, dkv + D, ldk);
    double t1 = now();
    if (big)
        printf("#   cpu %.2f s\n", t1 - t0);
    struct tfm_backend *home = gpu;
    for (int p = 0; p < npaths; p++) {
        gpu = path[p].be;
        double extra = path[p].extra;
        int32_t *dlen = klen ? dev(klen, B * sizeof(int32_t)) : NULL;
        float *gq = dact(q, nq), *gkv = dact(kv, nk), *gout = dact(dout, no),
              *go = dact(NULL, no), *glse = dev(NULL, nl * 4), *gdq = dact(NULL, nq),
              *gdkv = dact(NULL, nk);
        a.klen = dlen;
        gpu->reserve(gpu, Tq, Tk, NULL);
        gpu->sync(gpu);
        t1 = now();
        gpu->attn_fwd(gpu, &a, gq, ldq, gkv, ldk, gact(gkv, D), ldk, go, ldo, glse);
        gpu->attn_bwd(gpu, &a, gq, ldq, gkv, ldk, gact(gkv, D), ldk, go, ldo, glse, gout, ldo,
                      gdq, ldq, gdkv, ldk, gact(gdkv, D), ldk);
        gpu->sync(gpu);
        double t2 = now();
        /* dq: the head columns only (the padding of ldq is not written) */
        float *hq = hact(gdq, nq), *hkv = hact(gdkv, nk);
        if (big) {
            double bound = sum_bound((double)dk + Tk + Tq) + extra;
            printf("#   %s: gpu %.3f s\n", path[p].name, t2 - t1);
            near_act("o", go, o, no, bound);
            near("lse", glse, lse, nl, sum_bound((double)dk + Tk + Tq));
            size_t nr = (size_t)B * Tq * D;
            float *pg = malloc(nr * 4), *pc = malloc(nr * 4);
            for (size_t r = 0; r < (size_t)B * Tq; r++) {
                memcpy(pg + r * D, hq + r * ldq, (size_t)D * 4);
                memcpy(pc + r * D, dq + r * ldq, (size_t)D * 4);
            }
            near_host("dq", pg, pc, nr, bound + ulp16);
            near_host("dk, dv", hkv, dkv, nk, bound + ulp16);
            free(pg);
            free(pc);
        } else {
            SAME_ACT(go, o, no, TOL + extra);
            SAME(glse, lse, nl, TOL);
            double e = 0;
            for (int r = 0; r < B * Tq; r++) {
                double x = maxerr(hq + (size_t)r * ldq, dq + (size_t)r * ldq, D);
                e = isnan(x) || x > e ? x : e;
            }
            for (int r = 0; r < B * Tk; r++) {
                double x = maxerr(hkv + (size_t)r * ldk, dkv + (size_t)r * ldk, 2 * D);
                e = isnan(x) || x > e ? x : e;
            }
            if (!(e <= TOL + ulp16 + extra))
                printf("#   attention (%s) B=%d H=%d Tq=%d Tk=%d dk=%d causal=%d dropout=%g: "
                       "gradients differ by %.3g\n", path[p].name, B, H, Tq, Tk, dk, causal,
                       dropout, e);
            CHECK(e <= TOL + ulp16 + extra);
        }
        GFREE(gq, gkv, gout, go, glse, gdq, gdkv);
        if (dlen)
            gpu->free(gpu, dlen);
        free(hq);
        free(hkv);
        gpu = home;
    }
    free(q); free(kv); free(dout); free(o); free(lse); free(dq); free(dkv);
}

static void test_attention(void)
{
    NEED_GPU();
    int32_t klen[3] = {7, 0, 3};                          /* sentence 1: every key masked */
    attn_case(3, 2, 7, 7, 8, klen, 0, 0, 0, 1, 5);           /* padding */
    attn_case(3, 2, 7, 7, 8, klen, 1, 0, 0, 1, 5);           /* padding + causal */
    attn_case(2, 4, 5, 9, 16, NULL, 0, 0, 0, 1, 5);          /* cross: Tq != Tk */
    attn_case(3, 2, 7, 7, 8, klen, 1, 0.3f, 0, 1, 5);        /* attention dropout */
    attn_case(2, 8, 64, 64, 64, NULL, 1, 0, 0, 1, 5);        /* tiled, 2 columns a lane */
    int32_t long_len[2] = {300, 129};
    attn_case(2, 2, 300, 300, 32, long_len, 0, 0.1f, 0, 1, 5); /* rows longer than a warp */
    /* every other form, each dk off the multiples of 32 (the column guards) */
    int32_t len2[2] = {45, 17};
    attn_case(2, 2, 40, 45, 100, len2, 0, 0.1f, 0, 1, 5);    /* tiled, 4 columns a lane */
    attn_case(2, 2, 40, 40, 200, len2, 1, 0, 0, 1, 5);       /* tiled, 8 columns, > 48 KiB */
    attn_case(2, 2, 40, 45, 257, len2, 0, 0.1f, 0, 1, 5);    /* the rows form */
    attn_case(2, 1, 40, 40, 257, len2, 1, 0, 0, 1, 5);       /* the rows form, causal */
    /* q's rows 16-byte aligned (qpad 0): mm's every product through its pointer arrays
     * (with qpad 5 those reading Q, dQ take one strided call per head); Tk 7, 45: score
     * rows padded to 8, 48 */
    attn_case(3, 2, 7, 7, 8, klen, 1, 0.3f, 0, 1, 0);
    attn_case(2, 8, 64, 64, 64, NULL, 1, 0, 0, 1, 0);
    attn_case(2, 2, 40, 45, 32, len2, 0, 0.1f, 0, 1, 0);
    /* more than 65535 problems in a product: mm's calls take them in slices (B*H = 67200
     * through the pointer arrays; B = 70000 sentences a head, strided) */
    attn_case(4200, 16, 2, 3, 8, NULL, 0, 0.1f, 0, 1, 0);
    attn_case(70000, 1, 1, 2, 8, NULL, 1, 0, 0, 1, 5);
}

/* Incremental attention: R rows of H heads of dk, each with len[r] keys found through
 * blk or slot in `blocks` blocks of `steps` cached rows (the decoder's caches). */
static void decode_case(int R, int H, int dk, int steps, int blocks, const int32_t *len,
                        int big)
{
    int D = H * dk, ld = 2 * D;
    int64_t bstride = (int64_t)steps * ld;
    size_t nkv = (size_t)blocks * bstride;
    float *q = rnda((size_t)R * D, big ? 2 : 1), *kv = rnda(nkv, 1), *o = malloc((size_t)R * D * 4);
    int32_t *blk = malloc((size_t)R * 4), *slot = malloc((size_t)R * steps * 4);
    for (int r = 0; r < R; r++)
        blk[r] = (r * 3 + 1) % blocks;
    for (int i = 0; i < R * steps; i++)
        slot[i] = (i * 7 + 3) % blocks;
    float *gq = dact(q, (size_t)R * D), *gkv = dact(kv, nkv), *go = dact(NULL, (size_t)R * D);
    int32_t *glen = dev(len, (size_t)R * 4), *gblk = dev(blk, (size_t)R * 4),
            *gslot = dev(slot, (size_t)R * steps * 4);
    float scale = 1.0f / sqrtf((float)dk);
    cpu->reserve(cpu, 1, steps, NULL);
    gpu->reserve(gpu, 1, steps, NULL);
    for (int use_slot = 0; use_slot < 2; use_slot++) {
        cpu->attn_decode(cpu, R, H, dk, scale, q, D, kv, kv + D, ld, bstride, blk,
                         use_slot ? slot : NULL, steps, len, o, D);
        gpu->attn_decode(gpu, R, H, dk, scale, gq, D, gkv, gact(gkv, D), ld, bstride, gblk,
                         use_slot ? gslot : NULL, steps, glen, go, D);
        if (big) {
            char w[80];
            snprintf(w, sizeof w, "decoding, R %d, H %d, dk %d, %s", R, H, dk,
                     use_slot ? "slots" : "blocks");
            near_act(w, go, o, (size_t)R * D, sum_bound((double)dk + steps));
        } else {
            SAME_ACT(go, o, (size_t)R * D, TOL);
        }
    }
    GFREE(gq, gkv, go, glen, gblk, gslot);
    free(q); free(kv); free(o); free(blk); free(slot);
}

static void test_attn_decode(void)
{
    NEED_GPU();
    int32_t len[5] = {1, 9, 4, 7, 2};
    decode_case(5, 3, 16, 9, 4, len, 0);
    int32_t len2[4] = {70, 33, 1, 64};                    /* several chunks of 32 keys */
    decode_case(4, 2, 40, 70, 3, len2, 0);
    decode_case(4, 1, 257, 70, 3, len2, 0);
}

/* ---- element-wise ------------------------------------------------------------------------ */

/* bias_bwd alone: column sums of N rows of M (the rows in chunks, cuda_ops.cu). */
static void bias_bwd_case(int N, int M)
{
    size_t n = (size_t)N * M;
    float *y = rnda(n, 1), *db = rnd(M, 1);
    float *gy = dact(y, n), *gdb = dev(db, M * 4);
    printf("#  bias_bwd: N %d, M %d\n", N, M);
    cpu->bias_bwd(cpu, db, y, N, M);
    gpu->bias_bwd(gpu, gdb, gy, N, M);
    near("bias gradient", gdb, db, M, sum_bound(N));
    GFREE(gy, gdb);
    free(y); free(db);
}

/* The element-wise ops on both of the CUDA kernels' paths (kernels/cuda.h, "16-byte
 * vectors"): N rows of M, with y, the bias and the outputs `off` elements into their
 * buffers (dact_off), x at the start.  Bounds as test_elementwise's. */
static void elementwise_paths_case(int N, int M, int off)
{
    size_t n = (size_t)N * M;
    float *x = rnda(n, 1), *y = rnda(n, 1), *b = rnda(M, 1), *db = rnd(M, 1);
    float *z = malloc(n * 4), *xc = malloc(n * 4);
    void *bY, *bB, *bZ, *bR;
    float *gx = dact(x, n), *gy = dact_off(y, n, off, &bY), *gb = dact_off(b, M, off, &bB),
          *gz = dact_off(NULL, n, off, &bZ), *gr = dact_off(NULL, n, off, &bR),
          *gdb = dev(db, M * 4);
    uint64_t key = tfm_rng_key(2, 3, 4);
    printf("#  paths: N %d, M %d, offset %d\n", N, M, off);
    memcpy(xc, x, n * 4);
    gpu->upload_act(gpu, gz, x, n);
    cpu->bias_act(cpu, xc, b, N, M, 1);
    gpu->bias_act(gpu, gz, gb, N, M, 1);
    SAME_ACT(gz, xc, n, TOL);
    cpu->relu_bwd(cpu, z, y, xc, n, 1.25f);
    gpu->relu_bwd(gpu, gr, gy, gz, n, 1.25f);
    SAME_ACT(gr, z, n, TOL);
    {               /* in place (dx = dy, as the FFN's backward calls it): the same bits */
        float *hr = hact(gr, n);
        void *bI;
        float *gin = dact_off(y, n, off, &bI);
        gpu->relu_bwd(gpu, gin, gin, gz, n, 1.25f);
        exact_act("relu_bwd in place", gin, hr, n);
        free(hr);
        gpu->free(gpu, bI);
    }
    cpu->bias_bwd(cpu, db, y, N, M);
    gpu->bias_bwd(gpu, gdb, gy, N, M);
    SAME(gdb, db, M, TOL);
    cpu->dropout(cpu, z, y, n, 0.3f, key);
    gpu->dropout(gpu, gz, gy, n, 0.3f, key);
    EXACT_ACT(gz, z, n);
    cpu->add_dropout(cpu, z, x, y, n, 0.3f, key);
    gpu->add_dropout(gpu, gr, gx, gy, n, 0.3f, key);
    SAME_ACT(gr, z, n, TOL);
    memcpy(z, x, n * 4);
    cpu->axpy(cpu, z, -0.75f, y, n);
    gpu->axpy(gpu, gx, -0.75f, gy, n);
    SAME_ACT(gx, z, n, TOL);
    GFREE(gx, bY, bB, bZ, bR, gdb);
    free(x); free(y); free(b); free(db); free(z); free(xc);
}

static void test_elementwise(void)
{
    NEED_GPU();
    bias_bwd_case(20001, 33);                             /* 254 chunks of 79 rows */
    bias_bwd_case(1, 5);                                  /* one row, one partial tile */
    elementwise_paths_case(40, 1024, 0);                  /* vectors, the bias's too */
    elementwise_paths_case(40, 1024, 1);                  /* off the boundary */
    elementwise_paths_case(9, 1023, 0);                   /* bias rows off it, a tail */
    elementwise_paths_case(3, 5, 1);
    int N = 123, M = 257;
    size_t n = (size_t)N * M;
    float *x = rnda(n, 1), *y = rnda(n, 1), *b = rnda(M, 1), *db = rnd(M, 1);
    float *gx = dact(x, n), *gy = dact(y, n), *gb = dact(b, M), *gdb = dev(db, M * 4),
          *gz = dact(NULL, n);
    float *z = malloc(n * 4);
    /* bias_act with and without ReLU; relu_bwd on its output */
    for (int relu = 0; relu < 2; relu++) {
        float *xc = malloc(n * 4);
        memcpy(xc, x, n * 4);
        gpu->upload_act(gpu, gz, x, n);
        cpu->bias_act(cpu, xc, b, N, M, relu);
        gpu->bias_act(gpu, gz, gb, N, M, relu);
        SAME_ACT(gz, xc, n, TOL);
        if (relu) {
            cpu->relu_bwd(cpu, z, y, xc, n, 1.25f);
            float *gr = dact(NULL, n);
            gpu->relu_bwd(gpu, gr, gy, gz, n, 1.25f);
            SAME_ACT(gr, z, n, TOL);
            gpu->free(gpu, gr);
        }
        free(xc);
    }
    cpu->bias_bwd(cpu, db, y, N, M);
    gpu->bias_bwd(gpu, gdb, gy, N, M);
    SAME(gdb, db, M, TOL);
    /* dropout: exact (NaN-ness for NaN); with an Inf and a NaN among the inputs */
    x[5] = INFINITY;
    x[77] = NAN;
    x[78] = -INFINITY;
    gpu->upload_act(gpu, gx, x, n);
    uint64_t key = tfm_rng_key(9, 9, 9);
    cpu->dropout(cpu, z, x, n, 0.3f, key);
    gpu->dropout(gpu, gz, gx, n, 0.3f, key);
    EXACT_ACT(gz, z, n);
    cpu->add_dropout(cpu, z, y, x, n, 0.3f, key);
    gpu->add_dropout(gpu, gz, gy, gx, n, 0.3f, key);
    SAME_ACT(gz, z, n, TOL);
    cpu->dropout(cpu, z, x, n, 0.0f, key);
    gpu->dropout(gpu, gz, gx, n, 0.0f, key);
    EXACT_ACT(gz, z, n);
    /* in place */
    float *xc = malloc(n * 4);
    memcpy(xc, x, n * 4);
    gpu->copy(gpu, gz, gx, n * gpu->act_size);
    cpu->dropout(cpu, xc, xc, n, 0.5f, key);
    gpu->dropout(gpu, gz, gz, n, 0.5f, key);
    EXACT_ACT(gz, xc, n);
    free(xc);
    x[5] = 0.5f;
    x[77] = -0.5f;
    x[78] = 0.25f;
    gpu->upload_act(gpu, gx, x, n);
    /* axpy */
    memcpy(z, y, n * 4);
    gpu->upload_act(gpu, gz, y, n);
    cpu->axpy(cpu, z, -0.75f, x, n);
    gpu->axpy(gpu, gz, -0.75f, gx, n);
    SAME_ACT(gz, z, n, TOL);
    /* gather with and without indexes: copies, bit for bit */
    int32_t idx[4] = {5, 0, 122, 5};
    int32_t *gidx = dev(idx, sizeof idx);
    float *r = calloc(4 * 300, 4), *gr = dact(NULL, 4 * 300);
    cpu->gather(cpu, r, 300, x, M, idx, 4, 200);
    gpu->gather(gpu, gr, 300, gx, M, gidx, 4, 200);
    EXACT_ACT(gr, r, 4 * 300);
    cpu->gather(cpu, r, 300, x, M, NULL, 4, 250);
    gpu->gather(gpu, gr, 300, gx, M, NULL, 4, 250);
    EXACT_ACT(gr, r, 4 * 300);
    GFREE(gx, gy, gb, gdb, gz, gidx, gr);
    free(x); free(y); free(b); free(db); free(z); free(r);
}

/* ---- fused ops ------------------------------------------------------------------------------ */

/* The fused ops (backend.h, "fused") against the CPU's: bias + activation + dropout on
 * (N,F), embedding (V,D) + positions + dropout on (N,D), residual + dropout + layer norm
 * and layer-norm backward + dropout on (N,D); with dropout p (0: the copy path).  Bounds:
 *  - bias_act_dropout, embed_fwd_dropout, add_dropout_layernorm's r: bit for bit (NaN-ness
 *    for NaN) at both precisions: the CPU's fp32 operations in its order, rounded where the
 *    sequence stores (the element-wise ops' rule, the header); with Inf and NaN among the
 *    bias inputs (a dropped Inf is 0, ReLU(NaN) is 0);
 *  - y, mean, rstd, dx, dg, db: layernorm_case's (TOL, or sum_bound over D along rows and
 *    over N down columns when big), one bf16 unit more for the activations;
 *  - dxd = dropout(dx), from the dx each side stored: dx's bound times the same multiplier,
 *    so the same relative bound, plus at bf16 a second unit (dx's rounding, then dxd's).
 * Accumulating dx starts from the CPU's dx on both sides (the header).  The inputs x, the
 * table, a, r and dy start off elements into their buffers (dact_off: the CUDA kernels'
 * element-by-element path for them, the vector path for the rest).  And on the GPU alone:
 * add_dropout_layernorm and layernorm_bwd_dropout give their sequences' bits (backend.h,
 * "fused"), the sequences run on fresh buffers at the start (other paths when off is 1). */
static void fused_case(int N, int D, int F, int V, float p, int big, int off)
{
    size_t nd = (size_t)N * D, nf = (size_t)N * F, nt = (size_t)V * D;
    int L = N < 256 ? N : 256, pos0 = 3;
    uint64_t key = tfm_rng_key(5, 6, 7);
    double rows = big ? sum_bound(D) : TOL, cols = big ? sum_bound(N) : TOL;
    char w[96];
    printf("#  N %d, D %d, F %d, V %d, p %g\n", N, D, F, V, p);
    /* bias + ReLU (or none) + dropout */
    float *x = rnda(nf, 1), *b = rnda(F, 1), *z = malloc(nf * 4);
    x[3] = INFINITY;
    x[4] = -INFINITY;
    x[5] = NAN;
    void *bX, *bT, *bA, *bR, *bDY;
    float *gx = dact_off(NULL, nf, off, &bX), *gb = dact(b, F);
    for (int relu = 0; relu < 2; relu++) {
        memcpy(z, x, nf * 4);
        gpu->upload_act(gpu, gx, x, nf);
        cpu->bias_act_dropout(cpu, z, b, N, F, relu, p, key);
        gpu->bias_act_dropout(gpu, gx, gb, N, F, relu, p, key);
        snprintf(w, sizeof w, "bias%s + dropout", relu ? " + ReLU" : "");
        exact_act(w, gx, z, nf);
    }
    GFREE(bX, gb);
    free(x); free(b); free(z);
    /* embedding + positions (or none) + dropout */
    int32_t *ids = malloc((size_t)N * 4);
    for (int i = 0; i < N; i++)
        ids[i] = irand(V);
    float *table = rnda(nt, 1), *pos = rnda((size_t)(pos0 + L) * D, 1), *out = malloc(nd * 4);
    int32_t *gid = dev(ids, (size_t)N * 4);
    float *gt = dact_off(table, nt, off, &bT), *gp = dact(pos, (size_t)(pos0 + L) * D),
          *go = dact(NULL, nd);
    for (int with_pos = 0; with_pos < 2; with_pos++) {
        cpu->embed_fwd_dropout(cpu, out, table, ids, N, D, 32.0f, with_pos ? pos : NULL, L,
                               pos0, p, key);
        gpu->embed_fwd_dropout(gpu, go, gt, gid, N, D, 32.0f, with_pos ? gp : NULL, L, pos0,
                               p, key);
        exact_act(with_pos ? "embedding + positions + dropout" : "embedding + dropout", go,
                  out, nd);
    }
    GFREE(gid, bT, gp, go);
    free(ids); free(table); free(pos); free(out);
    /* residual + dropout + layer norm, then its backward */
    float *a = rnda(nd, 2), *s = rnda(nd, 2), *g = rnda(D, 1), *c = rnda(D, 1),
          *y = malloc(nd * 4), *r = malloc(nd * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4),
          *dy = rnda(nd, 1), *dx = rnda(nd, 1), *dxd = malloc(nd * 4), *dg = rnd(D, 1),
          *db = rnd(D, 1);
    float *ga = dact_off(a, nd, off, &bA), *gs = dact(s, nd), *gg = dact(g, D),
          *gc = dact(c, D), *gy = dact(NULL, nd), *gr = dact_off(NULL, nd, off, &bR),
          *gm = dev(NULL, N * 4), *grs = dev(NULL, N * 4), *gdy = dact_off(dy, nd, off, &bDY),
          *gdx = dact(dx, nd), *gdxd = dact(NULL, nd), *gdg = dev(dg, D * 4),
          *gdb = dev(db, D * 4);
    cpu->add_dropout_layernorm(cpu, y, mean, rstd, r, a, s, g, c, N, D, 1e-5f, p, key);
    gpu->add_dropout_layernorm(gpu, gy, gm, grs, gr, ga, gs, gg, gc, N, D, 1e-5f, p, key);
    exact_act("residual + dropout", gr, r, nd);
    near_act("layer norm y", gy, y, nd, rows);
    near("mean", gm, mean, N, rows);
    near("rstd", grs, rstd, N, rows);
    for (int acc = 0; acc < 2; acc++) {
        if (acc && ulp16 > 0)
            gpu->upload_act(gpu, gdx, dx, nd);
        cpu->layernorm_bwd_dropout(cpu, dx, dxd, dg, db, dy, r, mean, rstd, g, N, D, acc, p,
                                   key);
        gpu->layernorm_bwd_dropout(gpu, gdx, gdxd, gdg, gdb, gdy, gr, gm, grs, gg, N, D, acc,
                                   p, key);
        snprintf(w, sizeof w, "dx (accumulate %d)", acc);
        near_act(w, gdx, dx, nd, rows);
        snprintf(w, sizeof w, "dropout(dx) (accumulate %d)", acc);
        near_act(w, gdxd, dxd, nd, rows + ulp16);
        snprintf(w, sizeof w, "dg (accumulate %d)", acc);
        near(w, gdg, dg, D, cols);
        snprintf(w, sizeof w, "db (accumulate %d)", acc);
        near(w, gdb, db, D, cols);
    }
    /* the same bits twice (row sums in a fixed tree) */
    float *y1 = hact(gy, nd);
    gpu->add_dropout_layernorm(gpu, gy, gm, grs, gr, ga, gs, gg, gc, N, D, 1e-5f, p, key);
    exact_act("layer norm y, again", gy, y1, nd);
    /* the sequences, on the GPU */
    float *r1 = hact(gr, nd), *m1 = host(gm, N), *rs1 = host(grs, N);
    float *qr = dact(NULL, nd), *qy = dact(NULL, nd), *qm = dev(NULL, N * 4),
          *qrs = dev(NULL, N * 4), *qdx = dact(NULL, nd), *qdxd = dact(NULL, nd),
          *qdg = dev(dg, D * 4), *qdb = dev(db, D * 4);
    gpu->add_dropout(gpu, qr, ga, gs, nd, p, key);
    gpu->layernorm_fwd(gpu, qy, qm, qrs, qr, gg, gc, N, D, 1e-5f);
    exact_act("add_dropout, layernorm_fwd: r", qr, r1, nd);
    exact_act("add_dropout, layernorm_fwd: y", qy, y1, nd);
    exact("add_dropout, layernorm_fwd: mean", qm, m1, N);
    exact("add_dropout, layernorm_fwd: rstd", qrs, rs1, N);
    gpu->layernorm_bwd_dropout(gpu, gdx, gdxd, gdg, gdb, gdy, gr, gm, grs, gg, N, D, 0, p, key);
    gpu->layernorm_bwd(gpu, qdx, qdg, qdb, gdy, gr, gm, grs, gg, N, D, 0);
    gpu->dropout(gpu, qdxd, qdx, nd, p, key);
    float *dx1 = hact(gdx, nd), *dxd1 = hact(gdxd, nd);
    exact_act("layernorm_bwd, dropout: dx", qdx, dx1, nd);
    exact_act("layernorm_bwd, dropout: dropout(dx)", qdxd, dxd1, nd);
    free(y1); free(r1); free(m1); free(rs1); free(dx1); free(dxd1);
    GFREE(qr, qy, qm, qrs, qdx, qdxd, qdg, qdb);
    GFREE(bA, gs, gg, gc, gy, bR, gm, grs, bDY, gdx, gdxd, gdg, gdb);
    free(a); free(s); free(g); free(c); free(y); free(r); free(mean); free(rstd); free(dy);
    free(dx); free(dxd); free(dg); free(db);
}

static void test_fused(void)
{
    NEED_GPU();
    fused_case(77, 200, 300, 13, 0.1f, 0, 0);
    fused_case(77, 200, 300, 13, 0.0f, 0, 0);
    fused_case(5, 1000, 257, 9, 0.3f, 0, 0);              /* D > 256: several per thread */
    /* the vector paths (kernels/cuda.h): whole rows of vectors, with and without offsets;
     * rows that start off the boundary and end in a partial group */
    fused_case(6, 1024, 4096, 9, 0.1f, 0, 0);
    fused_case(6, 1024, 1024, 9, 0.1f, 0, 1);
    fused_case(6, 1024, 1024, 9, 0.0f, 0, 1);
    fused_case(5, 1023, 255, 9, 0.1f, 0, 0);
    fused_case(4, 1025, 257, 9, 0.3f, 0, 1);
    fused_case(3, 7, 9, 5, 0.1f, 0, 1);
}

/* ---- output layer and optimizer ------------------------------------------------------------ */

/* Cross-entropy and log-softmax of N rows of V logits in [-8, 8]; every 9th (small) or
 * 16th (big) row ignored (label 0).  The logits start off elements into their buffer
 * (dact_off), log_softmax's output at its start. */
static void xent_case(int N, int V, int big, int off)
{
    size_t n = (size_t)N * V;
    float *z = rnda(n, 8), *loss = malloc(N * 4), *nll = malloc(N * 4), *ls = malloc(n * 4);
    int32_t *lab = malloc((size_t)N * 4);
    for (int i = 0; i < N; i++)
        lab[i] = i % (big ? 16 : 9) == 4 ? 0 : big ? 1 + irand(V - 1) : (i * 131) % V;
    void *bZ;
    float *gz = dact_off(z, n, off, &bZ), *gl = dev(NULL, N * 4), *gn = dev(NULL, N * 4),
          *gls = dact(NULL, n);
    printf("#  N %d, V %d, offset %d\n", N, V, off);
    int32_t *glab = dev(lab, (size_t)N * 4);
    cpu->log_softmax(cpu, ls, z, N, V);
    gpu->log_softmax(gpu, gls, gz, N, V);
    /* Sums over V (in float within blocks of 256 or a thread's ~145 columns, in double
     * across: rounding ~1e-6 of the sum), exp by two libraries (2e-7): TOL. */
    if (big)
        near_act("log_softmax", gls, ls, n, TOL);
    else
        SAME_ACT(gls, ls, n, TOL);
    if (!big) {     /* in place (y = x, as decoding calls it): the same bits */
        float *gin = dact(NULL, n);
        gpu->copy(gpu, gin, gz, n * gpu->act_size);
        gpu->log_softmax(gpu, gin, gin, N, V);
        float *hls = hact(gls, n);
        exact_act("log_softmax in place", gin, hls, n);
        free(hls);
        gpu->free(gpu, gin);
    }
    cpu->xent(cpu, z, lab, N, V, 0.1f, 0, loss, nll, 0.0f);   /* logits untouched */
    gpu->xent(gpu, gz, glab, N, V, 0.1f, 0, gl, gn, 0.0f);
    if (big) {
        near("loss", gl, loss, N, TOL);
        near("nll", gn, nll, N, TOL);
    } else {
        SAME(gl, loss, N, TOL);
        SAME(gn, nll, N, TOL);
    }
    exact_act("logits untouched", gz, z, n);
    cpu->xent(cpu, z, lab, N, V, 0.1f, 0, loss, nll, 0.5f);
    gpu->xent(gpu, gz, glab, N, V, 0.1f, 0, gl, gn, 0.5f);
    if (big) {
        near("loss with the gradient", gl, loss, N, TOL);
        near_act("gradient", gz, z, n, TOL);
    } else {
        SAME(gl, loss, N, TOL);
        SAME_ACT(gz, z, n, TOL);
    }
    GFREE(bZ, gl, gn, gls, glab);
    free(z); free(loss); free(nll); free(ls); free(lab);
}

static void test_xent(void)
{
    NEED_GPU();
    xent_case(37, 1000, 0, 0);
    xent_case(9, 5, 0, 0);                                /* V < 32: most lanes idle */
    xent_case(10, 257, 0, 0);                             /* one column past the block */
    xent_case(1, 1000, 0, 0);
    /* the vector paths (kernels/cuda.h): rows of whole vectors, with and without an
     * offset; rows that start off the boundary and end in a partial group */
    xent_case(10, 37000, 0, 0);
    xent_case(10, 37000, 0, 1);
    xent_case(11, 1001, 0, 0);
    xent_case(9, 7, 0, 1);
}

/* Sum of squares and an Adam step over n elements.  sumsq: both in double, in other
 * orders: relative differences ~1e-16 sqrt(n), bound 1e-12.  Adam: the same fp32
 * operations in the same order on both (cuda_ops.cu: adam_elems), so 1e-6 of the typical
 * size is already generous.  The gradient and the parameters start off floats into their
 * buffers (the CUDA kernels' element-by-element path when off is not a multiple of 4:
 * kernels/cuda.h), the moments at their start; sumsq gives the same bits there as on a
 * copy at the start of a buffer (the vector path), its parts being the same sums. */
static void optimizer_case(size_t n, int big, int off)
{
    float *x = rnd(n, 1);
    float *bx = dev(NULL, (n + off) * 4), *gx = bx + off;
    gpu->upload(gpu, gx, x, n * 4);
    double a = cpu->sumsq(cpu, x, n), b = gpu->sumsq(gpu, gx, n);
    printf("#  n %zu, offset %d: sumsq cpu %.17g, gpu %.17g\n", n, off, a, b);
    CHECK_NEAR(b / a, 1.0, 1e-12);
    CHECK(gpu->sumsq(gpu, gx, n) == b);                    /* the same bits again */
    CHECK(gpu->sumsq(gpu, gx, 0) == 0);
    if (off) {
        float *gx0 = dev(x, n * 4);
        CHECK(gpu->sumsq(gpu, gx0, n) == b);
        gpu->free(gpu, gx0);
    }
    float *p = rnd(n, 1), *m = rnd(n, 0.1f), *v = rnd(n, 0.01f);
    for (size_t i = 0; i < n; i++)
        v[i] = fabsf(v[i]);
    float *bp = dev(NULL, (n + off) * 4), *gp = bp + off, *gm = dev(m, n * 4),
          *gv = dev(v, n * 4);
    gpu->upload(gpu, gp, p, n * 4);
    float *zeros = calloc(n, 4);
    cpu->adam(cpu, p, x, m, v, n, 1e-3f, 0.9f, 0.98f, 1e-9f, 0.5f, 7);
    gpu->adam(gpu, gp, gx, gm, gv, n, 1e-3f, 0.9f, 0.98f, 1e-9f, 0.5f, 7);
    if (big) {
        near("adam: parameters", gp, p, n, 1e-6);
        near("adam: m", gm, m, n, 1e-6);
        near("adam: v", gv, v, n, 1e-6);
    } else {
        SAME(gp, p, n, 1e-6);
        SAME(gm, m, n, 1e-6);
        SAME(gv, v, n, 1e-6);
    }
    EXACT(gx, zeros, n);                                   /* the gradient is cleared */
    GFREE(bx, bp, gm, gv);
    free(x); free(p); free(m); free(v); free(zeros);
}

static void test_optimizer(void)
{
    NEED_GPU();
    optimizer_case(3000017, 0, 0);
    optimizer_case(100003, 0, 1);                         /* off the 16-byte boundary */
    optimizer_case(4099, 0, 0);                           /* one part, a tail of 3 */
}

/* The step's statistics on the device (cuda_step.cu) over a gradient of n elements and a
 * batch of rows losses.  loss_sum and grad_clip: double sums in other orders, relative
 * differences ~1e-16 sqrt(n), bound 1e-12, and the same bits twice; the norm from the
 * device's own sumsq, bit for bit; clip and scale follow
 * the norm (1e-12 too), and each case clips or not as the CPU does.  adam_scaled, handed
 * the CPU's statistics: the CPU's adam with that scale (the same fp32 operations, 1e-6 as
 * test_optimizer), and nothing at all when the norm is not finite.  The gradient and m
 * start off floats into their buffers (the CUDA kernels' element-by-element path when off
 * is not a multiple of 4: kernels/cuda.h). */
static void step_case(size_t n, int rows, int big, int off)
{
    float *g = rnd(n, 1), *loss = rnd((size_t)rows, 3), *nll = rnd((size_t)rows, 2);
    float *bg = dev(NULL, (n + off) * 4), *gg = bg + off, *gl = dev(loss, (size_t)rows * 4),
          *gn = dev(nll, (size_t)rows * 4);
    gpu->upload(gpu, gg, g, n * 4);
    struct tfm_step_stats c = {1.5, 2.5, 0, 0, 0}, h, h2;
    struct tfm_step_stats *gst = dev(&c, sizeof c);
    for (int k = 0; k < 2; k++) {                       /* the sums add up */
        cpu->loss_sum(cpu, &c, loss, nll, rows);
        gpu->loss_sum(gpu, gst, gl, gn, rows);
    }
    gpu->download(gpu, &h, gst, sizeof h);
    printf("#  rows %d: loss cpu %.17g, gpu %.17g\n", rows, c.loss, h.loss);
    CHECK_NEAR(h.loss / c.loss, 1.0, 1e-12);
    CHECK_NEAR(h.nll / c.nll, 1.0, 1e-12);
    double gscale = 1.0 / 3001, clips[3] = {0, 1e30, 0};
    for (int k = 0; k < 3; k++) {
        if (k == 2)                                     /* about half the norm: clipped */
            clips[2] = 0.5 * c.grad_norm;
        cpu->grad_clip(cpu, &c, g, n, gscale, clips[k]);
        gpu->grad_clip(gpu, gst, gg, n, gscale, clips[k]);
        gpu->download(gpu, &h, gst, sizeof h);
        gpu->grad_clip(gpu, gst, gg, n, gscale, clips[k]);
        gpu->download(gpu, &h2, gst, sizeof h2);
        printf("#  n %zu, clip_norm %g: norm cpu %.17g, gpu %.17g; clip %.17g, %.17g\n", n,
               clips[k], c.grad_norm, h.grad_norm, c.clip, h.clip);
        CHECK_NEAR(h.grad_norm / c.grad_norm, 1.0, 1e-12);
        CHECK_NEAR(h.clip / c.clip, 1.0, 1e-12);
        CHECK_NEAR(h.scale / c.scale, 1.0, 1e-12);
        CHECK((h.clip < 1) == (c.clip < 1) && (c.clip < 1) == (k == 2));
        CHECK(memcmp(&h, &h2, sizeof h) == 0);          /* the same bits again */
        CHECK(h.loss == c.loss && h.nll == c.nll);      /* left as they were */
        /* the norm is sumsq's sum, its bits (backend.h, grad_clip) */
        CHECK(h.grad_norm == sqrt(gpu->sumsq(gpu, gg, n)) * gscale);
    }
    float *p = rnd(n, 1), *m = rnd(n, 0.1f), *v = rnd(n, 0.01f);
    for (size_t i = 0; i < n; i++)
        v[i] = fabsf(v[i]);
    float *gp = dev(p, n * 4), *bm = dev(NULL, (n + off) * 4), *gm = bm + off,
          *gv = dev(v, n * 4);
    gpu->upload(gpu, gm, m, n * 4);
    float *zeros = calloc(n, 4);
    /* a norm that is not finite: nothing changes */
    struct tfm_step_stats bad = c;
    bad.grad_norm = NAN;
    gpu->upload(gpu, gst, &bad, sizeof bad);
    gpu->adam_scaled(gpu, gp, gg, gm, gv, n, 1e-3f, 0.9f, 0.98f, 1e-9f, gst, 7);
    EXACT(gp, p, n);
    EXACT(gm, m, n);
    EXACT(gv, v, n);
    EXACT(gg, g, n);
    /* the CPU's statistics on both */
    gpu->upload(gpu, gst, &c, sizeof c);
    cpu->adam_scaled(cpu, p, g, m, v, n, 1e-3f, 0.9f, 0.98f, 1e-9f, &c, 7);
    gpu->adam_scaled(gpu, gp, gg, gm, gv, n, 1e-3f, 0.9f, 0.98f, 1e-9f, gst, 7);
    if (big) {
        near("adam_scaled: parameters", gp, p, n, 1e-6);
        near("adam_scaled: m", gm, m, n, 1e-6);
        near("adam_scaled: v", gv, v, n, 1e-6);
    } else {
        SAME(gp, p, n, 1e-6);
        SAME(gm, m, n, 1e-6);
        SAME(gv, v, n, 1e-6);
    }
    EXACT(gg, zeros, n);                                   /* the gradient is cleared */
    GFREE(bg, gl, gn, gst, gp, bm, gv);
    free(g); free(loss); free(nll); free(p); free(m); free(v); free(zeros);
}

static void test_step(void)
{
    NEED_GPU();
    step_case(3000017, 2049, 0, 0);
    step_case(5, 1, 0, 0);
    step_case(100003, 7, 0, 1);                           /* off the 16-byte boundary */
}

static void test_big_step(void)
{
    NEED_BIG();
    step_case(50000017, 10240, 1, 0);
}

/* ---- determinism: the reductions give the same bits twice ------------------------------- */

/* Attention forward and backward twice on the GPU: the same bits, on each path (dk picks
 * the form of the online-softmax kernels). */
static void attn_twice_on(int dk, const char *name)
{
    int B = 2, H = 2, T = 70, D = H * dk;
    int32_t klen[2] = {70, 41};
    struct tfm_attn a = {B, H, T, T, dk, NULL, 1, 1.0f / sqrtf((float)dk), 0.1f,
                         tfm_rng_key(1, 2, 3)};
    size_t nx = (size_t)B * T * D, nl = (size_t)B * H * T;
    float *x = rnda(3 * nx, 1);
    float *gx = dact(x, 3 * nx), *gq = gx, *gk = gact(gx, nx), *gv = gact(gx, 2 * nx);
    int32_t *gl = dev(klen, sizeof klen);
    a.klen = gl;
    gpu->reserve(gpu, T, T, NULL);
    float *out[2][5];
    for (int run = 0; run < 2; run++) {
        float *o = dact(NULL, nx), *lse = dev(NULL, nl * 4), *dq = dact(NULL, nx),
              *dk_ = dact(NULL, nx), *dv = dact(NULL, nx);
        gpu->attn_fwd(gpu, &a, gq, D, gk, D, gv, D, o, D, lse);
        gpu->attn_bwd(gpu, &a, gq, D, gk, D, gv, D, o, D, lse, gq, D, dq, D, dk_, D, dv, D);
        out[run][0] = hact(o, nx);
        out[run][1] = host(lse, nl);
        out[run][2] = hact(dq, nx);
        out[run][3] = hact(dk_, nx);
        out[run][4] = hact(dv, nx);
        GFREE(o, lse, dq, dk_, dv);
    }
    for (int k = 0; k < 5; k++) {
        size_t n = k == 1 ? nl : nx;
        size_t i = first_diff(out[0][k], out[1][k], n);
        if (i < n)
            printf("#   attention (%s) dk %d, output %d: element %zu differs between runs\n",
                   name, dk, k, i);
        CHECK(i == n);
        free(out[0][k]);
        free(out[1][k]);
    }
    GFREE(gx, gl);
    free(x);
}

static void attn_twice(int dk)
{
    struct tfm_backend *home = gpu;
    for (int p = 0; p < npaths; p++) {
        gpu = path[p].be;
        attn_twice_on(dk, path[p].name);
        gpu = home;
    }
}

/* A product twice on the GPU (gemm or gemm_grad): the same bits.  A long K and few
 * output tiles, where a library would split K across blocks (cuBLAS does so without
 * atomics, and the math mode forbids reducing in bf16). */
/* grad 0: gemm; 1: gemm_grad; 2: gemm_bias with ReLU (cuBLASLt: the plan's algorithm both
 * times). */
static void gemm_twice(int grad)
{
    int M = 96, N = 80, K = 8192;
    float *A = rnda((size_t)M * K, 1), *Bm = rnda((size_t)K * N, 1), *bias = rnda((size_t)N, 1);
    float *dA = dact(A, (size_t)M * K), *dB = dact(Bm, (size_t)K * N), *db = dact(bias, N);
    float *out[2];
    static const char *const name[] = {"gemm", "gemm_grad", "gemm_bias"};
    for (int run = 0; run < 2; run++) {
        float *dC = grad == 1 ? dev(NULL, (size_t)M * N * 4) : dact(NULL, (size_t)M * N);
        if (grad == 2)
            gpu->gemm_bias(gpu, 0, 0, M, N, K, dA, K, dB, N, db, 1, dC, N);
        else
            (grad ? gpu->gemm_grad : gpu->gemm)(gpu, 0, 0, M, N, K, 1.0f, dA, K, dB, N, 0.0f,
                                                dC, N);
        out[run] = grad == 1 ? host(dC, (size_t)M * N) : hact(dC, (size_t)M * N);
        gpu->free(gpu, dC);
    }
    size_t i = first_diff(out[0], out[1], (size_t)M * N);
    if (i < (size_t)M * N)
        printf("#   %s: element %zu differs between runs\n", name[grad], i);
    CHECK(i == (size_t)M * N);
    GFREE(dA, dB, db);
    free(A); free(Bm); free(bias); free(out[0]); free(out[1]);
}

static void test_determinism(void)
{
    NEED_GPU();
    int N = 500, D = 64, V = 7;
    size_t nd = (size_t)N * D;
    float *x = rnda(nd, 1), *g = rnda(D, 1);
    int32_t ids[500];
    for (int i = 0; i < N; i++)
        ids[i] = i % V;
    float *gx = dact(x, nd), *gg = dact(g, D), *gm = dev(NULL, N * 4), *gr = dev(NULL, N * 4),
          *gy = dact(NULL, nd);
    int32_t *gid = dev(ids, sizeof ids);
    float *out[2][3];
    for (int run = 0; run < 2; run++) {
        float *dx = dact(NULL, nd), *dg = dev(NULL, D * 4), *db = dev(NULL, D * 4),
              *dt = dev(NULL, (size_t)V * D * 4);
        gpu->layernorm_fwd(gpu, gy, gm, gr, gx, gg, gg, N, D, 1e-5f);
        gpu->layernorm_bwd(gpu, dx, dg, db, gx, gx, gm, gr, gg, N, D, 0);
        gpu->embed_bwd(gpu, dt, NULL, gx, gid, N, D, V, 1.0f, N, 0);
        out[run][0] = hact(dx, nd);
        out[run][1] = host(dg, D);
        out[run][2] = host(dt, (size_t)V * D);
        GFREE(dx, dg, db, dt);
    }
    CHECK(first_diff(out[0][0], out[1][0], nd) == nd);
    CHECK(first_diff(out[0][1], out[1][1], D) == (size_t)D);
    CHECK(first_diff(out[0][2], out[1][2], (size_t)V * D) == (size_t)V * D);
    for (int run = 0; run < 2; run++)
        for (int k = 0; k < 3; k++)
            free(out[run][k]);
    GFREE(gx, gg, gm, gr, gy, gid);
    free(x); free(g);
    attn_twice(64);                                        /* tiled */
    attn_twice(257);                                       /* rows */
    gemm_twice(0);
    gemm_twice(1);
    gemm_twice(2);
}

/* ---- a whole model: one training batch on the GPU and on the CPU ------------------------- */

/* The model-level tests compare against fp32 (and a model's config sets its backend's
 * precision): op tests only at bf16. */
#define NEED_FP32()                                                                    \
    do {                                                                               \
        if (ulp16 > 0) {                                                               \
            t_skip("TFM_GPU_OPS_PRECISION=bf16: op tests only");                       \
            return;                                                                    \
        }                                                                              \
    } while (0)

static struct tfm_backend *open_cuda(const char *attn, struct tfm_error *err);

static void test_model(void)
{
    NEED_GPU();
    /* the tools' own check (device.c): a 2-layer model's training batch, Adam step and
     * decoding steps against the CPU */
    struct tfm_error err;
    char note[512];
    if (ulp16 == 0) {
        int rc = tfm_device_check(gpu, note, sizeof note, &err);
        printf("# %s\n", rc == 0 ? note : err.msg);
        CHECK(rc == 0);
        return;
    }
    /* at bf16, its bf16 pass (tfm_device_check_bf16: what lets a run at precision auto
     * compute in bf16 on a GPU), against the CPU's emulation, on a fresh backend of each
     * attention path (the check leaves its backend at fp32; gpu stays at bf16) */
    const char *paths[2] = {"flash", "mm"};
    for (int p = 0; p < (sim ? 1 : 2); p++) {
        struct tfm_backend *be = sim ? tfm_backend_sim(2, &err) : open_cuda(paths[p], &err);
        if (!be) {
            printf("#   %s\n", err.msg);
            CHECK(!"backend opened");
            continue;
        }
        int rc = tfm_device_check_bf16(be, note, sizeof note, &err);
        printf("#   %s: %s\n", sim ? "sim" : paths[p], rc == 0 ? note : err.msg);
        CHECK(rc == 0);
        be->destroy(be);
    }
}

/* ---- the big model's shapes ---------------------------------------------------------------- */
/* d_model 1024, 16 heads of 64, d_ff 4096, vocabulary 37000, batches of 40 sentences of 256
 * tokens (10240).  Bounds: sum_bound of each result's longest sum (the header). */

enum { BD = 1024, BF = 4096, BV = 37000, BB = 40, BT = 256, BN = BB * BT };

/* C (M,N) = op(A) op(B) + beta C, A in [-1, 1], B in [-s, s] with s = sqrt(3/K): each
 * result has a standard deviation of 1/sqrt(3), as in the model (normalized activations
 * times Xavier-scaled weights).  Bound: sum_bound(K) (+ tc_extra(K) at bf16; + ulp16 for
 * gemm's bf16 C). */
static void big_gemm_case(const char *what, int grad, int ta, int tb, int M, int N, int K,
                          float beta)
{
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    int lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
    float *A = rnda(na, 1), *Bm = rnda(nb, sqrtf(3.0f / (float)K)),
          *C = grad ? rnd(nc, 1) : rnda(nc, 1);
    float *dA = dact(A, na), *dB = dact(Bm, nb), *dC = grad ? dev(C, nc * 4) : dact(C, nc);
    double t0 = now();
    (grad ? cpu->gemm_grad : cpu->gemm)(cpu, ta, tb, M, N, K, 1.0f, A, lda, Bm, ldb, beta, C,
                                        ldc);
    double t1 = now();
    (grad ? gpu->gemm_grad : gpu->gemm)(gpu, ta, tb, M, N, K, 1.0f, dA, lda, dB, ldb, beta, dC,
                                        ldc);
    gpu->sync(gpu);
    double t2 = now();
    char w[160];
    snprintf(w, sizeof w, "%s: (%d,%d) = %s(%d,%d) %s(%d,%d)%s, cpu %.2f s, gpu %.3f s", what,
             M, N, ta ? "T" : "", ta ? K : M, ta ? M : K, tb ? "T" : "", tb ? N : K,
             tb ? K : N, beta != 0 ? " + C" : "", t1 - t0, t2 - t1);
    if (grad)
        near(w, dC, C, nc, sum_bound(K) + tc_extra(K));
    else
        near_act(w, dC, C, nc, sum_bound(K) + tc_extra(K));
    GFREE(dA, dB, dC);
    free(A);
    free(Bm);
    free(C);
}

static void test_big_gemm(void)
{
    NEED_BIG();
    big_gemm_case("QKV projection", 0, 0, 0, BN, 3 * BD, BD, 0);
    big_gemm_case("FFN out", 0, 0, 0, BN, BD, BF, 0);
    big_gemm_case("FFN in, gradient of x", 0, 0, 1, BN, BD, BF, 0);
    /* parameter gradients go through gemm_grad, as in the model */
    big_gemm_case("FFN in, gradient of W (accumulated, gemm_grad)", 1, 1, 0, BD, BF, BN, 1);
    /* the output layer over the whole batch: (10240, 37000) logits, 1.5 GB at fp32; the
     * embedding gradient sums over the 10240 rows */
    big_gemm_case("logits", 0, 0, 1, BN, BV, BD, 0);
    big_gemm_case("embedding gradient (gemm_grad)", 1, 1, 0, BV, BD, BN, 1);
    /* logits of 14600 rows: 2.16e9 bytes, C's last elements past 2^31 bytes (at fp32; at
     * bf16 the same C is half that, so it runs at fp32 only) */
    if (ulp16 == 0)
        big_gemm_case("logits past 2^31 bytes", 0, 0, 1, 14600, BV, BD, 0);
}

/* gemm_bias at the big model's shapes (10240 rows; the products of linear() and of the
 * FFN's first layer with its ReLU), with the operands of big_gemm_case and its bound
 * (sum_bound(K) + tc_extra(K), + ulp16 for the bf16 C, gemm_bias_case's reasons); the
 * bias in [-1, 1], the size of the sums.  off and pad as gemm_bias_case's: the fallback.
 * (gemm_bias_run with a name: B scaled by sqrt(3/K), timed, compared by near_act.) */
static void test_big_gemm_bias(void)
{
    NEED_BIG();
    gemm_bias_run("QKV projection", 0, 0, BN, 3 * BD, BD, 0, 0, 0);
    gemm_bias_run("attention output", 0, 0, BN, BD, BD, 0, 0, 0);
    gemm_bias_run("FFN in", 0, 0, BN, BF, BD, 1, 0, 0);
    gemm_bias_run("FFN out", 0, 0, BN, BD, BF, 0, 0, 0);
    /* the other transposes (the op allows them; the model uses none) */
    gemm_bias_run("FFN in, A^T", 1, 0, BN, BF, BD, 1, 0, 0);
    gemm_bias_run("FFN in, B^T", 0, 1, BN, BF, BD, 1, 0, 0);
    /* the fallback: misaligned operands, odd leading dimensions */
    gemm_bias_run("FFN in, misaligned (fallback)", 0, 0, BN, BF, BD, 1, 1, 0);
    gemm_bias_run("QKV projection, odd ld (fallback)", 0, 0, BN, 3 * BD, BD, 0, 0, 1);
}

/* Embeddings of N tokens (sentences of 256 positions, the last one cut short) from 37000 x
 * 1024, scale 32.  Some ids repeat 256, 257, 300, 513 and 1000 times (the GPU's backward
 * finds a run of equal ids in windows of 256; the largest id ends the sorted ids).
 * Forward: one product and one sum an element: TOL.  Backward: sums of up to 1001 terms in
 * token order on both: sum_bound(1001); positions: N / 256 + 1 terms. */
static void big_embed_case(int N)
{
    enum { P = BT + 3, POS0 = 3 };
    static const int rep[][2] = {{BV - 1, 1000}, {5, 256}, {6, 257}, {7, 513}, {0, 300}};
    int32_t *ids = malloc((size_t)N * 4);
    int k = 0;
    printf("#  %d tokens\n", N);
    for (size_t r = 0; r < sizeof rep / sizeof rep[0]; r++)
        for (int i = 0; i < rep[r][1]; i++)
            ids[k++] = rep[r][0];
    while (k < N)                                         /* others: never 0, 5, 6, 7, V-1 */
        ids[k++] = 8 + irand(BV - 9);
    for (int i = N - 1; i > 0; i--) {                     /* shuffled */
        int j = irand(i + 1);
        int32_t t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    size_t nt = (size_t)BV * BD, no = (size_t)N * BD, np = (size_t)P * BD;
    float *table = rnda(nt, 1), *pos = rnda(np, 1), *dout = rnda(no, 1), *out = malloc(no * 4);
    float *dtable = rnd(nt, 1), *dpos = rnd(np, 1);
    int32_t *gid = dev(ids, (size_t)N * 4);
    float *gt = dact(table, nt), *gp = dact(pos, np), *go = dact(NULL, no), *gdo = dact(dout, no),
          *gdt = dev(dtable, nt * 4), *gdp = dev(dpos, np * 4);
    cpu->embed_fwd(cpu, out, table, ids, N, BD, 32.0f, pos, BT, POS0);
    gpu->embed_fwd(gpu, go, gt, gid, N, BD, 32.0f, gp, BT, POS0);
    near_act("forward", go, out, no, TOL);
    cpu->embed_bwd(cpu, dtable, dpos, dout, ids, N, BD, BV, 32.0f, BT, POS0);
    gpu->embed_bwd(gpu, gdt, gdp, gdo, gid, N, BD, BV, 32.0f, BT, POS0);
    near("table gradient", gdt, dtable, nt, sum_bound(1001));
    near("position gradient", gdp, dpos, np, sum_bound(N / BT + 1));
    GFREE(gid, gt, gp, go, gdo, gdt, gdp);
    free(ids); free(table); free(pos); free(dout); free(out); free(dtable); free(dpos);
}

static void test_big_embed(void)
{
    NEED_BIG();
    big_embed_case(BN);
}

static void test_big_layernorm(void)
{
    NEED_BIG();
    layernorm_case(BN, BD, 1, 0);
    layernorm_case(999, BF + 1, 1, 0);                    /* D off every multiple of 32 */
}

/* 40 sentences of 256 (padded to lengths 0, 1, and 200 to 256), queries in [-2, 2]. */
static void test_big_attention(void)
{
    NEED_BIG();
    int32_t klen[BB];
    for (int b = 0; b < BB; b++)
        klen[b] = b == 0 ? 0 : b == 1 ? 1 : b % 5 == 0 ? BT : BT - (b * 37) % 57;
    attn_case(BB, 16, BT, BT, 64, klen, 0, 0.1f, 1, 2, 5);   /* tiled, 2 columns a lane */
    attn_case(BB, 16, BT, BT, 64, klen, 1, 0, 1, 2, 5);
    attn_case(BB, 8, BT, BT, 128, klen, 1, 0.1f, 1, 2, 5);   /* tiled, 4 columns */
    attn_case(BB, 4, BT, BT, 256, klen, 0, 0.1f, 1, 2, 5);   /* tiled, 8 columns */
    attn_case(BB, 4, BT, BT, 320, klen, 1, 0, 1, 2, 5);      /* rows */
    attn_case(BB, 4, 100, BT, 320, klen, 0, 0.1f, 1, 2, 5);  /* rows, cross */
    /* the big model at translation lengths: 96 sentences of up to 107 tokens (10272 a
     * side), 16 heads of 64; encoder, decoder (causal) and cross attention; q's rows D
     * apart as the model's (qpad 0: every product of mm through its pointer arrays) */
    int32_t tlen[96];
    for (int b = 0; b < 96; b++)
        tlen[b] = b == 0 ? 0 : b == 1 ? 1 : b % 7 == 0 ? 107 : 107 - (b * 29) % 80;
    attn_case(96, 16, 107, 107, 64, tlen, 0, 0.1f, 1, 2, 0);
    attn_case(96, 16, 100, 100, 64, tlen, 1, 0.1f, 1, 2, 0);
    attn_case(96, 16, 100, 107, 64, tlen, 0, 0.1f, 1, 2, 0);
    /* decoding: 64 rows (16 sentences x beam 4) over caches of up to 256 keys */
    int32_t len[64];
    for (int r = 0; r < 64; r++)
        len[r] = r % 7 == 0 ? BT : 1 + (r * 53) % BT;
    decode_case(64, 16, 64, BT, 64, len, 1);
    decode_case(64, 4, 320, BT, 64, len, 1);
}

/* The FFN's element-wise ops on (N, 4096): bias and ReLU, its backward, the bias gradient
 * (column sums of N: sum_bound), dropout (bit for bit, with Inf and NaN among the inputs)
 * and residual + dropout (one product, one sum: TOL). */
static void big_elementwise_case(int N)
{
    size_t n = (size_t)N * BF;
    printf("#  %d x %d\n", N, BF);
    float *x = rnda(n, 1), *y = rnda(n, 1), *b = rnda(BF, 1), *db = rnd(BF, 1),
          *z = malloc(n * 4);
    float *gx = dact(x, n), *gy = dact(y, n), *gb = dact(b, BF), *gdb = dev(db, BF * 4),
          *gz = dact(NULL, n);
    cpu->bias_act(cpu, x, b, N, BF, 1);
    gpu->bias_act(gpu, gx, gb, N, BF, 1);
    near_act("bias and ReLU", gx, x, n, TOL);
    cpu->relu_bwd(cpu, z, y, x, n, 1.0f / 0.9f);
    gpu->relu_bwd(gpu, gz, gy, gx, n, 1.0f / 0.9f);
    near_act("ReLU backward", gz, z, n, TOL);
    cpu->bias_bwd(cpu, db, y, N, BF);
    gpu->bias_bwd(gpu, gdb, gy, N, BF);
    near("bias gradient", gdb, db, BF, sum_bound(N));
    y[12345] = NAN;
    y[n - 1] = INFINITY;
    y[n / 2] = -INFINITY;
    gpu->upload_act(gpu, gy, y, n);
    uint64_t key = tfm_rng_key(1, 77, 5);
    cpu->dropout(cpu, z, y, n, 0.1f, key);
    gpu->dropout(gpu, gz, gy, n, 0.1f, key);
    exact_act("dropout", gz, z, n);
    cpu->add_dropout(cpu, z, x, y, n, 0.1f, key);
    gpu->add_dropout(gpu, gz, gx, gy, n, 0.1f, key);
    near_act("residual + dropout", gz, z, n, TOL);
    GFREE(gx, gy, gb, gdb, gz);
    free(x); free(y); free(b); free(db); free(z);
}

static void test_big_elementwise(void)
{
    NEED_BIG();
    big_elementwise_case(BN);
}

/* The fused ops at the big model's shapes: the FFN's (10240, 4096), embeddings of 37000 x
 * 1024, residual and layer norm on (10240, 1024) and on (999, 4097) (D off every multiple
 * of 32); the bounds of fused_case with sum_bound. */
static void test_big_fused(void)
{
    NEED_BIG();
    fused_case(BN, BD, BF, BV, 0.1f, 1, 0);
    fused_case(999, BF + 1, 300, 100, 0.1f, 1, 0);
}

/* The logits of a batch of 10240 tokens: 10240 rows of 37000, 379 million elements, 1.5 GB
 * at fp32: element offsets past 2^28 (byte offsets stay below 2^31 here: the paper's
 * 25000-token batch, test_paper, passes 2^31 and 2^32). */
static void test_big_xent(void)
{
    NEED_BIG();
    xent_case(BN, BV, 1, 0);
}

/* 50 million parameters: a quarter of the big model's. */
static void test_big_optimizer(void)
{
    NEED_BIG();
    optimizer_case(50000017, 1, 0);
}

/* ---- the workspace: a training step allocates nothing after reserve_step -------------------- */

/* A CUDA backend with the attention path `attn` (TFM_CUDA_ATTN), at the precision under
 * test, bound to this thread; NULL with err. */
static struct tfm_backend *open_cuda(const char *attn, struct tfm_error *err)
{
    char *was = getenv("TFM_CUDA_ATTN") ? strdup(getenv("TFM_CUDA_ATTN")) : NULL;
    setenv("TFM_CUDA_ATTN", attn, 1);
    struct tfm_backend *be = tfm_backend_cuda(0, err);
    if (was)
        setenv("TFM_CUDA_ATTN", was, 1);
    else
        unsetenv("TFM_CUDA_ATTN");
    free(was);
    enum tfm_precision p = ulp16 > 0 ? TFM_PRECISION_BF16 : TFM_PRECISION_FP32;
    if (be && tfm_backend_set_precision(be, p, err) < 0) {
        be->destroy(be);
        return NULL;
    }
    if (be && be->bind)
        be->bind(be);
    return be;
}

/* One attention forward and backward (causal, dropout) of B sentences of T tokens, H
 * heads of dk, on be, its inputs zeros: only the workspace it asks for matters here. */
static void attn_on(struct tfm_backend *be, int B, int H, int T, int dk)
{
    struct tfm_backend *home = gpu;
    gpu = be;
    struct tfm_attn a = {B, H, T, T, dk, NULL, 1, 1.0f / sqrtf((float)dk), 0.1f,
                         tfm_rng_key(1, 2, 3)};
    int D = H * dk;
    size_t n = (size_t)B * T * D;
    float *q = dact(NULL, n), *k = dact(NULL, n), *v = dact(NULL, n), *o = dact(NULL, n),
          *dout = dact(NULL, n), *dq = dact(NULL, n), *dk_ = dact(NULL, n),
          *dv = dact(NULL, n), *lse = dev(NULL, (size_t)B * H * T * sizeof(float));
    be->attn_fwd(be, &a, q, D, k, D, v, D, o, D, lse);
    be->attn_bwd(be, &a, q, D, k, D, v, D, o, D, lse, dout, D, dq, D, dk_, D, dv, D);
    be->sync(be);
    GFREE(q, k, v, o, dout, dq, dk_, dv, lse);
    gpu = home;
}

/* The column sums of a backward on be: bias_bwd of (N,M) and layernorm_bwd of (N,D) (their
 * per-chunk partial sums live in the workspace). */
static void colsums_on(struct tfm_backend *be, int N, int M, int D)
{
    struct tfm_backend *home = gpu;
    gpu = be;
    float *dy = dact(NULL, (size_t)N * M), *db = dev(NULL, (size_t)M * sizeof(float));
    be->bias_bwd(be, db, dy, N, M);
    float *x = dact(NULL, (size_t)N * D), *dyl = dact(NULL, (size_t)N * D),
          *dx = dact(NULL, (size_t)N * D), *mean = dev(NULL, (size_t)N * sizeof(float)),
          *rstd = dev(NULL, (size_t)N * sizeof(float)), *g = dact(NULL, (size_t)D),
          *dg = dev(NULL, (size_t)D * sizeof(float)), *dbl = dev(NULL, (size_t)D * sizeof(float));
    be->layernorm_bwd(be, dx, dg, dbl, dyl, x, mean, rstd, g, N, D, 0);
    be->sync(be);
    GFREE(dy, db, x, dyl, dx, mean, rstd, g, dg, dbl);
    gpu = home;
}

/* The count of tfm_backend_cuda_work_grows: -1 where there is no CUDA backend; on a GPU,
 * a fresh backend of each attention path counts the workspace growing (attention with
 * nothing reserved), not a call that fits, and after reserve_step (512 rows a side, 2
 * heads of 8) no attention of a shape it allows (the longest sentences, the most
 * sentences, one in between) grows it: tfm_cuda_attn_step_work covers both paths; nor do
 * the column sums of fewer rows than reserved (tfm_cuda_ops_step_work). */
static void test_work_grows(void)
{
    CHECK(tfm_backend_cuda_work_grows(NULL) == -1);
    CHECK(tfm_backend_cuda_work_grows(cpu) == -1);
    CHECK(tfm_backend_cuda_bias_fallbacks(NULL) == -1);
    CHECK(tfm_backend_cuda_bias_fallbacks(cpu) == -1);
    if (gpu && sim) {
        CHECK(tfm_backend_cuda_work_grows(gpu) == -1);
        CHECK(tfm_backend_cuda_bias_fallbacks(gpu) == -1);
        return;
    }
    NEED_GPU();
    CHECK(tfm_backend_cuda_work_grows(gpu) >= 0);
    const char *names[2] = {"flash", "mm"};
    for (int p = 0; p < 2; p++) {
        struct tfm_error err;
        struct tfm_backend *be = open_cuda(names[p], &err);
        if (!be) {
            printf("#   %s: %s\n", names[p], err.msg);
            CHECK(!"backend opened");
            continue;
        }
        CHECK(tfm_backend_cuda_work_grows(be) == 0);
        CHECK(be->reserve(be, 64, 64, &err) == 0);
        attn_on(be, 2, 2, 16, 8);                         /* nothing reserved: grows */
        long g = tfm_backend_cuda_work_grows(be);
        CHECK(g >= 1);
        attn_on(be, 2, 2, 16, 8);                         /* the same shape: fits */
        CHECK(tfm_backend_cuda_work_grows(be) == g);
        CHECK(be->reserve_step(be, 512, 16, 64, 2, 100, &err) == 0);
        attn_on(be, 8, 2, 64, 8);                         /* 8 x 64: the longest */
        attn_on(be, 512, 2, 1, 8);                        /* 512 x 1: the most */
        attn_on(be, 21, 2, 24, 8);                        /* 504 rows, Tk 24 */
        long g2 = tfm_backend_cuda_work_grows(be);
        if (g2 != g)
            printf("#   %s: the workspace grew %ld times after reserve_step\n", names[p],
                   g2 - g);
        CHECK(g2 == g);
        /* column sums of fewer rows than reserved may take more chunks (16640 rows: 256
         * of 65; the 20000 reserved: 254 of 79): reserve_step sizes for the most */
        CHECK(be->reserve_step(be, 20000, 1024, 4096, 2, 100, &err) == 0);
        long g3 = tfm_backend_cuda_work_grows(be);
        colsums_on(be, 16640, 4096, 1024);
        if (tfm_backend_cuda_work_grows(be) != g3)
            printf("#   %s: column sums of 16640 rows grew the workspace after reserve_step "
                   "of 20000\n", names[p]);
        CHECK(tfm_backend_cuda_work_grows(be) == g3);
        be->destroy(be);
    }
}

/* The big model's config (d_model 1024, 16 heads, d_ff 4096, vocabulary 37000) with
 * layers, max_len, a token budget, every dropout and label smoothing at 0.1, and seed. */
static void big_config(struct tfm_config *c, int layers, int max_len, int tokens, int seed)
{
    tfm_config_defaults(c);
    c->layers = layers;
    c->d_model = BD;
    c->heads = 16;
    c->d_ff = BF;
    c->vocab = BV;
    c->max_len = max_len;
    c->tokens = tokens;
    c->dropout = 0.1;
    c->attn_dropout = 0.1;
    c->relu_dropout = 0.1;
    c->label_smoothing = 0.1;
    c->seed = seed;
}

/* A training step of the big model (one layer: d_model 1024, 16 heads, d_ff 4096,
 * vocabulary 37000; tokens_max tokens a side, max_len L), on a fresh backend of each
 * attention path at the precision under test: after tfm_model_create (reserve_step), the
 * batches of shapes (sentences, source length, target length; test_big_step_work: the
 * longest sentences, 40 x 256, the most, 320 x 32, and sources longer than targets, 64 x
 * 160 / 100), then the optimizer's step, must not grow the workspace (backend.h,
 * reserve_step: no step allocates). */
static void step_work_case(int tokens_max, int L, const int shapes[3][3])
{
    struct tfm_config c;
    big_config(&c, 1, L, tokens_max, 5);
    c.precision = ulp16 > 0 ? TFM_PRECISION_BF16 : TFM_PRECISION_FP32;
    printf("#  %d tokens a side, max_len %d\n", tokens_max, L);
    int32_t *src = malloc((size_t)tokens_max * 4), *tgt = malloc((size_t)tokens_max * 4);
    for (int i = 0; i < tokens_max; i++) {
        src[i] = 4 + irand(BV - 4);
        tgt[i] = 4 + irand(BV - 4);
    }
    const char *names[2] = {"flash", "mm"};
    for (int p = 0; p < 2; p++) {
        struct tfm_error err;
        struct tfm_backend *be = open_cuda(names[p], &err);
        struct tfm_model *m = be ? tfm_model_create(&c, be, 0, &err) : NULL;
        if (!m) {
            printf("#   %s: %s\n", names[p], err.msg);
            CHECK(!"model created");
            if (be)
                be->destroy(be);
            continue;
        }
        long g0 = tfm_backend_cuda_work_grows(be);
        CHECK(g0 >= 0);
        int64_t tokens = 0;
        int ok = 1;
        double t0 = now();
        for (int s = 0; s < 3 && ok; s++) {
            struct tfm_loss loss;
            if (tfm_model_train_batch_dev(m, shapes[s][0], shapes[s][1], shapes[s][2], src,
                                          tgt, (uint64_t)s + 1, &loss, &err)) {
                printf("#   %s: batch %d x %d / %d: %s\n", names[p], shapes[s][0],
                       shapes[s][1], shapes[s][2], err.msg);
                ok = 0;
            }
            tokens += loss.tokens;
        }
        struct tfm_optim_stats st;
        if (ok && tfm_optim_step(m, 1, tokens, &st, &err)) {
            printf("#   %s: optimizer step: %s\n", names[p], err.msg);
            ok = 0;
        }
        CHECK(ok);
        long g1 = tfm_backend_cuda_work_grows(be);
        printf("#   %s: 3 batches and a step in %.2f s; the workspace grew %ld times in "
               "them\n", names[p], now() - t0, g1 - g0);
        CHECK(g1 == g0);
        tfm_model_free(m);
        be->destroy(be);
    }
    free(src);
    free(tgt);
}

static void test_big_step_work(void)
{
    NEED_BIG();
    if (sim) {
        t_skip("the sim backend has no workspace");
        return;
    }
    enum { L = 256 };
    const int shapes[3][3] = {{BN / L, L, L}, {BN / 32, 32, 32}, {BN / 160, 160, 100}};
    step_work_case(BN, L, shapes);
}

/* One training batch of a whole 6-layer model of the big shapes (dropout 0.1 on the
 * sub-layers, the attention weights and the ReLU outputs; label smoothing 0.1): 8
 * sentence pairs of up to 256 tokens a side (2048 padded tokens, a fifth of a 10k batch,
 * for time: the CPU's side is 2.7 TFLOP), then 3 decoding steps of 4 sentences.
 * Bounds: the loss (a sum over the tokens, in double) to 1e-5 relative: per-token
 * differences of ~1e-5 in the logits average out over the 1156 target tokens.  Each
 * gradient tensor to 2e-3 of max(|cpu|, its rms): every op differs by ~1e-6 of its
 * typical size (the op tests above), the backward through 12 layers chains some 200 of
 * them, and layer norm and softmax can amplify by the inverse spread of a row; a wrong op
 * is off by 1e-2 or more in the tensors it feeds.  (The keys' bias gradient is rounding
 * noise on both sides, softmax ignoring a constant: it is judged by the size of the rest
 * of bqkv and bkv, the tensors it is part of.)  Log-probabilities while decoding: device.h's 1e-4.
 * Not compared: an Adam step, which moves each parameter by +-lr (~1e-7 here) whatever
 * the gradient's size; Adam itself is tested above on 50 million elements. */
static void test_big_model(void)
{
    NEED_BIG();
    NEED_FP32();
    enum { MB = 8, MS = 256, MT = 256, DB = 4, DSTEPS = 3 };
    struct tfm_config c;
    big_config(&c, 6, MS, MB * MS, 11);
    c.precision = TFM_PRECISION_FP32;                     /* auto is bf16 on CUDA */
    int32_t *src = malloc((size_t)MB * MS * 4), *tgt = malloc((size_t)MB * MT * 4);
    for (int b = 0; b < MB; b++) {                        /* lengths 256, 227, 198, ... */
        int ls = MS - (b * 29) % MS, lt = MT - (b * 41) % MT;
        for (int i = 0; i < MS; i++)
            src[b * MS + i] = i < ls ? 4 + irand(BV - 4) : 0;
        for (int i = 0; i < MT; i++)
            tgt[b * MT + i] = i < lt ? 4 + irand(BV - 4) : 0;
    }
    struct tfm_error err;
    struct tfm_model *mc = NULL, *mg = NULL;
    struct tfm_decoder *dc = NULL, *dg = NULL;
    float *hc = NULL, *hg = NULL;
    double t0 = now();
    if (!(mc = tfm_model_create(&c, cpu, 0, &err)) || !(mg = tfm_model_create(&c, gpu, 0, &err))) {
        printf("#   %s\n", err.msg);
        CHECK(!"model created");
        goto done;
    }
    size_t cnt = (size_t)tfm_model_count(mc), out = (size_t)DB * BV;
    size_t len = cnt > out ? cnt : out;
    hc = malloc(len * 4);
    hg = malloc(len * 4);
    tfm_model_download(mc, TFM_PARAMS, hc);
    tfm_model_download(mg, TFM_PARAMS, hg);
    CHECK(first_diff(hg, hc, cnt) == cnt);                /* the same initialization */
    printf("#   %zu parameters, created in %.1f s\n", cnt, now() - t0);
    struct tfm_loss lc, lg;
    double t1 = now();
    if (tfm_model_train_batch(mc, MB, MS, MT, src, tgt, 1, &lc, &err)) {
        printf("#   cpu: %s\n", err.msg);
        CHECK(!"cpu training batch");
        goto done;
    }
    double t2 = now();
    if (tfm_model_train_batch(mg, MB, MS, MT, src, tgt, 1, &lg, &err)) {
        printf("#   gpu: %s\n", err.msg);
        CHECK(!"gpu training batch");
        goto done;
    }
    gpu->sync(gpu);
    double t3 = now();
    printf("#   training batch: cpu %.1f s, gpu %.2f s; loss cpu %.9g, gpu %.9g over %lld "
           "tokens\n", t2 - t1, t3 - t2, lc.loss, lg.loss, (long long)lc.tokens);
    CHECK_EQ_INT(lg.tokens, lc.tokens);
    CHECK_NEAR(lg.loss / lc.loss, 1.0, 1e-5);
    CHECK_NEAR(lg.nll / lc.nll, 1.0, 1e-5);
    tfm_model_download(mc, TFM_GRADS, hc);
    tfm_model_download(mg, TFM_GRADS, hg);
    double worst = 0;
    const char *wname = "";
    for (int i = 0; i < tfm_model_nparams(mc); i++) {
        const struct tfm_param *p = tfm_model_param(mc, i);
        const float *a = hg + p->offset, *b = hc + p->offset;
        double f = rms(b, (size_t)p->count);
        size_t at;
        double e = diff_floor(a, b, (size_t)p->count, f > 0 ? f : 1, &at);
        if (!(e <= 2e-3)) {
            printf("#   gradient of %s: %.3g of max(|cpu|, rms %.3g) (bound 2e-3), worst at "
                   "[%zu]: gpu %.9g, cpu %.9g\n", p->name, e, f, at, a[at], b[at]);
            t_fail(__FILE__, __LINE__, p->name);
        }
        if (!(e <= worst)) {
            worst = e;
            wname = p->name;
        }
    }
    printf("#   gradients: the largest difference %.3g of the typical size, in %s\n", worst,
           wname);
    /* decoding: DSTEPS steps of DB rows, each fed the CPU's best token */
    if (!(dc = tfm_decoder_create(mc, DB, MS, DB, DSTEPS, &err)) ||
        !(dg = tfm_decoder_create(mg, DB, MS, DB, DSTEPS, &err)) ||
        tfm_decoder_encode(dc, DB, MS, src, &err) || tfm_decoder_encode(dg, DB, MS, src, &err)) {
        printf("#   %s\n", err.msg);
        CHECK(!"decoder");
        goto done;
    }
    int32_t tok[DB] = {0}, rows[DB];
    for (int r = 0; r < DB; r++)
        rows[r] = r;
    for (int s = 0; s < DSTEPS; s++) {
        if (tfm_decoder_step(dc, DB, tok, rows, hc, &err) ||
            tfm_decoder_step(dg, DB, tok, rows, hg, &err)) {
            printf("#   %s\n", err.msg);
            CHECK(!"decoding step");
            goto done;
        }
        double e = maxerr(hg, hc, out);
        printf("#   decoding step %d: log-probabilities within %.3g (bound 1e-4)\n", s + 1, e);
        CHECK(e <= 1e-4);
        for (int r = 0; r < DB; r++) {
            int best = 0;
            for (int v = 1; v < BV; v++)
                best = hc[(size_t)r * BV + v] > hc[(size_t)r * BV + best] ? v : best;
            tok[r] = best;
        }
    }
done:
    tfm_decoder_free(dc);
    tfm_decoder_free(dg);
    tfm_model_free(mg);
    tfm_model_free(mc);
    free(hc); free(hg); free(src); free(tgt);
}

/* ---- log_softmax_top: a search step's k best tokens, selected on the GPU ------------------ */

/* Row r of the inputs below, by r % 10 (every value a bf16 value, so both precisions start
 * from the same row):
 *  0, 5: random in [-8, 8] (near ties: the CPU may order them otherwise, see top_case)
 *  1, 6: 33 levels 0.5 apart in [-8, 8] (hundreds of exact ties a level: ties by id)
 *  2, 7: those levels with every 7th entry -inf
 *  3, 8: -inf but for 3 entries (fewer than k qualify: -inf, -1 pad the list)
 *  4:    the levels and one NaN (the log-sum-exp is NaN: nothing qualifies)
 *  9:    all -inf (nothing qualifies) */
static float *top_input(int N, int V)
{
    float *z = rnd((size_t)N * V, 8);
    for (int r = 0; r < N; r++) {
        float *x = z + (size_t)r * V;
        int kind = r % 10;
        for (int v = 0; v < V && kind % 5 != 0; v++) {
            x[v] = (float)(irand(33) - 16) * 0.5f;
            if ((kind % 5 == 2 && v % 7 == 3) || kind % 5 == 3 || kind == 9)
                x[v] = -INFINITY;
        }
        if (kind % 5 == 3)
            for (int j = 0; j < 3 && j < V; j++)
                x[irand(V)] = (float)(irand(33) - 16) * 0.5f;
        if (kind == 4)
            x[irand(V)] = NAN;
    }
    round_act(z, (size_t)N * V);
    return z;
}

/* The host path (model.c without the slot): log-probabilities y (N,V) as stored, each row
 * selected by tfm_topk_row, and y[also]. */
static void top_host(const float *y, int N, int V, int k, const int32_t *ban, int nban,
                     int also, float *top, int32_t *id, float *al)
{
    for (int r = 0; r < N; r++) {
        const float *row = y + (size_t)r * V;
        tfm_topk_row(row, 0.0f, V, k, ban, nban, NULL, 0, top + (size_t)r * k,
                     id + (size_t)r * k);
        al[r] = row[also];
    }
}

/* The first place where two id lists differ, printed, or n. */
static size_t ids_diff(const char *what, const int32_t *a, const int32_t *b, size_t n, int k)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            printf("#   %s: row %zu, place %zu: id %d, the reference's %d\n", what, i / k,
                   i % k, (int)a[i], (int)b[i]);
            return i;
        }
    return n;
}

/* log_softmax_top of N random rows of V (top_input) on the GPU:
 *  - against the GPU's own host path (its log_softmax, downloaded, tfm_topk_row): the
 *    same values, ids and also-values bit for bit, the logits untouched; a second call
 *    gives the same bits;
 *  - against the CPU's host path (its log_softmax; at bf16 its emulation): values within
 *    log_softmax's bound (test_xent; the i-th best of two rows within e of each other are
 *    within e), padding in the same places, and the same ids on the rows of levels (exact
 *    ties on both sides, distinct values 0.5 apart, so the same order; random rows may
 *    legally differ where two values are within rounding).
 * nban 0 passes no list; `also` is a banned id in some calls (it is reported anyway). */
static void top_case(int N, int V, int k, int nban, int also, double *t_top, double *t_host)
{
    size_t n = (size_t)N * V, nk = (size_t)N * k;
    float *z = top_input(N, V);
    int32_t ban[6] = {3 % V, 0, 3 % V, V - 1, V / 2, 17 % V};
    const int32_t *bp = nban ? ban : NULL;
    float *gz = dact(z, n), *gls = dact(NULL, n);
    float *gy = malloc(nk * 4), *ry = malloc(nk * 4), *cy = malloc(nk * 4), *gy2 = malloc(nk * 4);
    int32_t *gid = malloc(nk * 4), *rid = malloc(nk * 4), *cid = malloc(nk * 4),
            *gid2 = malloc(nk * 4);
    float *ga = malloc(N * 4), *ra = malloc(N * 4), *ca = malloc(N * 4), *ga2 = malloc(N * 4);
    float *cls = malloc(n * 4);
    printf("#   %d rows of %d, k %d, %d banned, also %d\n", N, V, k, nban, also);
    gpu->sync(gpu);
    double t0 = now();
    gpu->log_softmax_top(gpu, gz, N, V, k, bp, nban, also, gy, gid, ga);
    double t1 = now();
    gpu->log_softmax(gpu, gls, gz, N, V);
    float *ls = hact(gls, n);
    top_host(ls, N, V, k, bp, nban, also, ry, rid, ra);
    double t2 = now();
    if (t_top) {
        *t_top = t1 - t0;
        *t_host = t2 - t1;
    }
    exact_host("values = log_softmax's, selected on the host", gy, ry, nk);
    CHECK(ids_diff("ids = the host path's", gid, rid, nk, k) == nk);
    exact_host("also = log_softmax's", ga, ra, (size_t)N);
    exact_act("logits untouched", gz, z, n);
    gpu->log_softmax_top(gpu, gz, N, V, k, bp, nban, also, gy2, gid2, ga2);
    exact_host("the same values twice", gy2, gy, nk);
    CHECK(memcmp(gid2, gid, nk * 4) == 0);
    exact_host("the same also twice", ga2, ga, (size_t)N);

    cpu->log_softmax(cpu, cls, z, N, V);
    top_host(cls, N, V, k, bp, nban, also, cy, cid, ca);
    double e = maxerr(gy, cy, nk);
    if (!(e <= TOL + ulp16))
        printf("#   values against the CPU's: %.3g (bound %.3g)\n", e, TOL + ulp16);
    CHECK(e <= TOL + ulp16);
    int bad_id = 0, bad_also = 0;
    for (int r = 0; r < N && !bad_id; r++) {
        const int32_t *g = gid + (size_t)r * k, *c = cid + (size_t)r * k;
        for (int i = 0; i < k && !bad_id; i++)
            if ((g[i] < 0) != (c[i] < 0) || (r % 5 != 0 && g[i] != c[i])) {
                printf("#   row %d place %d: id %d (%.9g), the CPU's %d (%.9g)\n", r, i,
                       (int)g[i], gy[(size_t)r * k + i], (int)c[i], cy[(size_t)r * k + i]);
                bad_id = 1;
            }
    }
    for (int r = 0; r < N && !bad_also; r++)
        if (isfinite(ca[r]) && !(fabs(ga[r] - ca[r]) <= (TOL + ulp16) * fmax(1, fabs(ca[r])))) {
            printf("#   row %d: also %.9g, the CPU's %.9g\n", r, ga[r], ca[r]);
            bad_also = 1;
        }
    CHECK(!bad_id);
    CHECK(!bad_also);
    GFREE(gz, gls);
    free(z); free(ls); free(cls);
    free(gy); free(ry); free(cy); free(gy2); free(gid); free(rid); free(cid); free(gid2);
    free(ga); free(ra); free(ca); free(ga2);
}

/* A small model's decoding on the GPU with log_softmax_top and without (the host path):
 * the same steps bit for bit (tfm_decoder_step_top), and the same beam-search hypotheses
 * and scores (tfm_decode_sources, beam 4). */
static void top_decoding(void)
{
    enum { B = 6, S = 12, V = 1000, K = 8, STEPS = 4 };
    struct tfm_config c;
    tfm_config_defaults(&c);
    c.layers = 2;
    c.d_model = 64;
    c.heads = 4;
    c.d_ff = 128;
    c.vocab = V;
    c.max_len = 64;
    c.tokens = B * S;
    c.seed = 5;
    c.precision = ulp16 > 0 ? TFM_PRECISION_BF16 : TFM_PRECISION_FP32;
    int32_t src[B * S];
    for (int b = 0; b < B; b++) {
        int len = S - 2 * b;
        for (int i = 0; i < S; i++)
            src[b * S + i] = i < len - 1 ? 4 + irand(V - 4) : i == len - 1 ? TFM_EOS : TFM_PAD;
    }
    void (*slot)(struct tfm_backend *, const float *, int, int, int, const int32_t *, int, int,
                 float *, int32_t *, float *) = gpu->log_softmax_top;
    struct tfm_error err;
    struct tfm_model *m = tfm_model_create(&c, gpu, 0, &err);
    struct tfm_decoder *d[2] = {NULL, NULL};
    struct tfm_hyps h[2];
    memset(h, 0, sizeof h);
    if (!m) {
        printf("#   %s\n", err.msg);
        CHECK(!"model created");
        return;
    }
    float top[2][B * K], al[2][B];
    int32_t tok[2][B * K], last[B], rows[B], ban[2] = {TFM_PAD, 2};
    for (int b = 0; b < B; b++) {
        last[b] = 2;                                      /* bos */
        rows[b] = b;
    }
    for (int w = 0; w < 2; w++)
        if (!(d[w] = tfm_decoder_create(m, B, S, B, STEPS, &err)) ||
            tfm_decoder_encode(d[w], B, S, src, &err)) {
            printf("#   %s\n", err.msg);
            CHECK(!"decoder");
            goto done;
        }
    for (int s = 0; s < STEPS; s++) {
        for (int w = 0; w < 2; w++) {
            gpu->log_softmax_top = w ? NULL : slot;       /* w 1: the host path */
            int rc = tfm_decoder_step_top(d[w], B, last, rows, K, ban, 2, TFM_EOS, top[w],
                                          tok[w], al[w], &err);
            gpu->log_softmax_top = slot;
            if (rc) {
                printf("#   %s\n", err.msg);
                CHECK(!"decoding step");
                goto done;
            }
        }
        exact_host("a step's values", top[0], top[1], B * K);
        CHECK(ids_diff("a step's ids", tok[0], tok[1], B * K, K) == B * K);
        exact_host("a step's eos values", al[0], al[1], B);
        for (int b = 0; b < B; b++)
            last[b] = tok[0][b * K + s % K];
    }
    struct tfm_beam_opts o;
    tfm_beam_defaults(&o);
    for (int w = 0; w < 2; w++) {
        gpu->log_softmax_top = w ? NULL : slot;
        int rc = tfm_decode_sources(m, B, S, src, &o, 10, &h[w], &err);
        gpu->log_softmax_top = slot;
        if (rc) {
            printf("#   %s\n", err.msg);
            CHECK(!"decode_sources");
            goto done;
        }
    }
    CHECK(h[0].n == B && h[1].n == B);
    if (h[0].n == h[1].n) {
        CHECK(memcmp(h[0].offsets, h[1].offsets, (size_t)(h[0].n + 1) * 8) == 0);
        if (h[0].offsets[h[0].n] == h[1].offsets[h[1].n])
            CHECK(memcmp(h[0].ids, h[1].ids, (size_t)h[0].offsets[h[0].n] * 4) == 0);
        exact_host("hypotheses' scores", h[0].score, h[1].score, (size_t)h[0].n);
        printf("#   beam 4: %lld tokens in %d hypotheses, the same with and without\n",
               (long long)h[0].offsets[h[0].n], (int)h[0].n);
    }
done:
    gpu->log_softmax_top = slot;
    tfm_hyps_free(&h[0]);
    tfm_hyps_free(&h[1]);
    tfm_decoder_free(d[0]);
    tfm_decoder_free(d[1]);
    tfm_model_free(m);
}

static void test_log_softmax_top(void)
{
    NEED_GPU();
    if (!gpu->log_softmax_top) {                          /* sim: the host path only */
        CHECK(gpu->kind != TFM_BACKEND_CUDA);
        t_skip("this backend has no log_softmax_top");
        return;
    }
    top_case(1, 37000, 1, 6, 3, NULL, NULL);
    top_case(37, 1000, 1, 6, 500, NULL, NULL);
    top_case(37, 1000, 8, 0, 999, NULL, NULL);
    top_case(37, 1000, 64, 6, 3, NULL, NULL);
    top_case(37, 1000, 300, 6, 1, NULL, NULL);            /* passes of 128, 128, 44 */
    top_case(12, 33, 8, 6, 32, NULL, NULL);               /* V short of a block */
    top_case(10, 5, 8, 6, 4, NULL, NULL);                 /* k > V: padding */
    top_decoding();
    if (quick)
        return;
    int ks[2] = {8, 64};
    for (int i = 0; i < 2; i++) {
        double tt, th;
        top_case(512, 37000, ks[i], 6, 3, &tt, &th);
        printf("#   512 rows of 37000, k %d: log_softmax_top %.2f ms, log_softmax + download + "
               "host selection %.2f ms\n", ks[i], tt * 1e3, th * 1e3);
    }
}

/* ---- the paper's shapes ------------------------------------------------------------------ */

/* The shapes the paper's configurations train and search with (configs/big.conf,
 * parse.conf), where the shapes above stop short: batches of 25000 tokens a side (the big
 * tests take 10240), parsing's max_len 1024 (above: 256) and beam 21 (above: k <= 64 on
 * 512 rows), translation's beam 4 over about 128 sentences.  The same cases and bounds as
 * above, at these shapes:
 *  - the logits of a whole batch, 25000 x 37000: 925 million elements, 3.7 GB at fp32, so
 *    byte offsets past 2^31 and 2^32 (1.85 GB at bf16) and element offsets past 2^29;
 *  - embeddings, the FFN's element-wise ops and column sums (25000 x 4096), layer norms and
 *    the fused ops of 25000 rows;
 *  - attention of 24 sentences of up to 1024 tokens (24576), 16 heads of 64, on both paths:
 *    the encoder's (padding, one sentence empty, dropout) and the decoder's (causal):
 *    score rows of 1024 keys (the products' softmax takes its most threads, 256, with 4
 *    keys each; the online softmax 32 tiles) and 403 million scores a call (mm's
 *    workspace: 4.8 GB at bf16, 6.4 GB at fp32);
 *  - decoding: 512 rows (128 sentences x beam 4) over caches of 256 steps, and 2688 rows
 *    (128 x beam 21) over 1024; log_softmax_top of 2688 rows with k = 42 (a beam of 21
 *    takes twice its width);
 *  - a training step of one layer at 25000 tokens a side and max_len 1024 (the longest
 *    sentences, the most, sources longer than targets) allocates no workspace after
 *    reserve_step, on both paths. */
enum { PN = 25000, PT = 1024 };

static void test_paper(void)
{
    NEED_PAPER();
    xent_case(PN, BV, 1, 0);
    big_embed_case(PN);
    big_elementwise_case(PN);
    layernorm_case(PN, BD, 1, 0);
    fused_case(PN, BD, BF, BV, 0.1f, 1, 0);
    enum { PB = 24 };
    int32_t plen[PB];
    for (int b = 0; b < PB; b++)
        plen[b] = b == 0 ? 0 : b % 5 == 0 ? PT : PT - (b * 211) % (PT - 24);
    attn_case(PB, 16, PT, PT, 64, plen, 0, 0.1f, 1, 2, 0);
    attn_case(PB, 16, PT, PT, 64, NULL, 1, 0.1f, 1, 2, 0);
    int32_t *len = malloc(2688 * sizeof *len);
    for (int r = 0; r < 512; r++)
        len[r] = r % 7 == 0 ? BT : 1 + (r * 53) % BT;
    decode_case(512, 16, 64, BT, 128, len, 1);
    for (int r = 0; r < 2688; r++)
        len[r] = r % 7 == 0 ? PT : 1 + (r * 389) % PT;
    decode_case(2688, 16, 64, PT, 64, len, 1);
    free(len);
    if (gpu->log_softmax_top)                             /* sim: the host path only */
        top_case(2688, BV, 42, 6, 3, NULL, NULL);
    if (sim)                                              /* no workspace to watch */
        return;
    const int shapes[3][3] = {{PN / PT, PT, PT}, {PN / 32, 32, 32}, {PN / 160, 160, 100}};
    step_work_case(PN, PT, shapes);
}

/* ---- running ---------------------------------------------------------------------------- */

static void (*current)(void);

/* The current test, timed; or skipped when TFM_GPU_OPS_ONLY does not name it. */
static const char *only;
static const char *current_name;

static void timed(void)
{
    if (only && *only && !strstr(current_name, only)) {
        t_skip("not selected by TFM_GPU_OPS_ONLY");
        return;
    }
    double t0 = now();
    current();
    if (!t_cur_skipped)
        printf("#  %.1f s\n", now() - t0);
}

static void run(const char *name, void (*fn)(void))
{
    current = fn;
    current_name = name;
    t_run(name, timed);
}

int main(void)
{
    struct tfm_error err;
    const char *q = getenv("TFM_GPU_OPS_QUICK"), *d = getenv("TFM_GPU_OPS_DEVICE");
    quick = q && *q && strcmp(q, "0") != 0;
    const char *pp = getenv("TFM_GPU_OPS_PAPER");
    paper = !(pp && strcmp(pp, "0") == 0);
    only = getenv("TFM_GPU_OPS_ONLY");
    sim = d && strcmp(d, "sim") == 0;
    if (d && *d && !sim && strcmp(d, "cuda") != 0) {
        fprintf(stderr, "test_gpu_ops: TFM_GPU_OPS_DEVICE=%s: cuda or sim\n", d);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    cpu = tfm_backend_cpu(0, &err);                       /* every core: the slow side */
    if (!cpu) {
        printf("# %s\n", err.msg);
        return 1;
    }
    gpu = sim ? tfm_backend_sim(0, &err) : tfm_backend_cuda(0, &err);
    if (!gpu)
        snprintf(why, sizeof why, "%.180s", err.msg);
    const char *pr = getenv("TFM_GPU_OPS_PRECISION");
    if (pr && *pr && strcmp(pr, "fp32") != 0) {
        if (strcmp(pr, "bf16") != 0) {
            fprintf(stderr, "test_gpu_ops: TFM_GPU_OPS_PRECISION=%s: fp32 or bf16\n", pr);
            return 2;
        }
        ulp16 = 0x1p-7;
        if (tfm_backend_set_precision(cpu, TFM_PRECISION_BF16, &err) < 0) {
            printf("# %s\n", err.msg);
            return 1;
        }
        if (gpu && tfm_backend_set_precision(gpu, TFM_PRECISION_BF16, &err) < 0) {
            snprintf(why, sizeof why, "%.180s", err.msg);
            gpu->destroy(gpu);
            gpu = NULL;
        }
    }
    if (gpu && gpu->bind)
        gpu->bind(gpu);
    if (gpu && sim) {
        path[npaths++] = (struct attn_path){gpu, "sim", 0};
    } else if (gpu) {
        /* a backend per attention path, chosen when it opens (TFM_CUDA_ATTN) */
        const char *names[2] = {"flash", "mm"};
        for (int p = 0; p < 2; p++) {
            struct tfm_backend *be = open_cuda(names[p], &err);
            if (!be) {
                printf("# attention path %s: %s\n", names[p], err.msg);
                return 1;
            }
            double extra = ulp16 > 0 ? (p == 0 ? 4 : 2) * ulp16 : 0;
            path[npaths++] = (struct attn_path){be, names[p], extra};
        }
    }
    run("the CUDA backend starts on a GPU, or says why not", test_create);
    run("the comparisons: NaN-ness, not NaN bits; relative to the typical size", test_compare);
    run("cuda: alloc, upload, download, copy, zero", test_memory);
    run("cuda: gemm against the CPU", test_gemm);
    run("cuda: gemm_bias (cuBLASLt epilogues, the fallback) against the CPU", test_gemm_bias);
    run("cuda: embedding forward and backward against the CPU", test_embed);
    run("cuda: layer norm forward and backward against the CPU", test_layernorm);
    run("cuda: attention forward and backward against the CPU, every kernel form", test_attention);
    run("cuda: incremental attention against the CPU", test_attn_decode);
    run("cuda: bias, ReLU, dropout, axpy, scale, gather against the CPU", test_elementwise);
    run("cuda: fused bias/embedding/residual + dropout, layer norm + dropout against the CPU",
        test_fused);
    run("cuda: cross-entropy and log-softmax against the CPU", test_xent);
    run("cuda: sumsq and Adam against the CPU", test_optimizer);
    run("cuda: reductions, attention and products give the same bits twice", test_determinism);
    run("cuda: a model's training batch, Adam step and decoding against the CPU", test_model);
    run("cuda: the step's statistics (loss sums, norm, clipping, Adam) against the CPU",
        test_step);
    run("cuda: workspace growth is counted; none after reserve_step, both attention paths",
        test_work_grows);
    run("cuda big: gemm at the big model's shapes", test_big_gemm);
    run("cuda big: gemm_bias at the big model's shapes, with and without ReLU, the fallback",
        test_big_gemm_bias);
    run("cuda big: embeddings of 10240 tokens, 37000 x 1024, ids repeated 256 to 1000 times",
        test_big_embed);
    run("cuda big: layer norm of 10240 x 1024 and 999 x 4097", test_big_layernorm);
    run("cuda big: attention at dk 64, 128, 256, 320 over 40 x 256 tokens and 96 x 107, and "
        "decoding",
        test_big_attention);
    run("cuda big: bias, ReLU, dropout on 10240 x 4096", test_big_elementwise);
    run("cuda big: fused ops on 10240 x 4096, 10240 x 1024 and 999 x 4097", test_big_fused);
    run("cuda big: cross-entropy and log-softmax of 10240 rows of 37000 classes", test_big_xent);
    run("cuda big: sumsq and Adam on 50 million elements", test_big_optimizer);
    run("cuda big: a 6-layer d_model 1024 model's training batch and decoding against the CPU",
        test_big_model);
    run("cuda big: the step's statistics over 50 million elements", test_big_step);
    run("cuda big: a training step of the big model allocates no workspace after "
        "reserve_step, both attention paths", test_big_step_work);
    run("cuda: log_softmax_top (the k best tokens on the GPU) = log_softmax, then the host's "
        "selection", test_log_softmax_top);
    run("cuda paper: 25000-token batches, logits of 25000 x 37000, attention over 1024 "
        "tokens, decoding and log_softmax_top at beam 21, a step's workspace",
        test_paper);
    for (int p = 0; p < npaths; p++)
        if (path[p].be != gpu)
            path[p].be->destroy(path[p].be);
    if (gpu)
        gpu->destroy(gpu);
    cpu->destroy(cpu);
    return t_done();
}
