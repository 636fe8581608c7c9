/* backend.h: the table of operations the model is written against, once.
 *
 * A backend owns a device memory space and implements every op below on pointers into it.
 * The CPU backend (backend_cpu.c: fp32, OpenBLAS sgemm, a work-claiming thread pool for
 * every op) is the reference; a CUDA twin (kernels/, one .cu file per op) implements the same table with the
 * same semantics, and is tested op by op against the CPU.
 *
 * Conventions for every op:
 *  - Pointers are device pointers (on the CPU: ordinary memory).  Matrices are row-major;
 *    a shape comment (N,D) means N rows of D floats; "ld" is the row stride in floats.
 *  - "+=" in a description means the op accumulates into its output; "=" overwrites.
 *    Parameter gradients always accumulate, so several batches (and tied weights) add up.
 *  - Ops are deterministic: the same inputs give the same bits on every run for a fixed
 *    thread count (static partitioning, reductions in a fixed order, no atomics).  The
 *    non-gemm CPU ops give the same bits for every thread count.
 *  - Dropout masks come from a counter-based hash of (key, element index), never from a
 *    stateful generator: forward and backward regenerate the same mask, and the result does
 *    not depend on threads.  element i is kept iff tfm_dropout_keep(key, i, p); kept
 *    elements are scaled by 1/(1-p).  Callers derive key with tfm_rng_key.
 *  - Ops never fail once their arguments are valid (the model validates shapes before it
 *    calls them); only memory management returns errors.
 *
 * Not here: what the model computes with the ops (model.c), the optimizer schedule
 * (optim.c), rank communication (dist.c; the all_reduce hook below is set by the trainer).
 */
#ifndef TFM_BACKEND_H
#define TFM_BACKEND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "error.h"

/* ---- counter-based random numbers (shared by all backends, identical bits) ---------- */

/* Compiled for the GPU too when included from CUDA (kernels/). */
#ifdef __CUDACC__
#define TFM_HD __host__ __device__
#else
#define TFM_HD
#endif

/* splitmix64's finalizer: a bijective 64-bit mix. */
TFM_HD static inline uint64_t tfm_rng_mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A key for one random tensor: seed (the config's), step (the caller's counter: one value
 * per forward pass, e.g. the micro-batch number), site (which tensor in the model). */
TFM_HD static inline uint64_t tfm_rng_key(uint64_t seed, uint64_t step, uint64_t site)
{
    return tfm_rng_mix(tfm_rng_mix(tfm_rng_mix(seed) ^ step) ^ (site * 0xd1b54a32d192ed03ULL));
}

/* 24 random bits for element i of the tensor keyed key. */
TFM_HD static inline uint32_t tfm_rng_bits24(uint64_t key, uint64_t i)
{
    return (uint32_t)(tfm_rng_mix(key ^ (i * 0x9e3779b97f4a7c15ULL)) >> 40);
}

/* A uniform number in [0, 1) with 24 random bits for element i of the tensor keyed key. */
TFM_HD static inline float tfm_rng_uniform(uint64_t key, uint64_t i)
{
    return (float)tfm_rng_bits24(key, i) * (1.0f / 16777216.0f);
}

/* Dropout with probability p keeps element i iff its uniform number is >= p. */
TFM_HD static inline int tfm_dropout_keep(uint64_t key, uint64_t i, float p)
{
    return tfm_rng_uniform(key, i) >= p;
}

/* The same test on integers, for vector loops: tfm_dropout_keep(key, i, p) iff
 * tfm_rng_bits24(key, i) >= tfm_dropout_threshold(p).  bits * 2^-24 is exact, so u >= p
 * iff bits >= p * 2^24 (exact too: a power-of-two scaling) iff bits >= ceil(p * 2^24). */
TFM_HD static inline uint32_t tfm_dropout_threshold(float p)
{
    if (!(p > 0))
        return 0;
    if (p >= 1)
        return 1u << 24;
    float t = p * 16777216.0f;
    uint32_t u = (uint32_t)t;
    return u + ((float)u < t);
}

/* What dropout with probability p scales a kept element by: 1 / (1 - p), or 1 when p <= 0
 * (nothing dropped). */
TFM_HD static inline float tfm_dropout_scale(float p)
{
    return p > 0 ? 1.0f / (1.0f - p) : 1.0f;
}

/* Adam's bias correction at step t >= 1 for a decay b: 1 / (1 - b^t), in double, then
 * float (every backend's Adam multiplies by it). */
static inline float tfm_adam_correction(float b, int64_t t)
{
    return (float)(1.0 / (1.0 - pow((double)b, (double)t)));
}

/* ---- bf16 ------------------------------------------------------------------------------
 * bfloat16 is the top half of an IEEE binary32: sign, the same 8 exponent bits, 7 stored
 * mantissa bits (8 significant).  Rounding to it keeps fp32's range (subnormals included)
 * and has a relative error of at most 2^-8 (half a unit of 2^-7) for normal numbers. */

/* The bf16 nearest x, ties to even; NaN stays NaN (quiet, sign kept); a finite x past the
 * largest bf16 rounds to infinity, as IEEE rounding does. */
TFM_HD static inline uint16_t tfm_bf16_bits(float x)
{
    union { float f; uint32_t u; } v = {x};
    if ((v.u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((v.u >> 16) | 0x0040u);
    v.u += 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)(v.u >> 16);
}

TFM_HD static inline float tfm_bf16_float(uint16_t b)
{
    union { uint32_t u; float f; } v = {(uint32_t)b << 16};
    return v.f;
}

/* x rounded to bf16, as a float (exactly representable in bf16). */
TFM_HD static inline float tfm_bf16_round(float x) { return tfm_bf16_float(tfm_bf16_bits(x)); }

/* ---- attention shape ------------------------------------------------------------------ */

/* Multi-head scaled dot-product attention over a batch (the fused attention op).
 *   q: row b*Tq+i holds the H query heads of position i of sentence b, head h at columns
 *      [h*dk, (h+1)*dk).  k, v: row b*Tk+j likewise.  o: row b*Tq+i, same head layout.
 *   score(b,h,i,j) = scale * q_bhi . k_bhj, masked (-inf) where j >= klen[b] (klen NULL:
 *   no padding mask) or, when causal, where j > i.  P = softmax over j of the scores; a
 *   row with every key masked gets P = 0 (and o = 0).  With dropout > 0, P' = P * keep / (1
 *   - dropout) where keep(element (((b*H + h)*Tq + i)*Tk + j), key); else P' = P.
 *   o_bhi = sum_j P'(b,h,i,j) v_bhj.
 *   lse (B,H,Tq): the log-sum-exp of each score row (-inf for a fully masked row), saved
 *   by the forward for the backward, which recomputes P from q, k and lse. */
struct tfm_attn {
    int B, H, Tq, Tk, dk;
    const int32_t *klen;    /* (B) device, valid keys per sentence, or NULL */
    int causal;
    float scale;            /* 1/sqrt(dk) */
    float dropout;          /* on the attention weights; 0 in eval */
    uint64_t key;           /* dropout key */
};

/* ---- the statistics of an optimizer step ---------------------------------------------
 * Device memory (doubles), written by the ops loss_sum, grad_clip and adam_scaled below, so
 * that a training step needs no read of the device until its end: the optimizer reads the
 * struct once a step (optim.h, tfm_optim_step), and the trainer logs what it read. */
struct tfm_step_stats {
    double loss, nll;       /* loss_sum: the step's batches' summed loss and nll */
    double grad_norm;       /* grad_clip: L2 norm of gscale * the gradient, before clipping */
    double clip;            /* grad_clip: the factor clipping applies (1: not clipped) */
    double scale;           /* grad_clip: gscale * clip, what adam_scaled multiplies by */
};

/* ---- the ops, listed once ------------------------------------------------------------- */

/* Every compute op as X(ret, name, params, args, devs): its return type, its slot name,
 * its parameter list, the same names as an argument list, and which arguments are device
 * pointers.  The table's slots, the sim backend's checking wrappers and the CUDA
 * declarations (kernels/cuda.h) are made from this list; each backend defines
 * <prefix>_<name> with exactly these parameters.  Semantics, op by op: */
#define TFM_BACKEND_OPS(X)                                                                   \
    /* -- dense algebra --                                                                   \
     * C (M,N) = alpha * op(A) op(B) + beta * C, op(X) = X or X^T (ta, tb non-zero);         \
     * op(A) is (M,K), op(B) is (K,N).  With beta == 0, C is not read (NaN-safe). */         \
    X(void, gemm,                                                                            \
      (struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,             \
       const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc),     \
      (be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), (A, B, C))                 \
    /* The same product into a parameter gradient: C stays fp32 at every precision (A and    \
     * B are activations and weights like gemm's). */                                       \
    X(void, gemm_grad,                                                                       \
      (struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,             \
       const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc),     \
      (be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), (A, B, C))                 \
    /* A product with its bias and activation: C (M,N) = act(op(A) op(B) + bias), bias (N)   \
     * (a weight: the compute copy) broadcast over the rows, act = ReLU when relu != 0,      \
     * else none; all in fp32, then stored once (at bf16: rounded once, to nearest even).    \
     * ta, tb, A, B as gemm's; alpha is 1 and beta 0: C is not read; any ldc >= N.  A        \
     * linear layer (relu 0) and the FFN's first layer (relu 1) in one op, so that a GPU     \
     * adds the bias and the ReLU in its product's epilogue.  The CPU's way, which keeps     \
     * the bits of the sequences the model ran before the op was there: relu == 0, gather    \
     * the bias into C's rows, then gemm with beta 1 (the bias enters the sums first);       \
     * relu != 0, gemm with beta 0, then bias_act (the bias added to the rounded sums).      \
     * The same value up to the order of fp32 roundings; other backends may pick either. */  \
    X(void, gemm_bias,                                                                       \
      (struct tfm_backend *be, int ta, int tb, int M, int N, int K, const float *A, int lda, \
       const float *B, int ldb, const float *bias, int relu, float *C, int ldc),             \
      (be, ta, tb, M, N, K, A, lda, B, ldb, bias, relu, C, ldc), (A, B, bias, C))            \
    /* The compute copy of the weights: dst (n) = src (n, fp32 master weights) in the        \
     * backend's precision (bf16: rounded to nearest even; fp32: copied). */                 \
    X(void, weights_copy, (struct tfm_backend *be, float *dst, const float *src, size_t n),  \
      (be, dst, src, n), (dst, src))                                                         \
    /* -- embeddings --                                                                      \
     * out (N,D) = scale * table[ids[n]] + (pos ? pos[pos0 + n % L] : 0).                    \
     * table (V,D); pos (P,D) with pos0 + L <= P; ids (N) device, each in [0,V). */          \
    X(void, embed_fwd,                                                                       \
      (struct tfm_backend *be, float *out, const float *table, const int32_t *ids, int N,    \
       int D, float scale, const float *pos, int L, int pos0),                               \
      (be, out, table, ids, N, D, scale, pos, L, pos0), (out, table, ids, pos))              \
    /* dtable[ids[n]] += scale * dout[n]; dpos[pos0 + n % L] += dout[n] when dpos. */        \
    X(void, embed_bwd,                                                                       \
      (struct tfm_backend *be, float *dtable, float *dpos, const float *dout,                \
       const int32_t *ids, int N, int D, int V, float scale, int L, int pos0),               \
      (be, dtable, dpos, dout, ids, N, D, V, scale, L, pos0), (dtable, dpos, dout, ids))     \
    /* -- layer norm: y = (x - mean) / sqrt(var + eps) * g + b, var biased (1/D) --          \
     * x, y (N,D) (y may equal x only if the caller keeps no copy of x); mean, rstd (N). */  \
    X(void, layernorm_fwd,                                                                   \
      (struct tfm_backend *be, float *y, float *mean, float *rstd, const float *x,           \
       const float *g, const float *b, int N, int D, float eps),                             \
      (be, y, mean, rstd, x, g, b, N, D, eps), (y, mean, rstd, x, g, b))                     \
    /* dx (N,D) = (accumulate ? dx + : ) d/dx; dg, db (D) +=.  dx must not alias dy. */      \
    X(void, layernorm_bwd,                                                                   \
      (struct tfm_backend *be, float *dx, float *dg, float *db, const float *dy,             \
       const float *x, const float *mean, const float *rstd, const float *g, int N, int D,   \
       int accumulate),                                                                      \
      (be, dx, dg, db, dy, x, mean, rstd, g, N, D, accumulate),                              \
      (dx, dg, db, dy, x, mean, rstd, g))                                                    \
    /* -- attention (struct tfm_attn above) -- */                                            \
    X(void, attn_fwd,                                                                        \
      (struct tfm_backend *be, const struct tfm_attn *a, const float *q, int ldq,            \
       const float *k, int ldk, const float *v, int ldv, float *o, int ldo, float *lse),     \
      (be, a, q, ldq, k, ldk, v, ldv, o, ldo, lse), (a->klen, q, k, v, o, lse))              \
    /* dq = d/dq, dk = d/dk, dv = d/dv (all overwritten), given do and the forward's o,      \
     * lse. */                                                                               \
    X(void, attn_bwd,                                                                        \
      (struct tfm_backend *be, const struct tfm_attn *a, const float *q, int ldq,            \
       const float *k, int ldk, const float *v, int ldv, const float *o, int ldo,            \
       const float *lse, const float *dout, int lddo, float *dq, int lddq, float *dk,        \
       int lddk, float *dv, int lddv),                                                       \
      (be, a, q, ldq, k, ldk, v, ldv, o, ldo, lse, dout, lddo, dq, lddq, dk, lddk, dv,       \
       lddv),                                                                                \
      (a->klen, q, k, v, o, lse, dout, dq, dk, dv))                                          \
    /* Incremental decoding: R query rows, each attending to its own keys.                   \
     * q (R,H*dk) ld ldq; row r attends to keys j < len[r] at k + b*bstride + j*ld, where    \
     * b = slot[r*sstride + j] when slot is given (each key of each row in a block of its    \
     * own: a beam's cache shared with the rows it was copied from), else b = blk[r] (one    \
     * block per row: the source sentence); values at v + the same offset; no mask           \
     * otherwise; o (R,H*dk) ld ldo.  blk, len (R), slot (R,sstride) device; len[r] >= 1.    \
     * No dropout. */                                                                        \
    X(void, attn_decode,                                                                     \
      (struct tfm_backend *be, int R, int H, int dk, float scale, const float *q, int ldq,   \
       const float *k, const float *v, int ld, int64_t bstride, const int32_t *blk,          \
       const int32_t *slot, int sstride, const int32_t *len, float *o, int ldo),             \
      (be, R, H, dk, scale, q, ldq, k, v, ld, bstride, blk, slot, sstride, len, o, ldo),     \
      (q, k, v, blk, slot, len, o))                                                          \
    /* -- element-wise --                                                                    \
     * x (N,M) += b broadcast over rows; then relu when relu. */                             \
    X(void, bias_act, (struct tfm_backend *be, float *x, const float *b, int N, int M,       \
                       int relu),                                                            \
      (be, x, b, N, M, relu), (x, b))                                                        \
    /* db (M) += column sums of dy (N,M). */                                                 \
    X(void, bias_bwd, (struct tfm_backend *be, float *db, const float *dy, int N, int M),    \
      (be, db, dy, N, M), (db, dy))                                                          \
    /* dx = dy where y > 0, else 0 (dx may equal dy).  n elements.  With the ReLU output     \
     * taken after dropout, scale = 1/(1-p) makes this the backward of dropout(relu(.))      \
     * too. */                                                                               \
    X(void, relu_bwd,                                                                        \
      (struct tfm_backend *be, float *dx, const float *dy, const float *y, size_t n,         \
       float scale),                                                                         \
      (be, dx, dy, y, n, scale), (dx, dy, y))                                                \
    /* y = x * keep(key, i, p) / (1 - p) for i < n (y may equal x).  The same call with the  \
     * same key on dy is the backward.  p == 0: y = x. */                                    \
    X(void, dropout,                                                                         \
      (struct tfm_backend *be, float *y, const float *x, size_t n, float p, uint64_t key),   \
      (be, y, x, n, p, key), (y, x))                                                         \
    /* y = a + dropout(b) with (p, key) as above (y may equal a or b).  Residual +           \
     * dropout. */                                                                           \
    X(void, add_dropout,                                                                     \
      (struct tfm_backend *be, float *y, const float *a, const float *b, size_t n, float p,  \
       uint64_t key),                                                                        \
      (be, y, a, b, n, p, key), (y, a, b))                                                   \
    /* y += alpha * x. */                                                                    \
    X(void, axpy, (struct tfm_backend *be, float *y, float alpha, const float *x, size_t n), \
      (be, y, alpha, x, n), (y, x))                                                          \
    /* Copy n rows of len floats: dst + i*dstride = src + (idx ? idx[i] : i)*sstride. */     \
    X(void, gather,                                                                          \
      (struct tfm_backend *be, float *dst, int64_t dstride, const float *src,                \
       int64_t sstride, const int32_t *idx, int n, int64_t len),                             \
      (be, dst, dstride, src, sstride, idx, n, len), (dst, src, idx))                        \
    /* -- fused: one pass over memory for a sequence of the ops above, with the sequence's   \
     * results, bit for bit, at fp32 and at bf16 (where a value the sequence stores          \
     * between its ops is rounded to bf16 as it would be stored).  The dropout mask of an    \
     * (N,D) output is keep(key, n*D + c, p), as dropout's on the same N*D elements. --      \
     *                                                                                       \
     * x (N,M) = dropout(act(x + b)) with (p, key): bias_act, then dropout in place.  The    \
     * FFN's first layer after its product (relu_bwd with scale 1/(1-p) is the backward). */ \
    X(void, bias_act_dropout,                                                                \
      (struct tfm_backend *be, float *x, const float *b, int N, int M, int relu, float p,    \
       uint64_t key),                                                                        \
      (be, x, b, N, M, relu, p, key), (x, b))                                                \
    /* out (N,D) = dropout(embed_fwd's out) with (p, key): embed_fwd, then dropout in        \
     * place.  The embedding sum of the encoder's and the decoder's input. */                \
    X(void, embed_fwd_dropout,                                                               \
      (struct tfm_backend *be, float *out, const float *table, const int32_t *ids, int N,    \
       int D, float scale, const float *pos, int L, int pos0, float p, uint64_t key),        \
      (be, out, table, ids, N, D, scale, pos, L, pos0, p, key), (out, table, ids, pos))      \
    /* r (N,D) = a + dropout(b) with (p, key), then y (N,D) = LN(r) with g, bias, eps and    \
     * mean, rstd (N) as layernorm_fwd's: add_dropout, then layernorm_fwd.  r may equal a    \
     * or b; y aliases none of r, a, b.  Residual + dropout + layer norm (post-norm). */     \
    X(void, add_dropout_layernorm,                                                           \
      (struct tfm_backend *be, float *y, float *mean, float *rstd, float *r, const float *a, \
       const float *b, const float *g, const float *bias, int N, int D, float eps, float p,  \
       uint64_t key),                                                                        \
      (be, y, mean, rstd, r, a, b, g, bias, N, D, eps, p, key),                              \
      (y, mean, rstd, r, a, b, g, bias))                                                     \
    /* layernorm_bwd (dx, dg, db as there, accumulate too), then dxd (N,D) = dropout(dx)     \
     * with (p, key).  dxd aliases none of dx, dy, x.  The backward of the above: dx is the  \
     * gradient of the residual input a, dxd that of the sub-layer output b. */              \
    X(void, layernorm_bwd_dropout,                                                           \
      (struct tfm_backend *be, float *dx, float *dxd, float *dg, float *db, const float *dy, \
       const float *x, const float *mean, const float *rstd, const float *g, int N, int D,   \
       int accumulate, float p, uint64_t key),                                               \
      (be, dx, dxd, dg, db, dy, x, mean, rstd, g, N, D, accumulate, p, key),                 \
      (dx, dxd, dg, db, dy, x, mean, rstd, g))                                               \
    /* -- output layer --                                                                    \
     * Cross-entropy with label smoothing eps over V classes, rows with label == ignore      \
     * skipped (loss 0, gradient 0).  Target distribution q = (1-eps) onehot(label) + eps/V. \
     *   loss[n] = -sum_k q_k log softmax(z_n)_k;  nll[n] = -log softmax(z_n)_label.         \
     * logits (N,V); loss, nll (N) device.  When grad_scale != 0, logits is overwritten      \
     * with grad_scale * (softmax(z_n) - q) (rows skipped: 0). */                            \
    X(void, xent,                                                                            \
      (struct tfm_backend *be, float *logits, const int32_t *labels, int N, int V,           \
       float eps, int ignore, float *loss, float *nll, float grad_scale),                    \
      (be, logits, labels, N, V, eps, ignore, loss, nll, grad_scale),                        \
      (logits, labels, loss, nll))                                                           \
    /* y (N,V) = log softmax of x over each row (y may equal x). */                          \
    X(void, log_softmax, (struct tfm_backend *be, float *y, const float *x, int N, int V),   \
      (be, y, x, N, V), (y, x))                                                              \
    /* -- optimizer --                                                                       \
     * Sum of squares of x (n), accumulated in double in a fixed order; returned to host    \
     * (a read of the device: a training step uses grad_clip, which keeps it there). */     \
    X(double, sumsq, (struct tfm_backend *be, const float *x, size_t n), (be, x, n), (x))    \
    /* Adam with bias correction, for every i < n, with g = gscale * grad[i]:                \
     *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;                                        \
     *   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)      (t = step >= 1)      \
     * then grad[i] = 0, ready for the next step's accumulation (one pass over memory        \
     * instead of two: the update is memory-bound). */                                       \
    X(void, adam,                                                                            \
      (struct tfm_backend *be, float *p, float *grad, float *m, float *v, size_t n,          \
       float lr, float b1, float b2, float eps, float gscale, int64_t step),                 \
      (be, p, grad, m, v, n, lr, b1, b2, eps, gscale, step), (p, grad, m, v))            \
    /* -- the step's statistics on the device (struct tfm_step_stats) --                     \
     * A batch's losses: st->loss += sum of loss[i], st->nll += sum of nll[i] (i < n), each  \
     * sum formed in double from 0 in a fixed order (the CPU: i = 0, 1, ...), then added.    \
     * loss, nll (n) device, xent's. */                                                      \
    X(void, loss_sum,                                                                        \
      (struct tfm_backend *be, struct tfm_step_stats *st, const float *loss,                 \
       const float *nll, int n),                                                             \
      (be, st, loss, nll, n), (st, loss, nll))                                               \
    /* Norm and clipping of the gradient g (n): st->grad_norm = sqrt(sumsq(g, n)) * gscale   \
     * (sumsq's sum, its order and bits); st->clip = clip_norm / grad_norm when clip_norm >  \
     * 0 and grad_norm > clip_norm, else 1; st->scale = gscale * clip.  All in double;       \
     * loss and nll are left as they are. */                                                 \
    X(void, grad_clip,                                                                       \
      (struct tfm_backend *be, struct tfm_step_stats *st, const float *g, size_t n,          \
       double gscale, double clip_norm),                                                     \
      (be, st, g, n, gscale, clip_norm), (st, g))                                            \
    /* adam with gscale = (float)st->scale, read on the device; when st->grad_norm is not    \
     * finite, nothing at all (parameters, moments and gradient stay as they are). */        \
    X(void, adam_scaled,                                                                     \
      (struct tfm_backend *be, float *p, float *grad, float *m, float *v, size_t n,          \
       float lr, float b1, float b2, float eps, const struct tfm_step_stats *st,             \
       int64_t step),                                                                        \
      (be, p, grad, m, v, n, lr, b1, b2, eps, st, step), (p, grad, m, v, st))

/* ---- the table ------------------------------------------------------------------------- */

/* Which backend a table is (and which device a tool computes on, device.h).  SIM: the CPU
 * behind device memory (tfm_backend_sim). */
enum tfm_backend_kind { TFM_BACKEND_CPU = 0, TFM_BACKEND_CUDA = 1, TFM_BACKEND_SIM = 2 };

#define TFM_BACKEND_SLOT(ret, name, params, args, devs) ret(*name) params;

struct tfm_backend {
    const char *name;                 /* "cpu", "cuda", "sim" */
    enum tfm_backend_kind kind;
    /* The arithmetic (tfm_backend_set_precision): FP32 or BF16, never AUTO. */
    enum tfm_precision precision;
    /* Bytes of device memory per activation element: what the model sizes its activation
     * arena with.  4 at fp32, and in the CPU's bf16 emulation (bf16 values kept in fp32
     * words); 2 where a backend stores bf16 (the sim backend at bf16, a GPU's). */
    size_t act_size;
    int models;                       /* live models on this backend (model.c counts) */
    int threads;                      /* CPU threads used by the ops */
    int host_memory;                  /* device pointers are host pointers (the CPU):
                                       * an op may write host memory directly */
    void *impl;                       /* the backend's private state */

    /* All-reduce hook (sum over ranks, in place), set by the trainer; NULL: one rank.
     * The model never calls it itself: tfm_optim_step does, on the gradient arena. */
    int (*all_reduce)(void *ctx, float *buf, size_t n, struct tfm_error *err);
    void *all_reduce_ctx;
    /* Gradient readiness hook, set by the trainer with all_reduce; NULL: none.  During the
     * backward pass of tfm_model_train_batch the model calls it with lo, an offset (in
     * floats) into the gradient arena: no later op of the batch writes a gradient at or
     * past lo, so [lo, end) can be summed over the ranks while the backward goes on.
     * Called with lo decreasing, the last time with 0 (model.c says where). */
    void (*grads_ready)(void *ctx, size_t lo);

    /* -- memory ---------------------------------------------------------------------- */
    /* bytes of device memory aligned to 64 bytes, zero-filled; NULL with err on failure */
    void *(*alloc)(struct tfm_backend *be, size_t bytes, struct tfm_error *err);
    void (*free)(struct tfm_backend *be, void *p);
    /* Optional (NULL: no limit of its own).  May the process take `bytes` more of host
     * memory (malloc) without starving what the backend still needs?  The CPU backend
     * keeps address space for OpenBLAS's buffers under ulimit -v: taken by a large host
     * buffer, OpenBLAS would wait forever at the next product.  0, or -1 with err. */
    int (*host_room)(struct tfm_backend *be, size_t bytes, struct tfm_error *err);
    void (*upload)(struct tfm_backend *be, void *dst, const void *host, size_t bytes);
    void (*download)(struct tfm_backend *be, void *host, const void *src, size_t bytes);
    void (*copy)(struct tfm_backend *be, void *dst, const void *src, size_t bytes);
    void (*zero)(struct tfm_backend *be, void *dst, size_t bytes);
    /* n activations (act_size bytes each, in the backend's precision) from the device to n
     * host floats: the one way the host reads activations (log-probabilities). */
    void (*download_act)(struct tfm_backend *be, float *host, const void *src, size_t n);
    /* n host floats to n activations on the device, rounded to the backend's precision
     * (bf16: nearest even): the one way the host writes activation-typed data (the
     * sinusoid table, test inputs). */
    void (*upload_act)(struct tfm_backend *be, void *dst, const float *host, size_t n);
    /* Wait until every op issued so far is complete (a no-op on the CPU).  The model never
     * needs it (a download waits for the ops before it); benchmarks and tests that time
     * ops or read device memory behind the table's back do. */
    void (*sync)(struct tfm_backend *be);
    /* Make the calling thread's work go to this backend's device (CUDA: cudaSetDevice),
     * before a thread first uses it; NULL where there is nothing to do.  Needed when one
     * process drives several GPUs from several threads. */
    void (*bind)(struct tfm_backend *be);
    /* Prepare workspace for attention calls with up to max_tq queries and max_tk keys per
     * sentence (called once, by tfm_model_create and tfm_decoder_create; grows only). */
    int (*reserve)(struct tfm_backend *be, int max_tq, int max_tk, struct tfm_error *err);
    /* Optional (NULL: nothing to prepare).  Size, once, the workspace that the ops of a
     * training step use, for batches of up to `rows` tokens a side of a model of width D,
     * d_ff F, H heads and V classes, so that no step allocates (CUDA's workspace would
     * otherwise grow, waiting for the device, at the first batch of each new largest
     * shape).  Called by tfm_model_create; -1 with err when the memory is not there. */
    int (*reserve_step)(struct tfm_backend *be, int64_t rows, int D, int F, int H, int V,
                        struct tfm_error *err);

    /* -- compute: TFM_BACKEND_OPS -------------------------------------------------------- */
    TFM_BACKEND_OPS(TFM_BACKEND_SLOT)

    /* Optional (NULL: callers run log_softmax and select on the host, src/topk.h).  What
     * a search needs of each row's log softmax y_n = log_softmax(x_n) (the same bits),
     * without writing it: the k largest values by tfm_topk_row (ids in ban[0..nban)
     * skipped) into top_y, top_id (N,k), and y_n[also] into also_y (N).  x (N,V) device;
     * ban, top_y, top_id, also_y host.  The CPU backend has it. */
    void (*log_softmax_top)(struct tfm_backend *be, const float *x, int N, int V, int k,
                            const int32_t *ban, int nban, int also, float *top_y,
                            int32_t *top_id, float *also_y);

    /* Optional, for decoding's output layer (NULL: gemm, then log_softmax or
     * log_softmax_top).  W (V,D), the output embedding, is laid out once by out_pack into
     * `packed` (out_pack_floats(V, D) floats of device memory, the caller's), as long as W
     * does not change.  Then out_logits writes y (N,V) = x (N,D) W^T, each element one
     * chain of fused multiply-adds over d = 0..D-1 in order, so that its bits depend on
     * neither the threads nor N nor the row; and out_top computes the same y a block of
     * rows at a time and hands each block, still in cache, to what log_softmax_top does
     * (same arguments, same bits).  y is overwritten by both.  The CPU backend has them:
     * a search step then reads the logits once from cache instead of from memory, and the
     * weights are never packed again (a BLAS packs them at every call). */
    size_t (*out_pack_floats)(int V, int D);
    void (*out_pack)(struct tfm_backend *be, float *packed, const float *W, int V, int D);
    void (*out_logits)(struct tfm_backend *be, float *y, const float *x, int N,
                       const float *packed, int V, int D);
    void (*out_top)(struct tfm_backend *be, float *y, const float *x, int N,
                    const float *packed, int V, int D, int k, const int32_t *ban, int nban,
                    int also, float *top_y, int32_t *top_id, float *also_y);

    /* -- lifetime ------------------------------------------------------------------- */
    void (*destroy)(struct tfm_backend *be);

    /* Set by a backend that can compute in bf16 (NULL: fp32 only); called through
     * tfm_backend_set_precision only. */
    int (*set_bf16)(struct tfm_backend *be, int on, struct tfm_error *err);
    enum tfm_precision auto_precision;  /* what AUTO means here (FP32 or BF16) */
    void *emu;                        /* the bf16 emulation's state (precision.c) or NULL */
};

/* ---- precision (precision.c; tfm-config(5), precision) --------------------------------
 *
 * What each pointer of an op holds.  An op's `float *` arguments are activations: act_size
 * bytes an element, fp32 words at act_size 4, bf16 bits (tfm_bf16_bits) at act_size 2;
 * strides, leading dimensions and offsets count elements, never bytes, so host code steps
 * through activations with tfm_act (below), not with float arithmetic.  The weights the
 * ops read (DATA: the compute copy made by weights_copy) and the sinusoid table are
 * activations too.  Always fp32, whatever act_size is:
 *   gemm_grad's C; weights_copy's src (the master weights); embed_bwd's dtable and dpos;
 *   layernorm_fwd's and add_dropout_layernorm's mean and rstd; layernorm_bwd's and
 *   layernorm_bwd_dropout's dg, db, mean and rstd; the attention
 *   lse (attn_fwd, attn_bwd); bias_bwd's db; xent's loss and nll; sumsq's x; every
 *   pointer of adam and of adam_scaled; loss_sum's loss and nll; grad_clip's g; the step's
 *   statistics (struct tfm_step_stats, doubles); out_pack's `packed` (the backend's own
 *   layout).
 * Everything else (gemm's A, B, C; gemm_bias's A, B, bias, C; gemm_grad's A and B;
 * weights_copy's dst; embed_fwd's out, table and pos; layer-norm x, y, g, b, dx, dy;
 * attention q, k, v, o, dout, dq, dk, dv; bias_act; bias_bwd's dy; relu_bwd; dropout;
 * add_dropout; axpy; gather; the fused ops' x, b, out, table, pos, y, r, a, g, bias, dx,
 * dxd, dy; xent's logits; log_softmax; log_softmax_top's x; out_logits' and out_top's x and
 * y) is an activation.
 *
 * fp32: every op as described above.  bf16: the same ops, with every activation an op
 * writes (gemm's and gemm_bias's C, embeddings, layer-norm and attention outputs, the
 * element-wise ops' outputs, activation gradients, the cross-entropy's logit gradients,
 * log-softmax) rounded to bf16 (8 significant bits, round to nearest even) where it is
 * stored, the products taking bf16 inputs with fp32 accumulation (attn_fwd and attn_bwd
 * also round their weights P' and, backward, dS = dL/dscore to bf16 before the products
 * that read them: scores, softmax and D stay fp32); statistics (layer-norm mean and rstd,
 * the attention lse, losses), parameter gradients (gemm_grad, embed_bwd, layernorm_bwd's dg
 * and db, bias_bwd), sumsq, Adam and the step's statistics stay fp32 (doubles for the
 * statistics), and the weights the ops read are the bf16 compute copy (weights_copy) of the
 * fp32 master weights.  The CPU backend emulates it exactly (bf16 values kept in fp32
 * words), to test the mixed-precision logic anywhere; the sim backend stores the same
 * values in 2 bytes, to test that host code sizes and steps through activations by act_size
 * (tests/unit/test_packed.c).
 *
 * Set the precision (AUTO: be->auto_precision) while no model lives on be: 0, or -1 with
 * err naming the backend when it cannot compute in bf16 or models live on it with another
 * precision. */
int tfm_backend_set_precision(struct tfm_backend *be, enum tfm_precision p,
                              struct tfm_error *err);
/* The CPU's bf16 (on) or its fp32 ops again (off), on a backend whose memory the host
 * reads (the CPU's set_bf16; the sim backend's forwards to its CPU backend). */
int tfm_backend_emulate_bf16(struct tfm_backend *be, int on, struct tfm_error *err);
/* The activation n elements past p (n may be negative). */
static inline float *tfm_act(const struct tfm_backend *be, const void *p, int64_t n)
{
    return (float *)(void *)((char *)(uintptr_t)p + n * (int64_t)be->act_size);
}

/* "fp32" or "bf16". */
const char *tfm_precision_name(enum tfm_precision p);

/* The most threads a CPU backend takes (tfm-decode --threads checks against it). */
#define TFM_CPU_MAX_THREADS 1024

/* The CPU backend with `threads` threads, the caller's included (0: the number of online
 * CPUs, at most TFM_CPU_MAX_THREADS).  The BLAS runs single-threaded inside the ops'
 * ranges (one thread pool, pool.h, no contention).
 * Free with be->destroy(be).  NULL with err on failure. */
struct tfm_backend *tfm_backend_cpu(int threads, struct tfm_error *err);

/* The address space the CPU backend keeps free for each thread's OpenBLAS buffer, in bytes:
 * TFM_BLAS_BUFFER_MB's MiB (0: no check), 129 MiB unset or empty.  -1 with err for a value
 * that is not a whole number of MiB from 0 to 2^20. */
int tfm_backend_cpu_buffer_env(size_t *bytes, struct tfm_error *err);

/* The CUDA backend on GPU `device` (kernels/backend_cuda.cu): cuBLAS and cuBLASLt, one stream.
 * Every op as described above, tested op by op against the CPU (make check-gpu).  NULL with
 * err in a build without CUDA or when the device cannot be used. */
struct tfm_backend *tfm_backend_cuda(int device, struct tfm_error *err);

/* A stand-in for a GPU (backend_sim.c): the CPU backend's ops and bits on memory the host
 * cannot touch between ops, and that aborts when an op is handed host memory; for testing
 * the device paths of the model and the tools on any machine.  At bf16 it stores
 * activations in 2 bytes (act_size 2), as a GPU does (TFM_SIM_PACKED=0 in the environment
 * when it is made: in fp32 words, as the CPU does).  NULL with err. */
struct tfm_backend *tfm_backend_sim(int threads, struct tfm_error *err);

/* TFM_SIM_PACKED: *packed 1 (bf16 activations in 2 bytes) unset or "1", 0 for "0"; -1 with
 * err naming the variable and its value for any other (checked on every device:
 * tfm_device_env_check). */
int tfm_backend_sim_packed_env(int *packed, struct tfm_error *err);

/* How many times the host has read the sim backend be's memory so far: downloads,
 * download_act, and ops whose result comes back to the host (sumsq), each a point where a
 * GPU's host would wait for its queue; -1 for another backend.  For tests that count the
 * synchronizations of a training step. */
long tfm_backend_sim_reads(const struct tfm_backend *be);

#endif
