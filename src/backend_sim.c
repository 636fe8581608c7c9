/* backend_sim.c: a stand-in for a GPU on any machine (backend.h, tfm_backend_sim).
 *
 * The CPU backend's ops on memory the host cannot touch: every block comes from mmap with
 * no access, opened (mprotect) only while an op, an upload or a download runs, so host
 * code that reads or writes model memory directly dies with SIGSEGV at that line, as it
 * would read garbage on a GPU.  In the other direction every pointer an op is given must
 * lie in a block, or the process aborts naming the op and the argument: host memory passed
 * to a GPU op.  host_memory is 0, so callers take their device paths (uploads, downloads,
 * staging buffers).  Results are the CPU backend's, bit for bit.
 *
 * At bf16 the activations are stored as a GPU stores them: 2-byte bf16 bits (act_size 2),
 * so host code that steps through activations in floats, or sizes them in floats, reads
 * the wrong elements and gives other bits than the CPU (test_precision.c compares them).
 * Each op then converts the activations it reads (backend.h, precision, says which
 * pointers are activations; the op's shape arguments, leading dimensions included, say
 * which elements) into fp32 scratch, runs the CPU backend's op in its bf16 emulation on
 * the scratch and the fp32 arguments as they are, and stores the activations it wrote
 * back as bf16 bits: exactly, since the emulation's outputs are bf16 values (an output
 * that is not aborts the process, naming the op).  An activation that runs past the end of
 * its block aborts too.  With TFM_SIM_PACKED=0 in the environment when the backend is
 * made, bf16 is the CPU's emulation on fp32 words instead (act_size 4).
 * What it cannot show: a GPU's speed, its asynchrony (ops here complete before they
 * return), or errors inside CUDA kernels (test_gpu_ops on a GPU does).
 * Slow (two mprotect calls per block per op, and at bf16 a conversion of every activation
 * an op touches): for tests and `--device sim`, not training.
 */
#include "backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct block {
    char *p;
    size_t len;
};

#define SCRATCH 8               /* activation arguments of an op, at most (attn_bwd's) */

struct sim {
    struct tfm_backend *in;     /* the CPU backend doing the work */
    struct block *b;
    int n, cap;
    int words;                  /* TFM_SIM_PACKED=0: bf16 in fp32 words (act_size 4) */
    float *scr[SCRATCH];        /* fp32 scratch for the activations of one op, at bf16 */
    size_t scr_cap[SCRATCH];    /* floats */
    long reads;                 /* host reads of device memory (tfm_backend_sim_reads) */
};

static struct sim *SIM(struct tfm_backend *be) { return be->impl; }

static void protect(struct sim *s, int prot)
{
    for (int i = 0; i < s->n; i++)
        if (mprotect(s->b[i].p, s->b[i].len, prot)) {
            perror("tfm: sim backend: mprotect");
            abort();
        }
}

/* Abort unless p (when given) points into a block: an op was handed host memory. */
static void dev(const struct sim *s, const void *p, const char *arg, const char *op)
{
    if (!p)
        return;
    for (int i = 0; i < s->n; i++)
        if ((const char *)p >= s->b[i].p && (const char *)p < s->b[i].p + s->b[i].len)
            return;
    fprintf(stderr, "tfm: sim backend: %s: %s = %p is not device memory\n", op, arg, p);
    abort();
}

#define OPEN(be)                       \
    struct sim *s = SIM(be);           \
    protect(s, PROT_READ | PROT_WRITE)
#define CLOSE() protect(s, PROT_NONE)
#define DEV(p) dev(s, (p), #p, __func__)

static void *sim_alloc(struct tfm_backend *be, size_t bytes, struct tfm_error *err)
{
    struct sim *s = SIM(be);
    size_t len = bytes ? bytes : 1;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        struct block *b = realloc(s->b, (size_t)cap * sizeof *b);
        if (!b) {
            tfm_fail(err, "out of memory");
            return NULL;
        }
        s->b = b;
        s->cap = cap;
    }
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        tfm_fail(err, "sim: out of memory allocating %zu bytes", bytes);
        return NULL;
    }
    s->b[s->n++] = (struct block){p, len};
    return p;
}

static void sim_free(struct tfm_backend *be, void *p)
{
    struct sim *s = SIM(be);
    for (int i = 0; p && i < s->n; i++)
        if (s->b[i].p == p) {
            munmap(p, s->b[i].len);
            s->b[i] = s->b[--s->n];
            return;
        }
}

/* memmove between device and host (which sides are device memory: dev_dst, dev_src). */
static void move(struct tfm_backend *be, void *dst, int dev_dst, const void *src, int dev_src,
                 size_t bytes, const char *op)
{
    OPEN(be);
    if (!dev_dst)
        s->reads++;
    if (dev_dst)
        dev(s, dst, "dst", op);
    if (dev_src)
        dev(s, src, "src", op);
    if (bytes && dst != src)
        memmove(dst, src, bytes);
    CLOSE();
}

static void sim_upload(struct tfm_backend *be, void *dst, const void *host, size_t bytes)
{
    move(be, dst, 1, host, 0, bytes, __func__);
}

static void sim_download(struct tfm_backend *be, void *host, const void *src, size_t bytes)
{
    move(be, host, 0, src, 1, bytes, __func__);
}

/* Abort unless the bytes [p, p + bytes) lie in one block (p is device memory). */
static void span(const struct sim *s, const void *p, size_t bytes, const char *arg,
                 const char *op)
{
    for (int i = 0; i < s->n; i++)
        if ((const char *)p >= s->b[i].p && (const char *)p < s->b[i].p + s->b[i].len) {
            if (bytes <= (size_t)(s->b[i].p + s->b[i].len - (const char *)p))
                return;
            fprintf(stderr, "tfm: sim backend: %s: %s = %p: %zu bytes run past the end of "
                    "its block of %zu\n", op, arg, p, bytes, s->b[i].len);
            abort();
        }
    dev(s, p, arg, op);
}

static void sim_download_act(struct tfm_backend *be, float *host, const void *src, size_t n)
{
    if (be->act_size == sizeof(float)) {
        move(be, host, 0, src, 1, n * sizeof(float), __func__);
        return;
    }
    OPEN(be);
    s->reads++;
    span(s, src, n * 2, "src", __func__);
    const uint16_t *d = src;
    for (size_t i = 0; i < n; i++)
        host[i] = tfm_bf16_float(d[i]);
    CLOSE();
}

/* rounded to bf16 at bf16, as the CPU does (in fp32 words, or packed) */
static void sim_upload_act(struct tfm_backend *be, void *dst, const float *host, size_t n)
{
    OPEN(be);
    span(s, dst, n * be->act_size, "dst", __func__);
    if (be->act_size == 2) {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = tfm_bf16_bits(host[i]);
    } else {
        float *d = dst;
        int round = be->precision == TFM_PRECISION_BF16;
        for (size_t i = 0; i < n; i++)
            d[i] = round ? tfm_bf16_round(host[i]) : host[i];
    }
    CLOSE();
}

static void sim_copy(struct tfm_backend *be, void *dst, const void *src, size_t bytes)
{
    move(be, dst, 1, src, 1, bytes, __func__);
}

static void sim_zero(struct tfm_backend *be, void *dst, size_t bytes)
{
    OPEN(be);
    DEV(dst);
    memset(dst, 0, bytes);
    CLOSE();
}

static void sim_sync(struct tfm_backend *be) { (void)be; }

static int sim_reserve(struct tfm_backend *be, int max_tq, int max_tk, struct tfm_error *err)
{
    return SIM(be)->in->reserve(SIM(be)->in, max_tq, max_tk, err);
}

/* Abort unless each of the n pointers d (the arguments named in `names`, "(a, b, c)") is
 * NULL or device memory. */
static void devs(const struct sim *s, const void *const *d, int n, const char *names,
                 const char *op)
{
    for (int i = 0; i < n; i++) {
        int j = 0;
        const char *p = names + 1;                  /* past "(" */
        for (; j < i && *p; p++)
            j += *p == ',';
        while (*p == ' ')
            p++;
        char name[64];
        size_t len = strcspn(p, ",)");
        snprintf(name, sizeof name, "%.*s", (int)len, p);
        dev(s, d[i], name, op);
    }
}

/* Each op of TFM_BACKEND_OPS: open the blocks, check that each pointer its list names is
 * device memory, run the CPU backend's op on the same arguments, close the blocks. */
#define SIM_LIST(...) __VA_ARGS__
#define SIM_CHECK(devlist)                                                              \
    OPEN(be);                                                                           \
    const void *const d_[] = {SIM_LIST devlist};                                        \
    devs(s, d_, (int)(sizeof d_ / sizeof *d_), #devlist, __func__);                     \
    struct tfm_backend *inner_ = s->in
#define SIM_OP_void(name, params, args, devlist)                                        \
    static void sim_##name params                                                       \
    {                                                                                   \
        SIM_CHECK(devlist);                                                             \
        {                                                                               \
            struct tfm_backend *be = inner_;    /* args name the CPU backend */         \
            be->name args;                                                              \
        }                                                                               \
        CLOSE();                                                                        \
    }
#define SIM_OP_double(name, params, args, devlist)                                      \
    static double sim_##name params                                                     \
    {                                                                                   \
        SIM_CHECK(devlist);                                                             \
        double r_;                                                                      \
        s->reads++;                 /* the value comes back to the host */              \
        {                                                                               \
            struct tfm_backend *be = inner_;                                            \
            r_ = be->name args;                                                         \
        }                                                                               \
        CLOSE();                                                                        \
        return r_;                                                                      \
    }
#define SIM_OP(ret, name, params, args, devlist) SIM_OP_##ret(name, params, args, devlist)
TFM_BACKEND_OPS(SIM_OP)
#undef SIM_OP

/* Decoding's packed output layer, where the CPU backend has it (backend.h): the packing
 * and the logits, whose pointers are all device memory, so that decoding through sim keeps
 * the CPU's bits (at bf16 too: pk_out_pack and pk_out_logits below); not out_top or
 * log_softmax_top, whose results go to host memory as no GPU op's do (the model then
 * selects the best tokens on the host, with the same bits). */
SIM_OP_void(out_pack, (struct tfm_backend *be, float *packed, const float *W, int V, int D),
            (be, packed, W, V, D), (packed, W))
SIM_OP_void(out_logits,
            (struct tfm_backend *be, float *y, const float *x, int N, const float *packed,
             int V, int D),
            (be, y, x, N, packed, V, D), (y, x, packed))

/* ---- bf16 packed in 2 bytes (act_size 2) ---------------------------------------------
 * Each op below is the one above with its activations converted: PK_BEGIN opens the blocks
 * and checks the pointers as above; act() gives an fp32 scratch copy of the activation
 * elements an op reads or writes (rows of cols elements, ld apart, all inside one block),
 * for the CPU backend's op (its bf16 emulation) to use in place of the device pointer;
 * PK_END stores the scratch of each output back as bf16 bits and closes the blocks.  In-place
 * ops (y == x) get two scratch copies of the same elements: the ops that allow it are
 * element- or row-wise, so reading one copy and writing the other gives the same values.
 * Outputs that share rows (attn_bwd's dq, dk, dv in one (N,3D) matrix) store only their
 * own columns. */

struct pk_arg {
    uint16_t *dev;
    float *host;
    int64_t rows, cols, ld;
    int out;
};
struct pk {
    struct sim *s;
    const char *op;
    struct pk_arg a[SCRATCH];
    int n;
};

/* The fp32 copy of rows x cols activations at dev, ld apart (NULL dev: NULL); out: the op
 * writes them, to be stored back. */
static float *act(struct pk *k, const void *dev, int64_t rows, int64_t cols, int64_t ld,
                  int out, const char *name)
{
    if (!dev)
        return NULL;
    if (k->n == SCRATCH) {
        fprintf(stderr, "tfm: sim backend: %s: more than %d activations\n", k->op, SCRATCH);
        abort();
    }
    struct sim *s = k->s;
    int64_t n = rows > 0 && cols > 0 ? (rows - 1) * ld + cols : 0;
    span(s, dev, (size_t)n * 2, name, k->op);
    int i = k->n++;
    size_t want = n > 0 ? (size_t)n : 1;
    if (s->scr_cap[i] < want) {
        free(s->scr[i]);
        if (!(s->scr[i] = malloc(want * sizeof(float)))) {
            fprintf(stderr, "tfm: sim backend: %s: out of memory for %zu floats\n", k->op,
                    want);
            abort();
        }
        s->scr_cap[i] = want;
    }
    float *h = s->scr[i];
    const uint16_t *d = dev;
    if (ld != cols)     /* elements the op must not read: NaN, to show if it does */
        for (int64_t j = 0; j < n; j++)
            h[j] = NAN;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            h[r * ld + c] = tfm_bf16_float(d[r * ld + c]);
    k->a[i] = (struct pk_arg){(uint16_t *)(uintptr_t)dev, h, rows, cols, ld, out};
    return h;
}

/* Store the outputs back as bf16 bits: exact, or abort (the op stored an unrounded
 * activation, which the CPU's emulation never does). */
static void pk_store(struct pk *k)
{
    for (int i = 0; i < k->n; i++) {
        struct pk_arg *a = &k->a[i];
        for (int64_t r = 0; a->out && r < a->rows; r++)
            for (int64_t c = 0; c < a->cols; c++) {
                float v = a->host[r * a->ld + c];
                uint16_t b = tfm_bf16_bits(v);
                if (tfm_bf16_float(b) != v && !isnan(v)) {
                    fprintf(stderr, "tfm: sim backend: %s: output element %lld of row %lld "
                            "is %.9g, not a bf16\n", k->op, (long long)c, (long long)r, v);
                    abort();
                }
                a->dev[r * a->ld + c] = b;
            }
    }
}

#define PK_BEGIN(devlist)                                                               \
    SIM_CHECK(devlist);                                                                 \
    struct pk pk_ = {s, __func__, {{0}}, 0};                                            \
    struct pk *pk = &pk_
#define PK_END()                                                                        \
    pk_store(pk);                                                                        \
    CLOSE()
#define IN(p, rows, cols, ld) act(pk, (p), (rows), (cols), (ld), 0, #p)
#define OUT(p, rows, cols, ld) act(pk, (p), (rows), (cols), (ld), 1, #p)

/* 1 + the largest of the n ids (device memory, open, checked to hold them), or 0 when n
 * is 0. */
static int64_t rows_of(const struct pk *pk, const int32_t *ids, int64_t n)
{
    span(pk->s, ids, (size_t)n * sizeof *ids, "ids", pk->op);
    int64_t r = 0;
    for (int64_t i = 0; i < n; i++)
        r = ids[i] + 1 > r ? ids[i] + 1 : r;
    return r;
}

static void pk_gemm(struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C,
                    int ldc)
{
    PK_BEGIN((A, B, C));
    const float *a = IN(A, ta ? K : M, ta ? M : K, lda), *b = IN(B, tb ? N : K, tb ? K : N, ldb);
    inner_->gemm(inner_, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, OUT(C, M, N, ldc), ldc);
    PK_END();
}

/* The CPU's op writes C without reading it (beta 0), then rounds it once (its emulation). */
static void pk_gemm_bias(struct tfm_backend *be, int ta, int tb, int M, int N, int K,
                         const float *A, int lda, const float *B, int ldb, const float *bias,
                         int relu, float *C, int ldc)
{
    PK_BEGIN((A, B, bias, C));
    const float *a = IN(A, ta ? K : M, ta ? M : K, lda), *b = IN(B, tb ? N : K, tb ? K : N, ldb);
    const float *bs = IN(bias, 1, N, N);
    inner_->gemm_bias(inner_, ta, tb, M, N, K, a, lda, b, ldb, bs, relu, OUT(C, M, N, ldc),
                      ldc);
    PK_END();
}

static void pk_gemm_grad(struct tfm_backend *be, int ta, int tb, int M, int N, int K,
                         float alpha, const float *A, int lda, const float *B, int ldb,
                         float beta, float *C, int ldc)
{
    PK_BEGIN((A, B, C));
    const float *a = IN(A, ta ? K : M, ta ? M : K, lda), *b = IN(B, tb ? N : K, tb ? K : N, ldb);
    inner_->gemm_grad(inner_, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
    PK_END();
}

static void pk_weights_copy(struct tfm_backend *be, float *dst, const float *src, size_t n)
{
    PK_BEGIN((dst, src));
    inner_->weights_copy(inner_, OUT(dst, 1, n, n), src, n);
    PK_END();
}

static void pk_embed_fwd(struct tfm_backend *be, float *out, const float *table,
                         const int32_t *ids, int N, int D, float scale, const float *pos,
                         int L, int pos0)
{
    PK_BEGIN((out, table, ids, pos));
    const float *t = IN(table, rows_of(pk, ids, N), D, D);
    const float *p = IN(pos, N > 0 ? pos0 + (N < L ? N : L) : 0, D, D);
    inner_->embed_fwd(inner_, OUT(out, N, D, D), t, ids, N, D, scale, p, L, pos0);
    PK_END();
}

static void pk_embed_bwd(struct tfm_backend *be, float *dtable, float *dpos, const float *dout,
                         const int32_t *ids, int N, int D, int V, float scale, int L, int pos0)
{
    PK_BEGIN((dtable, dpos, dout, ids));
    inner_->embed_bwd(inner_, dtable, dpos, IN(dout, N, D, D), ids, N, D, V, scale, L, pos0);
    PK_END();
}

static void pk_layernorm_fwd(struct tfm_backend *be, float *y, float *mean, float *rstd,
                             const float *x, const float *g, const float *b, int N, int D,
                             float eps)
{
    PK_BEGIN((y, mean, rstd, x, g, b));
    const float *xs = IN(x, N, D, D), *gs = IN(g, 1, D, D), *bs = IN(b, 1, D, D);
    inner_->layernorm_fwd(inner_, OUT(y, N, D, D), mean, rstd, xs, gs, bs, N, D, eps);
    PK_END();
}

static void pk_layernorm_bwd(struct tfm_backend *be, float *dx, float *dg, float *db,
                             const float *dy, const float *x, const float *mean,
                             const float *rstd, const float *g, int N, int D, int accumulate)
{
    PK_BEGIN((dx, dg, db, dy, x, mean, rstd, g));
    const float *dys = IN(dy, N, D, D), *xs = IN(x, N, D, D), *gs = IN(g, 1, D, D);
    inner_->layernorm_bwd(inner_, OUT(dx, N, D, D), dg, db, dys, xs, mean, rstd, gs, N, D,
                          accumulate);
    PK_END();
}

static void pk_attn_fwd(struct tfm_backend *be, const struct tfm_attn *a, const float *q,
                        int ldq, const float *k, int ldk, const float *v, int ldv, float *o,
                        int ldo, float *lse)
{
    int64_t nq = (int64_t)a->B * a->Tq, nk = (int64_t)a->B * a->Tk, c = (int64_t)a->H * a->dk;
    PK_BEGIN((a->klen, q, k, v, o, lse));
    const float *qs = IN(q, nq, c, ldq), *ks = IN(k, nk, c, ldk), *vs = IN(v, nk, c, ldv);
    inner_->attn_fwd(inner_, a, qs, ldq, ks, ldk, vs, ldv, OUT(o, nq, c, ldo), ldo, lse);
    PK_END();
}

static void pk_attn_bwd(struct tfm_backend *be, const struct tfm_attn *a, const float *q,
                        int ldq, const float *k, int ldk, const float *v, int ldv,
                        const float *o, int ldo, const float *lse, const float *dout,
                        int lddo, float *dq, int lddq, float *dk, int lddk, float *dv,
                        int lddv)
{
    int64_t nq = (int64_t)a->B * a->Tq, nk = (int64_t)a->B * a->Tk, c = (int64_t)a->H * a->dk;
    PK_BEGIN((a->klen, q, k, v, o, lse, dout, dq, dk, dv));
    const float *qs = IN(q, nq, c, ldq), *ks = IN(k, nk, c, ldk), *vs = IN(v, nk, c, ldv);
    const float *os = IN(o, nq, c, ldo), *ds = IN(dout, nq, c, lddo);
    float *dqs = OUT(dq, nq, c, lddq), *dks = OUT(dk, nk, c, lddk);
    inner_->attn_bwd(inner_, a, qs, ldq, ks, ldk, vs, ldv, os, ldo, lse, ds, lddo, dqs, lddq,
                     dks, lddk, OUT(dv, nk, c, lddv), lddv);
    PK_END();
}

static void pk_attn_decode(struct tfm_backend *be, int R, int H, int dk, float scale,
                           const float *q, int ldq, const float *k, const float *v, int ld,
                           int64_t bstride, const int32_t *blk, const int32_t *slot,
                           int sstride, const int32_t *len, float *o, int ldo)
{
    PK_BEGIN((q, k, v, blk, slot, len, o));
    /* k and v: every key some row reads, up to the last of them (the indexes checked to
     * lie in their blocks before they are read) */
    int64_t c = (int64_t)H * dk, n = 0;
    span(s, len, (size_t)R * sizeof *len, "len", __func__);
    if (!slot)
        span(s, blk, (size_t)R * sizeof *blk, "blk", __func__);
    for (int r = 0; r < R; r++) {
        if (slot)
            span(s, slot + (int64_t)r * sstride, (size_t)len[r] * sizeof *slot, "slot", __func__);
        for (int j = 0; j < len[r]; j++) {
            int64_t b = slot ? slot[(int64_t)r * sstride + j] : blk[r];
            int64_t end = b * bstride + (int64_t)j * ld + c;
            n = end > n ? end : n;
        }
    }
    const float *qs = IN(q, R, c, ldq), *ks = IN(k, 1, n, n), *vs = IN(v, 1, n, n);
    inner_->attn_decode(inner_, R, H, dk, scale, qs, ldq, ks, vs, ld, bstride, blk, slot,
                        sstride, len, OUT(o, R, c, ldo), ldo);
    PK_END();
}

static void pk_bias_act(struct tfm_backend *be, float *x, const float *b, int N, int M,
                        int relu)
{
    PK_BEGIN((x, b));
    const float *bs = IN(b, 1, M, M);
    inner_->bias_act(inner_, OUT(x, N, M, M), bs, N, M, relu);
    PK_END();
}

static void pk_bias_bwd(struct tfm_backend *be, float *db, const float *dy, int N, int M)
{
    PK_BEGIN((db, dy));
    inner_->bias_bwd(inner_, db, IN(dy, N, M, M), N, M);
    PK_END();
}

static void pk_relu_bwd(struct tfm_backend *be, float *dx, const float *dy, const float *y,
                        size_t n, float scale)
{
    PK_BEGIN((dx, dy, y));
    const float *dys = IN(dy, 1, n, n), *ys = IN(y, 1, n, n);
    inner_->relu_bwd(inner_, OUT(dx, 1, n, n), dys, ys, n, scale);
    PK_END();
}

static void pk_dropout(struct tfm_backend *be, float *y, const float *x, size_t n, float p,
                       uint64_t key)
{
    PK_BEGIN((y, x));
    const float *xs = IN(x, 1, n, n);
    inner_->dropout(inner_, OUT(y, 1, n, n), xs, n, p, key);
    PK_END();
}

static void pk_add_dropout(struct tfm_backend *be, float *y, const float *a, const float *b,
                           size_t n, float p, uint64_t key)
{
    PK_BEGIN((y, a, b));
    const float *as = IN(a, 1, n, n), *bs = IN(b, 1, n, n);
    inner_->add_dropout(inner_, OUT(y, 1, n, n), as, bs, n, p, key);
    PK_END();
}

static void pk_axpy(struct tfm_backend *be, float *y, float alpha, const float *x, size_t n)
{
    PK_BEGIN((y, x));
    const float *xs = IN(x, 1, n, n);
    inner_->axpy(inner_, OUT(y, 1, n, n), alpha, xs, n);
    PK_END();
}

static void pk_gather(struct tfm_backend *be, float *dst, int64_t dstride, const float *src,
                      int64_t sstride, const int32_t *idx, int n, int64_t len)
{
    PK_BEGIN((dst, src, idx));
    /* the rows read: idx's, else 0..n-1; one row when they are all the same (sstride 0) */
    int64_t rows = idx ? rows_of(pk, idx, n) : n;
    const float *ss = IN(src, sstride ? rows : rows > 0, len, sstride ? sstride : len);
    inner_->gather(inner_, OUT(dst, n, len, dstride), dstride, ss, sstride, idx, n, len);
    PK_END();
}

static void pk_bias_act_dropout(struct tfm_backend *be, float *x, const float *b, int N, int M,
                                int relu, float p, uint64_t key)
{
    PK_BEGIN((x, b));
    const float *bs = IN(b, 1, M, M);
    inner_->bias_act_dropout(inner_, OUT(x, N, M, M), bs, N, M, relu, p, key);
    PK_END();
}

static void pk_embed_fwd_dropout(struct tfm_backend *be, float *out, const float *table,
                                 const int32_t *ids, int N, int D, float scale, const float *pos,
                                 int L, int pos0, float p, uint64_t key)
{
    PK_BEGIN((out, table, ids, pos));
    const float *t = IN(table, rows_of(pk, ids, N), D, D);
    const float *ps = IN(pos, N > 0 ? pos0 + (N < L ? N : L) : 0, D, D);
    inner_->embed_fwd_dropout(inner_, OUT(out, N, D, D), t, ids, N, D, scale, ps, L, pos0, p,
                              key);
    PK_END();
}

static void pk_add_dropout_layernorm(struct tfm_backend *be, float *y, float *mean, float *rstd,
                                     float *r, const float *a, const float *b, const float *g,
                                     const float *bias, int N, int D, float eps, float p,
                                     uint64_t key)
{
    PK_BEGIN((y, mean, rstd, r, a, b, g, bias));
    const float *as = IN(a, N, D, D), *bs = IN(b, N, D, D);
    const float *gs = IN(g, 1, D, D), *cs = IN(bias, 1, D, D);
    float *rs = OUT(r, N, D, D);
    inner_->add_dropout_layernorm(inner_, OUT(y, N, D, D), mean, rstd, rs, as, bs, gs, cs, N,
                                  D, eps, p, key);
    PK_END();
}

static void pk_layernorm_bwd_dropout(struct tfm_backend *be, float *dx, float *dxd, float *dg,
                                     float *db, const float *dy, const float *x,
                                     const float *mean, const float *rstd, const float *g,
                                     int N, int D, int accumulate, float p, uint64_t key)
{
    PK_BEGIN((dx, dxd, dg, db, dy, x, mean, rstd, g));
    const float *dys = IN(dy, N, D, D), *xs = IN(x, N, D, D), *gs = IN(g, 1, D, D);
    float *dxs = OUT(dx, N, D, D);
    inner_->layernorm_bwd_dropout(inner_, dxs, OUT(dxd, N, D, D), dg, db, dys, xs, mean, rstd,
                                  gs, N, D, accumulate, p, key);
    PK_END();
}

static void pk_xent(struct tfm_backend *be, float *logits, const int32_t *labels, int N, int V,
                    float eps, int ignore, float *loss, float *nll, float grad_scale)
{
    PK_BEGIN((logits, labels, loss, nll));
    float *ls = act(pk, logits, N, V, V, grad_scale != 0, "logits");
    inner_->xent(inner_, ls, labels, N, V, eps, ignore, loss, nll, grad_scale);
    PK_END();
}

static void pk_log_softmax(struct tfm_backend *be, float *y, const float *x, int N, int V)
{
    PK_BEGIN((y, x));
    const float *xs = IN(x, N, V, V);
    inner_->log_softmax(inner_, OUT(y, N, V, V), xs, N, V);
    PK_END();
}

/* decoding's packed output layer: W and x are activations, the packing fp32 */
static void pk_out_pack(struct tfm_backend *be, float *packed, const float *W, int V, int D)
{
    PK_BEGIN((packed, W));
    inner_->out_pack(inner_, packed, IN(W, V, D, D), V, D);
    PK_END();
}

static void pk_out_logits(struct tfm_backend *be, float *y, const float *x, int N,
                          const float *packed, int V, int D)
{
    PK_BEGIN((y, x, packed));
    const float *xs = IN(x, N, D, D);
    inner_->out_logits(inner_, OUT(y, N, V, V), xs, N, packed, V, D);
    PK_END();
}

/* The ops with activations (sumsq, adam and the step's statistics, loss_sum, grad_clip
 * and adam_scaled, have none: the checking wrappers above). */
#define PK_OPS(X)                                                                           \
    X(gemm) X(gemm_grad) X(weights_copy) X(embed_fwd) X(embed_bwd) X(layernorm_fwd)         \
    X(layernorm_bwd) X(attn_fwd) X(attn_bwd) X(attn_decode) X(bias_act) X(bias_bwd)         \
    X(relu_bwd) X(dropout) X(add_dropout) X(axpy) X(gather) X(bias_act_dropout)             \
    X(embed_fwd_dropout) X(add_dropout_layernorm) X(layernorm_bwd_dropout) X(xent)          \
    X(log_softmax) X(gemm_bias)

/* The CPU backend doing the work emulates bf16; packed (act_size 2, the pk_ ops) unless
 * TFM_SIM_PACKED=0 said otherwise when the backend was made. */
static int sim_set_bf16(struct tfm_backend *be, int on, struct tfm_error *err)
{
    struct sim *s = SIM(be);
    if (tfm_backend_set_precision(s->in, on ? TFM_PRECISION_BF16 : TFM_PRECISION_FP32, err) < 0)
        return -1;
    int packed = on && !s->words;
    be->act_size = packed ? 2 : sizeof(float);
#define PK_SET(op) be->op = packed ? pk_##op : sim_##op;
    PK_OPS(PK_SET)
#undef PK_SET
    if (be->out_pack) {
        be->out_pack = packed ? pk_out_pack : sim_out_pack;
        be->out_logits = packed ? pk_out_logits : sim_out_logits;
    }
    return 0;
}

long tfm_backend_sim_reads(const struct tfm_backend *be)
{
    return be->kind == TFM_BACKEND_SIM ? ((const struct sim *)be->impl)->reads : -1;
}

static void sim_destroy(struct tfm_backend *be)
{
    if (!be)
        return;
    struct sim *s = SIM(be);
    if (s) {
        for (int i = 0; i < s->n; i++)
            munmap(s->b[i].p, s->b[i].len);
        free(s->b);
        for (int i = 0; i < SCRATCH; i++)
            free(s->scr[i]);
        if (s->in)
            s->in->destroy(s->in);
    }
    free(s);
    free(be);
}

int tfm_backend_sim_packed_env(int *packed, struct tfm_error *err)
{
    const char *v = getenv("TFM_SIM_PACKED");
    *packed = 1;
    if (!v)
        return 0;
    if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
        return tfm_fail(err, "TFM_SIM_PACKED='%s': expected 0 or 1", v);
    *packed = v[0] == '1';
    return 0;
}

struct tfm_backend *tfm_backend_sim(int threads, struct tfm_error *err)
{
    int packed;
    if (tfm_backend_sim_packed_env(&packed, err))
        return NULL;
    struct tfm_backend *be = calloc(1, sizeof *be);
    struct sim *s = calloc(1, sizeof *s);
    if (!be || !s) {
        free(be);
        free(s);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    if (!(s->in = tfm_backend_cpu(threads, err))) {
        free(be);
        free(s);
        return NULL;
    }
    s->words = !packed;
    be->name = "sim";
    be->kind = TFM_BACKEND_SIM;
    be->precision = TFM_PRECISION_FP32;
    /* fp32 unless asked: the sim backend's bits are the CPU's at the same precision */
    be->auto_precision = TFM_PRECISION_FP32;
    be->act_size = sizeof(float);
    be->set_bf16 = sim_set_bf16;
    be->threads = s->in->threads;
    be->host_memory = 0;
    be->impl = s;
    be->alloc = sim_alloc;
    be->free = sim_free;
    be->upload = sim_upload;
    be->download = sim_download;
    be->copy = sim_copy;
    be->zero = sim_zero;
    be->download_act = sim_download_act;
    be->upload_act = sim_upload_act;
    be->sync = sim_sync;
    be->reserve = sim_reserve;
#define SIM_SET(ret, name, params, args, devlist) be->name = sim_##name;
    TFM_BACKEND_OPS(SIM_SET)
#undef SIM_SET
    if (s->in->out_pack) {
        be->out_pack_floats = s->in->out_pack_floats;
        be->out_pack = sim_out_pack;
        be->out_logits = sim_out_logits;
    }
    be->destroy = sim_destroy;
    return be;
}
