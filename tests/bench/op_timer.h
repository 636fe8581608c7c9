/* op_timer.h: where a training step's time goes, op by op, on any backend (bench only).
 *
 * op_timer_wrap(be) replaces each op of be's table with one that runs the op, waits for
 * the device (be->sync) and adds the elapsed wall time to the op's total.  Waiting after
 * every op drains the device's queue, so each op's time is its launch plus its execution,
 * and the step is slower than without the timer: the split is measured in passes of its
 * own and reported as shares, next to the untimed step time.  The inner ops see the same
 * backend pointer (be->impl is untouched), so any backend can be timed: the CPU, sim and
 * CUDA alike.  Single-threaded: one timer per process.
 */
#ifndef TFM_BENCH_OP_TIMER_H
#define TFM_BENCH_OP_TIMER_H

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend.h"

enum { OP_TIMER_MAX = 32 };

static struct {
    struct tfm_backend inner;           /* the backend's table before wrapping */
    const char *name[OP_TIMER_MAX];
    double seconds[OP_TIMER_MAX];
    long calls[OP_TIMER_MAX];
    int n;
} op_timer;

static double op_timer_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void op_timer_add(struct tfm_backend *be, int slot, double t0)
{
    op_timer.inner.sync(be);
    op_timer.seconds[slot] += op_timer_now() - t0;
    op_timer.calls[slot]++;
}

/* One wrapper per op: slot is the op's index in the report. */
#define OP_TIMED(slot, op, params, args)                                                  \
    static void timed_##op params                                                         \
    {                                                                                     \
        double t0 = op_timer_now();                                                       \
        op_timer.inner.op args;                                                           \
        op_timer_add(be, slot, t0);                                                       \
    }

OP_TIMED(0, gemm,
         (struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
          const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc),
         (be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
OP_TIMED(1, gemm_batched,
         (struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
          const float *A, int lda, int64_t sa, const float *B, int ldb, int64_t sb,
          float beta, float *C, int ldc, int64_t sc, int batch),
         (be, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch))
OP_TIMED(2, embed_fwd,
         (struct tfm_backend *be, float *out, const float *table, const int32_t *ids, int N,
          int D, float scale, const float *pos, int L, int pos0),
         (be, out, table, ids, N, D, scale, pos, L, pos0))
OP_TIMED(3, embed_bwd,
         (struct tfm_backend *be, float *dtable, float *dpos, const float *dout,
          const int32_t *ids, int N, int D, int V, float scale, int L, int pos0),
         (be, dtable, dpos, dout, ids, N, D, V, scale, L, pos0))
OP_TIMED(4, layernorm_fwd,
         (struct tfm_backend *be, float *y, float *mean, float *rstd, const float *x,
          const float *g, const float *b, int N, int D, float eps),
         (be, y, mean, rstd, x, g, b, N, D, eps))
OP_TIMED(5, layernorm_bwd,
         (struct tfm_backend *be, float *dx, float *dg, float *db, const float *dy,
          const float *x, const float *mean, const float *rstd, const float *g, int N, int D,
          int accumulate),
         (be, dx, dg, db, dy, x, mean, rstd, g, N, D, accumulate))
OP_TIMED(6, attn_fwd,
         (struct tfm_backend *be, const struct tfm_attn *a, const float *q, int ldq,
          const float *k, int ldk, const float *v, int ldv, float *o, int ldo, float *lse),
         (be, a, q, ldq, k, ldk, v, ldv, o, ldo, lse))
OP_TIMED(7, attn_bwd,
         (struct tfm_backend *be, const struct tfm_attn *a, const float *q, int ldq,
          const float *k, int ldk, const float *v, int ldv, const float *o, int ldo,
          const float *lse, const float *dout, int lddo, float *dq, int lddq, float *dk,
          int lddk, float *dv, int lddv),
         (be, a, q, ldq, k, ldk, v, ldv, o, ldo, lse, dout, lddo, dq, lddq, dk, lddk, dv,
          lddv))
OP_TIMED(8, bias_act,
         (struct tfm_backend *be, float *x, const float *b, int N, int M, int relu),
         (be, x, b, N, M, relu))
OP_TIMED(9, bias_bwd,
         (struct tfm_backend *be, float *db, const float *dy, int N, int M),
         (be, db, dy, N, M))
OP_TIMED(10, relu_bwd,
         (struct tfm_backend *be, float *dx, const float *dy, const float *y, size_t n,
          float scale),
         (be, dx, dy, y, n, scale))
OP_TIMED(11, dropout,
         (struct tfm_backend *be, float *y, const float *x, size_t n, float p, uint64_t key),
         (be, y, x, n, p, key))
OP_TIMED(12, add_dropout,
         (struct tfm_backend *be, float *y, const float *a, const float *b, size_t n, float p,
          uint64_t key),
         (be, y, a, b, n, p, key))
OP_TIMED(13, axpy,
         (struct tfm_backend *be, float *y, float alpha, const float *x, size_t n),
         (be, y, alpha, x, n))
OP_TIMED(14, gather,
         (struct tfm_backend *be, float *dst, int64_t dstride, const float *src,
          int64_t sstride, const int32_t *idx, int n, int64_t len),
         (be, dst, dstride, src, sstride, idx, n, len))
OP_TIMED(15, xent,
         (struct tfm_backend *be, float *logits, const int32_t *labels, int N, int V,
          float eps, int ignore, float *loss, float *nll, float grad_scale),
         (be, logits, labels, N, V, eps, ignore, loss, nll, grad_scale))
OP_TIMED(16, adam,
         (struct tfm_backend *be, float *p, float *grad, float *m, float *v, size_t n,
          float lr, float b1, float b2, float eps, float gscale, int64_t step),
         (be, p, grad, m, v, n, lr, b1, b2, eps, gscale, step))
OP_TIMED(17, copy,
         (struct tfm_backend *be, void *dst, const void *src, size_t bytes),
         (be, dst, src, bytes))
OP_TIMED(18, zero,
         (struct tfm_backend *be, void *dst, size_t bytes),
         (be, dst, bytes))
OP_TIMED(19, upload,
         (struct tfm_backend *be, void *dst, const void *host, size_t bytes),
         (be, dst, host, bytes))

static double timed_sumsq(struct tfm_backend *be, const float *x, size_t n)
{
    double t0 = op_timer_now();
    double r = op_timer.inner.sumsq(be, x, n);
    op_timer_add(be, 20, t0);
    return r;
}

/* Time every op of be from now on (the ops a training step calls). */
static void op_timer_wrap(struct tfm_backend *be)
{
    static const char *const names[] = {
        "gemm", "gemm_batched", "embed_fwd", "embed_bwd", "layernorm_fwd", "layernorm_bwd",
        "attn_fwd", "attn_bwd", "bias_act", "bias_bwd", "relu_bwd", "dropout", "add_dropout",
        "axpy", "gather", "xent", "adam", "copy", "zero", "upload", "sumsq"};
    op_timer.inner = *be;
    op_timer.n = (int)(sizeof names / sizeof *names);
    for (int i = 0; i < op_timer.n; i++)
        op_timer.name[i] = names[i];
#define OP_SET(op) be->op = timed_##op
    OP_SET(gemm); OP_SET(gemm_batched); OP_SET(embed_fwd); OP_SET(embed_bwd);
    OP_SET(layernorm_fwd); OP_SET(layernorm_bwd); OP_SET(attn_fwd); OP_SET(attn_bwd);
    OP_SET(bias_act); OP_SET(bias_bwd); OP_SET(relu_bwd); OP_SET(dropout);
    OP_SET(add_dropout); OP_SET(axpy); OP_SET(gather); OP_SET(xent); OP_SET(adam);
    OP_SET(copy); OP_SET(zero); OP_SET(upload); OP_SET(sumsq);
#undef OP_SET
}

static void op_timer_reset(void)
{
    memset(op_timer.seconds, 0, sizeof op_timer.seconds);
    memset(op_timer.calls, 0, sizeof op_timer.calls);
}

/* One line per op with time, in order of time: "op NAME calls=N ms_per_step=X share=X%". */
static void op_timer_print(FILE *f, int steps)
{
    double total = 0;
    int order[OP_TIMER_MAX];
    for (int i = 0; i < op_timer.n; i++) {
        total += op_timer.seconds[i];
        order[i] = i;
    }
    for (int i = 1; i < op_timer.n; i++)   /* insertion sort, longest first */
        for (int j = i; j > 0 && op_timer.seconds[order[j]] > op_timer.seconds[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int k = 0; k < op_timer.n; k++) {
        int i = order[k];
        if (!op_timer.calls[i])
            continue;
        fprintf(f, "op %s calls=%ld ms_per_step=%.3f share=%.1f%%\n", op_timer.name[i],
                op_timer.calls[i] / steps, op_timer.seconds[i] * 1e3 / steps,
                total > 0 ? 100 * op_timer.seconds[i] / total : 0);
    }
}

#endif
