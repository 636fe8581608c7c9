/* backend_cpu.c: the CPU backend (backend.h): fp32, OpenBLAS sgemm, our own threads.
 *
 * One thread pool (pool.h): OpenBLAS is set to one thread and every op, the gemm
 * included, cuts its work into ranges fixed by the sizes and the thread count (rows,
 * heads, elements, gemm slices) that the threads claim as they come: which thread
 * computes a range does not change its bits, and a thread slowed by other load does
 * less.  Reductions whose result is one number per column (bias, layer-norm and embedding
 * gradients) give each range whole columns and run over the rows in order, so their bits
 * do not depend on the thread count; sumsq sums fixed chunks in order.  The reference for
 * every other backend.
 * Speed: the build is plain -O2 for a generic x86-64, where GCC vectorizes only loops that
 * are marked, so the element-wise loops carry `omp simd` (-fopenmp-simd: the hint only;
 * the order of a row's sums is then fixed by the binary, not by the threads); the softmax
 * exponentials (attention, log_softmax, cross-entropy) use fast_expf below, a branch-free
 * polynomial that vectorizes (libm's expf does not); Adam uses SSE directly; large
 * products are cut into GEMM_BLOCKS slices per thread.
 * Not here: the model (model.c).
 */
/* Floating-point exception flags are read nowhere; without them GCC vectorizes loops
 * that select on a comparison (same bits: the option does not reorder arithmetic). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "backend.h"
#include "blas.h"
#include "pool.h"
#include "topk.h"
#include "util.h"

#include <cblas.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#ifdef __SSE2__
#include <immintrin.h>
#endif
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

struct cpu {
    int threads;
    struct tfm_pool *pool;      /* threads in all, the caller included */
    size_t scratch_floats;      /* per thread */
    float *scratch;             /* threads * scratch_floats */
    size_t blas_buffer;         /* address space kept free per thread (bytes; 0: no check) */
    size_t pending;             /* address space the backend's setup will still take */
    rlim_t as_limit, data_limit;    /* RLIMIT_AS, RLIMIT_DATA at creation */
    int avx512;                 /* the CPU runs AVX-512F: the kernels written for it */
    size_t l2;                  /* bytes of level-2 cache a core (out_rows) */
};

static struct cpu *CPU(struct tfm_backend *be) { return be->impl; }

/* The vectorized loops are compiled twice, for AVX2 and for the x86-64 baseline (SSE2),
 * and the loader picks the one the CPU runs (GCC function multiversioning): the build
 * stays portable and twice as wide where it can.  The results may then differ between
 * machines in the last bits (sums in other orders), never between runs on one. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define SIMD_CLONES __attribute__((target_clones("avx2", "default")))
/* Three clones where AVX-512 pays.  Dropout's hash multiplies 64-bit integers: AVX-512DQ
 * has that instruction, AVX2 builds it from three 32-bit ones (the masks are integer
 * work, the same in every clone).  Decoding's log-softmax and training's cross-entropy
 * are exponentials over the vocabulary: 16 lanes instead of 8 take a tenth off a tiny
 * model's beam search, and 6% off its training step (the cross-entropy had been 15%). */
#define DROP_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define SIMD_CLONES
#define DROP_CLONES
#endif

/* Work below this many elements runs on the calling thread. */
#define PAR_MIN 16384
/* Ranges per thread for loops over rows or elements: enough that a thread slowed by other
 * load leaves part of its share to the others. */
#define PAR_RANGES 4

/* fn over items [0, n) (rows, heads, ...) on the pool when the work is worth it. */
static void par(struct tfm_backend *be, int64_t n, double work, tfm_pool_fn *fn, void *ctx)
{
    struct cpu *c = CPU(be);
    if (work <= PAR_MIN || c->threads == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    tfm_pool_run(c->pool, n, tfm_pool_grain(c->pool, n, PAR_RANGES, 1, 1), fn, ctx);
}

/* fn over n elements in ranges of at least 4096, multiples of 16 (whole cache lines). */
static void par_range(struct tfm_backend *be, int64_t n, tfm_pool_fn *fn, void *ctx)
{
    struct cpu *c = CPU(be);
    if (n <= PAR_MIN || c->threads == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    tfm_pool_run(c->pool, n, tfm_pool_grain(c->pool, n, PAR_RANGES, 4096, 16), fn, ctx);
}

/* fn over D columns, a range of columns (a multiple of 16) per item: for sums over rows
 * whose order must not depend on the threads (each column adds its rows in order). */
static void par_cols(struct tfm_backend *be, int64_t D, double work, tfm_pool_fn *fn, void *ctx)
{
    struct cpu *c = CPU(be);
    if (work <= PAR_MIN || c->threads == 1) {
        fn(ctx, 0, D, 0);
        return;
    }
    tfm_pool_run(c->pool, D, tfm_pool_grain(c->pool, D, 2, 16, 16), fn, ctx);
}

/* e^x for float x with a relative error below 2e-7 (Cephes' expf polynomial), branch-free
 * so that loops calling it vectorize; 0 below -87.3 (no denormals), e^88 above 88, NaN
 * stays NaN. */
static inline float fast_expf(float x)
{
    float xc = x > 88.0f ? 88.0f : x;
    xc = xc < -87.3f ? -87.3f : xc;
    /* n = round(x / ln 2) by the 1.5 * 2^23 trick (exact in round-to-nearest) */
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { uint32_t u; float f; } e = {.u = (uint32_t)((int32_t)n + 127) << 23};
    float y = p * e.f;        /* NaN when x is NaN: r and p are */
    return x < -87.3f ? 0.0f : y;
}

/* s[t] = e^(s[t] - mx) for t < n; returns their sum. */
static inline float exp_shifted(float *s, int n, float mx)
{
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int t = 0; t < n; t++) {
        s[t] = fast_expf(s[t] - mx);
        sum += s[t];
    }
    return sum;
}

/* ---- memory ---------------------------------------------------------------------------- */

/* Zero-filled through calloc, whose large blocks are fresh pages from the kernel that it
 * does not clear again: memory is touched only where it is used, so an arena sized for the
 * worst batch costs resident memory only for the batches that come.  calloc aligns to 16
 * bytes; the block starts at the next multiple of 64 with calloc's pointer just before it. */
#define HUGE_PAGE ((uintptr_t)2 << 20)
#define HUGE_MIN ((size_t)8 << 20)

/* ---- address-space limits ------------------------------------------------------------ */

/* OpenBLAS takes a buffer of address space for each thread the first time the thread runs
 * a product (BUFFER_SIZE on x86-64: 128 MiB, and a page), and when it cannot get one it
 * retries forever: under an address-space limit (ulimit -v) that leaves less, a run would
 * spin instead of failing.  So the backend keeps that much free for each of its threads,
 * and refuses (with a message) an allocation that would eat into it.  TFM_BLAS_BUFFER_MB
 * sets the figure for other BLAS builds; 0 turns the check off. */
#define BLAS_BUFFER_MB 129
#define HEADROOM_SLACK ((size_t)16 << 20)   /* thread stacks, small allocations */

static double mib(double bytes) { return bytes / 1048576.0; }

/* When the buffers are short, OpenBLAS's own threads, which take theirs as they start, may
 * already be retrying forever, and its exit handler joins them: a process that returned
 * from main would hang there after its message.  So once headroom() has refused, the
 * process leaves at exit without running the libraries' exit handlers (its own streams
 * flushed, its exit status kept); what the tools clean up on an error is done before. */
static void leave_without_blas(int status, void *arg)
{
    (void)arg;
    fflush(NULL);
    _exit(status);
}

static void starved(void)
{
    static atomic_flag once = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&once))
        on_exit(leave_without_blas, NULL);
}

/* 0 if `extra` more bytes leave room under the limits for `buffers` BLAS buffers (and what
 * the setup still takes); else -1, err (with err NULL: -1 alone, a question asked before a
 * step that could otherwise wait forever). */
static int room_for(const struct cpu *c, int buffers, size_t extra, struct tfm_error *err)
{
    if (!c->blas_buffer || (c->as_limit == RLIM_INFINITY && c->data_limit == RLIM_INFINITY))
        return 0;
    unsigned long long pages[6] = {0};
    FILE *f = fopen("/proc/self/statm", "r");
    int got = f ? fscanf(f, "%llu %llu %llu %llu %llu %llu", &pages[0], &pages[1], &pages[2],
                         &pages[3], &pages[4], &pages[5]) : 0;
    if (f)
        fclose(f);
    if (got != 6)
        return 0;                           /* no /proc: nothing to measure against */
    double page = (double)sysconf(_SC_PAGESIZE);
    double need = (double)buffers * c->blas_buffer + HEADROOM_SLACK + c->pending + extra;
    /* statm: total size, and data + stack (what RLIMIT_DATA counts) */
    double used[2] = {pages[0] * page, pages[5] * page};
    rlim_t lim[2] = {c->as_limit, c->data_limit};
    const char *what[2] = {"address-space limit (ulimit -v)", "data-size limit (ulimit -d)"};
    for (int i = 0; i < 2; i++) {
        if (lim[i] == RLIM_INFINITY || used[i] + need <= (double)lim[i])
            continue;
        if (!err)
            return -1;
        starved();
        double left = (double)lim[i] > used[i] ? (double)lim[i] - used[i] : 0;
        char more[64] = "", setup[96] = "";
        if (extra)
            snprintf(more, sizeof more, " with %.1f MiB more allocated", mib((double)extra));
        if (c->pending)
            snprintf(setup, sizeof setup, " (and %.0f MiB for threads still to start)",
                     mib((double)c->pending));
        return tfm_fail(err, "the %s of %.0f MiB leaves %.0f MiB free, short of the %.0f MiB "
                        "needed%s: OpenBLAS needs %.0f MiB for each of %d threads%s and waits "
                        "forever without it; raise the limit, use fewer threads, or a smaller "
                        "token budget", what[i], mib((double)lim[i]), mib(left), mib(need),
                        more, mib((double)c->blas_buffer), buffers, setup);
    }
    return 0;
}

/* The same for a buffer for each of the backend's threads. */
static int headroom(const struct cpu *c, size_t extra, struct tfm_error *err)
{
    return room_for(c, c->threads, extra, err);
}

/* OpenBLAS's own threads (the pthread build starts one fewer than the CPUs at load, for
 * products it runs in parallel; the backend runs it single-threaded) each take a buffer
 * the first time they are scheduled, which may be at any moment: under a limit, one taken
 * after headroom() measured had OpenBLAS wait forever at a product (1 run in 30 of
 * limits.bats on a loaded machine).  Ending them makes that moment now: each takes its
 * buffer, frees it into OpenBLAS's table (where the backend's products reuse it) and
 * exits.  Weak: a BLAS without such threads lacks the symbol, and has nothing to end. */
extern int blas_thread_shutdown_(void) __attribute__((weak));

static int blas_idle_threads(void)
{
    return blas_thread_shutdown_ ? openblas_get_num_threads() - 1 : 0;
}

static void end_blas_threads(void)
{
    if (blas_thread_shutdown_)
        blas_thread_shutdown_();
}

/* The default stack of a new thread: address space each pool worker takes. */
static size_t thread_stack(void)
{
    pthread_attr_t a;
    size_t n = (size_t)8 << 20;
    if (pthread_attr_init(&a) == 0) {
        if (pthread_attr_getstacksize(&a, &n) != 0)
            n = (size_t)8 << 20;
        pthread_attr_destroy(&a);
    }
    return n;
}

static void *cpu_alloc(struct tfm_backend *be, size_t bytes, struct tfm_error *err)
{
    if (headroom(CPU(be), bytes, err))
        return NULL;
    size_t n = (bytes + 63) / 64 * 64;
    char *raw = n + 64 + sizeof(void *) > n ? calloc(1, n + 64 + sizeof(void *)) : NULL;
    if (!raw) {
        tfm_fail(err, "out of memory allocating %zu bytes", bytes);
        return NULL;
    }
    uintptr_t at = ((uintptr_t)raw + sizeof(void *) + 63) / 64 * 64;
    ((void **)at)[-1] = raw;
#ifdef MADV_HUGEPAGE
    /* Large blocks (arenas) in 2 MiB pages where the kernel leaves that to the program
     * (transparent huge pages "madvise"): a base step walks 1 GB of parameters, moments
     * and activations, and with 4 KiB pages its TLB misses cost 2-3% of the step
     * (interleaved A/B, tests/bench/RESULTS.md).  The resident size is unchanged: arenas
     * are used from their start. */
    if (n >= HUGE_MIN) {
        uintptr_t lo = (at + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
        uintptr_t hi = (at + n) / HUGE_PAGE * HUGE_PAGE;
        if (hi > lo)
            madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    }
#endif
    return (void *)at;
}

static int cpu_host_room(struct tfm_backend *be, size_t bytes, struct tfm_error *err)
{
    return headroom(CPU(be), bytes, err);
}

static void cpu_free(struct tfm_backend *be, void *p)
{
    (void)be;
    if (p)
        free(((void **)p)[-1]);
}

static void cpu_copy(struct tfm_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes && dst != src)
        memmove(dst, src, bytes);
}

/* act_size is 4 here (fp32, and bf16 emulated in fp32 words) */
static void cpu_download_act(struct tfm_backend *be, float *host, const void *src, size_t n)
{
    cpu_copy(be, host, src, n * sizeof(float));
}

/* in the bf16 emulation, activations hold bf16 values: the host's are rounded */
static void cpu_upload_act(struct tfm_backend *be, void *dst, const float *host, size_t n)
{
    float *d = dst;
    cpu_copy(be, d, host, n * sizeof(float));
    if (be->precision == TFM_PRECISION_BF16)
        for (size_t i = 0; i < n; i++)
            d[i] = tfm_bf16_round(d[i]);
}

static void cpu_zero(struct tfm_backend *be, void *dst, size_t bytes)
{
    (void)be;
    memset(dst, 0, bytes);
}

static void cpu_sync(struct tfm_backend *be) { (void)be; }

static int cpu_reserve(struct tfm_backend *be, int max_tq, int max_tk, struct tfm_error *err)
{
    struct cpu *c = CPU(be);
    size_t need = 2 * (size_t)max_tq * (size_t)max_tk + (size_t)max_tq + 64;
    if (need <= c->scratch_floats)
        return 0;
    float *s = cpu_alloc(be, need * sizeof(float) * (size_t)c->threads, err);
    if (!s)
        return -1;
    cpu_free(be, c->scratch);
    c->scratch = s;
    c->scratch_floats = need;
    return 0;
}

/* ---- gemm ------------------------------------------------------------------------------ */

static void sgemm1(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* Products of fewer multiply-adds run on the calling thread. */
#define GEMM_PAR_MIN 262144.0

#ifndef GEMM_BLOCKS
#define GEMM_BLOCKS 1
#endif

/* A product cut into slices. */
struct gemm_job {
    int ta, tb, M, N, K, lda, ldb, ldc, split_n, chunk, len;
    float alpha, beta;
    const float *A, *B;
    float *C;
};

static void gemm_slices(void *ctx, int64_t k0, int64_t k1, int thread)
{
    const struct gemm_job *j = ctx;
    (void)thread;
    for (int64_t k = k0; k < k1; k++) {
        int a = (int)k * j->chunk, b = a + j->chunk < j->len ? a + j->chunk : j->len;
        if (j->split_n)
            sgemm1(j->ta, j->tb, j->M, b - a, j->K, j->alpha, j->A, j->lda,
                   j->tb ? j->B + (size_t)a * j->ldb : j->B + a, j->ldb, j->beta, j->C + a,
                   j->ldc);
        else
            sgemm1(j->ta, j->tb, b - a, j->N, j->K, j->alpha,
                   j->ta ? j->A + a : j->A + (size_t)a * j->lda, j->lda, j->B, j->ldb, j->beta,
                   j->C + (size_t)a * j->ldc, j->ldc);
    }
}

/* ---- products of a few rows ----------------------------------------------------------
 * A decoding step of one sentence multiplies 1 to 4 rows (the beams) by each weight
 * matrix.  OpenBLAS then spends most of its time packing the K x N weights into its
 * panels, for a product that uses each weight M times (a base model's beam search of one
 * sentence: 54% of the process in sgemm_itcopy).  Here the rows go through B in place,
 * 64 columns at a time: each k reads 256 contiguous bytes of B's row k for all the rows of
 * a group (6, 4, 2 or 1) at once, with B's row k + FEW_PF prefetched (the rows lie N
 * floats apart, too far for the hardware's prefetchers).  Read at about twice OpenBLAS's
 * speed up to 4 rows and 1.5x at 12 (cold 512 x 2048 weights, one thread); past 12 the
 * packed products win.  Every element is one fma chain over k from 0, then alpha, then
 * beta C: the same bits whatever the thread count, the thread that takes its columns, and
 * the other rows (up to FEW_M) in the product. */
#define FEW_M 12
#define FEW_PF 16

struct few_job {
    int M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
};

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
/* m[v]: the columns of 16-lane vector v (v < NV) among the `cols` left of a tile. */
static inline __attribute__((always_inline)) void tile_masks(__mmask16 *m, int cols,
                                                             const int NV)
{
    for (int v = 0; v < NV; v++) {
        int left = cols - 16 * v;
        m[v] = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
    }
}

/* Rows [0, MR) and the columns of masks m (NV vectors) of y = alpha x b + beta y, for x's
 * rows ldx apart, b (K rows, ldb apart) and y (rows ldy apart; not read when beta is 0:
 * it may hold NaN).  Every element is one fma chain over k from 0.  in_place: b is a
 * caller's matrix, read through the masks, its row FEW_PF ahead prefetched (rows far
 * apart, beyond the hardware's prefetchers); else a panel padded with zeros to whole
 * vectors and in cache, read with plain loads (4% of a tiny model's beam search).  MR
 * (<= 8) and NV (<= 4) are constants at every call, so that the accumulators stay in
 * registers.  The few-rows product and decoding's output layer both multiply here. */
static inline __attribute__((always_inline, target("avx512f"))) void
fma_tile(float *y, int ldy, const float *x, int ldx, const float *b, int ldb, int K,
         const __mmask16 *m, float alpha, float beta, const int in_place, const int MR,
         const int NV)
{
    __m512 acc[8][4];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++)
            acc[r][v] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        const float *bk = b + (size_t)k * ldb;
        if (in_place && k + FEW_PF < K)        /* addresses inside b only */
            for (int v = 0; v < NV && m[v]; v++)
                _mm_prefetch((const char *)(bk + (size_t)FEW_PF * ldb + 16 * v),
                             _MM_HINT_T0);
        __m512 w[4];
        for (int v = 0; v < NV; v++)
            w[v] = in_place ? _mm512_maskz_loadu_ps(m[v], bk + 16 * v)
                            : _mm512_loadu_ps(bk + 16 * v);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            __m512 a = _mm512_set1_ps(x[(size_t)r * ldx + k]);
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm512_fmadd_ps(a, w[v], acc[r][v]);
        }
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        float *yr = y + (size_t)r * ldy;
        for (int v = 0; v < NV; v++) {
            __m512 o = alpha == 1.0f ? acc[r][v] : _mm512_mul_ps(va, acc[r][v]);
            if (beta != 0.0f)
                o = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m[v], yr + 16 * v), o);
            _mm512_mask_storeu_ps(yr + 16 * v, m[v], o);
        }
    }
}

/* Rows [r0, r0 + MR) and columns [n0, n0 + 64) of C (fewer at the right edge). */
static inline __attribute__((always_inline, target("avx512f"))) void
few_tile(const struct few_job *j, int r0, int n0, const int MR)
{
    __mmask16 m[4];
    tile_masks(m, j->N - n0, 4);
    fma_tile(j->C + (size_t)r0 * j->ldc + n0, j->ldc, j->A + (size_t)r0 * j->lda, j->lda,
             j->B + n0, j->ldb, j->K, m, j->alpha, j->beta, 1, MR, 4);
}

__attribute__((target("avx512f"))) static void few_columns(void *ctx, int64_t t0, int64_t t1,
                                                          int thread)
{
    const struct few_job *j = ctx;
    (void)thread;
    for (int64_t t = t0; t < t1; t++) {
        int n0 = (int)t * 64, r = 0;
        for (; r + 6 <= j->M; r += 6)
            few_tile(j, r, n0, 6);
        for (; r + 4 <= j->M; r += 4)
            few_tile(j, r, n0, 4);
        for (; r + 2 <= j->M; r += 2)
            few_tile(j, r, n0, 2);
        for (; r < j->M; r++)
            few_tile(j, r, n0, 1);
    }
}
#endif

/* C = alpha A B + beta C for A (M,K), B (K,N), C (M,N), neither transposed, M <= FEW_M:
 * 1 when done, 0 when the CPU lacks AVX-512 (the caller multiplies). */
static int few_gemm(struct tfm_backend *be, int M, int N, int K, float alpha, const float *A,
                    int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
    struct cpu *c = CPU(be);
    if (!c->avx512)
        return 0;
    struct few_job j = {M, N, K, lda, ldb, ldc, alpha, beta, A, B, C};
    int64_t tiles = (N + 63) / 64;
    if (c->threads == 1 || (double)M * N * K < GEMM_PAR_MIN)
        few_columns(&j, 0, tiles, 0);
    else
        tfm_pool_run(c->pool, tiles, tfm_pool_grain(c->pool, tiles, PAR_RANGES, 1, 1),
                     few_columns, &j);
    return 1;
#else
    (void)be, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb;
    (void)beta, (void)C, (void)ldc;
    return 0;
#endif
}

static void cpu_gemm(struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc)
{
    int T = be->threads;
    if (!ta && !tb && M >= 1 && M <= FEW_M && N >= 1 && K >= 1 &&
        few_gemm(be, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
        return;
    if (T <= 1 || (double)M * N * K < GEMM_PAR_MIN) {
        sgemm1(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* Split the larger of M and N into GEMM_BLOCKS * T slices (multiples of 16), claimed
     * by the threads as each finishes one.  The slices depend on T only, so the bits do
     * too; which thread computes a slice does not matter. */
    struct gemm_job j = {ta, tb, M, N, K, lda, ldb, ldc, N >= M, 0, 0, alpha, beta, A, B, C};
    j.len = j.split_n ? N : M;
    j.chunk = ((j.len + GEMM_BLOCKS * T - 1) / (GEMM_BLOCKS * T) + 15) / 16 * 16;
    tfm_pool_run(CPU(be)->pool, (j.len + j.chunk - 1) / j.chunk, 1, gemm_slices, &j);
}

/* Parameter gradients are fp32 at every precision: the same product (backend.h). */
static void cpu_gemm_grad(struct tfm_backend *be, int ta, int tb, int M, int N, int K,
                          float alpha, const float *A, int lda, const float *B, int ldb,
                          float beta, float *C, int ldc)
{
    cpu_gemm(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* gemm_bias (backend.h), as the model computed a biased product before the op existed, so
 * that fp32 results keep their bits: relu == 0, the bias gathered into C's rows and the
 * product added to it (gemm with beta 1); relu != 0, the product (beta 0), then bias_act
 * on each row.  bias_act_ld and cpu_gather are defined with the element-wise ops below. */
static void bias_act_ld(struct tfm_backend *be, float *C, int64_t ldc, const float *b, int M,
                        int N, int relu);
static void cpu_gather(struct tfm_backend *be, float *dst, int64_t dstride, const float *src,
                       int64_t sstride, const int32_t *idx, int n, int64_t len);

static void cpu_gemm_bias(struct tfm_backend *be, int ta, int tb, int M, int N, int K,
                          const float *A, int lda, const float *B, int ldb, const float *bias,
                          int relu, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (!relu) {
        cpu_gather(be, C, ldc, bias, 0, NULL, M, N);
        cpu_gemm(be, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc);
    } else {
        cpu_gemm(be, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
        bias_act_ld(be, C, ldc, bias, M, N, relu);
    }
}

/* At fp32 the compute copy is the weights' bits (precision.c rounds it for bf16). */
static void cpu_weights_copy(struct tfm_backend *be, float *dst, const float *src, size_t n)
{
    cpu_copy(be, dst, src, n * sizeof(float));
}

/* ---- embeddings ------------------------------------------------------------------------ */

struct embed_job {
    float *out, *dtable, *dpos;
    const float *table, *pos, *dout;
    const int32_t *ids;
    int N, D, L, pos0;
    float scale;
};

SIMD_CLONES static void embed_fwd_rows(void *ctx, int64_t n0, int64_t n1, int thread)
{
    const struct embed_job *j = ctx;
    int D = j->D;
    (void)thread;
    for (int64_t n = n0; n < n1; n++) {
        const float *e = j->table + (size_t)j->ids[n] * D;
        float *o = j->out + (size_t)n * D;
        float scale = j->scale;
        if (j->pos) {
            const float *p = j->pos + (size_t)(j->pos0 + n % j->L) * D;
#pragma omp simd
            for (int c = 0; c < D; c++)
                o[c] = scale * e[c] + p[c];
        } else {
#pragma omp simd
            for (int c = 0; c < D; c++)
                o[c] = scale * e[c];
        }
    }
}

static void cpu_embed_fwd(struct tfm_backend *be, float *out, const float *table,
                          const int32_t *ids, int N, int D, float scale, const float *pos,
                          int L, int pos0)
{
    struct embed_job j = {.out = out, .table = table, .pos = pos, .ids = ids, .N = N, .D = D,
                          .L = L, .pos0 = pos0, .scale = scale};
    par(be, N, (double)N * D, embed_fwd_rows, &j);
}

/* Columns [c0, c1) of every row: the rows of one table entry add up in row order. */
SIMD_CLONES static void embed_bwd_cols(void *ctx, int64_t c0, int64_t c1, int thread)
{
    const struct embed_job *j = ctx;
    int D = j->D;
    float scale = j->scale;
    (void)thread;
    for (int n = 0; n < j->N; n++) {
        const float *g = j->dout + (size_t)n * D;
        float *e = j->dtable + (size_t)j->ids[n] * D;
#pragma omp simd
        for (int64_t c = c0; c < c1; c++)
            e[c] += scale * g[c];
        if (j->dpos) {
            float *p = j->dpos + (size_t)(j->pos0 + n % j->L) * D;
#pragma omp simd
            for (int64_t c = c0; c < c1; c++)
                p[c] += g[c];
        }
    }
}

static void cpu_embed_bwd(struct tfm_backend *be, float *dtable, float *dpos,
                          const float *dout, const int32_t *ids, int N, int D, int V,
                          float scale, int L, int pos0)
{
    (void)V;
    struct embed_job j = {.dtable = dtable, .dpos = dpos, .dout = dout, .ids = ids, .N = N,
                          .D = D, .L = L, .pos0 = pos0, .scale = scale};
    par_cols(be, D, (double)N * D, embed_bwd_cols, &j);
}

/* ---- layer norm ------------------------------------------------------------------------ */

struct ln_job {
    float *y, *mean, *rstd, *dx, *dg, *db;
    const float *x, *g, *b, *dy, *cmean, *crstd;
    int N, D, accumulate;
    float eps;
};

SIMD_CLONES static void ln_fwd_rows(void *ctx, int64_t n0, int64_t n1, int thread)
{
    const struct ln_job *j = ctx;
    int D = j->D;
    const float *g = j->g, *b = j->b;
    (void)thread;
    for (int64_t n = n0; n < n1; n++) {
        const float *xr = j->x + (size_t)n * D;
        float *yr = j->y + (size_t)n * D;
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < D; c++)
            s += xr[c];
        float mu = s / D, v = 0;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < D; c++) {
            float d = xr[c] - mu;
            v += d * d;
        }
        float rs = 1.0f / sqrtf(v / D + j->eps);
        j->mean[n] = mu;
        j->rstd[n] = rs;
#pragma omp simd
        for (int c = 0; c < D; c++)
            yr[c] = (xr[c] - mu) * rs * g[c] + b[c];
    }
}

static void cpu_layernorm_fwd(struct tfm_backend *be, float *y, float *mean, float *rstd,
                              const float *x, const float *g, const float *b, int N, int D,
                              float eps)
{
    struct ln_job j = {.y = y, .mean = mean, .rstd = rstd, .x = x, .g = g, .b = b, .N = N,
                       .D = D, .eps = eps};
    par(be, N, (double)N * D, ln_fwd_rows, &j);
}

SIMD_CLONES static void ln_bwd_rows(void *ctx, int64_t n0, int64_t n1, int thread)
{
    const struct ln_job *j = ctx;
    int D = j->D;
    const float *g = j->g;
    (void)thread;
    for (int64_t n = n0; n < n1; n++) {
        const float *xr = j->x + (size_t)n * D, *dyr = j->dy + (size_t)n * D;
        float *dxr = j->dx + (size_t)n * D;
        float mu = j->cmean[n], rs = j->crstd[n], a = 0, bsum = 0;
#pragma omp simd reduction(+ : a, bsum)
        for (int c = 0; c < D; c++) {
            float dh = dyr[c] * g[c];
            a += dh;
            bsum += dh * (xr[c] - mu) * rs;
        }
        a /= D;
        bsum /= D;
        int acc = j->accumulate;
#pragma omp simd
        for (int c = 0; c < D; c++) {
            float xh = (xr[c] - mu) * rs;
            float v = rs * (dyr[c] * g[c] - a - xh * bsum);
            dxr[c] = acc ? dxr[c] + v : v;
        }
    }
}

SIMD_CLONES static void ln_bwd_cols(void *ctx, int64_t c0, int64_t c1, int thread)
{
    const struct ln_job *j = ctx;
    int D = j->D;
    float *dg = j->dg, *db = j->db;
    (void)thread;
    for (int n = 0; n < j->N; n++) {
        const float *xr = j->x + (size_t)n * D, *dyr = j->dy + (size_t)n * D;
        float mu = j->cmean[n], rs = j->crstd[n];
#pragma omp simd
        for (int64_t c = c0; c < c1; c++) {
            dg[c] += dyr[c] * (xr[c] - mu) * rs;
            db[c] += dyr[c];
        }
    }
}

static void cpu_layernorm_bwd(struct tfm_backend *be, float *dx, float *dg, float *db,
                              const float *dy, const float *x, const float *mean,
                              const float *rstd, const float *g, int N, int D, int accumulate)
{
    struct ln_job j = {.dx = dx, .dg = dg, .db = db, .x = x, .g = g, .dy = dy, .cmean = mean,
                       .crstd = rstd, .N = N, .D = D, .accumulate = accumulate};
    par(be, N, (double)N * D, ln_bwd_rows, &j);
    par_cols(be, D, (double)N * D, ln_bwd_cols, &j);
}

/* ---- attention -------------------------------------------------------------------------- */

/* Valid keys of query row i of sentence b. */
static int attn_keys(const struct tfm_attn *a, int b, int i)
{
    int n = a->klen ? a->klen[b] : a->Tk;
    if (n > a->Tk)
        n = a->Tk;
    if (a->causal && i + 1 < n)
        n = i + 1;
    return n < 0 ? 0 : n;
}

struct attn_job {
    struct cpu *c;
    const struct tfm_attn *a;
    /* The bf16 emulation's roundings inside the op (be->precision is bf16 only under
     * precision.c's emulation): P' rounded to bf16 before P'V and dV, dS before dQ and dK,
     * where the CUDA backend's default bf16 attention (kernels/cuda_attn_mm.cu) stores
     * them for its products.  0 at fp32: the bits as ever. */
    int round;
    const float *q, *k, *v, *o, *lse_in, *dout;
    int ldq, ldk, ldv, ldo, lddo, lddq, lddk, lddv;
    float *out, *lse, *dq, *dk, *dv;
};

SIMD_CLONES static void attn_fwd_heads(void *ctx, int64_t bh0, int64_t bh1, int thread)
{
    const struct attn_job *j = ctx;
    const struct tfm_attn *a = j->a;
    int H = a->H, Tq = a->Tq, Tk = a->Tk, dk = a->dk;
    float p = a->dropout, inv = tfm_dropout_scale(p);
    float *S = j->c->scratch + (size_t)thread * j->c->scratch_floats;     /* (Tq,Tk) */
    for (int64_t bh = bh0; bh < bh1; bh++) {
        int b = (int)(bh / H), h = (int)(bh % H);
        const float *qb = j->q + (size_t)b * Tq * j->ldq + h * dk;
        const float *kb = j->k + (size_t)b * Tk * j->ldk + h * dk;
        const float *vb = j->v + (size_t)b * Tk * j->ldv + h * dk;
        float *ob = j->out + (size_t)b * Tq * j->ldo + h * dk;
        sgemm1(0, 1, Tq, Tk, dk, a->scale, qb, j->ldq, kb, j->ldk, 0, S, Tk);
        for (int i = 0; i < Tq; i++) {
            float *s = S + (size_t)i * Tk;
            int n = attn_keys(a, b, i);
            float *l = j->lse + (size_t)bh * Tq + i;
            if (n == 0) {
                memset(s, 0, sizeof(float) * Tk);
                *l = -INFINITY;
                continue;
            }
            float mx = s[0];
#pragma omp simd reduction(max : mx)
            for (int t = 1; t < n; t++)
                mx = s[t] > mx ? s[t] : mx;
            float sum = exp_shifted(s, n, mx), r = 1.0f / sum;
#pragma omp simd
            for (int t = 0; t < n; t++)
                s[t] *= r;
            for (int t = n; t < Tk; t++)
                s[t] = 0;
            *l = mx + logf(sum);
            if (p > 0) {
                uint64_t e0 = ((uint64_t)bh * Tq + i) * Tk;
                for (int t = 0; t < n; t++)
                    s[t] = tfm_dropout_keep(a->key, e0 + t, p) ? s[t] * inv : 0;
            }
            if (j->round)
                for (int t = 0; t < n; t++)
                    s[t] = tfm_bf16_round(s[t]);
        }
        sgemm1(0, 0, Tq, dk, Tk, 1, S, Tk, vb, j->ldv, 0, ob, j->ldo);
    }
}

static void cpu_attn_fwd(struct tfm_backend *be, const struct tfm_attn *a, const float *q,
                         int ldq, const float *k, int ldk, const float *v, int ldv, float *o,
                         int ldo, float *lse)
{
    struct attn_job j = {.c = CPU(be), .a = a, .q = q, .k = k, .v = v, .ldq = ldq, .ldk = ldk,
                         .ldv = ldv, .ldo = ldo, .out = o, .lse = lse,
                         .round = be->precision == TFM_PRECISION_BF16};
    par(be, (int64_t)a->B * a->H, (double)a->B * a->H * a->Tq * a->Tk * a->dk,
        attn_fwd_heads, &j);
}

SIMD_CLONES static void attn_bwd_heads(void *ctx, int64_t bh0, int64_t bh1, int thread)
{
    const struct attn_job *j = ctx;
    const struct tfm_attn *a = j->a;
    int H = a->H, Tq = a->Tq, Tk = a->Tk, dkh = a->dk;
    float p = a->dropout, inv = tfm_dropout_scale(p);
    float *P = j->c->scratch + (size_t)thread * j->c->scratch_floats;     /* (Tq,Tk) */
    float *dP = P + (size_t)Tq * Tk;                                       /* (Tq,Tk) */
    for (int64_t bh = bh0; bh < bh1; bh++) {
        int b = (int)(bh / H), h = (int)(bh % H);
        const float *qb = j->q + (size_t)b * Tq * j->ldq + h * dkh;
        const float *kb = j->k + (size_t)b * Tk * j->ldk + h * dkh;
        const float *vb = j->v + (size_t)b * Tk * j->ldv + h * dkh;
        const float *gb = j->dout + (size_t)b * Tq * j->lddo + h * dkh;
        sgemm1(0, 1, Tq, Tk, dkh, a->scale, qb, j->ldq, kb, j->ldk, 0, P, Tk);
        sgemm1(0, 1, Tq, Tk, dkh, 1, gb, j->lddo, vb, j->ldv, 0, dP, Tk);
        for (int i = 0; i < Tq; i++) {
            float *pr = P + (size_t)i * Tk, *dpr = dP + (size_t)i * Tk;
            int n = attn_keys(a, b, i);
            float l = j->lse_in[(size_t)bh * Tq + i];
            uint64_t e0 = ((uint64_t)bh * Tq + i) * Tk;
            /* pr = P, dpr = dL/dP (through the dropout); D = sum_j P dL/dP, computed from
             * the same values as dS below so that their common part cancels exactly. */
            float d = 0;
            if (p <= 0) {
#pragma omp simd reduction(+ : d)
                for (int t = 0; t < n; t++) {
                    float pj = fast_expf(pr[t] - l);
                    pr[t] = pj;
                    d += pj * dpr[t];
                }
#pragma omp simd
                for (int t = 0; t < n; t++)
                    dpr[t] = pr[t] * (dpr[t] - d);
            } else {
                for (int t = 0; t < n; t++) {
                    float pj = fast_expf(pr[t] - l), g = dpr[t];
                    g = tfm_dropout_keep(a->key, e0 + t, p) ? g * inv : 0;
                    pr[t] = pj;
                    dpr[t] = g;
                    d += pj * g;
                }
                for (int t = 0; t < n; t++) {
                    float pj = pr[t];
                    dpr[t] = pj * (dpr[t] - d);
                    pr[t] = tfm_dropout_keep(a->key, e0 + t, p) ? pj * inv : 0;
                }
            }
            if (j->round)
                for (int t = 0; t < n; t++) {
                    pr[t] = tfm_bf16_round(pr[t]);
                    dpr[t] = tfm_bf16_round(dpr[t]);
                }
            for (int t = n; t < Tk; t++)
                pr[t] = dpr[t] = 0;
        }
        /* P now holds P' (after dropout), dP holds dS (before the scale). */
        sgemm1(1, 0, Tk, dkh, Tq, 1, P, Tk, gb, j->lddo, 0,
               j->dv + (size_t)b * Tk * j->lddv + h * dkh, j->lddv);
        sgemm1(0, 0, Tq, dkh, Tk, a->scale, dP, Tk, kb, j->ldk, 0,
               j->dq + (size_t)b * Tq * j->lddq + h * dkh, j->lddq);
        sgemm1(1, 0, Tk, dkh, Tq, a->scale, dP, Tk, qb, j->ldq, 0,
               j->dk + (size_t)b * Tk * j->lddk + h * dkh, j->lddk);
    }
}

static void cpu_attn_bwd(struct tfm_backend *be, const struct tfm_attn *a, const float *q,
                         int ldq, const float *k, int ldk, const float *v, int ldv,
                         const float *o, int ldo, const float *lse, const float *dout, int lddo,
                         float *dq, int lddq, float *dk, int lddk, float *dv, int lddv)
{
    (void)o;
    (void)ldo;
    struct attn_job j = {.c = CPU(be), .a = a, .q = q, .k = k, .v = v, .lse_in = lse,
                         .dout = dout, .ldq = ldq, .ldk = ldk, .ldv = ldv, .lddo = lddo,
                         .lddq = lddq, .lddk = lddk, .lddv = lddv, .dq = dq, .dk = dk,
                         .dv = dv, .round = be->precision == TFM_PRECISION_BF16};
    par(be, (int64_t)a->B * a->H, (double)a->B * a->H * a->Tq * a->Tk * a->dk,
        attn_bwd_heads, &j);
}

struct attn_decode_job {
    struct cpu *c;
    int H, dk, ldq, ld, ldo, sstride;
    float scale;
    int64_t bstride;
    const float *q, *k, *v;
    const int32_t *blk, *slot, *len;
    float *o;
};

/* Row-head rh of an attn_decode job: its query, output and key count, its slots (NULL:
 * its keys are those of block blk[r]) and its keys' and values' bases, from which
 * decode_at finds key or value t. */
struct decode_head {
    const float *q, *k, *v;
    float *o;
    const int32_t *slot;
    int n;
};

static inline struct decode_head decode_head(const struct attn_decode_job *j, int64_t rh)
{
    int r = (int)(rh / j->H), h = (int)(rh % j->H), dk = j->dk;
    const int32_t *sl = j->slot ? j->slot + (size_t)r * j->sstride : NULL;
    int64_t b0 = sl ? 0 : j->blk[r] * j->bstride;
    return (struct decode_head){j->q + (size_t)r * j->ldq + h * dk, j->k + b0 + h * dk,
                                j->v + b0 + h * dk, j->o + (size_t)r * j->ldo + h * dk, sl,
                                j->len[r]};
}

static inline const float *decode_at(const struct attn_decode_job *j,
                                     const struct decode_head *d, const float *base, int t)
{
    return base + (size_t)t * j->ld + (d->slot ? d->slot[t] * j->bstride : 0);
}

SIMD_CLONES static void attn_decode_heads(void *ctx, int64_t rh0, int64_t rh1, int thread)
{
    const struct attn_decode_job *j = ctx;
    int dk = j->dk;
    float *s = j->c->scratch + (size_t)thread * j->c->scratch_floats;     /* (keys) */
    for (int64_t rh = rh0; rh < rh1; rh++) {
        struct decode_head d = decode_head(j, rh);
        float mx = -INFINITY;
        for (int t = 0; t < d.n; t++) {
            const float *kt = decode_at(j, &d, d.k, t);
            float dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int x = 0; x < dk; x++)
                dot += d.q[x] * kt[x];
            s[t] = dot * j->scale;
            mx = s[t] > mx ? s[t] : mx;
        }
        float inv = 1.0f / exp_shifted(s, d.n, mx);
#pragma omp simd
        for (int x = 0; x < dk; x++)
            d.o[x] = 0;
        for (int t = 0; t < d.n; t++) {
            float w = s[t] * inv;
            const float *vt = decode_at(j, &d, d.v, t);
#pragma omp simd
            for (int x = 0; x < dk; x++)
                d.o[x] += w * vt[x];
        }
    }
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
/* The same attention on AVX-512 for heads of NV 16-lane vectors (dk = 16 NV, NV <= 8: the
 * base and big models' 64, the tiny model's 16).  The query stays in registers; scores go
 * four keys at a time, each key's products in one vector whose lanes are then summed for
 * the four together (attn_sum4), instead of one horizontal sum (and one chain of dk / 8
 * dependent FMAs) per key; the weighted values accumulate in registers, even and odd keys
 * apart.  On a base model's beam search (one thread, perf) it takes 1.6 s where the loop
 * above took 2.2 s: the rest is reading the key/value cache from memory. */
static inline __attribute__((always_inline, target("avx512f"))) __m128
attn_sum4(__m512 a, __m512 b, __m512 c, __m512 d)
{
    /* per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] and the same for c, d */
    __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    /* per 128-bit lane: [a, b, c, d] */
    __m512d abd = _mm512_castps_pd(ab), cdd = _mm512_castps_pd(cd);
    __m512 x = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(abd, cdd)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(abd, cdd)));
    __m256 y = _mm256_add_ps(_mm512_castps512_ps256(x),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
}

static inline __attribute__((always_inline, target("avx512f"))) void
attn_decode_head512(const struct attn_decode_job *j, float *s, int64_t rh, const int NV)
{
    struct decode_head d = decode_head(j, rh);
    int n = d.n;
    __m512 q[8], o0[8], o1[8];
#pragma GCC unroll 8
    for (int c = 0; c < NV; c++) {
        q[c] = _mm512_loadu_ps(d.q + 16 * c);
        o0[c] = o1[c] = _mm512_setzero_ps();
    }
    __m128 scale4 = _mm_set1_ps(j->scale), mx4 = _mm_set1_ps(-INFINITY);
    int t = 0;
    for (; t + 4 <= n; t += 4) {
        const float *k0 = decode_at(j, &d, d.k, t), *k1 = decode_at(j, &d, d.k, t + 1),
                    *k2 = decode_at(j, &d, d.k, t + 2), *k3 = decode_at(j, &d, d.k, t + 3);
        __m512 a0 = _mm512_mul_ps(q[0], _mm512_loadu_ps(k0));
        __m512 a1 = _mm512_mul_ps(q[0], _mm512_loadu_ps(k1));
        __m512 a2 = _mm512_mul_ps(q[0], _mm512_loadu_ps(k2));
        __m512 a3 = _mm512_mul_ps(q[0], _mm512_loadu_ps(k3));
#pragma GCC unroll 8
        for (int c = 1; c < NV; c++) {
            a0 = _mm512_fmadd_ps(q[c], _mm512_loadu_ps(k0 + 16 * c), a0);
            a1 = _mm512_fmadd_ps(q[c], _mm512_loadu_ps(k1 + 16 * c), a1);
            a2 = _mm512_fmadd_ps(q[c], _mm512_loadu_ps(k2 + 16 * c), a2);
            a3 = _mm512_fmadd_ps(q[c], _mm512_loadu_ps(k3 + 16 * c), a3);
        }
        __m128 s4 = _mm_mul_ps(attn_sum4(a0, a1, a2, a3), scale4);
        _mm_storeu_ps(s + t, s4);
        mx4 = _mm_max_ps(mx4, s4);
    }
    float mx = -INFINITY;
    for (; t < n; t++) {
        const float *k0 = decode_at(j, &d, d.k, t);
        __m512 a0 = _mm512_mul_ps(q[0], _mm512_loadu_ps(k0));
#pragma GCC unroll 8
        for (int c = 1; c < NV; c++)
            a0 = _mm512_fmadd_ps(q[c], _mm512_loadu_ps(k0 + 16 * c), a0);
        s[t] = _mm512_reduce_add_ps(a0) * j->scale;
        mx = s[t] > mx ? s[t] : mx;
    }
    float m4[4];
    _mm_storeu_ps(m4, mx4);
    for (int i = 0; i < 4; i++)
        mx = m4[i] > mx ? m4[i] : mx;
    float inv = 1.0f / exp_shifted(s, n, mx);
    for (t = 0; t + 2 <= n; t += 2) {
        __m512 w0 = _mm512_set1_ps(s[t] * inv), w1 = _mm512_set1_ps(s[t + 1] * inv);
        const float *v0 = decode_at(j, &d, d.v, t), *v1 = decode_at(j, &d, d.v, t + 1);
#pragma GCC unroll 8
        for (int c = 0; c < NV; c++) {
            o0[c] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(v0 + 16 * c), o0[c]);
            o1[c] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(v1 + 16 * c), o1[c]);
        }
    }
    if (t < n) {
        __m512 w0 = _mm512_set1_ps(s[t] * inv);
        const float *v0 = decode_at(j, &d, d.v, t);
#pragma GCC unroll 8
        for (int c = 0; c < NV; c++)
            o0[c] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(v0 + 16 * c), o0[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < NV; c++)
        _mm512_storeu_ps(d.o + 16 * c, _mm512_add_ps(o0[c], o1[c]));
}

__attribute__((target("avx512f"))) static void attn_decode_heads512(void *ctx, int64_t rh0,
                                                                   int64_t rh1, int thread)
{
    const struct attn_decode_job *j = ctx;
    float *s = j->c->scratch + (size_t)thread * j->c->scratch_floats;     /* (keys) */
    for (int64_t rh = rh0; rh < rh1; rh++)
        switch (j->dk / 16) {   /* a constant NV in each, for the registers */
        case 1: attn_decode_head512(j, s, rh, 1); break;
        case 2: attn_decode_head512(j, s, rh, 2); break;
        case 3: attn_decode_head512(j, s, rh, 3); break;
        case 4: attn_decode_head512(j, s, rh, 4); break;
        case 5: attn_decode_head512(j, s, rh, 5); break;
        case 6: attn_decode_head512(j, s, rh, 6); break;
        case 7: attn_decode_head512(j, s, rh, 7); break;
        default: attn_decode_head512(j, s, rh, 8); break;
        }
}
#endif

static void cpu_attn_decode(struct tfm_backend *be, int R, int H, int dk, float scale,
                            const float *q, int ldq, const float *k, const float *v, int ld,
                            int64_t bstride, const int32_t *blk, const int32_t *slot,
                            int sstride, const int32_t *len, float *o, int ldo)
{
    struct attn_decode_job j = {CPU(be), H, dk, ldq, ld, ldo, sstride, scale, bstride, q, k,
                                v, blk, slot, len, o};
    int64_t keys = 0;
    for (int r = 0; r < R; r++)
        keys += len[r];
    tfm_pool_fn *fn = attn_decode_heads;
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
    if (dk % 16 == 0 && dk <= 128 && CPU(be)->avx512)
        fn = attn_decode_heads512;
#endif
    par(be, (int64_t)R * H, (double)keys * H * dk * 4, fn, &j);
}

/* ---- element-wise -------------------------------------------------------------------- */

struct ew_job {
    float *y, *dx;
    const float *x, *a, *b, *dy;
    int64_t N, M;
    int relu;
    float alpha, p, inv;
    uint64_t key;
};

SIMD_CLONES static void bias_act_rows(void *ctx, int64_t n0, int64_t n1, int thread)
{
    const struct ew_job *j = ctx;
    int64_t M = j->M;
    const float *b = j->b;
    (void)thread;
    for (int64_t n = n0; n < n1; n++) {
        float *r = j->y + (size_t)n * M;
        if (j->relu) {
#pragma omp simd
            for (int64_t c = 0; c < M; c++) {
                float t = r[c] + b[c];
                r[c] = t > 0 ? t : 0;
            }
        } else {
#pragma omp simd
            for (int64_t c = 0; c < M; c++)
                r[c] += b[c];
        }
    }
}

static void cpu_bias_act(struct tfm_backend *be, float *x, const float *b, int N, int M,
                         int relu)
{
    struct ew_job j = {.y = x, .b = b, .M = M, .relu = relu};
    par(be, N, (double)N * M, bias_act_rows, &j);
}

/* bias_act on M rows of N floats, ldc apart: each row as bias_act does it (its bits). */
struct bias_ld_job {
    float *C;
    const float *b;
    int64_t ldc, N;
    int relu;
};

static void bias_act_ld_rows(void *ctx, int64_t i0, int64_t i1, int thread)
{
    const struct bias_ld_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        struct ew_job r = {.y = j->C + i * j->ldc, .b = j->b, .M = j->N, .relu = j->relu};
        bias_act_rows(&r, 0, 1, thread);
    }
}

static void bias_act_ld(struct tfm_backend *be, float *C, int64_t ldc, const float *b, int M,
                        int N, int relu)
{
    struct bias_ld_job j = {C, b, ldc, N, relu};
    par(be, M, (double)M * N, bias_act_ld_rows, &j);
}

/* Columns [c0, c1) of db: each adds its rows in row order. */
SIMD_CLONES static void bias_bwd_cols(void *ctx, int64_t c0, int64_t c1, int thread)
{
    const struct ew_job *j = ctx;
    float *db = j->y;
    (void)thread;
    for (int64_t n = 0; n < j->N; n++) {
        const float *r = j->dy + (size_t)n * j->M;
#pragma omp simd
        for (int64_t c = c0; c < c1; c++)
            db[c] += r[c];
    }
}

static void cpu_bias_bwd(struct tfm_backend *be, float *db, const float *dy, int N, int M)
{
    struct ew_job j = {.y = db, .dy = dy, .N = N, .M = M};
    par_cols(be, M, (double)N * M, bias_bwd_cols, &j);
}

SIMD_CLONES static void relu_bwd_range(void *ctx, int64_t i0, int64_t i1, int thread)
{
    const struct ew_job *j = ctx;
    float *dx = j->dx, scale = j->alpha;
    const float *dy = j->dy, *y = j->x;
    (void)thread;
#pragma omp simd
    for (int64_t i = i0; i < i1; i++) {
        float g = dy[i] * scale;        /* loaded unconditionally, so that it vectorizes */
        dx[i] = y[i] > 0 ? g : 0;
    }
}

static void cpu_relu_bwd(struct tfm_backend *be, float *dx, const float *dy, const float *y,
                         size_t n, float scale)
{
    struct ew_job j = {.dx = dx, .dy = dy, .x = y, .alpha = scale};
    par_range(be, (int64_t)n, relu_bwd_range, &j);
}

/* Dropout's multipliers for elements [i0, i0 + n), n <= DROP_BLOCK: inv where
 * tfm_dropout_keep(key, i, p) (as its integer twin, thr = tfm_dropout_threshold(p)), else
 * 0.  Apart from the element loop, so the hash runs in vector lanes. */
#define DROP_BLOCK 256
static inline void dropout_mul(float *mul, uint64_t key, int64_t i0, int n, uint32_t thr,
                               float inv)
{
#pragma omp simd
    for (int k = 0; k < n; k++)
        mul[k] = tfm_rng_bits24(key, (uint64_t)(i0 + k)) >= thr ? inv : 0.0f;
}

DROP_CLONES static void dropout_range(void *ctx, int64_t i0, int64_t i1, int thread)
{
    const struct ew_job *j = ctx;
    uint32_t thr = tfm_dropout_threshold(j->p);
    float mul[DROP_BLOCK];
    (void)thread;
    for (int64_t b = i0; b < i1; b += DROP_BLOCK) {
        int n = i1 - b < DROP_BLOCK ? (int)(i1 - b) : DROP_BLOCK;
        dropout_mul(mul, j->key, b, n, thr, j->inv);
        float *y = j->y + b;
        const float *x = j->x + b;
#pragma omp simd
        for (int k = 0; k < n; k++)
            y[k] = mul[k] > 0 ? x[k] * mul[k] : 0.0f;   /* a dropped Inf or NaN is 0 */
    }
}

static void cpu_dropout(struct tfm_backend *be, float *y, const float *x, size_t n, float p,
                        uint64_t key)
{
    if (p <= 0) {
        cpu_copy(be, y, x, n * sizeof(float));
        return;
    }
    struct ew_job j = {.y = y, .x = x, .p = p, .inv = tfm_dropout_scale(p), .key = key};
    par_range(be, (int64_t)n, dropout_range, &j);
}

DROP_CLONES static void add_dropout_range(void *ctx, int64_t i0, int64_t i1, int thread)
{
    const struct ew_job *j = ctx;
    float *y = j->y, p = j->p, inv = j->inv;
    const float *a = j->a, *b = j->b;
    (void)thread;
    if (p <= 0) {
#pragma omp simd
        for (int64_t i = i0; i < i1; i++)
            y[i] = a[i] + b[i];
        return;
    }
    uint32_t thr = tfm_dropout_threshold(p);
    float mul[DROP_BLOCK];
    for (int64_t c = i0; c < i1; c += DROP_BLOCK) {
        int n = i1 - c < DROP_BLOCK ? (int)(i1 - c) : DROP_BLOCK;
        dropout_mul(mul, j->key, c, n, thr, inv);
#pragma omp simd
        for (int k = 0; k < n; k++)
            y[c + k] = a[c + k] + (mul[k] > 0 ? b[c + k] * mul[k] : 0.0f);
    }
}

static void cpu_add_dropout(struct tfm_backend *be, float *y, const float *a, const float *b,
                            size_t n, float p, uint64_t key)
{
    struct ew_job j = {.y = y, .a = a, .b = b, .p = p, .inv = tfm_dropout_scale(p),
                       .key = key};
    par_range(be, (int64_t)n, add_dropout_range, &j);
}

SIMD_CLONES static void axpy_range(void *ctx, int64_t i0, int64_t i1, int thread)
{
    const struct ew_job *j = ctx;
    float *y = j->y, alpha = j->alpha;
    const float *x = j->x;
    (void)thread;
#pragma omp simd
    for (int64_t i = i0; i < i1; i++)
        y[i] += alpha * x[i];
}

static void cpu_axpy(struct tfm_backend *be, float *y, float alpha, const float *x, size_t n)
{
    struct ew_job j = {.y = y, .x = x, .alpha = alpha};
    par_range(be, (int64_t)n, axpy_range, &j);
}

struct gather_job {
    float *dst;
    const float *src;
    const int32_t *idx;
    int64_t dstride, sstride, len;
};

static void gather_rows(void *ctx, int64_t i0, int64_t i1, int thread)
{
    const struct gather_job *j = ctx;
    (void)thread;
    for (int64_t i = i0; i < i1; i++)
        memcpy(j->dst + i * j->dstride, j->src + (j->idx ? j->idx[i] : i) * j->sstride,
               (size_t)j->len * sizeof(float));
}

static void cpu_gather(struct tfm_backend *be, float *dst, int64_t dstride, const float *src,
                       int64_t sstride, const int32_t *idx, int n, int64_t len)
{
    struct gather_job j = {dst, src, idx, dstride, sstride, len};
    par(be, n, (double)n * len, gather_rows, &j);
}

/* ---- fused ops ---------------------------------------------------------------------------
 * Each runs the functions of its sequence (above) one row at a time, so that the row is
 * still in cache for the second, and every element gets the sequence's operations in the
 * sequence's order: its bits, for any thread count.  A dropout with p <= 0 is a copy, as
 * cpu_dropout's. */

struct fused_job {
    struct ew_job ew;           /* the element-wise stage (y, x or a, b: the row's owner) */
    struct ln_job ln;
    struct embed_job em;
    int64_t D;                  /* elements per row */
};

static void bias_act_dropout_rows(void *ctx, int64_t n0, int64_t n1, int thread)
{
    struct fused_job *j = ctx;
    for (int64_t n = n0; n < n1; n++) {
        bias_act_rows(&j->ew, n, n + 1, thread);
        if (j->ew.p > 0)
            dropout_range(&j->ew, n * j->D, (n + 1) * j->D, thread);
    }
}

static void cpu_bias_act_dropout(struct tfm_backend *be, float *x, const float *b, int N, int M,
                                 int relu, float p, uint64_t key)
{
    struct fused_job j = {.ew = {.y = x, .x = x, .b = b, .M = M, .relu = relu, .p = p,
                                 .inv = tfm_dropout_scale(p), .key = key},
                          .D = M};
    par(be, N, (double)N * M, bias_act_dropout_rows, &j);
}

static void embed_fwd_dropout_rows(void *ctx, int64_t n0, int64_t n1, int thread)
{
    struct fused_job *j = ctx;
    for (int64_t n = n0; n < n1; n++) {
        embed_fwd_rows(&j->em, n, n + 1, thread);
        if (j->ew.p > 0)
            dropout_range(&j->ew, n * j->D, (n + 1) * j->D, thread);
    }
}

static void cpu_embed_fwd_dropout(struct tfm_backend *be, float *out, const float *table,
                                  const int32_t *ids, int N, int D, float scale,
                                  const float *pos, int L, int pos0, float p, uint64_t key)
{
    struct fused_job j = {.em = {.out = out, .table = table, .pos = pos, .ids = ids, .N = N,
                                 .D = D, .L = L, .pos0 = pos0, .scale = scale},
                          .ew = {.y = out, .x = out, .p = p,
                                 .inv = tfm_dropout_scale(p), .key = key},
                          .D = D};
    par(be, N, (double)N * D, embed_fwd_dropout_rows, &j);
}

static void add_dropout_ln_rows(void *ctx, int64_t n0, int64_t n1, int thread)
{
    struct fused_job *j = ctx;
    for (int64_t n = n0; n < n1; n++) {
        add_dropout_range(&j->ew, n * j->D, (n + 1) * j->D, thread);
        ln_fwd_rows(&j->ln, n, n + 1, thread);
    }
}

static void cpu_add_dropout_layernorm(struct tfm_backend *be, float *y, float *mean, float *rstd,
                                      float *r, const float *a, const float *b, const float *g,
                                      const float *bias, int N, int D, float eps, float p,
                                      uint64_t key)
{
    struct fused_job j = {.ew = {.y = r, .a = a, .b = b, .p = p,
                                 .inv = tfm_dropout_scale(p), .key = key},
                          .ln = {.y = y, .mean = mean, .rstd = rstd, .x = r, .g = g, .b = bias,
                                 .N = N, .D = D, .eps = eps},
                          .D = D};
    par(be, N, (double)N * D, add_dropout_ln_rows, &j);
}

static void ln_bwd_dropout_rows(void *ctx, int64_t n0, int64_t n1, int thread)
{
    struct fused_job *j = ctx;
    for (int64_t n = n0; n < n1; n++) {
        ln_bwd_rows(&j->ln, n, n + 1, thread);
        if (j->ew.p > 0)
            dropout_range(&j->ew, n * j->D, (n + 1) * j->D, thread);
        else
            memcpy(j->ew.y + n * j->D, j->ew.x + n * j->D, (size_t)j->D * sizeof(float));
    }
}

static void cpu_layernorm_bwd_dropout(struct tfm_backend *be, float *dx, float *dxd, float *dg,
                                      float *db, const float *dy, const float *x,
                                      const float *mean, const float *rstd, const float *g,
                                      int N, int D, int accumulate, float p, uint64_t key)
{
    struct fused_job j = {.ln = {.dx = dx, .dg = dg, .db = db, .x = x, .g = g, .dy = dy,
                                 .cmean = mean, .crstd = rstd, .N = N, .D = D,
                                 .accumulate = accumulate},
                          .ew = {.y = dxd, .x = dx, .p = p,
                                 .inv = tfm_dropout_scale(p), .key = key},
                          .D = D};
    par(be, N, (double)N * D, ln_bwd_dropout_rows, &j);
    par_cols(be, D, (double)N * D, ln_bwd_cols, &j.ln);
}

/* ---- output layer ----------------------------------------------------------------------- */

/* Sums over a vocabulary row (log_softmax): float within blocks of this many, double
 * across them. */
#define XENT_BLOCK 256
_Static_assert(XENT_BLOCK % TFM_TOPK_BLOCK == 0, "log_softmax_top's runs are whole blocks");

struct xent_job {
    float *logits, *loss, *nll, *y;
    const float *x;
    const int32_t *labels;
    int V, ignore;
    float eps, grad_scale;
};

DROP_CLONES static void xent_rows(void *ctx, int64_t n0, int64_t n1, int thread)
{
    const struct xent_job *j = ctx;
    int V = j->V;
    float eps = j->eps, grad_scale = j->grad_scale;
    (void)thread;
    for (int64_t n = n0; n < n1; n++) {
        float *z = j->logits + (size_t)n * V;
        int y = j->labels[n];
        if (y == j->ignore) {
            j->loss[n] = j->nll[n] = 0;
            if (grad_scale != 0)
                memset(z, 0, sizeof(float) * V);
            continue;
        }
        float mx = z[0];
#pragma omp simd reduction(max : mx)
        for (int c = 1; c < V; c++)
            mx = z[c] > mx ? z[c] : mx;
        double se = 0, sz = 0;
        for (int c0 = 0; c0 < V; c0 += XENT_BLOCK) {
            int c1 = V - c0 < XENT_BLOCK ? V : c0 + XENT_BLOCK;
            float bs = 0, bz = 0;
#pragma omp simd reduction(+ : bs, bz)
            for (int c = c0; c < c1; c++) {
                bs += fast_expf(z[c] - mx);
                bz += z[c];
            }
            se += bs;
            sz += bz;
        }
        double lse = mx + log(se);
        j->nll[n] = (float)(lse - z[y]);
        j->loss[n] = (float)(lse - (1.0 - eps) * z[y] - eps / V * sz);
        if (grad_scale != 0) {
            float u = eps / V, l = (float)lse;
#pragma omp simd
            for (int c = 0; c < V; c++)
                z[c] = grad_scale * (fast_expf(z[c] - l) - u);
            z[y] -= grad_scale * (1.0f - eps);
        }
    }
}

/* Label-smoothed cross-entropy and its gradient, a row at a time: the maximum, then the
 * sums of exp(z - max) and of z in float over blocks of XENT_BLOCK and in double across
 * them, then the gradient softmax - smoothed target with the same fast_expf as the
 * attention softmax.  Vectorized (omp simd); the result depends on the binary only. */
static void cpu_xent(struct tfm_backend *be, float *logits, const int32_t *labels, int N,
                     int V, float eps, int ignore, float *loss, float *nll, float grad_scale)
{
    struct xent_job j = {.logits = logits, .loss = loss, .nll = nll, .labels = labels, .V = V,
                         .ignore = ignore, .eps = eps, .grad_scale = grad_scale};
    par(be, N, (double)N * V, xent_rows, &j);
}

/* The sum of fast_expf(z[c] - mx) over c < n in float, in an order fixed by the code
 * alone: 16 lanes (element c in lane c % 16), folded in halves.  Element-wise steps,
 * which GCC vectorizes at every width (so every clone gives the same bits), where an
 * `omp simd` reduction inside the block loop summed its lanes one by one. */
static inline __attribute__((always_inline)) float exp_sum(const float *z, int n, float mx)
{
    float s[16] = {0};
    int c = 0;
    for (; c + 16 <= n; c += 16)
        for (int l = 0; l < 16; l++)
            s[l] += fast_expf(z[c + l] - mx);
    for (int l = 0; c + l < n; l++)
        s[l] += fast_expf(z[c + l] - mx);
    for (int w = 8; w; w >>= 1)
        for (int l = 0; l < w; l++)
            s[l] += s[l + w];
    return s[0];
}

/* log sum exp of the row z (V): the maximum, then sums of exp(z - max) in float within
 * blocks of XENT_BLOCK (exp_sum) and in double across them.  bmax, if not NULL, receives the
 * maximum of each block. */
static inline __attribute__((always_inline)) float row_lse(const float *z, int V, float *bmax)
{
    float mx = z[0];
    if (bmax) {
        for (int c0 = 0; c0 < V; c0 += XENT_BLOCK) {
            int c1 = V - c0 < XENT_BLOCK ? V : c0 + XENT_BLOCK;
            float bm = tfm_run_max(z + c0, c1 - c0);    /* NaNs never count, as in the scan */
            bmax[c0 / XENT_BLOCK] = bm;
            mx = bm > mx ? bm : mx;
        }
    } else {
#pragma omp simd reduction(max : mx)
        for (int c = 1; c < V; c++)
            mx = z[c] > mx ? z[c] : mx;
    }
    double se = 0;
    for (int c0 = 0; c0 < V; c0 += XENT_BLOCK) {
        int c1 = V - c0 < XENT_BLOCK ? V : c0 + XENT_BLOCK;
        se += exp_sum(z + c0, c1 - c0, mx);
    }
    return (float)(mx + log(se));
}

DROP_CLONES static void log_softmax_rows(void *ctx, int64_t n0, int64_t n1, int thread)
{
    const struct xent_job *j = ctx;
    int V = j->V;
    (void)thread;
    for (int64_t n = n0; n < n1; n++) {
        const float *z = j->x + (size_t)n * V;
        float *o = j->y + (size_t)n * V;
        float l = row_lse(z, V, NULL);
#pragma omp simd
        for (int c = 0; c < V; c++)
            o[c] = z[c] - l;
    }
}

static void cpu_log_softmax(struct tfm_backend *be, float *y, const float *x, int N, int V)
{
    struct xent_job j = {.y = y, .x = x, .V = V};
    par(be, N, (double)N * V, log_softmax_rows, &j);
}

struct top_job {
    const float *x;
    const int32_t *ban;
    float *top_y, *also_y;
    int32_t *top_id;
    int V, k, nban, also;
};

DROP_CLONES static void log_softmax_top_rows(void *ctx, int64_t n0, int64_t n1, int thread)
{
    const struct top_job *j = ctx;
    (void)thread;
    float bmax[256];                /* block maxima of a row of up to 64k entries */
    for (int64_t n = n0; n < n1; n++) {
        const float *z = j->x + (size_t)n * j->V;
        int big = j->V <= 256 * XENT_BLOCK;
        float l = row_lse(z, j->V, big ? bmax : NULL);
        tfm_topk_row(z, l, j->V, j->k, j->ban, j->nban, big ? bmax : NULL, XENT_BLOCK,
                     j->top_y + (size_t)n * j->k, j->top_id + (size_t)n * j->k);
        j->also_y[n] = z[j->also] - l;
    }
}

static void cpu_log_softmax_top(struct tfm_backend *be, const float *x, int N, int V, int k,
                                const int32_t *ban, int nban, int also, float *top_y,
                                int32_t *top_id, float *also_y)
{
    struct top_job j = {x, ban, top_y, also_y, top_id, V, k, nban, also};
    par(be, N, (double)N * V, log_softmax_top_rows, &j);
}

/* ---- decoding's output layer ------------------------------------------------------------ */

/* The output embedding W (V,D) in panels of OUT_PW vocabulary entries: panel p holds
 * W[p*OUT_PW + c][d] at [p][d][c] (zeros past V), so that a tile's products read one
 * panel row of 16-lane vectors per d.  A step's rows go through in blocks (out_rows): the
 * tiles of OUT_MR rows of a block share each panel while it is in L1, and the block's
 * logits are still in L2 when log_softmax_top_rows reads them.  A block's logits take
 * half the core's L2 (cpu_l2), leaving the rest to the panels and the rows: a tiny model's
 * beam search (vocabulary 8000) took 1.63, 1.58 and 1.60 s with blocks of 16, 48 and 64
 * rows on a Xeon of 2 MiB L2, and on a Zen 4 of 1 MiB L2 0.94-0.95 s with 8 or 16 rows
 * where 48 (1.5 MiB, past its L2) took 1.15 s, on 2 threads, the same outputs. */
#define OUT_PW 32
#define OUT_MR 8
#define OUT_RB_MAX 48
#define OUT_L2_DEFAULT (1 << 20)    /* when the C library cannot tell the L2's size */

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
static size_t cpu_out_pack_floats(int V, int D)
{
    return (size_t)((V + OUT_PW - 1) / OUT_PW) * OUT_PW * (size_t)D;
}

struct out_job {
    float *y, *packed;
    const float *x, *W;
    int N, V, D, rb;            /* rb: rows a block (out_rows) */
    int with_top;
    struct top_job top;         /* out_top: what log_softmax_top_rows does next */
};

/* Rows a block: as many whole tiles as keep its logits within half of L2, 1 to
 * OUT_RB_MAX / OUT_MR tiles. */
static int out_rows(struct tfm_backend *be, int V)
{
    int64_t rb = (int64_t)(CPU(be)->l2 / 2) / ((int64_t)V * (int64_t)sizeof(float)) /
                 OUT_MR * OUT_MR;
    return rb < OUT_MR ? OUT_MR : rb > OUT_RB_MAX ? OUT_RB_MAX : (int)rb;
}

static void out_pack_panels(void *ctx, int64_t p0, int64_t p1, int thread)
{
    const struct out_job *j = ctx;
    (void)thread;
    for (int64_t p = p0; p < p1; p++) {
        float *P = j->packed + (size_t)p * j->D * OUT_PW;
        for (int c = 0; c < OUT_PW; c++) {
            int64_t v = p * OUT_PW + c;
            const float *w = j->W + (size_t)v * j->D;
            for (int d = 0; d < j->D; d++)
                P[(size_t)d * OUT_PW + c] = v < j->V ? w[d] : 0.0f;
        }
    }
}

static void cpu_out_pack(struct tfm_backend *be, float *packed, const float *W, int V, int D)
{
    struct out_job j = {.packed = packed, .W = W, .V = V, .D = D};
    int64_t panels = (V + OUT_PW - 1) / OUT_PW;
    par(be, panels, (double)V * D, out_pack_panels, &j);
}

/* y rows [0, MR) (ld ldy), columns [0, nc) of panel P, from x rows (ld D): each element
 * acc = fma(x[d], w[d], acc) for d = 0..D-1 from acc = 0 (fma_tile). */
static inline __attribute__((always_inline, target("avx512f"))) void
out_tile(float *y, int ldy, const float *x, int D, const float *P, int nc, const int MR)
{
    __mmask16 m[2];
    tile_masks(m, nc, 2);
    fma_tile(y, ldy, x, D, P, OUT_PW, D, m, 1.0f, 0.0f, 0, MR, 2);
}

/* The logits of rows [r0, r1) (a block), panel by panel. */
__attribute__((target("avx512f"))) static void out_block(const struct out_job *j, int64_t r0,
                                                         int64_t r1)
{
    int V = j->V, D = j->D;
    for (int v0 = 0; v0 < V; v0 += OUT_PW) {
        const float *P = j->packed + (size_t)(v0 / OUT_PW) * D * OUT_PW;
        int nc = V - v0 < OUT_PW ? V - v0 : OUT_PW;
        int64_t r = r0;
        for (; r + OUT_MR <= r1; r += OUT_MR)
            out_tile(j->y + (size_t)r * V + v0, V, j->x + (size_t)r * D, D, P, nc, OUT_MR);
        for (; r + 4 <= r1; r += 4)
            out_tile(j->y + (size_t)r * V + v0, V, j->x + (size_t)r * D, D, P, nc, 4);
        for (; r < r1; r++)
            out_tile(j->y + (size_t)r * V + v0, V, j->x + (size_t)r * D, D, P, nc, 1);
    }
}

/* Blocks [b0, b1): their logits, then (out_top) their best tokens while in cache. */
static void out_blocks(void *ctx, int64_t b0, int64_t b1, int thread)
{
    const struct out_job *j = ctx;
    for (int64_t b = b0; b < b1; b++) {
        int64_t r0 = b * j->rb, r1 = r0 + j->rb < j->N ? r0 + j->rb : j->N;
        out_block(j, r0, r1);
        if (j->with_top)
            log_softmax_top_rows((void *)&j->top, r0, r1, thread);
    }
}

static void cpu_out_logits(struct tfm_backend *be, float *y, const float *x, int N,
                           const float *packed, int V, int D)
{
    struct out_job j = {.y = y, .packed = (float *)packed, .x = x, .N = N, .V = V, .D = D,
                        .rb = out_rows(be, V)};
    par(be, (N + j.rb - 1) / j.rb, (double)N * V * D, out_blocks, &j);
}

static void cpu_out_top(struct tfm_backend *be, float *y, const float *x, int N,
                        const float *packed, int V, int D, int k, const int32_t *ban, int nban,
                        int also, float *top_y, int32_t *top_id, float *also_y)
{
    struct out_job j = {.y = y, .packed = (float *)packed, .x = x, .N = N, .V = V, .D = D,
                        .rb = out_rows(be, V), .with_top = 1,
                        .top = {y, ban, top_y, also_y, top_id, V, k, nban, also}};
    par(be, (N + j.rb - 1) / j.rb, (double)N * V * D, out_blocks, &j);
}
#endif

/* ---- optimizer ------------------------------------------------------------------------- */

#define SUMSQ_PARTS 1024
#define SUMSQ_LANES 32

struct sumsq_job {
    const float *x;
    size_t n, chunk;
    double *part;
    int avx512;
};

/* Sum of squares of x[a, b) in double: SUMSQ_LANES independent sums, so that the
 * additions' latency does not bound the loop (one chain ran at a quarter of the memory's
 * speed), then added up in lane order. */
SIMD_CLONES static double sumsq_range(const float *x, size_t a, size_t b)
{
    double acc[SUMSQ_LANES] = {0};
    size_t k = a;
    for (; k + SUMSQ_LANES <= b; k += SUMSQ_LANES)
#pragma omp simd
        for (int l = 0; l < SUMSQ_LANES; l++)
            acc[l] += (double)x[k + l] * x[k + l];
    double s = 0;
    for (int l = 0; l < SUMSQ_LANES; l++)
        s += acc[l];
    for (; k < b; k++)
        s += (double)x[k] * x[k];
    return s;
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
/* The same sums in the same order with AVX-512: GCC keeps the array of lanes above in
 * memory, a chain of stores and loads (9 GB/s on one core); here they are four registers
 * (14 GB/s, the core's memory bandwidth). */
__attribute__((target("avx512f"))) static double sumsq_range512(const float *x, size_t a,
                                                                 size_t b)
{
    __m512d acc[SUMSQ_LANES / 8];
    for (int v = 0; v < SUMSQ_LANES / 8; v++)
        acc[v] = _mm512_setzero_pd();
    size_t k = a;
    for (; k + SUMSQ_LANES <= b; k += SUMSQ_LANES)
        for (int v = 0; v < SUMSQ_LANES / 8; v++) {
            __m512d d = _mm512_cvtps_pd(_mm256_loadu_ps(x + k + 8 * v));
            acc[v] = _mm512_add_pd(acc[v], _mm512_mul_pd(d, d));
        }
    double lane[SUMSQ_LANES], s = 0;
    for (int v = 0; v < SUMSQ_LANES / 8; v++)
        _mm512_storeu_pd(lane + 8 * v, acc[v]);
    for (int l = 0; l < SUMSQ_LANES; l++)
        s += lane[l];
    for (; k < b; k++)
        s += (double)x[k] * x[k];
    return s;
}
#define HAVE_SUMSQ512 1
#endif

static void sumsq_parts(void *ctx, int64_t i0, int64_t i1, int thread)
{
    const struct sumsq_job *j = ctx;
    (void)thread;
    for (int64_t i = i0; i < i1; i++) {
        size_t a = (size_t)i * j->chunk, b = a + j->chunk < j->n ? a + j->chunk : j->n;
#ifdef HAVE_SUMSQ512
        if (j->avx512) {
            j->part[i] = sumsq_range512(j->x, a, b);
            continue;
        }
#endif
        j->part[i] = sumsq_range(j->x, a, b);
    }
}

static double cpu_sumsq(struct tfm_backend *be, const float *x, size_t n)
{
    double part[SUMSQ_PARTS];
    size_t chunk = (n + SUMSQ_PARTS - 1) / SUMSQ_PARTS;
    if (chunk < 4096)
        chunk = 4096;
    int parts = (int)((n + chunk - 1) / chunk);
    struct sumsq_job j = {x, n, chunk, part, 0};
#ifdef HAVE_SUMSQ512
    j.avx512 = CPU(be)->avx512;
#endif
    par(be, parts, parts > 1 ? PAR_MIN + 1 : 0, sumsq_parts, &j);
    double s = 0;
    for (int i = 0; i < parts; i++)
        s += part[i];
    return s;
}

/* Adam on elements [i0, i1), zeroing their gradient.  Four at a time with SSE where there
 * is SSE: GCC does not vectorize sqrtf without -fno-math-errno, and this is the
 * optimizer's whole cost.  The same operations in the same order as the scalar loop, so
 * the same bits. */
static void adam_range(float *p, float *grad, float *m, float *v, size_t i0, size_t i1,
                       float lr, float b1, float b2, float eps, float gscale, float a1, float a2)
{
    size_t i = i0;
#ifdef __SSE2__
    const __m128 gs4 = _mm_set1_ps(gscale), b14 = _mm_set1_ps(b1), c14 = _mm_set1_ps(1.0f - b1),
                 b24 = _mm_set1_ps(b2), c24 = _mm_set1_ps(1.0f - b2), a14 = _mm_set1_ps(a1),
                 a24 = _mm_set1_ps(a2), lr4 = _mm_set1_ps(lr), eps4 = _mm_set1_ps(eps);
    for (; i + 4 <= i1; i += 4) {
        __m128 g = _mm_mul_ps(gs4, _mm_loadu_ps(grad + i));
        _mm_storeu_ps(grad + i, _mm_setzero_ps());
        __m128 mi = _mm_add_ps(_mm_mul_ps(b14, _mm_loadu_ps(m + i)), _mm_mul_ps(c14, g));
        __m128 vi = _mm_add_ps(_mm_mul_ps(b24, _mm_loadu_ps(v + i)),
                               _mm_mul_ps(_mm_mul_ps(c24, g), g));
        _mm_storeu_ps(m + i, mi);
        _mm_storeu_ps(v + i, vi);
        __m128 num = _mm_mul_ps(lr4, _mm_mul_ps(mi, a14));
        __m128 den = _mm_add_ps(_mm_sqrt_ps(_mm_mul_ps(vi, a24)), eps4);
        _mm_storeu_ps(p + i, _mm_sub_ps(_mm_loadu_ps(p + i), _mm_div_ps(num, den)));
    }
#endif
    for (; i < i1; i++) {
        float g = gscale * grad[i];
        grad[i] = 0;
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * (mi * a1) / (sqrtf(vi * a2) + eps);
    }
}

struct adam_job {
    float *p, *m, *v, *grad;
    float lr, b1, b2, eps, gscale, a1, a2;
};

static void adam_elems(void *ctx, int64_t i0, int64_t i1, int thread)
{
    const struct adam_job *j = ctx;
    (void)thread;
    adam_range(j->p, j->grad, j->m, j->v, (size_t)i0, (size_t)i1, j->lr, j->b1, j->b2, j->eps,
               j->gscale, j->a1, j->a2);
}

static void cpu_adam(struct tfm_backend *be, float *p, float *grad, float *m, float *v,
                     size_t n, float lr, float b1, float b2, float eps, float gscale,
                     int64_t step)
{
    struct adam_job j = {p, m, v, grad, lr, b1, b2, eps, gscale,
                         tfm_adam_correction(b1, step), tfm_adam_correction(b2, step)};
    par_range(be, (int64_t)n, adam_elems, &j);
}

/* ---- the step's statistics (struct tfm_step_stats) ------------------------------------------
 * Host memory here, so these are what the host computed before there were device ops for
 * them, operation for operation: the same bits. */

static void cpu_loss_sum(struct tfm_backend *be, struct tfm_step_stats *st, const float *loss,
                         const float *nll, int n)
{
    (void)be;
    double l = 0, q = 0;
    for (int i = 0; i < n; i++) {
        l += loss[i];
        q += nll[i];
    }
    st->loss += l;
    st->nll += q;
}

static void cpu_grad_clip(struct tfm_backend *be, struct tfm_step_stats *st, const float *g,
                          size_t n, double gscale, double clip_norm)
{
    double norm = sqrt(cpu_sumsq(be, g, n)) * gscale, clip = 1.0;
    if (clip_norm > 0 && norm > clip_norm)
        clip = clip_norm / norm;
    st->grad_norm = norm;
    st->clip = clip;
    st->scale = gscale * clip;
}

/* Through the table's adam (not cpu_adam itself), so that whatever stands in that slot (a
 * test's deliberately faulty Adam, tests/unit/test_device.c) makes the update. */
static void cpu_adam_scaled(struct tfm_backend *be, float *p, float *grad, float *m, float *v,
                            size_t n, float lr, float b1, float b2, float eps,
                            const struct tfm_step_stats *st, int64_t step)
{
    if (isfinite(st->grad_norm))
        be->adam(be, p, grad, m, v, n, lr, b1, b2, eps, (float)st->scale, step);
}

/* ---- lifetime ---------------------------------------------------------------------------- */

static void cpu_destroy(struct tfm_backend *be)
{
    if (!be)
        return;
    struct cpu *c = CPU(be);
    if (c) {
        cpu_free(be, c->scratch);
        tfm_pool_free(c->pool);
    }
    free(c);
    free(be);
}

int tfm_backend_cpu_buffer_env(size_t *bytes, struct tfm_error *err)
{
    *bytes = (size_t)BLAS_BUFFER_MB << 20;
    const char *mb = getenv("TFM_BLAS_BUFFER_MB");
    if (mb && *mb) {
        long long v;
        if (tfm_parse_int(mb, &v) || v < 0 || v > (1L << 20))
            return tfm_fail(err, "TFM_BLAS_BUFFER_MB='%s': expected MiB, 0 to %ld", mb, 1L << 20);
        *bytes = (size_t)v << 20;
    }
    return 0;
}

/* Bytes of level-2 cache a core, as the C library reads it from the CPU (glibc: cpuid),
 * or OUT_L2_DEFAULT when it cannot tell (0 or -1) or tells something implausible. */
static size_t cpu_l2(void)
{
    long l2 = -1;
#ifdef _SC_LEVEL2_CACHE_SIZE
    l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    return l2 >= (64 << 10) && l2 <= (64L << 20) ? (size_t)l2 : OUT_L2_DEFAULT;
}

struct tfm_backend *tfm_backend_cpu(int threads, struct tfm_error *err)
{
    if (threads < 0 || threads > TFM_CPU_MAX_THREADS) {
        tfm_fail(err, "threads %d: out of range [0, %d]", threads, TFM_CPU_MAX_THREADS);
        return NULL;
    }
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n < 1 ? 1 : n > TFM_CPU_MAX_THREADS ? TFM_CPU_MAX_THREADS : (int)n;
    }
    struct tfm_backend *be = calloc(1, sizeof *be);
    struct cpu *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    tfm_blas_fit();                     /* OpenBLAS's kernels, before any product */
    int idle = blas_idle_threads();     /* before the count is set to 1 */
    openblas_set_num_threads(1);
    c->threads = threads;
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
    c->avx512 = __builtin_cpu_supports("avx512f");
#endif
    c->l2 = cpu_l2();
    if (tfm_backend_cpu_buffer_env(&c->blas_buffer, err)) {
        free(be);
        free(c);
        return NULL;
    }
    struct rlimit rl;
    c->as_limit = getrlimit(RLIMIT_AS, &rl) == 0 ? rl.rlim_cur : RLIM_INFINITY;
    c->data_limit = getrlimit(RLIMIT_DATA, &rl) == 0 ? rl.rlim_cur : RLIM_INFINITY;
    /* glibc gives each thread that calls malloc an arena of its own, reserving 64 MiB of
     * address space at that first call: under a limit, whether a pool thread had done so
     * when headroom() measured decided whether OpenBLAS found its buffer later (and spun
     * when it did not: 1 run in 6 of limits.bats's decoding).  One arena for the process
     * keeps the measure true; the ops do not allocate, so nothing waits on its lock. */
#ifdef M_ARENA_MAX
    if (c->blas_buffer && (c->as_limit != RLIM_INFINITY || c->data_limit != RLIM_INFINITY))
        mallopt(M_ARENA_MAX, 1);
#endif
    /* OpenBLAS's idle threads may or may not hold their buffers yet, so ending them is
     * safe only when their buffers fit (else one would wait forever, and the join with
     * it); then the buffers are in what is measured.  The pool's stacks are still to come. */
    size_t stacks = (size_t)(threads - 1) * thread_stack();
    if (idle > 0 && room_for(c, idle, 0, NULL) < 0) {
        c->pending = (size_t)idle * c->blas_buffer + stacks;
    } else {
        end_blas_threads();
        c->pending = stacks;
    }
    if (headroom(c, 0, err)) {
        free(be);
        free(c);
        return NULL;
    }
    if (!(c->pool = tfm_pool_create(threads, err))) {
        free(be);
        free(c);
        return NULL;
    }
    c->pending = 0;
    be->name = "cpu";
    be->kind = TFM_BACKEND_CPU;
    be->precision = TFM_PRECISION_FP32;
    be->auto_precision = TFM_PRECISION_FP32;
    be->act_size = sizeof(float);
    be->set_bf16 = tfm_backend_emulate_bf16;
    be->threads = threads;
    be->host_memory = 1;
    be->impl = c;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->host_room = cpu_host_room;
    be->upload = cpu_copy;
    be->download = cpu_copy;
    be->copy = cpu_copy;
    be->zero = cpu_zero;
    be->download_act = cpu_download_act;
    be->upload_act = cpu_upload_act;
    be->sync = cpu_sync;
    be->reserve = cpu_reserve;
#define CPU_OP(ret, name, params, args, devs) be->name = cpu_##name;
    TFM_BACKEND_OPS(CPU_OP)
#undef CPU_OP
    be->log_softmax_top = cpu_log_softmax_top;
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
    if (c->avx512) {    /* else the BLAS and log_softmax_top */
        be->out_pack_floats = cpu_out_pack_floats;
        be->out_pack = cpu_out_pack;
        be->out_logits = cpu_out_logits;
        be->out_top = cpu_out_top;
    }
#endif
    be->destroy = cpu_destroy;
    if (cpu_reserve(be, 64, 64, err) < 0) {
        cpu_destroy(be);
        return NULL;
    }
    return be;
}
