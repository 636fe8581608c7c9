/* precision.c: choosing a backend's arithmetic (backend.h, tfm_backend_set_precision) and
 * the CPU's emulation of bf16.
 *
 * The emulation wraps a host-memory backend's table: each op runs as at fp32, then the
 * activations it wrote are rounded to bf16 in place (tfm_bf16_round), at exactly the
 * places where a GPU computing in bf16 stores bf16 (backend.h lists them); the fp32
 * outputs (statistics, parameter gradients, Adam) are left alone.  Inputs need no
 * rounding: every activation an op reads was written by an op, and the weights it reads
 * are the compute copy (weights_copy, rounded here).  Products of bf16 inputs summed in
 * fp32 are what tensor cores compute, up to the order of the sums.  One op also rounds
 * inside: attention at bf16 (backend_cpu.c, seeing be->precision) rounds its weights P'
 * and their gradient dS to bf16 before the products that read them, where the CUDA
 * backend's default bf16 attention stores them (kernels/cuda_attn_mm.cu).
 * Not here: the ops themselves (backend_cpu.c), the CUDA kernels (kernels/).
 */
#include "backend.h"

#include <stdlib.h>

const char *tfm_precision_name(enum tfm_precision p)
{
    return p == TFM_PRECISION_BF16 ? "bf16" : "fp32";
}

int tfm_backend_set_precision(struct tfm_backend *be, enum tfm_precision p,
                              struct tfm_error *err)
{
    if (p == TFM_PRECISION_AUTO)
        p = be->auto_precision == TFM_PRECISION_BF16 ? TFM_PRECISION_BF16 : TFM_PRECISION_FP32;
    enum tfm_precision now =
        be->precision == TFM_PRECISION_BF16 ? TFM_PRECISION_BF16 : TFM_PRECISION_FP32;
    if (p == now) {
        be->precision = now;
        return 0;
    }
    if (be->models > 0)
        return tfm_fail(err, "%s backend: precision %s: %d model%s on it compute%s in %s",
                        be->name, tfm_precision_name(p), be->models, be->models > 1 ? "s" : "",
                        be->models > 1 ? "" : "s", tfm_precision_name(now));
    if (!be->set_bf16)
        return tfm_fail(err, "%s backend: precision bf16: not in this build (fp32 only)",
                        be->name);
    if (be->set_bf16(be, p == TFM_PRECISION_BF16, err) < 0)
        return -1;
    be->precision = p;
    return 0;
}

/* ---- the emulation ------------------------------------------------------------------ */

struct emu {
    struct tfm_backend f32;     /* the table as it was: every op at fp32 */
};

static const struct tfm_backend *F32(struct tfm_backend *be)
{
    return &((struct emu *)be->emu)->f32;
}

static void round_n(float *x, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        x[i] = tfm_bf16_round(x[i]);
}

/* rows of cols floats, ld apart */
static void round_rows(float *x, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t r = 0; r < rows; r++)
        round_n(x + r * ld, (size_t)cols);
}

static void emu_gemm(struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc)
{
    F32(be)->gemm(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    round_rows(C, M, N, ldc);
}

/* The fp32 op (its bias and ReLU added to the unrounded sums), then C rounded once: what a
 * GPU's epilogue stores.  (Not gemm and then bias_act at bf16, which would round the sums
 * first and the biased values again.) */
static void emu_gemm_bias(struct tfm_backend *be, int ta, int tb, int M, int N, int K,
                          const float *A, int lda, const float *B, int ldb, const float *bias,
                          int relu, float *C, int ldc)
{
    F32(be)->gemm_bias(be, ta, tb, M, N, K, A, lda, B, ldb, bias, relu, C, ldc);
    round_rows(C, M, N, ldc);
}

static void emu_weights_copy(struct tfm_backend *be, float *dst, const float *src, size_t n)
{
    F32(be)->weights_copy(be, dst, src, n);
    round_n(dst, n);
}

static void emu_embed_fwd(struct tfm_backend *be, float *out, const float *table,
                          const int32_t *ids, int N, int D, float scale, const float *pos,
                          int L, int pos0)
{
    F32(be)->embed_fwd(be, out, table, ids, N, D, scale, pos, L, pos0);
    round_n(out, (size_t)N * D);
}

static void emu_layernorm_fwd(struct tfm_backend *be, float *y, float *mean, float *rstd,
                              const float *x, const float *g, const float *b, int N, int D,
                              float eps)
{
    F32(be)->layernorm_fwd(be, y, mean, rstd, x, g, b, N, D, eps);
    round_n(y, (size_t)N * D);
}

static void emu_layernorm_bwd(struct tfm_backend *be, float *dx, float *dg, float *db,
                              const float *dy, const float *x, const float *mean,
                              const float *rstd, const float *g, int N, int D, int accumulate)
{
    F32(be)->layernorm_bwd(be, dx, dg, db, dy, x, mean, rstd, g, N, D, accumulate);
    round_n(dx, (size_t)N * D);
}

static void emu_attn_fwd(struct tfm_backend *be, const struct tfm_attn *a, const float *q,
                         int ldq, const float *k, int ldk, const float *v, int ldv, float *o,
                         int ldo, float *lse)
{
    F32(be)->attn_fwd(be, a, q, ldq, k, ldk, v, ldv, o, ldo, lse);
    round_rows(o, (int64_t)a->B * a->Tq, (int64_t)a->H * a->dk, ldo);
}

static void emu_attn_bwd(struct tfm_backend *be, const struct tfm_attn *a, const float *q,
                         int ldq, const float *k, int ldk, const float *v, int ldv,
                         const float *o, int ldo, const float *lse, const float *dout,
                         int lddo, float *dq, int lddq, float *dk, int lddk, float *dv,
                         int lddv)
{
    F32(be)->attn_bwd(be, a, q, ldq, k, ldk, v, ldv, o, ldo, lse, dout, lddo, dq, lddq, dk,
                      lddk, dv, lddv);
    int64_t cols = (int64_t)a->H * a->dk;
    round_rows(dq, (int64_t)a->B * a->Tq, cols, lddq);
    round_rows(dk, (int64_t)a->B * a->Tk, cols, lddk);
    round_rows(dv, (int64_t)a->B * a->Tk, cols, lddv);
}

static void emu_attn_decode(struct tfm_backend *be, int R, int H, int dk, float scale,
                            const float *q, int ldq, const float *k, const float *v, int ld,
                            int64_t bstride, const int32_t *blk, const int32_t *slot,
                            int sstride, const int32_t *len, float *o, int ldo)
{
    F32(be)->attn_decode(be, R, H, dk, scale, q, ldq, k, v, ld, bstride, blk, slot, sstride,
                         len, o, ldo);
    round_rows(o, R, (int64_t)H * dk, ldo);
}

static void emu_bias_act(struct tfm_backend *be, float *x, const float *b, int N, int M,
                         int relu)
{
    F32(be)->bias_act(be, x, b, N, M, relu);
    round_n(x, (size_t)N * M);
}

static void emu_relu_bwd(struct tfm_backend *be, float *dx, const float *dy, const float *y,
                         size_t n, float scale)
{
    F32(be)->relu_bwd(be, dx, dy, y, n, scale);
    round_n(dx, n);
}

static void emu_dropout(struct tfm_backend *be, float *y, const float *x, size_t n, float p,
                        uint64_t key)
{
    F32(be)->dropout(be, y, x, n, p, key);
    round_n(y, n);
}

static void emu_add_dropout(struct tfm_backend *be, float *y, const float *a, const float *b,
                            size_t n, float p, uint64_t key)
{
    F32(be)->add_dropout(be, y, a, b, n, p, key);
    round_n(y, n);
}

static void emu_axpy(struct tfm_backend *be, float *y, float alpha, const float *x, size_t n)
{
    F32(be)->axpy(be, y, alpha, x, n);
    round_n(y, n);
}

/* The fused ops: their sequences, each op rounding what it stores, as backend.h defines
 * them at bf16. */
static void emu_bias_act_dropout(struct tfm_backend *be, float *x, const float *b, int N, int M,
                                 int relu, float p, uint64_t key)
{
    emu_bias_act(be, x, b, N, M, relu);
    if (p > 0)
        emu_dropout(be, x, x, (size_t)N * M, p, key);
}

static void emu_embed_fwd_dropout(struct tfm_backend *be, float *out, const float *table,
                                  const int32_t *ids, int N, int D, float scale,
                                  const float *pos, int L, int pos0, float p, uint64_t key)
{
    emu_embed_fwd(be, out, table, ids, N, D, scale, pos, L, pos0);
    if (p > 0)
        emu_dropout(be, out, out, (size_t)N * D, p, key);
}

static void emu_add_dropout_layernorm(struct tfm_backend *be, float *y, float *mean,
                                      float *rstd, float *r, const float *a, const float *b,
                                      const float *g, const float *bias, int N, int D,
                                      float eps, float p, uint64_t key)
{
    emu_add_dropout(be, r, a, b, (size_t)N * D, p, key);
    emu_layernorm_fwd(be, y, mean, rstd, r, g, bias, N, D, eps);
}

static void emu_layernorm_bwd_dropout(struct tfm_backend *be, float *dx, float *dxd, float *dg,
                                      float *db, const float *dy, const float *x,
                                      const float *mean, const float *rstd, const float *g,
                                      int N, int D, int accumulate, float p, uint64_t key)
{
    emu_layernorm_bwd(be, dx, dg, db, dy, x, mean, rstd, g, N, D, accumulate);
    emu_dropout(be, dxd, dx, (size_t)N * D, p, key);
}

static void emu_xent(struct tfm_backend *be, float *logits, const int32_t *labels, int N, int V,
                     float eps, int ignore, float *loss, float *nll, float grad_scale)
{
    F32(be)->xent(be, logits, labels, N, V, eps, ignore, loss, nll, grad_scale);
    if (grad_scale != 0)
        round_n(logits, (size_t)N * V);
}

static void emu_log_softmax(struct tfm_backend *be, float *y, const float *x, int N, int V)
{
    F32(be)->log_softmax(be, y, x, N, V);
    round_n(y, (size_t)N * V);
}

/* decoding's packed output layer (backend.h): the logits are an activation */
static void emu_out_logits(struct tfm_backend *be, float *y, const float *x, int N,
                           const float *packed, int V, int D)
{
    F32(be)->out_logits(be, y, x, N, packed, V, D);
    round_n(y, (size_t)N * V);
}

static void emu_destroy(struct tfm_backend *be)
{
    struct emu *e = be->emu;
    void (*destroy)(struct tfm_backend *) = e->f32.destroy;
    be->emu = NULL;
    free(e);
    destroy(be);
}

/* The ops the emulation wraps: those that store activations (the others, gemm_grad,
 * embed_bwd, bias_bwd, gather, sumsq, adam and the step's statistics (loss_sum, grad_clip,
 * adam_scaled), write fp32 or double or copy bf16 values). */
#define EMU_OPS(X)                                                                          \
    X(gemm) X(weights_copy) X(embed_fwd) X(layernorm_fwd) X(layernorm_bwd) X(attn_fwd)      \
    X(attn_bwd) X(attn_decode) X(bias_act) X(relu_bwd) X(dropout) X(add_dropout) X(axpy)    \
    X(bias_act_dropout) X(embed_fwd_dropout) X(add_dropout_layernorm)                       \
    X(layernorm_bwd_dropout) X(xent) X(log_softmax) X(gemm_bias)

int tfm_backend_emulate_bf16(struct tfm_backend *be, int on, struct tfm_error *err)
{
    struct emu *e = be->emu;
    if (!on) {
        if (!e)
            return 0;
#define EMU_RESTORE(op) be->op = e->f32.op;
        EMU_OPS(EMU_RESTORE)
#undef EMU_RESTORE
        be->log_softmax_top = e->f32.log_softmax_top;
        be->out_logits = e->f32.out_logits;
        be->out_top = e->f32.out_top;
        be->destroy = e->f32.destroy;
        be->emu = NULL;
        free(e);
        return 0;
    }
    if (e)
        return 0;
    if (!(e = malloc(sizeof *e)))
        return tfm_fail(err, "out of memory");
    e->f32 = *be;
    be->emu = e;
#define EMU_SET(op) be->op = emu_##op;
    EMU_OPS(EMU_SET)
#undef EMU_SET
    /* the top-k searches read unrounded logits or log-probabilities: callers take the
     * logits (rounded), then log_softmax */
    be->log_softmax_top = NULL;
    be->out_top = NULL;
    if (be->out_logits)
        be->out_logits = emu_out_logits;
    be->destroy = emu_destroy;
    return 0;
}
