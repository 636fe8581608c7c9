/* test_gpu_ops.c: every op of the CUDA backend against the CPU backend (the reference) on
 * random inputs, the CUDA ops' determinism (the same bits on a second run), and the check
 * the tools run before using a GPU (tfm_device_check: a whole model's training batch, Adam
 * step and decoding steps against the CPU).  `make check-gpu` runs it;
 * without a GPU (this machine, CI) each test skips itself, except the first, which checks
 * that asking for the CUDA backend there fails with a reason instead of crashing.
 *
 * Bounds: |gpu - cpu| <= TOL * max(1, |cpu|) element by element, TOL = 2e-5 for the ops
 * (fp32 with sums in another order; inputs in [-1, 1], sums of at most a few hundred
 * terms: rounding differences are ~1e-6); the whole model's bounds are device.h's.  Dropout, gathers and copies must agree exactly.
 */
#include "check.h"

#include "backend.h"
#include "device.h"

#include <stdint.h>

#define TOL 2e-5

static struct tfm_backend *cpu, *gpu;
static char why[200];

static uint64_t rs = 4242;
static float frand(void)
{
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rs >> 40) / 16777216.0 * 2.0 - 1.0);
}

static float *rnd(size_t n, float s)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = s * frand();
    return x;
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
    gpu->download(gpu, h, d, n * sizeof(float));
    return h;
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

/* Largest |a - b| / max(1, |b|); NaN where they disagree on NaN-ness. */
#define maxerr tfm_device_diff

/* Compare device result d (n floats) with host reference ref. */
#define SAME(d, ref, n, tol)                                                           \
    do {                                                                               \
        float *h_ = host((d), (n));                                                    \
        double e_ = maxerr(h_, (ref), (n));                                            \
        if (!(e_ <= (tol)))                                                            \
            printf("#   %s: max relative difference %.3g (bound %g)\n", #d, e_, (double)(tol)); \
        CHECK(e_ <= (tol));                                                            \
        free(h_);                                                                      \
    } while (0)

#define EXACT(d, ref, n)                                                               \
    do {                                                                               \
        float *h_ = host((d), (n));                                                    \
        CHECK(memcmp(h_, (ref), (n) * sizeof(float)) == 0);                            \
        free(h_);                                                                      \
    } while (0)

#define NEED_GPU()                                                                     \
    do {                                                                               \
        if (!gpu) {                                                                    \
            t_skip(why);                                                               \
            return;                                                                    \
        }                                                                              \
    } while (0)

/* ---- the backend itself ------------------------------------------------------------------ */

static void test_create(void)
{
    struct tfm_error err;
    if (gpu) {
        CHECK_STR(gpu->name, "cuda");
        CHECK(gpu->kind == TFM_BACKEND_CUDA && !gpu->host_memory);
        CHECK(tfm_backend_cuda(1 << 20, &err) == NULL);
        CHECK(strstr(err.msg, "no such device") != NULL);
        return;
    }
    /* no GPU: a clear reason, no crash */
    CHECK(strncmp(why, "the CUDA backend: ", 18) == 0 && strlen(why) > 18);
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
    GFREE(z, y);
    free(x);
    free(zeros);
}

/* ---- gemm ---------------------------------------------------------------------------------- */

static void gemm_case(int ta, int tb, int M, int N, int K, float beta)
{
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb,
           nc = (size_t)M * ldc;
    float *A = rnd(na, 1), *Bm = rnd(nb, 1), *C = rnd(nc, 1);
    float *dA = dev(A, na * 4), *dB = dev(Bm, nb * 4), *dC = dev(C, nc * 4);
    if (beta == 0) {                                      /* C must not be read */
        float *nan = malloc(nc * 4);
        for (size_t i = 0; i < nc; i++)
            nan[i] = NAN;
        gpu->upload(gpu, dC, nan, nc * 4);
        for (int i = 0; i < M; i++)                       /* the padding keeps its value */
            for (int j = N; j < ldc; j++)
                C[(size_t)i * ldc + j] = NAN;
        free(nan);
    }
    cpu->gemm(cpu, ta, tb, M, N, K, 0.5f, A, lda, Bm, ldb, beta, C, ldc);
    gpu->gemm(gpu, ta, tb, M, N, K, 0.5f, dA, lda, dB, ldb, beta, dC, ldc);
    SAME(dC, C, nc, TOL);
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
            gemm_case(ta, tb, 37, 53, 129, 0);
            gemm_case(ta, tb, 64, 17, 300, 1);
        }
    /* batched: 5 products of (7,9)x(9,11) at strides with gaps */
    int M = 7, N = 11, K = 9, batch = 5;
    int64_t sa = M * K + 5, sb = K * N + 3, sc = M * N + 7;
    float *A = rnd(sa * batch, 1), *Bm = rnd(sb * batch, 1), *C = rnd(sc * batch, 1);
    float *dA = dev(A, sa * batch * 4), *dB = dev(Bm, sb * batch * 4), *dC = dev(C, sc * batch * 4);
    cpu->gemm_batched(cpu, 0, 1, M, N, K, 1.0f, A, K, sa, Bm, K, sb, 1.0f, C, N, sc, batch);
    gpu->gemm_batched(gpu, 0, 1, M, N, K, 1.0f, dA, K, sa, dB, K, sb, 1.0f, dC, N, sc, batch);
    SAME(dC, C, (size_t)sc * batch, TOL);
    GFREE(dA, dB, dC);
    free(A);
    free(Bm);
    free(C);
}

/* ---- embeddings and layer norm ------------------------------------------------------------ */

static void test_embed(void)
{
    NEED_GPU();
    int V = 13, D = 24, N = 40, L = 10, P = 16, pos0 = 3;
    int32_t ids[40];
    for (int i = 0; i < N; i++)
        ids[i] = (i * 7) % 5 == 0 ? 2 : (i * 5) % V;       /* id 2 repeated many times */
    float *table = rnd((size_t)V * D, 1), *pos = rnd((size_t)P * D, 1);
    float *out = rnd((size_t)N * D, 1), *dout = rnd((size_t)N * D, 1);
    float *dtable = rnd((size_t)V * D, 1), *dpos = rnd((size_t)P * D, 1);
    int32_t *did = dev(ids, sizeof ids);
    float *dt = dev(table, V * D * 4), *dp = dev(pos, P * D * 4), *dO = dev(NULL, N * D * 4),
          *ddo = dev(dout, N * D * 4), *ddt = dev(dtable, V * D * 4), *ddp = dev(dpos, P * D * 4);
    for (int with_pos = 0; with_pos < 2; with_pos++) {
        cpu->embed_fwd(cpu, out, table, ids, N, D, 2.5f, with_pos ? pos : NULL, L, pos0);
        gpu->embed_fwd(gpu, dO, dt, did, N, D, 2.5f, with_pos ? dp : NULL, L, pos0);
        SAME(dO, out, (size_t)N * D, TOL);
        cpu->embed_bwd(cpu, dtable, with_pos ? dpos : NULL, dout, ids, N, D, V, 2.5f, L, pos0);
        gpu->embed_bwd(gpu, ddt, with_pos ? ddp : NULL, ddo, did, N, D, V, 2.5f, L, pos0);
        SAME(ddt, dtable, (size_t)V * D, TOL);
        SAME(ddp, dpos, (size_t)P * D, TOL);
    }
    GFREE(did, dt, dp, dO, ddo, ddt, ddp);
    free(table); free(pos); free(out); free(dout); free(dtable); free(dpos);
}

static void test_layernorm(void)
{
    NEED_GPU();
    int N = 77, D = 200;
    size_t nd = (size_t)N * D;
    float *x = rnd(nd, 2), *g = rnd(D, 1), *b = rnd(D, 1), *dy = rnd(nd, 1);
    float *y = malloc(nd * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
    float *dx = rnd(nd, 1), *dg = rnd(D, 1), *db = rnd(D, 1);
    float *dX = dev(x, nd * 4), *dG = dev(g, D * 4), *dB = dev(b, D * 4), *dY = dev(NULL, nd * 4),
          *dM = dev(NULL, N * 4), *dR = dev(NULL, N * 4), *dDY = dev(dy, nd * 4),
          *dDX = dev(dx, nd * 4), *dDG = dev(dg, D * 4), *dDB = dev(db, D * 4);
    cpu->layernorm_fwd(cpu, y, mean, rstd, x, g, b, N, D, 1e-5f);
    gpu->layernorm_fwd(gpu, dY, dM, dR, dX, dG, dB, N, D, 1e-5f);
    SAME(dY, y, nd, TOL);
    SAME(dM, mean, N, TOL);
    SAME(dR, rstd, N, TOL);
    for (int acc = 0; acc < 2; acc++) {
        cpu->layernorm_bwd(cpu, dx, dg, db, dy, x, mean, rstd, g, N, D, acc);
        gpu->layernorm_bwd(gpu, dDX, dDG, dDB, dDY, dX, dM, dR, dG, N, D, acc);
        SAME(dDX, dx, nd, TOL);
        SAME(dDG, dg, D, TOL);
        SAME(dDB, db, D, TOL);
    }
    GFREE(dX, dG, dB, dY, dM, dR, dDY, dDX, dDG, dDB);
    free(x); free(g); free(b); free(dy); free(y); free(mean); free(rstd); free(dx); free(dg);
    free(db);
}

/* ---- attention ------------------------------------------------------------------------------ */

static void attn_case(int B, int H, int Tq, int Tk, int dk, const int32_t *klen, int causal,
                      float dropout)
{
    struct tfm_attn a = {B, H, Tq, Tk, dk, NULL, causal, 1.0f / sqrtf((float)dk), dropout,
                         tfm_rng_key(3, 4, 5)};
    int D = H * dk, ldq = D + 5, ldk = 2 * D, ldo = D;
    size_t nq = (size_t)B * Tq * ldq, nk = (size_t)B * Tk * ldk, no = (size_t)B * Tq * ldo,
           nl = (size_t)B * H * Tq;
    float *q = rnd(nq, 1), *kv = rnd(nk, 1), *dout = rnd(no, 1);
    float *o = malloc(no * 4), *lse = malloc(nl * 4);
    float *dq = calloc(nq, 4), *dkv = calloc(nk, 4);
    int32_t *dlen = klen ? dev(klen, B * sizeof(int32_t)) : NULL;
    float *gq = dev(q, nq * 4), *gkv = dev(kv, nk * 4), *gout = dev(dout, no * 4),
          *go = dev(NULL, no * 4), *glse = dev(NULL, nl * 4), *gdq = dev(NULL, nq * 4),
          *gdkv = dev(NULL, nk * 4);
    a.klen = klen;
    cpu->reserve(cpu, Tq, Tk, NULL);
    cpu->attn_fwd(cpu, &a, q, ldq, kv, ldk, kv + D, ldk, o, ldo, lse);
    cpu->attn_bwd(cpu, &a, q, ldq, kv, ldk, kv + D, ldk, o, ldo, lse, dout, ldo, dq, ldq, dkv,
                  ldk, dkv + D, ldk);
    a.klen = dlen;
    gpu->reserve(gpu, Tq, Tk, NULL);
    gpu->attn_fwd(gpu, &a, gq, ldq, gkv, ldk, gkv + D, ldk, go, ldo, glse);
    SAME(go, o, no, TOL);
    SAME(glse, lse, nl, TOL);
    gpu->attn_bwd(gpu, &a, gq, ldq, gkv, ldk, gkv + D, ldk, go, ldo, glse, gout, ldo, gdq, ldq,
                  gdkv, ldk, gdkv + D, ldk);
    /* dq: compare the head columns only (the padding of ldq is not written) */
    float *hq = host(gdq, nq), *hkv = host(gdkv, nk);
    double e = 0;
    for (int r = 0; r < B * Tq; r++) {
        double x = maxerr(hq + (size_t)r * ldq, dq + (size_t)r * ldq, D);
        e = isnan(x) || x > e ? x : e;
    }
    for (int r = 0; r < B * Tk; r++) {
        double x = maxerr(hkv + (size_t)r * ldk, dkv + (size_t)r * ldk, 2 * D);
        e = isnan(x) || x > e ? x : e;
    }
    if (!(e <= TOL))
        printf("#   attention B=%d H=%d Tq=%d Tk=%d causal=%d dropout=%g: gradients differ by %.3g\n",
               B, H, Tq, Tk, causal, dropout, e);
    CHECK(e <= TOL);
    GFREE(gq, gkv, gout, go, glse, gdq, gdkv);
    if (dlen)
        gpu->free(gpu, dlen);
    free(q); free(kv); free(dout); free(o); free(lse); free(dq); free(dkv); free(hq); free(hkv);
}

static void test_attention(void)
{
    NEED_GPU();
    int32_t klen[3] = {7, 0, 3};                          /* sentence 1: every key masked */
    attn_case(3, 2, 7, 7, 8, klen, 0, 0);                 /* padding */
    attn_case(3, 2, 7, 7, 8, klen, 1, 0);                 /* padding + causal */
    attn_case(2, 4, 5, 9, 16, NULL, 0, 0);                /* cross: Tq != Tk */
    attn_case(3, 2, 7, 7, 8, klen, 1, 0.3f);              /* attention dropout */
    attn_case(2, 8, 64, 64, 64, NULL, 1, 0);              /* the base config's head size */
    int32_t long_len[2] = {300, 129};
    attn_case(2, 2, 300, 300, 32, long_len, 0, 0.1f);     /* rows longer than a warp */
}

static void test_attn_decode(void)
{
    NEED_GPU();
    int R = 5, H = 3, dk = 16, D = H * dk, ld = 2 * D, steps = 9, blocks = 4;
    int64_t bstride = (int64_t)steps * ld;
    size_t nkv = (size_t)blocks * bstride;
    float *q = rnd((size_t)R * D, 1), *kv = rnd(nkv, 1), *o = malloc((size_t)R * D * 4);
    int32_t len[5] = {1, 9, 4, 7, 2}, blk[5] = {0, 3, 1, 1, 2}, slot[5 * 9];
    for (int i = 0; i < R * steps; i++)
        slot[i] = (i * 7 + 3) % blocks;
    float *gq = dev(q, (size_t)R * D * 4), *gkv = dev(kv, nkv * 4), *go = dev(NULL, (size_t)R * D * 4);
    int32_t *glen = dev(len, sizeof len), *gblk = dev(blk, sizeof blk), *gslot = dev(slot, sizeof slot);
    cpu->reserve(cpu, 1, steps, NULL);
    gpu->reserve(gpu, 1, steps, NULL);
    for (int use_slot = 0; use_slot < 2; use_slot++) {
        cpu->attn_decode(cpu, R, H, dk, 0.25f, q, D, kv, kv + D, ld, bstride, blk,
                         use_slot ? slot : NULL, steps, len, o, D);
        gpu->attn_decode(gpu, R, H, dk, 0.25f, gq, D, gkv, gkv + D, ld, bstride, gblk,
                         use_slot ? gslot : NULL, steps, glen, go, D);
        SAME(go, o, (size_t)R * D, TOL);
    }
    GFREE(gq, gkv, go, glen, gblk, gslot);
    free(q); free(kv); free(o);
}

/* ---- element-wise ------------------------------------------------------------------------ */

static void test_elementwise(void)
{
    NEED_GPU();
    int N = 123, M = 257;
    size_t n = (size_t)N * M;
    float *x = rnd(n, 1), *y = rnd(n, 1), *b = rnd(M, 1), *db = rnd(M, 1);
    float *gx = dev(x, n * 4), *gy = dev(y, n * 4), *gb = dev(b, M * 4), *gdb = dev(db, M * 4),
          *gz = dev(NULL, n * 4);
    float *z = malloc(n * 4);
    /* bias_act with and without ReLU; relu_bwd on its output */
    for (int relu = 0; relu < 2; relu++) {
        float *xc = malloc(n * 4);
        memcpy(xc, x, n * 4);
        gpu->upload(gpu, gz, x, n * 4);
        cpu->bias_act(cpu, xc, b, N, M, relu);
        gpu->bias_act(gpu, gz, gb, N, M, relu);
        SAME(gz, xc, n, TOL);
        if (relu) {
            cpu->relu_bwd(cpu, z, y, xc, n, 1.25f);
            float *gr = dev(NULL, n * 4);
            gpu->relu_bwd(gpu, gr, gy, gz, n, 1.25f);
            SAME(gr, z, n, TOL);
            gpu->free(gpu, gr);
        }
        free(xc);
    }
    cpu->bias_bwd(cpu, db, y, N, M);
    gpu->bias_bwd(gpu, gdb, gy, N, M);
    SAME(gdb, db, M, TOL);
    /* dropout: exact; with an Inf and a NaN among the inputs; in place too */
    x[5] = INFINITY;
    x[77] = NAN;
    gpu->upload(gpu, gx, x, n * 4);
    uint64_t key = tfm_rng_key(9, 9, 9);
    cpu->dropout(cpu, z, x, n, 0.3f, key);
    gpu->dropout(gpu, gz, gx, n, 0.3f, key);
    EXACT(gz, z, n);
    cpu->add_dropout(cpu, z, y, x, n, 0.3f, key);      /* a + b * inv may be one FMA */
    gpu->add_dropout(gpu, gz, gy, gx, n, 0.3f, key);
    SAME(gz, z, n, TOL);
    cpu->dropout(cpu, z, x, n, 0.0f, key);
    gpu->dropout(gpu, gz, gx, n, 0.0f, key);
    EXACT(gz, z, n);
    x[5] = 0.5f;
    x[77] = -0.5f;
    gpu->upload(gpu, gx, x, n * 4);
    /* axpy, scale */
    memcpy(z, y, n * 4);
    gpu->upload(gpu, gz, y, n * 4);
    cpu->axpy(cpu, z, -0.75f, x, n);
    gpu->axpy(gpu, gz, -0.75f, gx, n);
    SAME(gz, z, n, TOL);
    cpu->scale(cpu, z, 3.0f, n);
    gpu->scale(gpu, gz, 3.0f, n);
    SAME(gz, z, n, TOL);
    /* gather with and without indexes */
    int32_t idx[4] = {5, 0, 122, 5};
    int32_t *gidx = dev(idx, sizeof idx);
    float *r = calloc(4 * 300, 4), *gr = dev(NULL, 4 * 300 * 4);
    cpu->gather(cpu, r, 300, x, M, idx, 4, 200);
    gpu->gather(gpu, gr, 300, gx, M, gidx, 4, 200);
    EXACT(gr, r, 4 * 300);
    cpu->gather(cpu, r, 300, x, M, NULL, 4, 250);
    gpu->gather(gpu, gr, 300, gx, M, NULL, 4, 250);
    EXACT(gr, r, 4 * 300);
    GFREE(gx, gy, gb, gdb, gz, gidx, gr);
    free(x); free(y); free(b); free(db); free(z); free(r);
}

/* ---- output layer and optimizer ------------------------------------------------------------ */

static void test_xent(void)
{
    NEED_GPU();
    int N = 37, V = 1000;
    size_t n = (size_t)N * V;
    float *z = rnd(n, 8), *loss = malloc(N * 4), *nll = malloc(N * 4), *ls = malloc(n * 4);
    int32_t lab[37];
    for (int i = 0; i < N; i++)
        lab[i] = i % 9 == 4 ? 0 : (i * 131) % V;           /* label 0: ignored rows */
    float *gz = dev(z, n * 4), *gl = dev(NULL, N * 4), *gn = dev(NULL, N * 4), *gls = dev(NULL, n * 4);
    int32_t *glab = dev(lab, sizeof lab);
    cpu->log_softmax(cpu, ls, z, N, V);
    gpu->log_softmax(gpu, gls, gz, N, V);
    SAME(gls, ls, n, TOL);
    cpu->xent(cpu, z, lab, N, V, 0.1f, 0, loss, nll, 0.0f);   /* logits untouched */
    gpu->xent(gpu, gz, glab, N, V, 0.1f, 0, gl, gn, 0.0f);
    SAME(gl, loss, N, TOL);
    SAME(gn, nll, N, TOL);
    SAME(gz, z, n, 0);
    cpu->xent(cpu, z, lab, N, V, 0.1f, 0, loss, nll, 0.5f);
    gpu->xent(gpu, gz, glab, N, V, 0.1f, 0, gl, gn, 0.5f);
    SAME(gl, loss, N, TOL);
    SAME(gz, z, n, TOL);
    GFREE(gz, gl, gn, gls, glab);
    free(z); free(loss); free(nll); free(ls);
}

static void test_optimizer(void)
{
    NEED_GPU();
    size_t n = 3000017;
    float *x = rnd(n, 1);
    float *gx = dev(x, n * 4);
    double a = cpu->sumsq(cpu, x, n), b = gpu->sumsq(gpu, gx, n);
    CHECK_NEAR(b / a, 1.0, 1e-12);
    CHECK(gpu->sumsq(gpu, gx, n) == b);                    /* the same bits again */
    CHECK(gpu->sumsq(gpu, gx, 0) == 0);
    float *p = rnd(n, 1), *m = rnd(n, 0.1f), *v = rnd(n, 0.01f);
    for (size_t i = 0; i < n; i++)
        v[i] = fabsf(v[i]);
    float *gp = dev(p, n * 4), *gm = dev(m, n * 4), *gv = dev(v, n * 4);
    float *zeros = calloc(n, 4);
    cpu->adam(cpu, p, x, m, v, n, 1e-3f, 0.9f, 0.98f, 1e-9f, 0.5f, 7);
    gpu->adam(gpu, gp, gx, gm, gv, n, 1e-3f, 0.9f, 0.98f, 1e-9f, 0.5f, 7);
    SAME(gp, p, n, 1e-6);
    SAME(gm, m, n, 1e-6);
    SAME(gv, v, n, 1e-6);
    EXACT(gx, zeros, n);                                   /* the gradient is cleared */
    GFREE(gx, gp, gm, gv);
    free(x); free(p); free(m); free(v); free(zeros);
}

/* ---- determinism: the reductions give the same bits twice ------------------------------- */

static void test_determinism(void)
{
    NEED_GPU();
    int N = 500, D = 64, V = 7;
    size_t nd = (size_t)N * D;
    float *x = rnd(nd, 1), *g = rnd(D, 1);
    int32_t ids[500];
    for (int i = 0; i < N; i++)
        ids[i] = i % V;
    float *gx = dev(x, nd * 4), *gg = dev(g, D * 4), *gm = dev(NULL, N * 4), *gr = dev(NULL, N * 4),
          *gy = dev(NULL, nd * 4);
    int32_t *gid = dev(ids, sizeof ids);
    float *out[2][3];
    for (int run = 0; run < 2; run++) {
        float *dx = dev(NULL, nd * 4), *dg = dev(NULL, D * 4), *db = dev(NULL, D * 4),
              *dt = dev(NULL, (size_t)V * D * 4);
        gpu->layernorm_fwd(gpu, gy, gm, gr, gx, gg, gg, N, D, 1e-5f);
        gpu->layernorm_bwd(gpu, dx, dg, db, gx, gx, gm, gr, gg, N, D, 0);
        gpu->embed_bwd(gpu, dt, NULL, gx, gid, N, D, V, 1.0f, N, 0);
        out[run][0] = host(dx, nd);
        out[run][1] = host(dg, D);
        out[run][2] = host(dt, (size_t)V * D);
        GFREE(dx, dg, db, dt);
    }
    CHECK(memcmp(out[0][0], out[1][0], nd * 4) == 0);
    CHECK(memcmp(out[0][1], out[1][1], D * 4) == 0);
    CHECK(memcmp(out[0][2], out[1][2], (size_t)V * D * 4) == 0);
    for (int run = 0; run < 2; run++)
        for (int k = 0; k < 3; k++)
            free(out[run][k]);
    GFREE(gx, gg, gm, gr, gy, gid);
    free(x); free(g);
}

/* ---- a whole model: one training batch on the GPU and on the CPU ------------------------- */

static void test_model(void)
{
    NEED_GPU();
    /* the tools' own check (device.c): a 2-layer model's training batch, Adam step and
     * decoding steps against the CPU */
    struct tfm_error err;
    char note[256];
    int rc = tfm_device_check(gpu, note, sizeof note, &err);
    printf("# %s\n", rc == 0 ? note : err.msg);
    CHECK(rc == 0);
}

int main(void)
{
    struct tfm_error err;
    cpu = tfm_backend_cpu(2, &err);
    gpu = tfm_backend_cuda(0, &err);
    if (!gpu)
        snprintf(why, sizeof why, "%.180s", err.msg);
    t_run("the CUDA backend starts on a GPU, or says why not", test_create);
    t_run("cuda: alloc, upload, download, copy, zero", test_memory);
    t_run("cuda: gemm and gemm_batched against the CPU", test_gemm);
    t_run("cuda: embedding forward and backward against the CPU", test_embed);
    t_run("cuda: layer norm forward and backward against the CPU", test_layernorm);
    t_run("cuda: attention forward and backward against the CPU", test_attention);
    t_run("cuda: incremental attention against the CPU", test_attn_decode);
    t_run("cuda: bias, ReLU, dropout, axpy, scale, gather against the CPU", test_elementwise);
    t_run("cuda: cross-entropy and log-softmax against the CPU", test_xent);
    t_run("cuda: sumsq and Adam against the CPU", test_optimizer);
    t_run("cuda: reductions give the same bits twice", test_determinism);
    t_run("cuda: a model's training batch, Adam step and decoding against the CPU", test_model);
    if (gpu)
        gpu->destroy(gpu);
    cpu->destroy(cpu);
    return t_done();
}
