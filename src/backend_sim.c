/* backend_sim.c: a stand-in for a GPU on any machine (backend.h, tfm_backend_sim).
 *
 * The CPU backend's ops on memory the host cannot touch: every block comes from mmap with
 * no access, opened (mprotect) only while an op, an upload or a download runs, so host
 * code that reads or writes model memory directly dies with SIGSEGV at that line, as it
 * would read garbage on a GPU.  In the other direction every pointer an op is given must
 * lie in a block, or the process aborts naming the op and the argument: host memory passed
 * to a GPU op.  host_memory is 0, so callers take their device paths (uploads, downloads,
 * staging buffers).  Results are the CPU backend's, bit for bit.
 * What it cannot show: a GPU's speed, its asynchrony (ops here complete before they
 * return), or errors inside CUDA kernels (test_gpu_ops on a GPU does).
 * Slow (two mprotect calls per block per op): for tests and `--device sim`, not training.
 */
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct block {
    char *p;
    size_t len;
};

struct sim {
    struct tfm_backend *in;     /* the CPU backend doing the work */
    struct block *b;
    int n, cap;
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

/* An op: open the blocks, check that each named pointer is device memory, run the CPU
 * backend's op on the same arguments, close the blocks. */
#define SIM_OP(op, params, checks, args) \
    static void sim_##op params           \
    {                                     \
        OPEN(be);                         \
        checks;                           \
        s->in->op args;                   \
        CLOSE();                          \
    }

SIM_OP(gemm,
       (struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
        const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc),
       DEV(A); DEV(B); DEV(C),
       (s->in, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
SIM_OP(gemm_batched,
       (struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
        const float *A, int lda, int64_t sa, const float *B, int ldb, int64_t sb, float beta,
        float *C, int ldc, int64_t sc, int batch),
       DEV(A); DEV(B); DEV(C),
       (s->in, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch))
SIM_OP(embed_fwd,
       (struct tfm_backend *be, float *out, const float *table, const int32_t *ids, int N,
        int D, float scale, const float *pos, int L, int pos0),
       DEV(out); DEV(table); DEV(ids); DEV(pos),
       (s->in, out, table, ids, N, D, scale, pos, L, pos0))
SIM_OP(embed_bwd,
       (struct tfm_backend *be, float *dtable, float *dpos, const float *dout,
        const int32_t *ids, int N, int D, int V, float scale, int L, int pos0),
       DEV(dtable); DEV(dpos); DEV(dout); DEV(ids),
       (s->in, dtable, dpos, dout, ids, N, D, V, scale, L, pos0))
SIM_OP(layernorm_fwd,
       (struct tfm_backend *be, float *y, float *mean, float *rstd, const float *x,
        const float *g, const float *b, int N, int D, float eps),
       DEV(y); DEV(mean); DEV(rstd); DEV(x); DEV(g); DEV(b),
       (s->in, y, mean, rstd, x, g, b, N, D, eps))
SIM_OP(layernorm_bwd,
       (struct tfm_backend *be, float *dx, float *dg, float *db, const float *dy,
        const float *x, const float *mean, const float *rstd, const float *g, int N, int D,
        int accumulate),
       DEV(dx); DEV(dg); DEV(db); DEV(dy); DEV(x); DEV(mean); DEV(rstd); DEV(g),
       (s->in, dx, dg, db, dy, x, mean, rstd, g, N, D, accumulate))
SIM_OP(attn_fwd,
       (struct tfm_backend *be, const struct tfm_attn *a, const float *q, int ldq,
        const float *k, int ldk, const float *v, int ldv, float *o, int ldo, float *lse),
       DEV(a->klen); DEV(q); DEV(k); DEV(v); DEV(o); DEV(lse),
       (s->in, a, q, ldq, k, ldk, v, ldv, o, ldo, lse))
SIM_OP(attn_bwd,
       (struct tfm_backend *be, const struct tfm_attn *a, const float *q, int ldq,
        const float *k, int ldk, const float *v, int ldv, const float *o, int ldo,
        const float *lse, const float *dout, int lddo, float *dq, int lddq, float *dk, int lddk,
        float *dv, int lddv),
       DEV(a->klen); DEV(q); DEV(k); DEV(v); DEV(o); DEV(lse); DEV(dout); DEV(dq); DEV(dk);
       DEV(dv),
       (s->in, a, q, ldq, k, ldk, v, ldv, o, ldo, lse, dout, lddo, dq, lddq, dk, lddk, dv,
        lddv))
SIM_OP(attn_decode,
       (struct tfm_backend *be, int R, int H, int dk, float scale, const float *q, int ldq,
        const float *k, const float *v, int ld, int64_t bstride, const int32_t *blk,
        const int32_t *slot, int sstride, const int32_t *len, float *o, int ldo),
       DEV(q); DEV(k); DEV(v); DEV(blk); DEV(slot); DEV(len); DEV(o),
       (s->in, R, H, dk, scale, q, ldq, k, v, ld, bstride, blk, slot, sstride, len, o, ldo))
SIM_OP(bias_act,
       (struct tfm_backend *be, float *x, const float *b, int N, int M, int relu),
       DEV(x); DEV(b),
       (s->in, x, b, N, M, relu))
SIM_OP(bias_bwd,
       (struct tfm_backend *be, float *db, const float *dy, int N, int M),
       DEV(db); DEV(dy),
       (s->in, db, dy, N, M))
SIM_OP(relu_bwd,
       (struct tfm_backend *be, float *dx, const float *dy, const float *y, size_t n,
        float scale),
       DEV(dx); DEV(dy); DEV(y),
       (s->in, dx, dy, y, n, scale))
SIM_OP(dropout,
       (struct tfm_backend *be, float *y, const float *x, size_t n, float p, uint64_t key),
       DEV(y); DEV(x),
       (s->in, y, x, n, p, key))
SIM_OP(add_dropout,
       (struct tfm_backend *be, float *y, const float *a, const float *b, size_t n, float p,
        uint64_t key),
       DEV(y); DEV(a); DEV(b),
       (s->in, y, a, b, n, p, key))
SIM_OP(axpy,
       (struct tfm_backend *be, float *y, float alpha, const float *x, size_t n),
       DEV(y); DEV(x),
       (s->in, y, alpha, x, n))
SIM_OP(scale,
       (struct tfm_backend *be, float *x, float alpha, size_t n),
       DEV(x),
       (s->in, x, alpha, n))
SIM_OP(gather,
       (struct tfm_backend *be, float *dst, int64_t dstride, const float *src, int64_t sstride,
        const int32_t *idx, int n, int64_t len),
       DEV(dst); DEV(src); DEV(idx),
       (s->in, dst, dstride, src, sstride, idx, n, len))
SIM_OP(xent,
       (struct tfm_backend *be, float *logits, const int32_t *labels, int N, int V, float eps,
        int ignore, float *loss, float *nll, float grad_scale),
       DEV(logits); DEV(labels); DEV(loss); DEV(nll),
       (s->in, logits, labels, N, V, eps, ignore, loss, nll, grad_scale))
SIM_OP(log_softmax,
       (struct tfm_backend *be, float *y, const float *x, int N, int V),
       DEV(y); DEV(x),
       (s->in, y, x, N, V))

static double sim_sumsq(struct tfm_backend *be, const float *x, size_t n)
{
    OPEN(be);
    DEV(x);
    double r = s->in->sumsq(s->in, x, n);
    CLOSE();
    return r;
}

SIM_OP(adam,
       (struct tfm_backend *be, float *p, float *grad, float *m, float *v, size_t n, float lr,
        float b1, float b2, float eps, float gscale, int64_t step),
       DEV(p); DEV(grad); DEV(m); DEV(v),
       (s->in, p, grad, m, v, n, lr, b1, b2, eps, gscale, step))

static void sim_destroy(struct tfm_backend *be)
{
    if (!be)
        return;
    struct sim *s = SIM(be);
    if (s) {
        for (int i = 0; i < s->n; i++)
            munmap(s->b[i].p, s->b[i].len);
        free(s->b);
        if (s->in)
            s->in->destroy(s->in);
    }
    free(s);
    free(be);
}

struct tfm_backend *tfm_backend_sim(int threads, struct tfm_error *err)
{
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
    be->name = "sim";
    be->kind = TFM_BACKEND_SIM;
    be->threads = s->in->threads;
    be->host_memory = 0;
    be->impl = s;
    be->alloc = sim_alloc;
    be->free = sim_free;
    be->upload = sim_upload;
    be->download = sim_download;
    be->copy = sim_copy;
    be->zero = sim_zero;
    be->sync = sim_sync;
    be->reserve = sim_reserve;
    be->gemm = sim_gemm;
    be->gemm_batched = sim_gemm_batched;
    be->embed_fwd = sim_embed_fwd;
    be->embed_bwd = sim_embed_bwd;
    be->layernorm_fwd = sim_layernorm_fwd;
    be->layernorm_bwd = sim_layernorm_bwd;
    be->attn_fwd = sim_attn_fwd;
    be->attn_bwd = sim_attn_bwd;
    be->attn_decode = sim_attn_decode;
    be->bias_act = sim_bias_act;
    be->bias_bwd = sim_bias_bwd;
    be->relu_bwd = sim_relu_bwd;
    be->dropout = sim_dropout;
    be->add_dropout = sim_add_dropout;
    be->axpy = sim_axpy;
    be->scale = sim_scale;
    be->gather = sim_gather;
    be->xent = sim_xent;
    be->log_softmax = sim_log_softmax;
    be->sumsq = sim_sumsq;
    be->adam = sim_adam;
    be->destroy = sim_destroy;
    return be;
}
