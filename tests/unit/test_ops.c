/* test_ops.c: every op of the CPU backend (backend.h) against finite differences or
 * direct computation, plus known answers and determinism across thread counts.
 *
 * Gradient checks: the scalar L = sum_i w_i out_i (w fixed random) is computed in double
 * from the op's float outputs; its derivative by central differences with step h = 1e-2
 * is compared with the op's backward fed dout = w.  Bound, for every checked element:
 *     |analytic - numeric| <= 2e-4 * max(1, max |numeric|)
 * (measured: at most 4.3e-5 over all ops; float rounding of L over 2h is ~1e-5, the
 * truncation error O(h^2) smaller).
 */
#include "check.h"

#include "backend.h"
#include "topk.h"

#include <stdint.h>
#include <time.h>

static struct tfm_backend *be, *be1;

/* Deterministic test data. */
static uint64_t rs = 12345;
static float frand(void)
{
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rs >> 40) / 16777216.0 * 2.0 - 1.0);
}
static void fill(float *x, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        x[i] = s * frand();
}
static double dot(const float *w, const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)w[i] * x[i];
    return s;
}

/* Check analytic gradient g (n) of x (n) against central differences of loss(). */
static double (*loss_fn)(void);
#define GC_H 1e-2
#define GC_TOL 2e-4
static int gradcheck(const char *what, float *x, const float *g, size_t n)
{
    double maxn = 0, maxerr = 0;
    double *num = malloc(n * sizeof *num);
    for (size_t i = 0; i < n; i++) {
        float save = x[i];
        x[i] = save + (float)GC_H;
        double lp = loss_fn();
        x[i] = save - (float)GC_H;
        double lm = loss_fn();
        x[i] = save;
        num[i] = (lp - lm) / (2 * GC_H);
        if (fabs(num[i]) > maxn)
            maxn = fabs(num[i]);
    }
    for (size_t i = 0; i < n; i++) {
        double e = fabs(num[i] - g[i]);
        if (e > maxerr)
            maxerr = e;
    }
    free(num);
    double bound = GC_TOL * (maxn > 1 ? maxn : 1);
    if (!(maxerr <= bound)) {
        printf("#   %s: max |analytic - numeric| = %.3g > %.3g (max |grad| %.3g)\n", what, maxerr,
               bound, maxn);
        return 0;
    }
    return 1;
}

/* ---- gemm ------------------------------------------------------------------------------ */

static void naive_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)(ta ? A[k * lda + i] : A[i * lda + k]) *
                     (tb ? B[j * ldb + k] : B[k * ldb + j]);
            C[i * ldc + j] = (float)(alpha * s + beta * C[i * ldc + j]);
        }
}

static void test_gemm(void)
{
    /* Sizes above the threading threshold so the split paths run. */
    int M = 70, N = 90, K = 64;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int big = 0; big < 2; big++) {
                int m = big ? 200 : M, n = big ? 120 : N;
                float *A = malloc(sizeof(float) * m * K), *B = malloc(sizeof(float) * n * K);
                float *C = malloc(sizeof(float) * m * n), *R = malloc(sizeof(float) * m * n);
                fill(A, (size_t)m * K, 1);
                fill(B, (size_t)n * K, 1);
                fill(C, (size_t)m * n, 1);
                memcpy(R, C, sizeof(float) * m * n);
                int lda = ta ? m : K, ldb = tb ? K : n;
                be->gemm(be, ta, tb, m, n, K, 0.5f, A, lda, B, ldb, 0.25f, C, n);
                naive_gemm(ta, tb, m, n, K, 0.5f, A, lda, B, ldb, 0.25f, R, n);
                double e = 0;
                for (int i = 0; i < m * n; i++)
                    e = fmax(e, fabs(C[i] - R[i]));
                CHECK(e < 1e-4);
                free(A); free(B); free(C); free(R);
            }
}

/* Products of 1 to 13 rows (the few-rows path up to 12 on an AVX-512 CPU, OpenBLAS past
 * it), at column counts around the 64-column tiles and their 16-lane vectors, with padded
 * leading dimensions, against a double product: C = alpha A B + beta C with C holding NaN
 * where beta is 0 (never read).  Bound 3e-5 * max(1, |C|): float chains of up to 300
 * products in [-1, 1] round about sqrt(300) * 6e-8 times partial sums of up to ~20, 2e-5
 * (measured 5e-6).  A row's result has the same bits whatever rows come with it (M = 1
 * and M = 12) and on 1 and 2 threads. */
static void test_gemm_few_rows(void)
{
    static const int Ns[] = {1, 15, 16, 17, 63, 64, 65, 130, 700};
    static const int Ks[] = {1, 7, 64, 300};
    static const float ab[][2] = {{1, 0}, {0.5f, 1}, {1, -0.5f}};
    enum { MAXM = 13, PAD = 3 };
    double worst = 0;
    int same = 1;
    for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
            int N = Ns[ni], K = Ks[ki], lda = K + PAD, ldb = N + PAD, ldc = N + PAD;
            float *A = malloc(sizeof(float) * MAXM * lda), *B = malloc(sizeof(float) * K * ldb);
            float *C0 = malloc(sizeof(float) * MAXM * ldc), *C = malloc(sizeof(float) * MAXM * ldc);
            float *C1 = malloc(sizeof(float) * MAXM * ldc);
            fill(A, (size_t)MAXM * lda, 1);
            fill(B, (size_t)K * ldb, 1);
            fill(C0, (size_t)MAXM * ldc, 1);
            for (size_t c = 0; c < sizeof ab / sizeof *ab; c++) {
                float alpha = ab[c][0], beta = ab[c][1];
                for (int M = 1; M <= MAXM; M++) {
                    memcpy(C, C0, sizeof(float) * MAXM * ldc);
                    if (beta == 0)
                        for (int i = 0; i < M * ldc; i++)
                            C[i] = NAN;
                    be->gemm(be, 0, 0, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
                    for (int i = 0; i < M; i++)
                        for (int n = 0; n < N; n++) {
                            double want = beta == 0 ? 0 : beta * (double)C0[i * ldc + n];
                            for (int k = 0; k < K; k++)
                                want += alpha * (double)A[i * lda + k] * B[k * ldb + n];
                            double e = fabs(C[i * ldc + n] - want) / fmax(1, fabs(want));
                            worst = fmax(worst, isnan(e) ? INFINITY : e);
                        }
                    for (int i = 0; i < M; i++)      /* the padding is left alone */
                        for (int n = N; n < ldc; n++)
                            same &= memcmp(&C[i * ldc + n], &C0[i * ldc + n], 4) == 0 ||
                                    (beta == 0 && isnan(C[i * ldc + n]));
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
                    if (M != 12 || !__builtin_cpu_supports("avx512f"))
                        continue;   /* OpenBLAS's bits may change with the rows */
#else
                    continue;
#endif
                    /* each row alone, and on one thread: the same bits */
                    for (int i = 0; i < M; i++) {
                        memcpy(C1 + i * ldc, C0 + i * ldc, sizeof(float) * ldc);
                        be->gemm(be, 0, 0, 1, N, K, alpha, A + i * lda, lda, B, ldb, beta,
                                 C1 + i * ldc, ldc);
                    }
                    for (int i = 0; i < M; i++)
                        same &= memcmp(C + i * ldc, C1 + i * ldc, sizeof(float) * N) == 0;
                    memcpy(C1, C0, sizeof(float) * MAXM * ldc);
                    be1->gemm(be1, 0, 0, M, N, K, alpha, A, lda, B, ldb, beta, C1, ldc);
                    for (int i = 0; i < M; i++)
                        same &= memcmp(C + i * ldc, C1 + i * ldc, sizeof(float) * N) == 0;
                }
            }
            free(A); free(B); free(C0); free(C); free(C1);
        }
    if (!(worst <= 3e-5))
        printf("# worst relative error %g\n", worst);
    CHECK(worst <= 3e-5);
    CHECK(same);
}

/* ---- embedding ------------------------------------------------------------------------ */

enum { EV = 7, ED = 6, EN = 10, EL = 5, EP = 8 };
static float e_tab[EV * ED], e_pos[EP * ED], e_out[EN * ED], e_w[EN * ED];
static int32_t e_ids[EN] = {1, 3, 0, 6, 3, 2, 2, 5, 1, 4};

static double embed_loss(void)
{
    be->embed_fwd(be, e_out, e_tab, e_ids, EN, ED, 2.5f, e_pos, EL, 2);
    return dot(e_w, e_out, EN * ED);
}

static void test_embed(void)
{
    fill(e_tab, sizeof e_tab / 4, 1);
    fill(e_pos, sizeof e_pos / 4, 1);
    fill(e_w, sizeof e_w / 4, 1);
    embed_loss();
    /* row 4: id 3, position 2 + 4 % 5 = 6 */
    CHECK_NEAR(e_out[4 * ED + 1], 2.5f * e_tab[3 * ED + 1] + e_pos[6 * ED + 1], 1e-6);
    float dt[EV * ED] = {0}, dp[EP * ED] = {0};
    be->embed_bwd(be, dt, dp, e_w, e_ids, EN, ED, EV, 2.5f, EL, 2);
    loss_fn = embed_loss;
    CHECK(gradcheck("embed table", e_tab, dt, EV * ED));
    CHECK(gradcheck("embed pos", e_pos, dp, EP * ED));
    /* no position table */
    be->embed_fwd(be, e_out, e_tab, e_ids, EN, ED, 1.0f, NULL, EL, 0);
    CHECK_NEAR(e_out[3 * ED + 2], e_tab[6 * ED + 2], 0);
}

/* ---- layer norm ------------------------------------------------------------------------- */

enum { LN_N = 5, LN_D = 12 };
static float ln_x[LN_N * LN_D], ln_g[LN_D], ln_b[LN_D], ln_y[LN_N * LN_D], ln_w[LN_N * LN_D];
static float ln_mean[LN_N], ln_rstd[LN_N];

static double ln_loss(void)
{
    be->layernorm_fwd(be, ln_y, ln_mean, ln_rstd, ln_x, ln_g, ln_b, LN_N, LN_D, 1e-5f);
    return dot(ln_w, ln_y, LN_N * LN_D);
}

static void test_layernorm(void)
{
    fill(ln_x, LN_N * LN_D, 2);
    fill(ln_g, LN_D, 1);
    fill(ln_b, LN_D, 1);
    fill(ln_w, LN_N * LN_D, 1);
    for (int c = 0; c < LN_D; c++)
        ln_g[c] += 1.5f;
    ln_loss();
    /* a row normalized with g = 1, b = 0 has mean 0 and variance ~1 */
    double mu = 0, var = 0;
    for (int c = 0; c < LN_D; c++)
        mu += (ln_y[c] - ln_b[c]) / ln_g[c];
    mu /= LN_D;
    for (int c = 0; c < LN_D; c++) {
        double z = (ln_y[c] - ln_b[c]) / ln_g[c] - mu;
        var += z * z;
    }
    CHECK_NEAR(mu, 0, 1e-5);
    CHECK_NEAR(var / LN_D, 1, 1e-3);
    float dx[LN_N * LN_D], dg[LN_D] = {0}, db[LN_D] = {0};
    for (int i = 0; i < LN_N * LN_D; i++)
        dx[i] = 100;       /* overwritten (accumulate = 0) */
    be->layernorm_bwd(be, dx, dg, db, ln_w, ln_x, ln_mean, ln_rstd, ln_g, LN_N, LN_D, 0);
    loss_fn = ln_loss;
    CHECK(gradcheck("layernorm x", ln_x, dx, LN_N * LN_D));
    CHECK(gradcheck("layernorm g", ln_g, dg, LN_D));
    CHECK(gradcheck("layernorm b", ln_b, db, LN_D));
    /* accumulate adds */
    float dx2[LN_N * LN_D];
    for (int i = 0; i < LN_N * LN_D; i++)
        dx2[i] = 1;
    be->layernorm_bwd(be, dx2, dg, db, ln_w, ln_x, ln_mean, ln_rstd, ln_g, LN_N, LN_D, 1);
    CHECK_NEAR(dx2[7], dx[7] + 1, 1e-6);
}

/* ---- attention -------------------------------------------------------------------------- */

enum { AB = 2, AH = 2, ADK = 3, AMAX = 6 };
static struct tfm_attn at;
static float a_q[AB * AMAX * AH * ADK], a_k[AB * AMAX * AH * ADK], a_v[AB * AMAX * AH * ADK];
static float a_o[AB * AMAX * AH * ADK], a_w[AB * AMAX * AH * ADK], a_lse[AB * AH * AMAX];

static double attn_loss(void)
{
    int D = AH * ADK;
    be->attn_fwd(be, &at, a_q, D, a_k, D, a_v, D, a_o, D, a_lse);
    return dot(a_w, a_o, (size_t)at.B * at.Tq * D);
}

static void attn_case(int Tq, int Tk, const int32_t *klen, int causal, float p)
{
    int D = AH * ADK;
    struct tfm_attn a = {AB, AH, Tq, Tk, ADK, klen, causal, 1.0f / sqrtf(ADK), p, 77};
    at = a;
    fill(a_q, sizeof a_q / 4, 1.5f);
    fill(a_k, sizeof a_k / 4, 1.5f);
    fill(a_v, sizeof a_v / 4, 1);
    fill(a_w, sizeof a_w / 4, 1);
    attn_loss();
    float dq[sizeof a_q / 4], dk[sizeof a_k / 4], dv[sizeof a_v / 4];
    be->attn_bwd(be, &at, a_q, D, a_k, D, a_v, D, a_o, D, a_lse, a_w, D, dq, D, dk, D, dv, D);
    loss_fn = attn_loss;
    char what[64];
    snprintf(what, sizeof what, "attn q Tq=%d Tk=%d causal=%d p=%g", Tq, Tk, causal, p);
    CHECK(gradcheck(what, a_q, dq, (size_t)AB * Tq * D));
    what[5] = 'k';
    CHECK(gradcheck(what, a_k, dk, (size_t)AB * Tk * D));
    what[5] = 'v';
    CHECK(gradcheck(what, a_v, dv, (size_t)AB * Tk * D));
}

/* Direct computation of one output element, for the forward's meaning. */
static void test_attn_fwd_direct(void)
{
    int32_t klen[AB] = {3, 5};
    int D = AH * ADK, Tq = 4, Tk = 5;
    struct tfm_attn a = {AB, AH, Tq, Tk, ADK, klen, 1, 0.5f, 0, 0};
    fill(a_q, sizeof a_q / 4, 1);
    fill(a_k, sizeof a_k / 4, 1);
    fill(a_v, sizeof a_v / 4, 1);
    be->attn_fwd(be, &a, a_q, D, a_k, D, a_v, D, a_o, D, a_lse);
    for (int b = 0; b < AB; b++)
        for (int h = 0; h < AH; h++)
            for (int i = 0; i < Tq; i++) {
                int n = klen[b] < i + 1 ? klen[b] : i + 1;
                double s[8], mx = -1e30, sum = 0;
                for (int j = 0; j < n; j++) {
                    s[j] = 0;
                    for (int x = 0; x < ADK; x++)
                        s[j] += (double)a_q[(b * Tq + i) * D + h * ADK + x] *
                                a_k[(b * Tk + j) * D + h * ADK + x];
                    s[j] *= 0.5;
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j < n; j++)
                    sum += exp(s[j] - mx);
                CHECK_NEAR(a_lse[(b * AH + h) * Tq + i], mx + log(sum), 1e-5);
                for (int x = 0; x < ADK; x++) {
                    double o = 0;
                    for (int j = 0; j < n; j++)
                        o += exp(s[j] - mx) / sum * a_v[(b * Tk + j) * D + h * ADK + x];
                    CHECK_NEAR(a_o[(b * Tq + i) * D + h * ADK + x], o, 1e-5);
                }
            }
}

static void test_attn_grad(void)
{
    int32_t klen[AB] = {3, 5};
    attn_case(5, 5, klen, 0, 0);        /* encoder self-attention with padding */
    attn_case(4, 4, NULL, 1, 0);        /* decoder self-attention */
    attn_case(4, 6, klen, 0, 0);        /* encoder-decoder attention */
    attn_case(5, 5, klen, 1, 0.3f);     /* with dropout on the weights (fixed key) */
}

static void test_attn_fully_masked(void)
{
    int32_t klen[AB] = {0, 2};
    int D = AH * ADK;
    struct tfm_attn a = {AB, AH, 3, 3, ADK, klen, 0, 1, 0, 0};
    fill(a_q, sizeof a_q / 4, 1);
    be->attn_fwd(be, &a, a_q, D, a_k, D, a_v, D, a_o, D, a_lse);
    for (int i = 0; i < 3 * D; i++)
        CHECK(a_o[i] == 0);
    CHECK(isinf(a_lse[0]) && a_lse[0] < 0);
    float dq[3 * 2 * 6], dk[36], dv[36];
    be->attn_bwd(be, &a, a_q, D, a_k, D, a_v, D, a_o, D, a_lse, a_w, D, dq, D, dk, D, dv, D);
    for (int i = 0; i < 3 * D; i++)
        CHECK(dq[i] == 0 && dk[i] == 0 && dv[i] == 0 && !isnan(dq[i]));
}

/* attn_decode equals attn_fwd row by row (causal self-attention at each step). */
static void test_attn_decode(void)
{
    int D = AH * ADK, T = 5;
    struct tfm_attn a = {AB, AH, T, T, ADK, NULL, 1, 0.4f, 0, 0};
    fill(a_q, sizeof a_q / 4, 1);
    fill(a_k, sizeof a_k / 4, 1);
    fill(a_v, sizeof a_v / 4, 1);
    be->attn_fwd(be, &a, a_q, D, a_k, D, a_v, D, a_o, D, a_lse);
    /* rows: (b, i) for every b, i; block b of T keys, len i + 1 */
    int R = AB * T;
    int32_t blk[AB * 5], len[AB * 5];
    float o[AB * 5 * 6];
    for (int r = 0; r < R; r++) {
        blk[r] = r / T;
        len[r] = r % T + 1;
    }
    be->attn_decode(be, R, AH, ADK, 0.4f, a_q, D, a_k, a_v, D, (int64_t)T * D, blk, NULL, 0,
                    len, o, D);
    for (int i = 0; i < R * D; i++)
        CHECK_NEAR(o[i], a_o[i], 1e-6);
    /* each key through a slot of its own: the keys and values stored in reverse order, row
     * r's key j found at slot N-1-(b*T+j) (ld 0: the slot alone places it) */
    enum { N = AB * 5 };
    static float ks[N * 6], vs[N * 6];
    int32_t slot[AB * 5 * 5];
    for (int n = 0; n < N; n++)
        for (int c = 0; c < D; c++) {
            ks[(size_t)(N - 1 - n) * D + c] = a_k[(size_t)n * D + c];
            vs[(size_t)(N - 1 - n) * D + c] = a_v[(size_t)n * D + c];
        }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < T; j++)
            slot[r * T + j] = N - 1 - ((r / T) * T + j);
    memset(o, 0, sizeof o);
    be->attn_decode(be, R, AH, ADK, 0.4f, a_q, D, ks, vs, 0, D, NULL, slot, T, len, o, D);
    for (int i = 0; i < R * D; i++)
        CHECK_NEAR(o[i], a_o[i], 1e-6);
}

/* attn_decode at head widths of whole 16-lane vectors (16, 48, 64, 128: the AVX-512 path
 * on a CPU that has it, four keys at a time) and one that is not (40), for 0 to 11 keys
 * (every remainder of four and of two), through blocks and through slots, against the
 * softmax computed in double here.  Bound: 2e-6 * max(1, |o|) (float rounding of dk-term
 * products and of up to 11-term weighted sums of values in [-1, 1]; measured 3e-7). */
static void test_attn_decode_wide(void)
{
    enum { H = 3, R = 12, T = 11, MAXDK = 128 };
    static float q[R * H * MAXDK], k[R * T * H * MAXDK], v[R * T * H * MAXDK];
    static float o[R * H * MAXDK];
    static const int dks[] = {16, 48, 64, 128, 40};
    for (size_t c = 0; c < sizeof dks / sizeof *dks; c++) {
        int dk = dks[c], D = H * dk;
        fill(q, (size_t)R * D, 2);
        fill(k, (size_t)R * T * D, 1);
        fill(v, (size_t)R * T * D, 1);
        int32_t blk[R], len[R], slot[R * T];
        for (int r = 0; r < R; r++) {
            blk[r] = R - 1 - r;                   /* row r reads block R-1-r */
            len[r] = r;                           /* 0..11 keys */
            for (int t = 0; t < T; t++)           /* key t of row r at slot (r + 5t) % (R*T) */
                slot[r * T + t] = (r + 5 * t) % (R * T);
        }
        for (int mode = 0; mode < 2; mode++) {
            for (size_t i = 0; i < (size_t)R * D; i++)
                o[i] = NAN;
            if (mode == 0)
                be->attn_decode(be, R, H, dk, 0.3f, q, D, k, v, D, (int64_t)T * D, blk, NULL, 0,
                                len, o, D);
            else
                be->attn_decode(be, R, H, dk, 0.3f, q, D, k, v, 0, D, NULL, slot, T, len, o, D);
            double worst = 0;
            for (int r = 0; r < R; r++)
                for (int h = 0; h < H; h++) {
                    double sc[T], mx = -INFINITY, sum = 0;
                    const float *kt[T], *vt[T];
                    for (int t = 0; t < len[r]; t++) {
                        size_t at = mode == 0 ? ((size_t)blk[r] * T + t) * D
                                              : (size_t)slot[r * T + t] * D;
                        kt[t] = k + at + h * dk;
                        vt[t] = v + at + h * dk;
                        double d = 0;
                        for (int x = 0; x < dk; x++)
                            d += (double)q[r * D + h * dk + x] * kt[t][x];
                        sc[t] = 0.3 * d;
                        mx = sc[t] > mx ? sc[t] : mx;
                    }
                    for (int t = 0; t < len[r]; t++)
                        sum += sc[t] = exp(sc[t] - mx);
                    for (int x = 0; x < dk; x++) {
                        double want = 0;
                        for (int t = 0; t < len[r]; t++)
                            want += sc[t] / sum * vt[t][x];
                        double got = o[r * D + h * dk + x];
                        double e = fabs(got - want) / (fabs(want) > 1 ? fabs(want) : 1);
                        worst = fmax(worst, isnan(e) ? INFINITY : e);
                    }
                }
            if (!(worst <= 2e-6))
                printf("# dk %d, %s: worst error %g\n", dk, mode ? "slots" : "blocks", worst);
            CHECK(worst <= 2e-6);
        }
    }
}

/* ---- element-wise ------------------------------------------------------------------------- */

enum { XN = 6, XM = 10 };
static float x_in[XN * XM], x_b[XM], x_y[XN * XM], x_w[XN * XM];

static double bias_relu_loss(void)
{
    memcpy(x_y, x_in, sizeof x_y);
    be->bias_act(be, x_y, x_b, XN, XM, 1);
    be->dropout(be, x_y, x_y, XN * XM, 0.25f, 99);
    return dot(x_w, x_y, XN * XM);
}

static void test_bias_relu_dropout(void)
{
    fill(x_in, XN * XM, 1);
    fill(x_b, XM, 0.5f);
    fill(x_w, XN * XM, 1);
    /* keep pre-activations away from the kink */
    for (int i = 0; i < XN * XM; i++)
        if (fabsf(x_in[i] + x_b[i % XM]) < 0.05f)
            x_in[i] += 0.2f;
    bias_relu_loss();
    float d[XN * XM], db[XM] = {0};
    be->relu_bwd(be, d, x_w, x_y, XN * XM, 1.0f / 0.75f);
    be->bias_bwd(be, db, d, XN, XM);
    loss_fn = bias_relu_loss;
    CHECK(gradcheck("relu+dropout x", x_in, d, XN * XM));
    CHECK(gradcheck("bias", x_b, db, XM));
}

static void test_dropout(void)
{
    size_t n = 1 << 20;
    float *x = malloc(n * 4), *y = malloc(n * 4), *z = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        x[i] = 1.0f;
    be->dropout(be, y, x, n, 0.3f, tfm_rng_key(1, 2, 3));
    size_t kept = 0;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        kept += y[i] != 0;
        sum += y[i];
        CHECK(y[i] == 0 || fabsf(y[i] - 1 / 0.7f) < 1e-6);
    }
    /* keep rate 0.7 within 5 standard deviations (sd = sqrt(.21/n) = 4.5e-4) */
    CHECK_NEAR((double)kept / n, 0.7, 2.3e-3);
    CHECK_NEAR(sum / n, 1.0, 3.3e-3);
    /* same key: same mask, on one thread or two; other key: other mask */
    be1->dropout(be1, z, x, n, 0.3f, tfm_rng_key(1, 2, 3));
    CHECK(memcmp(y, z, n * 4) == 0);
    be->dropout(be, z, x, n, 0.3f, tfm_rng_key(1, 3, 3));
    CHECK(memcmp(y, z, n * 4) != 0);
    /* add_dropout = a + dropout(b) with the same mask */
    be->add_dropout(be, z, x, x, n, 0.3f, tfm_rng_key(1, 2, 3));
    int same = 1;
    for (size_t i = 0; i < n; i++)
        same &= z[i] == 1.0f + y[i];
    CHECK(same);
    be->dropout(be, z, x, n, 0.0f, 5);
    CHECK(memcmp(z, x, n * 4) == 0);
    /* element by element the mask is tfm_dropout_keep's (the contract every backend
     * shares), at an odd length, and a dropped Inf or NaN becomes 0 */
    size_t odd = 1000003;
    for (size_t i = 0; i < odd; i++)
        x[i] = i % 7 == 0 ? INFINITY : i % 11 == 0 ? NAN : -1.0f - (float)(i % 5);
    uint64_t key = tfm_rng_key(7, 8, 9);
    be->dropout(be, y, x, odd, 0.1f, key);
    be->add_dropout(be, z, y, x, odd, 0.1f, key);
    size_t bad = 0;
    for (size_t i = 0; i < odd; i++) {
        int keep = tfm_dropout_keep(key, i, 0.1f);
        float want = keep ? x[i] * (1 / 0.9f) : 0.0f;
        if (memcmp(&y[i], &want, 4) != 0 && !(isnan(want) && isnan(y[i])))
            bad++;
        float want2 = y[i] + want;
        if (memcmp(&z[i], &want2, 4) != 0 && !(isnan(want2) && isnan(z[i])))
            bad++;
    }
    CHECK(bad == 0);
    free(x); free(y); free(z);
}

/* The integer form of the keep test agrees with the float form at the threshold's edges. */
static void test_dropout_threshold(void)
{
    const float ps[] = {0.0f, 1e-9f, 5.9604645e-8f, 1e-7f, 0.1f, 0.3f, 1.0f / 3, 0.5f,
                        0.9999999f, 1.0f};
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        float p = ps[k];
        uint32_t thr = tfm_dropout_threshold(p);
        for (int64_t d = -2; d <= 2; d++) {
            int64_t b = (int64_t)thr + d;
            if (b < 0 || b >= (1 << 24))
                continue;
            int by_float = (float)b * (1.0f / 16777216.0f) >= p;
            CHECK(by_float == (b >= (int64_t)thr));
        }
    }
    CHECK(tfm_dropout_threshold(0.5f) == 1u << 23);
    CHECK(tfm_dropout_threshold(0.1f) == 1677722u);   /* ceil(0.1f * 2^24), 0.1f > 0.1 */
}

static void test_misc(void)
{
    float y[5] = {1, 2, 3, 4, 5}, x[5] = {1, 1, 1, 1, 2};
    be->axpy(be, y, 2.0f, x, 5);
    CHECK_NEAR(y[4], 9, 0);
    be->axpy(be, y, -0.5f, y, 5);      /* in place: y *= 0.5 */
    CHECK_NEAR(y[0], 1.5, 0);
    float src[4 * 3], dst[2 * 3];
    for (int i = 0; i < 12; i++)
        src[i] = (float)i;
    int32_t idx[2] = {3, 1};
    be->gather(be, dst, 3, src, 3, idx, 2, 2);
    CHECK(dst[0] == 9 && dst[1] == 10 && dst[3] == 3 && dst[4] == 4);
    double s = be->sumsq(be, x, 5);
    CHECK_NEAR(s, 8, 0);
    /* a long odd-length vector against a plain double sum */
    size_t n = 3000017;
    float *big = malloc(n * sizeof(float));
    double want = 0;
    for (size_t i = 0; i < n; i++) {
        big[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        want += (double)big[i] * big[i];
    }
    CHECK_NEAR(be->sumsq(be, big, n) / want, 1.0, 1e-12);
    /* and bit for bit the documented order (every code path of the backend keeps it):
     * chunks of 4096, each in 32 lanes added up in lane order, then its tail; the chunks'
     * sums in order */
    double exact = 0;
    for (size_t a = 0; a < n; a += 4096) {
        size_t b = a + 4096 < n ? a + 4096 : n, k = a;
        double lane[32] = {0}, part = 0;
        for (; k + 32 <= b; k += 32)
            for (int l = 0; l < 32; l++)
                lane[l] += (double)big[k + l] * big[k + l];
        for (int l = 0; l < 32; l++)
            part += lane[l];
        for (; k < b; k++)
            part += (double)big[k] * big[k];
        exact += part;
    }
    CHECK(be->sumsq(be, big, n) == exact);
    free(big);
}

/* ---- output layer -------------------------------------------------------------------------- */

enum { CN = 4, CV = 9 };
static float c_z[CN * CV], c_work[CN * CV];
static int32_t c_lab[CN] = {3, 0, 8, 1};

static double xent_loss(void)
{
    float loss[CN], nll[CN];
    memcpy(c_work, c_z, sizeof c_z);
    be->xent(be, c_work, c_lab, CN, CV, 0.1f, 0, loss, nll, 0.0f);
    double s = 0;
    for (int i = 0; i < CN; i++)
        s += loss[i];
    return s;
}

static void test_xent(void)
{
    /* Known value: logits (1, 2, 3), label 2, eps 0.1, V 3:
     * loss = lse - 0.9*3 - 0.1/3*6 with lse = log(e + e^2 + e^3) = 3.40760596444438 */
    float z[3] = {1, 2, 3}, loss, nll;
    int32_t lab = 2;
    be->xent(be, z, &lab, 1, 3, 0.1f, -1, &loss, &nll, 0.0f);
    CHECK_NEAR(loss, 0.5076059644443801, 1e-6);
    CHECK_NEAR(nll, 0.40760596444438013, 1e-6);
    /* eps 0 is plain cross-entropy */
    be->xent(be, z, &lab, 1, 3, 0.0f, -1, &loss, &nll, 0.0f);
    CHECK_NEAR(loss, nll, 1e-7);
    /* gradient, with an ignored row (label 0) */
    fill(c_z, CN * CV, 2);
    float g[CN * CV], l2[CN], n2[CN];
    memcpy(g, c_z, sizeof g);
    be->xent(be, g, c_lab, CN, CV, 0.1f, 0, l2, n2, 1.0f);
    CHECK(l2[1] == 0 && n2[1] == 0 && g[CV] == 0);
    loss_fn = xent_loss;
    CHECK(gradcheck("xent", c_z, g, CN * CV));
    /* grad_scale scales */
    float g3[CN * CV];
    memcpy(g3, c_z, sizeof g3);
    be->xent(be, g3, c_lab, CN, CV, 0.1f, 0, l2, n2, 0.5f);
    CHECK_NEAR(g3[5], 0.5 * g[5], 1e-7);
    /* log_softmax */
    float ls[3] = {1, 2, 3};
    be->log_softmax(be, ls, ls, 1, 3);
    CHECK_NEAR(ls[2], -0.40760596444438013, 1e-6);
}

/* tfm_topk_row against a reference: every candidate sorted best first, ties by smaller id,
 * the first k taken; for short lists (kept by insertion) and long ones (a heap), with
 * ties, -inf, NaN, banned ids, block maxima, and k beyond the candidates. */
struct topk_ref {
    float y;
    int32_t id;
};

static int by_topk_ref(const void *a, const void *b)
{
    const struct topk_ref *x = a, *y = b;
    if (x->y != y->y)
        return x->y < y->y ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

static void test_topk_row(void)
{
    enum { V = 1000, BS = 64 };
    static float z[V], bmax[V / BS + 1], top[V + 8];
    static int32_t tok[V + 8];
    static struct topk_ref ref[V];
    int32_t ban[3] = {0, 2, 3};
    int ks[] = {1, 5, 64, 65, 100, 333, 600, 995, 997, 998, 1000};
    int bad = 0;
    for (int row = 0; row < 6; row++) {
        for (int v = 0; v < V; v++) {
            uint32_t h = (uint32_t)(row * 7919 + v * 104729) * 2654435761u;
            /* rows 0-2: coarse values, many ties; 3-5: fine ones */
            z[v] = row < 3 ? (float)(h >> 28) - 8.0f : (float)(h >> 8) / 65536.0f - 128.0f;
        }
        if (row == 1 || row == 4)
            for (int v = 0; v < V; v += 7)
                z[v] = v % 2 ? -INFINITY : NAN;
        if (row == 2)
            for (int v = 0; v < V; v++)
                if (v % 97)
                    z[v] = -INFINITY;
        for (int b = 0; b * BS < V; b++) {
            bmax[b] = -INFINITY;
            for (int v = b * BS; v < V && v < (b + 1) * BS; v++)
                bmax[b] = z[v] > bmax[b] ? z[v] : bmax[b];
        }
        float l = row == 5 ? 1.5f : 0.0f;
        for (int nban = 0; nban <= 3; nban += 3)
            for (int ki = 0; ki < (int)(sizeof ks / sizeof *ks); ki++) {
                int k = ks[ki], n = 0;
                for (int v = 0; v < V; v++) {
                    float y = z[v] - l;
                    if (!(y > -INFINITY) || (nban && (v == 0 || v == 2 || v == 3)))
                        continue;
                    ref[n++] = (struct topk_ref){y, v};
                }
                qsort(ref, (size_t)n, sizeof *ref, by_topk_ref);
                for (int with_bmax = 0; with_bmax < 2; with_bmax++) {
                    tfm_topk_row(z, l, V, k, ban, nban, with_bmax ? bmax : NULL, BS, top, tok);
                    for (int j = 0; j < k; j++) {
                        int ok = j < n ? tok[j] == ref[j].id && top[j] == ref[j].y
                                       : tok[j] == -1 && top[j] == -INFINITY;
                        if (!ok && bad++ < 5)
                            printf("# row %d k %d nban %d bmax %d: entry %d is %d (%g), "
                                   "expected %d (%g)\n", row, k, nban, with_bmax, j, tok[j],
                                   top[j], j < n ? ref[j].id : -1, j < n ? ref[j].y : -1.0);
                    }
                }
            }
    }
    CHECK_EQ_INT(bad, 0);
}

/* A long list costs about a heap's O(V log k) a row, not an insertion's O(V k): 400 rows
 * of 8192 entries, k = 4097 (a beam of 4096) took seconds of CPU time by insertion. */
static void test_topk_row_long_is_fast(void)
{
    enum { V = 8192, K = 4097, ROWS = 400 };
    float *z = malloc((size_t)V * sizeof *z), *top = malloc((size_t)K * sizeof *top);
    int32_t *tok = malloc((size_t)K * sizeof *tok);
    CHECK(z && top && tok);
    if (z && top && tok) {
        clock_t c0 = clock();
        double sum = 0;
        for (int r = 0; r < ROWS; r++) {
            for (int v = 0; v < V; v++)
                z[v] = (float)((uint32_t)(r * 7919 + v * 104729) * 2654435761u >> 8) / 1e6f;
            tfm_topk_row(z, 0.0f, V, K, NULL, 0, NULL, 0, top, tok);
            sum += top[0] + top[K - 1];
        }
        double s = (double)(clock() - c0) / CLOCKS_PER_SEC;
        printf("# %d rows of %d, k %d: %.3f s CPU (checksum %g)\n", ROWS, V, K, s, sum);
        CHECK(s < 1.0);
    }
    free(z);
    free(top);
    free(tok);
}

/* log_softmax_top: the same bits as log_softmax followed by tfm_topk_row, on rows with ties,
 * -inf and NaN entries, banned ids, k from 1 to beyond the candidates; and by hand. */
static void test_log_softmax_top(void)
{
    enum { N = 5, V = 700, K = 12 };
    static float z[N * V], y[N * V];
    for (int n = 0; n < N; n++)
        for (int v = 0; v < V; v++) {
            uint32_t h = (uint32_t)(n * 7919 + v * 104729) * 2654435761u;
            z[n * V + v] = (float)(h >> 20) / 256.0f - 8.0f;    /* coarse: many ties */
        }
    z[1 * V + 600] = 40.0f;                         /* a winner in a late block */
    for (int v = 0; v < V; v++)                      /* row 2: only 3 finite entries */
        z[2 * V + v] = v == 5 || v == 333 || v == 699 ? 1.0f : -INFINITY;
    z[3 * V + 0] = NAN;                              /* row 3: NaN first, then more */
    z[3 * V + 300] = NAN;
    be->log_softmax(be, y, z, N, V);
    int32_t ban[3] = {0, 2, 3};
    int ks[] = {1, 4, K};
    for (int ki = 0; ki < 3; ki++) {
        int k = ks[ki];
        for (int nban = 0; nban <= 3; nban++) {
            float top[N * K], also[N], want[K];
            int32_t tok[N * K], want_tok[K];
            be->log_softmax_top(be, z, N, V, k, ban, nban, 3, top, tok, also);
            int same = 1;
            for (int n = 0; n < N; n++) {
                tfm_topk_row(y + n * V, 0.0f, V, k, ban, nban, NULL, 0, want, want_tok);
                same &= memcmp(want, top + n * k, (size_t)k * sizeof *want) == 0 &&
                        memcmp(want_tok, tok + n * k, (size_t)k * sizeof *want_tok) == 0 &&
                        memcmp(&y[n * V + 3], &also[n], sizeof *also) == 0;
            }
            CHECK(same);
            CHECK_EQ_INT(tok[1 * k], 600);
            if (k == K) {                           /* row 2: three, then padding */
                CHECK(tok[2 * k] == 5 && tok[2 * k + 1] == 333 && tok[2 * k + 2] == 699);
                CHECK(tok[2 * k + 3] == -1 && isinf(top[2 * k + 3]));
                CHECK_NEAR(top[2 * k], -log(3.0), 1e-6);
            }
        }
    }
    /* by hand: (1, 2, 3, 2) with id 3 banned: 2 (3.0) first, then 1 and 3's tie of 2.0 */
    float h[4] = {1, 2, 3, 2}, top[3], also;
    int32_t tok[3], b3 = 3;
    be->log_softmax_top(be, h, 1, 4, 3, &b3, 1, 0, top, tok, &also);
    double lse = log(exp(1.0) + 2 * exp(2.0) + exp(3.0));
    CHECK(tok[0] == 2 && tok[1] == 1 && tok[2] == 0);
    CHECK_NEAR(top[0], 3 - lse, 1e-6);
    CHECK_NEAR(top[1], 2 - lse, 1e-6);
    CHECK_NEAR(also, 1 - lse, 1e-6);
}

/* ---- decoding's output layer ---------------------------------------------------------------- */

/* out_logits: each logit the fma chain over d in order (the bits, whatever the threads, the
 * number of rows or a row's place); out_top: log_softmax_top of those logits, bit for bit.
 * V and N are not multiples of the panel and block sizes, so the edges are covered. */
static void test_out_layer(void)
{
    if (!be->out_pack) {
        printf("# the CPU has no AVX-512: out_* are not offered (gemm is used)\n");
        CHECK(!be->out_logits && !be->out_top && !be1->out_pack);
        return;
    }
    /* blocks of 8 to 48 rows (out_rows: 8 for this V with an L2 of 1 or 2 MiB); N, a prime,
     * leaves a partial last block whatever the size */
    enum { N = 37, V = 20011, D = 40, K = 5 };
    static float W[V * D], x[N * D], want[N * V], y[N * V], y1[N * V], one[V];
    for (int i = 0; i < V * D; i++)
        W[i] = (float)((uint32_t)(i * 2654435761u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < N * D; i++)
        x[i] = (float)((uint32_t)(i * 40503u + 17) % 1000) / 250.0f - 2.0f;
    for (int n = 0; n < N; n++)
        for (int v = 0; v < V; v++) {
            float acc = 0;
            for (int d = 0; d < D; d++)
                acc = fmaf(x[n * D + d], W[v * D + d], acc);
            want[n * V + v] = acc;
        }
    float *packed = calloc(be->out_pack_floats(V, D), sizeof *packed);
    float *packed1 = calloc(be1->out_pack_floats(V, D), sizeof *packed1);
    CHECK(packed && packed1 && be->out_pack_floats(V, D) >= (size_t)V * D);
    if (!packed || !packed1) {
        free(packed);
        free(packed1);
        return;
    }
    be->out_pack(be, packed, W, V, D);
    be1->out_pack(be1, packed1, W, V, D);
    CHECK(memcmp(packed, packed1, be->out_pack_floats(V, D) * sizeof *packed) == 0);
    be->out_logits(be, y, x, N, packed, V, D);
    be1->out_logits(be1, y1, x, N, packed1, V, D);
    CHECK(memcmp(y, want, sizeof y) == 0);
    CHECK(memcmp(y1, want, sizeof y1) == 0);
    be->out_logits(be, one, x + 30 * D, 1, packed, V, D);       /* row 30 alone */
    CHECK(memcmp(one, want + 30 * V, sizeof one) == 0);

    static float lsm[N * V];
    be->log_softmax(be, lsm, want, N, V);
    int32_t ban[2] = {1, 7};
    float top[N * K], also[N], wtop[K];
    int32_t tok[N * K], wtok[K];
    be->out_top(be, y, x, N, packed, V, D, K, ban, 2, 3, top, tok, also);
    int same = 1;
    for (int n = 0; n < N; n++) {
        tfm_topk_row(lsm + n * V, 0.0f, V, K, ban, 2, NULL, 0, wtop, wtok);
        same &= memcmp(wtop, top + n * K, sizeof wtop) == 0 &&
                memcmp(wtok, tok + n * K, sizeof wtok) == 0 &&
                memcmp(&lsm[n * V + 3], &also[n], sizeof *also) == 0;
    }
    CHECK(same);
    free(packed);
    free(packed1);
}

/* ---- Adam ---------------------------------------------------------------------------------- */

static void test_adam(void)
{
    float p[2] = {1, -1}, g[2] = {0.5f, -2}, m[2] = {0, 0}, v[2] = {0, 0};
    /* step 1 with bias correction: update = lr * g / (|g| + eps) = lr * sign(g) */
    be->adam(be, p, g, m, v, 2, 0.1f, 0.9f, 0.98f, 1e-9f, 1.0f, 1);
    CHECK_NEAR(p[0], 0.9, 1e-6);
    CHECK_NEAR(p[1], -0.9, 1e-6);
    CHECK_NEAR(m[0], 0.05, 1e-7);
    CHECK_NEAR(v[1], 0.02 * 4, 1e-7);
    /* step 2 by hand, gscale 0.5 */
    CHECK(g[0] == 0 && g[1] == 0);      /* the gradient is cleared for the next step */
    g[0] = 0.5f;
    g[1] = -2;
    double mm = 0.9 * 0.05 + 0.1 * 0.25, vv = 0.98 * 0.005 + 0.02 * 0.0625;
    double upd = 0.1 * (mm / (1 - 0.81)) / (sqrt(vv / (1 - 0.98 * 0.98)) + 1e-9);
    be->adam(be, p, g, m, v, 2, 0.1f, 0.9f, 0.98f, 1e-9f, 0.5f, 2);
    CHECK_NEAR(p[0], 0.9 - upd, 1e-6);
    /* the vector path (groups of 4) and its tail agree with the formula, step 3 */
    enum { AN = 11 };
    float ap[AN], ag[AN], am[AN], av[AN];
    double want[AN];
    for (int i = 0; i < AN; i++) {
        ap[i] = 0.1f * i - 0.5f;
        ag[i] = 0.3f * (i % 4) - 0.4f;
        am[i] = 0.01f * i;
        av[i] = 0.001f * (i + 1);
        double gg = 2.0 * ag[i], mi = 0.9 * am[i] + 0.1 * gg, vi = 0.98 * av[i] + 0.02 * gg * gg;
        want[i] = ap[i] - 0.01 * (mi / (1 - 0.729)) / (sqrt(vi / (1 - pow(0.98, 3))) + 1e-9);
    }
    be->adam(be, ap, ag, am, av, AN, 0.01f, 0.9f, 0.98f, 1e-9f, 2.0f, 3);
    for (int i = 0; i < AN; i++) {
        CHECK_NEAR(ap[i], want[i], 1e-6);
        CHECK(ag[i] == 0);
    }
}

/* The step's statistics: loss sums add up; the norm of {3, 4} is 5; clipping; Adam with
 * the statistics' scale is adam with that scale, bit for bit, and nothing at all when the
 * norm is not finite. */
static void test_step_stats(void)
{
    struct tfm_step_stats st = {1, 2, 0, 0, 0};
    float loss[3] = {0.5f, 0.25f, 2}, nll[3] = {1, 1, 1};
    be->loss_sum(be, &st, loss, nll, 3);
    be->loss_sum(be, &st, loss, nll, 2);
    CHECK(st.loss == 1 + 2.75 + 0.75 && st.nll == 2 + 3 + 2);
    float g[2] = {3, 4};
    be->grad_clip(be, &st, g, 2, 0.5, 0);
    CHECK(st.grad_norm == 2.5 && st.clip == 1 && st.scale == 0.5);
    be->grad_clip(be, &st, g, 2, 0.5, 3);
    CHECK(st.grad_norm == 2.5 && st.clip == 1 && st.scale == 0.5);
    be->grad_clip(be, &st, g, 2, 0.5, 2);
    CHECK(st.grad_norm == 2.5 && st.clip == 0.8 && st.scale == 0.5 * 0.8);
    CHECK(st.loss == 4.5 && st.nll == 7);                   /* left as they were */
    enum { AN = 11 };
    float p[2][AN], gr[2][AN], m[2][AN], v[2][AN];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < AN; i++) {
            p[k][i] = 0.1f * i - 0.5f;
            gr[k][i] = 0.3f * (i % 4) - 0.4f;
            m[k][i] = 0.01f * i;
            v[k][i] = 0.001f * (i + 1);
        }
    be->adam(be, p[0], gr[0], m[0], v[0], AN, 0.01f, 0.9f, 0.98f, 1e-9f, (float)st.scale, 3);
    be->adam_scaled(be, p[1], gr[1], m[1], v[1], AN, 0.01f, 0.9f, 0.98f, 1e-9f, &st, 3);
    CHECK(memcmp(p[0], p[1], sizeof p[0]) == 0 && memcmp(m[0], m[1], sizeof m[0]) == 0 &&
          memcmp(v[0], v[1], sizeof v[0]) == 0 && memcmp(gr[0], gr[1], sizeof gr[0]) == 0);
    gr[1][3] = INFINITY;
    be->grad_clip(be, &st, gr[1], AN, 0.5, 2);
    CHECK(isinf(st.grad_norm));
    memcpy(p[0], p[1], sizeof p[0]);
    be->adam_scaled(be, p[1], gr[1], m[1], v[1], AN, 0.01f, 0.9f, 0.98f, 1e-9f, &st, 4);
    CHECK(memcmp(p[0], p[1], sizeof p[0]) == 0 && isinf(gr[1][3]));
}

/* ---- determinism --------------------------------------------------------------------------- */

/* ---- fused ops: their sequences' bits ---------------------------------------------------- */

static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* x (n) rounded to bf16 when c computes in bf16. */
static void round_bf16(const struct tfm_backend *c, float *x, size_t n)
{
    if (c->precision == TFM_PRECISION_BF16)
        for (size_t i = 0; i < n; i++)
            x[i] = tfm_bf16_round(x[i]);
}

/* Each fused op of backend.h against the sequence of ops it stands for, bit for bit, on c
 * (its precision, its threads), with dropout p (0: none), on rows of D (the FFN's first
 * layer: rows of 2D).  Sizes above the CPU's parallel threshold, so that rows are split
 * between threads. */
static void fused_case(struct tfm_backend *c, float p)
{
    enum { N = 97, D = 300, V = 40, L = 50 };
    size_t nd = (size_t)N * D, nf = 2 * nd;
    uint64_t key = tfm_rng_key(7, 3, 11);
    float *a = malloc(nf * 4), *b = malloc(nf * 4), *g = malloc(2 * D * 4),
          *bias = malloc(2 * D * 4), *y1 = malloc(nf * 4), *y2 = malloc(nf * 4),
          *r1 = malloc(nd * 4), *r2 = malloc(nd * 4), *m1 = malloc(N * 4), *m2 = malloc(N * 4),
          *s1 = malloc(N * 4), *s2 = malloc(N * 4), *table = malloc(V * D * 4),
          *pos = malloc((L + 2) * D * 4), *dg1 = calloc(D, 4), *dg2 = calloc(D, 4),
          *db1 = calloc(D, 4), *db2 = calloc(D, 4), *t1 = malloc(nd * 4), *t2 = malloc(nd * 4);
    int32_t ids[N];
    fill(a, nf, 1);
    fill(b, nf, 2);
    fill(g, 2 * D, 1);
    fill(bias, 2 * D, 0.5f);
    fill(table, (size_t)V * D, 1);
    fill(pos, (size_t)(L + 2) * D, 1);
    for (int i = 0; i < N; i++)
        ids[i] = (i * 7) % V;
    round_bf16(c, a, nf);                      /* inputs as the emulation holds them */
    round_bf16(c, b, nf);
    round_bf16(c, g, 2 * D);
    round_bf16(c, bias, 2 * D);
    round_bf16(c, table, (size_t)V * D);
    round_bf16(c, pos, (size_t)(L + 2) * D);
    /* bias + ReLU (or none) + dropout */
    for (int relu = 0; relu < 2; relu++) {
        memcpy(y1, a, nf * 4);
        memcpy(y2, a, nf * 4);
        c->bias_act(c, y1, bias, N, 2 * D, relu);
        if (p > 0)
            c->dropout(c, y1, y1, nf, p, key);
        c->bias_act_dropout(c, y2, bias, N, 2 * D, relu, p, key);
        CHECK(same_bits(y1, y2, nf));
    }
    /* embedding + positions (or none) + dropout */
    for (int with_pos = 0; with_pos < 2; with_pos++) {
        const float *ps = with_pos ? pos : NULL;
        c->embed_fwd(c, y1, table, ids, N, D, 17.0f, ps, L, 2);
        if (p > 0)
            c->dropout(c, y1, y1, nd, p, key);
        c->embed_fwd_dropout(c, y2, table, ids, N, D, 17.0f, ps, L, 2, p, key);
        CHECK(same_bits(y1, y2, nd));
    }
    /* residual + dropout + layer norm */
    c->add_dropout(c, r1, a, b, nd, p, key);
    c->layernorm_fwd(c, y1, m1, s1, r1, g, bias, N, D, 1e-5f);
    c->add_dropout_layernorm(c, y2, m2, s2, r2, a, b, g, bias, N, D, 1e-5f, p, key);
    CHECK(same_bits(r1, r2, nd) && same_bits(y1, y2, nd));
    CHECK(same_bits(m1, m2, N) && same_bits(s1, s2, N));
    /* in place on the residual (r = a), as the model's pre-norm does not but may */
    memcpy(t1, a, nd * 4);
    c->add_dropout_layernorm(c, y2, m2, s2, t1, t1, b, g, bias, N, D, 1e-5f, p, key);
    CHECK(same_bits(t1, r1, nd) && same_bits(y1, y2, nd));
    /* layer-norm backward (overwriting, accumulating) + dropout; dy = b */
    for (int acc = 0; acc < 2; acc++) {
        memcpy(t1, a + nd, nd * 4);             /* dx before: accumulated onto */
        memcpy(t2, a + nd, nd * 4);
        c->layernorm_bwd(c, t1, dg1, db1, b, r1, m1, s1, g, N, D, acc);
        c->dropout(c, y1, t1, nd, p, key);
        c->layernorm_bwd_dropout(c, t2, y2, dg2, db2, b, r1, m1, s1, g, N, D, acc, p, key);
        CHECK(same_bits(t1, t2, nd) && same_bits(y1, y2, nd));
        CHECK(same_bits(dg1, dg2, D) && same_bits(db1, db2, D));
    }
    /* the dropout is there: a fused op that ignored it would differ */
    if (p > 0) {
        c->layernorm_bwd_dropout(c, t2, y2, dg2, db2, b, r1, m1, s1, g, N, D, 0, 0.0f, key);
        CHECK(!same_bits(y1, y2, nd) && same_bits(t2, y2, nd));
    }
    free(a); free(b); free(g); free(bias); free(y1); free(y2); free(r1); free(r2); free(m1);
    free(m2); free(s1); free(s2); free(table); free(pos); free(dg1); free(dg2); free(db1);
    free(db2); free(t1); free(t2);
}

static void test_fused(void)
{
    struct tfm_error err;
    for (int prec = 0; prec < 2; prec++) {
        enum tfm_precision pr = prec ? TFM_PRECISION_BF16 : TFM_PRECISION_FP32;
        for (struct tfm_backend **c = (struct tfm_backend *[]){be, be1, NULL}; *c; c++) {
            CHECK(tfm_backend_set_precision(*c, pr, &err) == 0);
            fused_case(*c, 0.1f);
            fused_case(*c, 0.0f);
            CHECK(tfm_backend_set_precision(*c, TFM_PRECISION_FP32, &err) == 0);
        }
    }
}

static void test_threads_same_bits(void)
{
    int N = 300, D = 64;
    float *x = malloc(sizeof(float) * N * D), *dy = malloc(sizeof(float) * N * D);
    float *g = malloc(sizeof(float) * D), *mean = malloc(sizeof(float) * N),
          *rstd = malloc(sizeof(float) * N);
    float *dx1 = calloc((size_t)N * D, 4), *dx2 = calloc((size_t)N * D, 4);
    float dg1[64] = {0}, db1[64] = {0}, dg2[64] = {0}, db2[64] = {0};
    fill(x, (size_t)N * D, 1);
    fill(dy, (size_t)N * D, 1);
    fill(g, D, 1);
    float *y = malloc(sizeof(float) * N * D);
    be->layernorm_fwd(be, y, mean, rstd, x, g, g, N, D, 1e-5f);
    be->layernorm_bwd(be, dx1, dg1, db1, dy, x, mean, rstd, g, N, D, 0);
    be1->layernorm_bwd(be1, dx2, dg2, db2, dy, x, mean, rstd, g, N, D, 0);
    CHECK(memcmp(dx1, dx2, sizeof(float) * N * D) == 0);
    CHECK(memcmp(dg1, dg2, sizeof dg1) == 0 && memcmp(db1, db2, sizeof db1) == 0);
    CHECK(be->sumsq(be, x, (size_t)N * D) == be1->sumsq(be1, x, (size_t)N * D));
    /* attention forward and backward */
    int32_t ids[300];
    for (int i = 0; i < N; i++)
        ids[i] = i % 50;
    float *t1 = calloc(50 * 64, 4), *t2 = calloc(50 * 64, 4);
    be->embed_bwd(be, t1, NULL, dy, ids, N, D, 50, 1.0f, 1, 0);
    be1->embed_bwd(be1, t2, NULL, dy, ids, N, D, 50, 1.0f, 1, 0);
    CHECK(memcmp(t1, t2, 50 * 64 * 4) == 0);
    free(x); free(dy); free(g); free(mean); free(rstd); free(dx1); free(dx2); free(y);
    free(t1); free(t2);
}

int main(void)
{
    struct tfm_error err;
    be = tfm_backend_cpu(2, &err);
    be1 = tfm_backend_cpu(1, &err);
    if (!be || !be1) {
        printf("not ok 1 - backend: %s\n", err.msg);
        return 1;
    }
    t_run("gemm against a naive product", test_gemm);
    t_run("gemm of 1 to 13 rows: a double product, the same bits per row and thread count",
          test_gemm_few_rows);
    t_run("embedding forward and gradient (table and positions)", test_embed);
    t_run("layer norm forward and gradients", test_layernorm);
    t_run("attention forward by direct computation", test_attn_fwd_direct);
    t_run("attention gradients: padding, causal, cross, dropout", test_attn_grad);
    t_run("attention with every key masked gives zeros", test_attn_fully_masked);
    t_run("incremental attention equals full causal attention", test_attn_decode);
    t_run("incremental attention at head widths of 16 to 128, blocks and slots",
          test_attn_decode_wide);
    t_run("bias, ReLU and dropout gradients", test_bias_relu_dropout);
    t_run("dropout keep rate, scaling and reproducibility", test_dropout);
    t_run("dropout's integer threshold equals its float test", test_dropout_threshold);
    t_run("axpy, gather, sumsq", test_misc);
    t_run("label-smoothed cross-entropy: known value and gradient", test_xent);
    t_run("log_softmax_top = log_softmax, then the best tokens", test_log_softmax_top);
    t_run("out_logits: fma chains, the same bits for any threads and rows; out_top",
          test_out_layer);
    t_run("tfm_topk_row: the k best, ties by smaller id, short and long lists", test_topk_row);
    t_run("tfm_topk_row: a long list (a beam of 4096) costs O(V log k)",
          test_topk_row_long_is_fast);
    t_run("Adam update by hand", test_adam);
    t_run("reductions give the same bits on 1 and 2 threads", test_threads_same_bits);
    t_run("fused ops give their sequences' bits (fp32, bf16; 1 and 2 threads)", test_fused);
    t_run("the step's statistics: loss sums, norm, clipping, Adam with their scale",
          test_step_stats);
    be->destroy(be);
    be1->destroy(be1);
    return t_done();
}
