/* backend_cpu.c: the CPU backend (backend.h): fp32, OpenBLAS sgemm, OpenMP threads.
 *
 * One thread pool: OpenBLAS is set to one thread and every op, the gemm included, splits
 * its work over this backend's OpenMP threads by fixed partitioning (static, or slices
 * fixed by the thread count that the threads take in turn: which thread computes a slice
 * does not change its bits).  Reductions whose
 * result is one number per column (bias, layer-norm and embedding gradients) give each
 * thread whole columns and run over the rows in order, so their bits do not depend on
 * the thread count; sumsq sums fixed chunks in order.  The reference for every other
 * backend.
 * Speed: the build is plain -O2 for a generic x86-64, where GCC vectorizes only loops that
 * are marked, so the element-wise loops carry `omp simd` (the order of a row's sums is then
 * fixed by the binary, not by the threads); the softmax exponentials (attention,
 * log_softmax) use fast_expf below, a branch-free polynomial that vectorizes (libm's expf
 * does not); Adam uses SSE directly; large products are cut into GEMM_BLOCKS slices per
 * thread that the threads take as they finish (a thread slowed by other load does less).
 * Not here: the model (model.c).
 * Owner: the model engineer; speed (no change of results beyond rounding): the
 * performance engineer.
 */
/* Floating-point exception flags are read nowhere; without them GCC vectorizes loops
 * that select on a comparison (same bits: the option does not reorder arithmetic). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "backend.h"

#include <cblas.h>
#include <math.h>
#ifdef __SSE2__
#include <immintrin.h>
#endif
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct cpu {
    int threads;
    size_t scratch_floats;      /* per thread */
    float *scratch;             /* threads * scratch_floats */
};

static struct cpu *CPU(struct tfm_backend *be) { return be->impl; }

/* Work below this many elements runs on one thread. */
#define PAR_MIN 16384

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

/* ---- memory ---------------------------------------------------------------------------- */

/* Zero-filled through calloc, whose large blocks are fresh pages from the kernel that it
 * does not clear again: memory is touched only where it is used, so an arena sized for the
 * worst batch costs resident memory only for the batches that come.  calloc aligns to 16
 * bytes; the block starts at the next multiple of 64 with calloc's pointer just before it. */
static void *cpu_alloc(struct tfm_backend *be, size_t bytes, struct tfm_error *err)
{
    (void)be;
    size_t n = (bytes + 63) / 64 * 64;
    char *raw = n + 64 + sizeof(void *) > n ? calloc(1, n + 64 + sizeof(void *)) : NULL;
    if (!raw) {
        tfm_fail(err, "out of memory allocating %zu bytes", bytes);
        return NULL;
    }
    uintptr_t at = ((uintptr_t)raw + sizeof(void *) + 63) / 64 * 64;
    ((void **)at)[-1] = raw;
    return (void *)at;
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

#ifndef GEMM_BLOCKS
#define GEMM_BLOCKS 2
#endif

static void cpu_gemm(struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc)
{
    int T = be->threads;
    if (T <= 1 || (double)M * N * K < 262144.0) {
        sgemm1(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* Split the larger of M and N into GEMM_BLOCKS * T slices (multiples of 16), taken by
     * the threads in turn as each finishes one.  The slices depend on T only, so the bits
     * do too; which thread computes a slice does not matter. */
    int split_n = N >= M;
    int len = split_n ? N : M;
    int chunk = ((len + GEMM_BLOCKS * T - 1) / (GEMM_BLOCKS * T) + 15) / 16 * 16;
    int nb = (len + chunk - 1) / chunk;
#pragma omp parallel for num_threads(T) schedule(dynamic, 1)
    for (int k = 0; k < nb; k++) {
        int a = k * chunk, b = a + chunk < len ? a + chunk : len;
        if (split_n)
            sgemm1(ta, tb, M, b - a, K, alpha, A, lda, tb ? B + (size_t)a * ldb : B + a, ldb,
                   beta, C + a, ldc);
        else
            sgemm1(ta, tb, b - a, N, K, alpha, ta ? A + a : A + (size_t)a * lda, lda, B, ldb,
                   beta, C + (size_t)a * ldc, ldc);
    }
}

static void cpu_gemm_batched(struct tfm_backend *be, int ta, int tb, int M, int N, int K,
                             float alpha, const float *A, int lda, int64_t sa, const float *B,
                             int ldb, int64_t sb, float beta, float *C, int ldc, int64_t sc,
                             int batch)
{
#pragma omp parallel for num_threads(be->threads) schedule(static) if (batch > 1)
    for (int i = 0; i < batch; i++)
        sgemm1(ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
}

/* ---- column-partitioned reductions ------------------------------------------------------ */

/* Thread t of T owns columns [*c0, *c1) of D (multiples of 16 where possible). */
static void col_range(int t, int T, int D, int *c0, int *c1)
{
    int chunk = ((D + T - 1) / T + 15) / 16 * 16;
    *c0 = t * chunk < D ? t * chunk : D;
    *c1 = *c0 + chunk < D ? *c0 + chunk : D;
}

/* ---- embeddings ------------------------------------------------------------------------ */

static void cpu_embed_fwd(struct tfm_backend *be, float *out, const float *table,
                          const int32_t *ids, int N, int D, float scale, const float *pos,
                          int L, int pos0)
{
#pragma omp parallel for num_threads(be->threads) schedule(static) if ((size_t)N * D > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *e = table + (size_t)ids[n] * D;
        float *o = out + (size_t)n * D;
        if (pos) {
            const float *p = pos + (size_t)(pos0 + n % L) * D;
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

static void cpu_embed_bwd(struct tfm_backend *be, float *dtable, float *dpos,
                          const float *dout, const int32_t *ids, int N, int D, int V,
                          float scale, int L, int pos0)
{
    (void)V;
    int T = (size_t)N * D > PAR_MIN ? be->threads : 1;
#pragma omp parallel num_threads(T)
    {
        int c0, c1;
        col_range(omp_get_thread_num(), T, D, &c0, &c1);
        for (int n = 0; n < N; n++) {
            const float *g = dout + (size_t)n * D;
            float *e = dtable + (size_t)ids[n] * D;
#pragma omp simd
            for (int c = c0; c < c1; c++)
                e[c] += scale * g[c];
            if (dpos) {
                float *p = dpos + (size_t)(pos0 + n % L) * D;
#pragma omp simd
                for (int c = c0; c < c1; c++)
                    p[c] += g[c];
            }
        }
    }
}

/* ---- layer norm ------------------------------------------------------------------------ */

static void cpu_layernorm_fwd(struct tfm_backend *be, float *y, float *mean, float *rstd,
                              const float *x, const float *g, const float *b, int N, int D,
                              float eps)
{
#pragma omp parallel for num_threads(be->threads) schedule(static) if ((size_t)N * D > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * D;
        float *yr = y + (size_t)n * D;
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
        float rs = 1.0f / sqrtf(v / D + eps);
        mean[n] = mu;
        rstd[n] = rs;
#pragma omp simd
        for (int c = 0; c < D; c++)
            yr[c] = (xr[c] - mu) * rs * g[c] + b[c];
    }
}

static void cpu_layernorm_bwd(struct tfm_backend *be, float *dx, float *dg, float *db,
                              const float *dy, const float *x, const float *mean,
                              const float *rstd, const float *g, int N, int D, int accumulate)
{
    /* One parallel region: each thread does its rows of dx, then its columns of dg and db
     * (independent: dx does not alias dy, so no barrier between them). */
#pragma omp parallel num_threads((size_t)N * D > PAR_MIN ? be->threads : 1)
    {
#pragma omp for schedule(static) nowait
        for (int n = 0; n < N; n++) {
            const float *xr = x + (size_t)n * D, *dyr = dy + (size_t)n * D;
            float *dxr = dx + (size_t)n * D;
            float mu = mean[n], rs = rstd[n], a = 0, bsum = 0;
#pragma omp simd reduction(+ : a, bsum)
            for (int c = 0; c < D; c++) {
                float dh = dyr[c] * g[c];
                a += dh;
                bsum += dh * (xr[c] - mu) * rs;
            }
            a /= D;
            bsum /= D;
#pragma omp simd
            for (int c = 0; c < D; c++) {
                float xh = (xr[c] - mu) * rs;
                float v = rs * (dyr[c] * g[c] - a - xh * bsum);
                dxr[c] = accumulate ? dxr[c] + v : v;
            }
        }
        int T1 = omp_get_num_threads(), c0, c1;
        col_range(omp_get_thread_num(), T1, D, &c0, &c1);
        for (int n = 0; n < N; n++) {
            const float *xr = x + (size_t)n * D, *dyr = dy + (size_t)n * D;
            float mu = mean[n], rs = rstd[n];
#pragma omp simd
            for (int c = c0; c < c1; c++) {
                dg[c] += dyr[c] * (xr[c] - mu) * rs;
                db[c] += dyr[c];
            }
        }
    }
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

static void cpu_attn_fwd(struct tfm_backend *be, const struct tfm_attn *a, const float *q,
                         int ldq, const float *k, int ldk, const float *v, int ldv, float *o,
                         int ldo, float *lse)
{
    struct cpu *c = CPU(be);
    int B = a->B, H = a->H, Tq = a->Tq, Tk = a->Tk, dk = a->dk;
    float p = a->dropout, inv = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
#pragma omp parallel for num_threads(c->threads) schedule(static) \
    if ((double)B * H * Tq * Tk * dk > PAR_MIN)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        float *S = c->scratch + (size_t)omp_get_thread_num() * c->scratch_floats;
        const float *qb = q + (size_t)b * Tq * ldq + h * dk;
        const float *kb = k + (size_t)b * Tk * ldk + h * dk;
        const float *vb = v + (size_t)b * Tk * ldv + h * dk;
        float *ob = o + (size_t)b * Tq * ldo + h * dk;
        sgemm1(0, 1, Tq, Tk, dk, a->scale, qb, ldq, kb, ldk, 0, S, Tk);
        for (int i = 0; i < Tq; i++) {
            float *s = S + (size_t)i * Tk;
            int n = attn_keys(a, b, i);
            float *l = lse + (size_t)bh * Tq + i;
            if (n == 0) {
                memset(s, 0, sizeof(float) * Tk);
                *l = -INFINITY;
                continue;
            }
            float mx = s[0];
            for (int j = 1; j < n; j++)
                mx = s[j] > mx ? s[j] : mx;
            float sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < n; j++) {
                s[j] = fast_expf(s[j] - mx);
                sum += s[j];
            }
            float r = 1.0f / sum;
#pragma omp simd
            for (int j = 0; j < n; j++)
                s[j] *= r;
            for (int j = n; j < Tk; j++)
                s[j] = 0;
            *l = mx + logf(sum);
            if (p > 0) {
                uint64_t e0 = ((uint64_t)bh * Tq + i) * Tk;
                for (int j = 0; j < n; j++)
                    s[j] = tfm_dropout_keep(a->key, e0 + j, p) ? s[j] * inv : 0;
            }
        }
        sgemm1(0, 0, Tq, dk, Tk, 1, S, Tk, vb, ldv, 0, ob, ldo);
    }
}

static void cpu_attn_bwd(struct tfm_backend *be, const struct tfm_attn *a, const float *q,
                         int ldq, const float *k, int ldk, const float *v, int ldv,
                         const float *o, int ldo, const float *lse, const float *dout, int lddo,
                         float *dq, int lddq, float *dk, int lddk, float *dv, int lddv)
{
    (void)o;
    (void)ldo;
    struct cpu *c = CPU(be);
    int B = a->B, H = a->H, Tq = a->Tq, Tk = a->Tk, dkh = a->dk;
    float p = a->dropout, inv = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
#pragma omp parallel for num_threads(c->threads) schedule(static) \
    if ((double)B * H * Tq * Tk * dkh > PAR_MIN)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        float *P = c->scratch + (size_t)omp_get_thread_num() * c->scratch_floats;
        float *dP = P + (size_t)Tq * Tk;
        const float *qb = q + (size_t)b * Tq * ldq + h * dkh;
        const float *kb = k + (size_t)b * Tk * ldk + h * dkh;
        const float *vb = v + (size_t)b * Tk * ldv + h * dkh;
        const float *gb = dout + (size_t)b * Tq * lddo + h * dkh;
        sgemm1(0, 1, Tq, Tk, dkh, a->scale, qb, ldq, kb, ldk, 0, P, Tk);
        sgemm1(0, 1, Tq, Tk, dkh, 1, gb, lddo, vb, ldv, 0, dP, Tk);
        for (int i = 0; i < Tq; i++) {
            float *pr = P + (size_t)i * Tk, *dpr = dP + (size_t)i * Tk;
            int n = attn_keys(a, b, i);
            float l = lse[(size_t)bh * Tq + i];
            uint64_t e0 = ((uint64_t)bh * Tq + i) * Tk;
            /* pr = P, dpr = dL/dP (through the dropout); D = sum_j P dL/dP, computed from the
             * same values as dS below so that their common part cancels exactly. */
            float d = 0;
            if (p <= 0) {
#pragma omp simd reduction(+ : d)
                for (int j = 0; j < n; j++) {
                    float pj = fast_expf(pr[j] - l);
                    pr[j] = pj;
                    d += pj * dpr[j];
                }
#pragma omp simd
                for (int j = 0; j < n; j++)
                    dpr[j] = pr[j] * (dpr[j] - d);
            } else {
                for (int j = 0; j < n; j++) {
                    float pj = fast_expf(pr[j] - l), g = dpr[j];
                    g = tfm_dropout_keep(a->key, e0 + j, p) ? g * inv : 0;
                    pr[j] = pj;
                    dpr[j] = g;
                    d += pj * g;
                }
                for (int j = 0; j < n; j++) {
                    float pj = pr[j];
                    dpr[j] = pj * (dpr[j] - d);
                    pr[j] = tfm_dropout_keep(a->key, e0 + j, p) ? pj * inv : 0;
                }
            }
            for (int j = n; j < Tk; j++)
                pr[j] = dpr[j] = 0;
        }
        /* P now holds P' (after dropout), dP holds dS (before the scale). */
        sgemm1(1, 0, Tk, dkh, Tq, 1, P, Tk, gb, lddo, 0, dv + (size_t)b * Tk * lddv + h * dkh,
               lddv);
        sgemm1(0, 0, Tq, dkh, Tk, a->scale, dP, Tk, kb, ldk, 0,
               dq + (size_t)b * Tq * lddq + h * dkh, lddq);
        sgemm1(1, 0, Tk, dkh, Tq, a->scale, dP, Tk, qb, ldq, 0,
               dk + (size_t)b * Tk * lddk + h * dkh, lddk);
    }
}

static void cpu_attn_decode(struct tfm_backend *be, int R, int H, int dk, float scale,
                            const float *q, int ldq, const float *k, const float *v, int ld,
                            int64_t bstride, const int32_t *blk, const int32_t *len, float *o,
                            int ldo)
{
    struct cpu *c = CPU(be);
#pragma omp parallel for num_threads(c->threads) schedule(static) if (R * H * dk > 4096)
    for (int rh = 0; rh < R * H; rh++) {
        int r = rh / H, h = rh % H, n = len[r];
        float *s = c->scratch + (size_t)omp_get_thread_num() * c->scratch_floats;
        const float *qr = q + (size_t)r * ldq + h * dk;
        const float *kb = k + blk[r] * bstride + h * dk;
        const float *vb = v + blk[r] * bstride + h * dk;
        float mx = -INFINITY;
        for (int j = 0; j < n; j++) {
            const float *kj = kb + (size_t)j * ld;
            float d = 0;
#pragma omp simd reduction(+ : d)
            for (int x = 0; x < dk; x++)
                d += qr[x] * kj[x];
            s[j] = d * scale;
            mx = s[j] > mx ? s[j] : mx;
        }
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < n; j++) {
            s[j] = fast_expf(s[j] - mx);
            sum += s[j];
        }
        float *orow = o + (size_t)r * ldo + h * dk, inv = 1.0f / sum;
#pragma omp simd
        for (int x = 0; x < dk; x++)
            orow[x] = 0;
        for (int j = 0; j < n; j++) {
            float w = s[j] * inv;
            const float *vj = vb + (size_t)j * ld;
#pragma omp simd
            for (int x = 0; x < dk; x++)
                orow[x] += w * vj[x];
        }
    }
}

/* ---- element-wise -------------------------------------------------------------------- */

static void cpu_bias_act(struct tfm_backend *be, float *x, const float *b, int N, int M,
                         int relu)
{
#pragma omp parallel for num_threads(be->threads) schedule(static) if ((size_t)N * M > PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *r = x + (size_t)n * M;
        if (relu) {
#pragma omp simd
            for (int j = 0; j < M; j++) {
                float t = r[j] + b[j];
                r[j] = t > 0 ? t : 0;
            }
        } else {
#pragma omp simd
            for (int j = 0; j < M; j++)
                r[j] += b[j];
        }
    }
}

static void cpu_bias_bwd(struct tfm_backend *be, float *db, const float *dy, int N, int M)
{
    int T = (size_t)N * M > PAR_MIN ? be->threads : 1;
#pragma omp parallel num_threads(T)
    {
        int c0, c1;
        col_range(omp_get_thread_num(), T, M, &c0, &c1);
        for (int n = 0; n < N; n++) {
            const float *r = dy + (size_t)n * M;
#pragma omp simd
            for (int j = c0; j < c1; j++)
                db[j] += r[j];
        }
    }
}

static void cpu_relu_bwd(struct tfm_backend *be, float *dx, const float *dy, const float *y,
                         size_t n, float scale)
{
#pragma omp parallel for simd num_threads(be->threads) schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++)
    {
        float g = dy[i] * scale;        /* loaded unconditionally, so that it vectorizes */
        dx[i] = y[i] > 0 ? g : 0;
    }
}

static void cpu_dropout(struct tfm_backend *be, float *y, const float *x, size_t n, float p,
                        uint64_t key)
{
    if (p <= 0) {
        cpu_copy(be, y, x, n * sizeof(float));
        return;
    }
    float inv = 1.0f / (1.0f - p);
#pragma omp parallel for num_threads(be->threads) schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++)
        y[i] = tfm_dropout_keep(key, i, p) ? x[i] * inv : 0;
}

static void cpu_add_dropout(struct tfm_backend *be, float *y, const float *a, const float *b,
                            size_t n, float p, uint64_t key)
{
    float inv = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
#pragma omp parallel for num_threads(be->threads) schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] + (p <= 0 ? b[i] : tfm_dropout_keep(key, i, p) ? b[i] * inv : 0);
}

static void cpu_axpy(struct tfm_backend *be, float *y, float alpha, const float *x, size_t n)
{
#pragma omp parallel for simd num_threads(be->threads) schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++)
        y[i] += alpha * x[i];
}

static void cpu_scale(struct tfm_backend *be, float *x, float alpha, size_t n)
{
#pragma omp parallel for simd num_threads(be->threads) schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++)
        x[i] *= alpha;
}

static void cpu_gather(struct tfm_backend *be, float *dst, int64_t dstride, const float *src,
                       int64_t sstride, const int32_t *idx, int n, int64_t len)
{
#pragma omp parallel for num_threads(be->threads) schedule(static) if ((size_t)n * len > PAR_MIN)
    for (int i = 0; i < n; i++)
        memcpy(dst + i * dstride, src + (idx ? idx[i] : i) * sstride, (size_t)len * sizeof(float));
}

/* ---- output layer ----------------------------------------------------------------------- */

/* Sums over a vocabulary row (log_softmax): float within blocks of this many, double
 * across them. */
#define XENT_BLOCK 256

/* Label-smoothed cross-entropy and its gradient, a row at a time: the maximum, then the
 * sums of exp(z - max) and of z in float over blocks of XENT_BLOCK and in double across
 * them, then the gradient softmax - smoothed target with the same fast_expf as the
 * attention softmax.  Vectorized (omp simd); the result depends on the binary only. */
static void cpu_xent(struct tfm_backend *be, float *logits, const int32_t *labels, int N,
                     int V, float eps, int ignore, float *loss, float *nll, float grad_scale)
{
#pragma omp parallel for num_threads(be->threads) schedule(static) if ((size_t)N * V > PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *z = logits + (size_t)n * V;
        int y = labels[n];
        if (y == ignore) {
            loss[n] = nll[n] = 0;
            if (grad_scale != 0)
                memset(z, 0, sizeof(float) * V);
            continue;
        }
        float mx = z[0];
#pragma omp simd reduction(max : mx)
        for (int j = 1; j < V; j++)
            mx = z[j] > mx ? z[j] : mx;
        double se = 0, sz = 0;
        for (int j0 = 0; j0 < V; j0 += XENT_BLOCK) {
            int j1 = V - j0 < XENT_BLOCK ? V : j0 + XENT_BLOCK;
            float bs = 0, bz = 0;
#pragma omp simd reduction(+ : bs, bz)
            for (int j = j0; j < j1; j++) {
                bs += fast_expf(z[j] - mx);
                bz += z[j];
            }
            se += bs;
            sz += bz;
        }
        double lse = mx + log(se);
        nll[n] = (float)(lse - z[y]);
        loss[n] = (float)(lse - (1.0 - eps) * z[y] - eps / V * sz);
        if (grad_scale != 0) {
            float u = eps / V, l = (float)lse;
#pragma omp simd
            for (int j = 0; j < V; j++)
                z[j] = grad_scale * (fast_expf(z[j] - l) - u);
            z[y] -= grad_scale * (1.0f - eps);
        }
    }
}

static void cpu_log_softmax(struct tfm_backend *be, float *y, const float *x, int N, int V)
{
#pragma omp parallel for num_threads(be->threads) schedule(static) if ((size_t)N * V > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *z = x + (size_t)n * V;
        float *o = y + (size_t)n * V;
        float mx = z[0];
#pragma omp simd reduction(max : mx)
        for (int j = 1; j < V; j++)
            mx = z[j] > mx ? z[j] : mx;
        double se = 0;
        for (int j0 = 0; j0 < V; j0 += XENT_BLOCK) {
            int j1 = V - j0 < XENT_BLOCK ? V : j0 + XENT_BLOCK;
            float bs = 0;
#pragma omp simd reduction(+ : bs)
            for (int j = j0; j < j1; j++)
                bs += fast_expf(z[j] - mx);
            se += bs;
        }
        float l = (float)(mx + log(se));
#pragma omp simd
        for (int j = 0; j < V; j++)
            o[j] = z[j] - l;
    }
}

/* ---- optimizer ------------------------------------------------------------------------- */

#define SUMSQ_PARTS 1024

static double cpu_sumsq(struct tfm_backend *be, const float *x, size_t n)
{
    double part[SUMSQ_PARTS];
    size_t chunk = (n + SUMSQ_PARTS - 1) / SUMSQ_PARTS;
    if (chunk < 4096)
        chunk = 4096;
    int parts = (int)((n + chunk - 1) / chunk);
#pragma omp parallel for num_threads(be->threads) schedule(static) if (parts > 1)
    for (int i = 0; i < parts; i++) {
        size_t a = (size_t)i * chunk, b = a + chunk < n ? a + chunk : n;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (size_t j = a; j < b; j++)
            s += (double)x[j] * x[j];
        part[i] = s;
    }
    double s = 0;
    for (int i = 0; i < parts; i++)
        s += part[i];
    return s;
}

/* Adam on elements [i0, i1).  Four at a time with SSE where there is SSE: GCC does not
 * vectorize sqrtf without -fno-math-errno, and this is the optimizer's whole cost.  The
 * same operations in the same order as the scalar loop, so the same bits. */
static void adam_range(float *p, const float *grad, float *m, float *v, size_t i0, size_t i1,
                       float lr, float b1, float b2, float eps, float gscale, float a1, float a2)
{
    size_t i = i0;
#ifdef __SSE2__
    const __m128 gs4 = _mm_set1_ps(gscale), b14 = _mm_set1_ps(b1), c14 = _mm_set1_ps(1.0f - b1),
                 b24 = _mm_set1_ps(b2), c24 = _mm_set1_ps(1.0f - b2), a14 = _mm_set1_ps(a1),
                 a24 = _mm_set1_ps(a2), lr4 = _mm_set1_ps(lr), eps4 = _mm_set1_ps(eps);
    for (; i + 4 <= i1; i += 4) {
        __m128 g = _mm_mul_ps(gs4, _mm_loadu_ps(grad + i));
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
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * (mi * a1) / (sqrtf(vi * a2) + eps);
    }
}

static void cpu_adam(struct tfm_backend *be, float *p, const float *grad, float *m, float *v,
                     size_t n, float lr, float b1, float b2, float eps, float gscale,
                     int64_t step)
{
    double c1 = 1.0 - pow(b1, (double)step), c2 = 1.0 - pow(b2, (double)step);
    float a1 = (float)(1.0 / c1), a2 = (float)(1.0 / c2);
    int T = n > PAR_MIN ? be->threads : 1;
    size_t chunk = ((n + T - 1) / T + 15) / 16 * 16;
#pragma omp parallel num_threads(T)
    {
        size_t i0 = (size_t)omp_get_thread_num() * chunk;
        size_t i1 = i0 + chunk < n ? i0 + chunk : n;
        if (i0 < i1)
            adam_range(p, grad, m, v, i0, i1, lr, b1, b2, eps, gscale, a1, a2);
    }
}

/* ---- lifetime ---------------------------------------------------------------------------- */

static void cpu_destroy(struct tfm_backend *be)
{
    if (!be)
        return;
    struct cpu *c = CPU(be);
    if (c)
        cpu_free(be, c->scratch);
    free(c);
    free(be);
}

struct tfm_backend *tfm_backend_cpu(int threads, struct tfm_error *err)
{
    if (threads < 0 || threads > 1024) {
        tfm_fail(err, "threads %d: out of range [0, 1024]", threads);
        return NULL;
    }
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    struct tfm_backend *be = calloc(1, sizeof *be);
    struct cpu *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    openblas_set_num_threads(1);
    c->threads = threads;
    be->name = "cpu";
    be->kind = TFM_BACKEND_CPU;
    be->threads = threads;
    be->impl = c;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->upload = cpu_copy;
    be->download = cpu_copy;
    be->copy = cpu_copy;
    be->zero = cpu_zero;
    be->sync = cpu_sync;
    be->reserve = cpu_reserve;
    be->gemm = cpu_gemm;
    be->gemm_batched = cpu_gemm_batched;
    be->embed_fwd = cpu_embed_fwd;
    be->embed_bwd = cpu_embed_bwd;
    be->layernorm_fwd = cpu_layernorm_fwd;
    be->layernorm_bwd = cpu_layernorm_bwd;
    be->attn_fwd = cpu_attn_fwd;
    be->attn_bwd = cpu_attn_bwd;
    be->attn_decode = cpu_attn_decode;
    be->bias_act = cpu_bias_act;
    be->bias_bwd = cpu_bias_bwd;
    be->relu_bwd = cpu_relu_bwd;
    be->dropout = cpu_dropout;
    be->add_dropout = cpu_add_dropout;
    be->axpy = cpu_axpy;
    be->scale = cpu_scale;
    be->gather = cpu_gather;
    be->xent = cpu_xent;
    be->log_softmax = cpu_log_softmax;
    be->sumsq = cpu_sumsq;
    be->adam = cpu_adam;
    be->destroy = cpu_destroy;
    if (cpu_reserve(be, 64, 64, err) < 0) {
        cpu_destroy(be);
        return NULL;
    }
    return be;
}
