// cuda_ops.cu: the CUDA backend's ops other than gemm and attention (cuda.h), each with
// the semantics of its slot in struct tfm_backend (backend.h) and the CPU backend
// (backend_cpu.c) as the reference:
//
//   cuda_embed_fwd, cuda_embed_bwd        token (+ position) embeddings; the backward sorts
//                                         the ids (CUB radix sort, stable) so that each table
//                                         row adds its tokens' gradients in token order
//   cuda_layernorm_fwd, _bwd              a block per row; dg, db by column sums
//   cuda_bias_act, cuda_bias_bwd          bias (+ ReLU); its gradient by column sums
//   cuda_relu_bwd, cuda_dropout, cuda_add_dropout, cuda_axpy, cuda_gather
//                                         element-wise, grid-stride loops
//   cuda_bias_act_dropout, cuda_embed_fwd_dropout, cuda_add_dropout_layernorm,
//   cuda_layernorm_bwd_dropout            the fused sequences (backend.h): the element-wise
//                                         ones grid-stride, the layer norms a block per row
//   cuda_xent, cuda_log_softmax           a block per row
//   cuda_sumsq, cuda_adam                 the optimizer's
//
// Determinism (no atomics, a fixed order for every sum):
//  - sums along a row: each thread adds its strided elements in order, then block_reduce
//    combines the threads in a fixed tree;
//  - sums down columns (bias, layer-norm gains): fixed chunks of rows, each summed by a
//    block in a fixed tree into a partial row of the workspace, then one thread per column
//    adds the partials in chunk order (colsum_*);
//  - embedding gradients: each table row (and each position row) is owned by one block,
//    which adds its tokens in token order: the CPU's order, so the CPU's bits.
// Element-wise ops that have no sum write their products and sums with __fmul_rn,
// __fadd_rn (...) so that nvcc cannot contract them into an FMA: they give the CPU's bits
// (its build has no FMA).  Row ops (layer norm, softmax) round differently from the CPU
// (other summation orders, libm's expf for the CPU's polynomial): agreement to rounding.
//
// Precision (cuda.h, "the activation type"): every kernel that touches activations is a
// template on their type T (float, bf16) and computes in fp32 exactly as at fp32; at bf16 an
// element-wise op therefore gives the CPU's emulation's bits (the same fp32 operations on
// the same bf16 inputs, one rounding), and a row or column op its fp32 agreement plus one
// rounding.  The column sums' partials, the statistics, the parameter gradients, sumsq and
// Adam are fp32 at every precision.
//
// Every kernel is launched on the backend's stream; indices into N*D or n elements are
// 64-bit.  An op with nothing to do launches nothing.
#include "cuda.h"

#include <cub/device/device_radix_sort.cuh>

#include <math.h>
#include <stdint.h>

namespace {

constexpr unsigned THREADS = 256;         // threads per block, every kernel but column sums

// ---- helpers ----------------------------------------------------------------------------

// Grid-stride loops over 64-bit element counts.
__device__ __forceinline__ size_t thread_index()
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ size_t thread_count() { return (size_t)gridDim.x * blockDim.x; }

#include "reduce.cuh"

// ---- column sums: out (M) += sums over the rows of an (N,M) matrix -----------------------
//
// Pass 1: a block of COL_TILE columns x COL_ROWS threads per column sums one chunk of rows
// (thread y takes rows y, y + COL_ROWS, ... of the chunk; then a tree over y) into row
// `chunk` of a (chunks, M) workspace.  Pass 2 (colsum_finish): one thread per column adds
// the chunks in order.  The chunks depend on N only.

constexpr int COL_TILE = 32, COL_ROWS = 8;
constexpr int COL_MAX_CHUNKS = 256, COL_MIN_ROWS = 64;

struct col_plan {
    int rows;       // rows per chunk
    int chunks;
};

col_plan plan_columns(int N)
{
    int64_t rows = ((int64_t)N + COL_MAX_CHUNKS - 1) / COL_MAX_CHUNKS;
    if (rows < COL_MIN_ROWS)
        rows = COL_MIN_ROWS;
    return {(int)rows, (int)((N + rows - 1) / rows)};
}

dim3 col_grid(int M, const col_plan &pl)
{
    return dim3((unsigned)(((int64_t)M + COL_TILE - 1) / COL_TILE), (unsigned)pl.chunks);
}

// Sum of v over threadIdx.y in a fixed tree, valid where threadIdx.y == 0.
__device__ float column_tree(float v, float (*sh)[COL_TILE])
{
    unsigned x = threadIdx.x, y = threadIdx.y;
    sh[y][x] = v;
    __syncthreads();
    for (unsigned h = COL_ROWS / 2; h > 0; h /= 2) {
        if (y < h)
            sh[y][x] += sh[y + h][x];
        __syncthreads();
    }
    return sh[0][x];
}

// out[c] += part[0][c] + part[1][c] + ... (chunks rows of M), in order.
__global__ void colsum_finish(float *out, const float *part, int chunks, int M)
{
    for (size_t c = thread_index(); c < (size_t)M; c += thread_count()) {
        float s = 0;
        for (int k = 0; k < chunks; k++)
            s += part[(size_t)k * M + c];
        out[c] += s;
    }
}

void launch_colsum_finish(struct tfm_backend *be, float *out, const float *part, int chunks,
                          int M)
{
    colsum_finish<<<tfm_cuda_blocks((size_t)M, THREADS), THREADS, 0, STREAM(be)>>>(
        out, part, chunks, M);
    LAUNCH_CHECK();
}

// ---- embeddings ----------------------------------------------------------------------------

// out[n][c] = scale * table[ids[n]][c] (+ pos[pos0 + n % L][c]).
template <typename T>
__global__ void embed_fwd_elems(T *out, const T *table, const int32_t *ids, size_t total, int D,
                                float scale, const T *pos, int L, int pos0)
{
    for (size_t i = thread_index(); i < total; i += thread_count()) {
        size_t n = i / (size_t)D, c = i - n * (size_t)D;
        float e = __fmul_rn(scale, act_load(table + (size_t)ids[n] * D + c));
        if (pos)
            e = __fadd_rn(e, act_load(pos + (size_t)(pos0 + (int64_t)(n % (size_t)L)) * D + c));
        act_store(out + i, e);
    }
}

// dpos[pos0 + l] += dout[l] + dout[l + L] + ... in row order: block l owns position row l.
template <typename T>
__global__ void embed_bwd_pos(float *dpos, const T *dout, int N, int D, int L, int pos0)
{
    int l = blockIdx.x;
    float *row = dpos + (size_t)(pos0 + l) * D;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float acc = row[c];
        for (int64_t n = l; n < N; n += L)
            acc = __fadd_rn(acc, act_load(dout + (size_t)n * D + c));
        row[c] = acc;
    }
}

// v[i] = i: the token numbers that the sort carries along with the ids.
__global__ void iota(int32_t *v, int n)
{
    for (size_t i = thread_index(); i < (size_t)n; i += thread_count())
        v[i] = (int32_t)i;
}

// The end of the run of `key` in sorted keys that starts at s: a block-wide window at a
// time, counting the window's threads that still see key (a prefix of the window, since the
// keys are sorted).  Every thread of the block calls it and gets the same end.
__device__ int64_t run_end(const uint32_t *keys, int64_t s, int N, uint32_t key)
{
    int64_t e = s + 1;
    for (;;) {
        int64_t k = e + threadIdx.x;
        int same = __syncthreads_count(k < N && keys[k] == key);
        e += same;
        if (same < (int)blockDim.x)
            return e;
    }
}

// Block s handles sorted position s when it starts a run of equal ids: table row keys[s]
// adds scale * dout[order[k]] for k over the run, in order (order is the stable sort's
// permutation, so token order): the CPU's operations in the CPU's order.
template <typename T>
__global__ void embed_bwd_runs(float *dtable, const T *dout, const uint32_t *keys,
                               const int32_t *order, int N, int D, float scale)
{
    int64_t s = blockIdx.x;
    uint32_t id = keys[s];
    if (s > 0 && keys[s - 1] == id)
        return;                         // inside a run: its first block does it
    int64_t e = run_end(keys, s, N, id);
    float *row = dtable + (size_t)id * D;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float acc = row[c];
        for (int64_t k = s; k < e; k++)
            acc = __fadd_rn(acc, __fmul_rn(scale, act_load(dout + (size_t)order[k] * D + c)));
        row[c] = acc;
    }
}

// Bits that hold every id in [0, V).
int id_bits(int V)
{
    int bits = 1;
    while (bits < 32 && ((uint64_t)1 << bits) < (uint64_t)(V > 0 ? V : 0))
        bits++;
    return V > 0 ? bits : 32;
}

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// ---- layer norm ---------------------------------------------------------------------------

// The rest of a row's layer norm once each thread has summed its strided columns of the
// row xr into s: the mean (the block tree of s), the biased variance (a strided sum per
// thread, then the tree), *mean, *rstd (thread 0), yr = (x - mean) * rstd * g + b.  Each
// thread reads and writes only its own columns, so yr may equal xr.
template <typename T>
__device__ void ln_row_finish(T *yr, float *mean, float *rstd, const T *xr, float s,
                              const T *g, const T *b, int D, float eps)
{
    float mu = block_sum(s) / D;
    float v = 0;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float d = act_load(xr + c) - mu;
        v += d * d;
    }
    float rs = 1.0f / sqrtf(block_sum(v) / D + eps);
    if (threadIdx.x == 0) {
        *mean = mu;
        *rstd = rs;
    }
    for (int c = threadIdx.x; c < D; c += blockDim.x)
        act_store(yr + c, (act_load(xr + c) - mu) * rs * act_load(g + c) + act_load(b + c));
}

// Block n normalizes row n (ln_row_finish); y may equal x.
template <typename T>
__global__ void ln_fwd_rows(T *y, float *mean, float *rstd, const T *x, const T *g, const T *b,
                            int D, float eps)
{
    size_t n = blockIdx.x;
    const T *xr = x + n * D;
    float s = 0;
    for (int c = threadIdx.x; c < D; c += blockDim.x)
        s += act_load(xr + c);
    ln_row_finish(y + n * D, mean + n, rstd + n, xr, s, g, b, D, eps);
}

// Pass 1 of dg += sum_n dy * xhat and db += sum_n dy (column sums above).
template <typename T>
__global__ void ln_bwd_partial(float *part_g, float *part_b, const T *dy, const T *x,
                               const float *mean, const float *rstd, int N, int D, int rows)
{
    __shared__ float sh_g[COL_ROWS][COL_TILE], sh_b[COL_ROWS][COL_TILE];
    int64_t c = (int64_t)blockIdx.x * COL_TILE + threadIdx.x;
    int64_t r0 = (int64_t)blockIdx.y * rows, r1 = r0 + rows < N ? r0 + rows : N;
    float sg = 0, sb = 0;
    if (c < D)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += COL_ROWS) {
            float d = act_load(dy + r * D + c);
            sg += d * (act_load(x + r * D + c) - mean[r]) * rstd[r];
            sb += d;
        }
    sg = column_tree(sg, sh_g);
    sb = column_tree(sb, sh_b);
    if (threadIdx.y == 0 && c < D) {
        part_g[(size_t)blockIdx.y * D + c] = sg;
        part_b[(size_t)blockIdx.y * D + c] = sb;
    }
}

// ---- element-wise ---------------------------------------------------------------------------

// x[n][c] += b[c]; then relu.
template <typename T>
__global__ void bias_act_elems(T *x, const T *b, size_t total, int M, int relu)
{
    for (size_t i = thread_index(); i < total; i += thread_count()) {
        float t = __fadd_rn(act_load(x + i), act_load(b + i % (size_t)M));
        act_store(x + i, relu ? (t > 0 ? t : 0.0f) : t);
    }
}

// Pass 1 of db += column sums of dy.
template <typename T>
__global__ void bias_bwd_partial(float *part, const T *dy, int N, int M, int rows)
{
    __shared__ float sh[COL_ROWS][COL_TILE];
    int64_t c = (int64_t)blockIdx.x * COL_TILE + threadIdx.x;
    int64_t r0 = (int64_t)blockIdx.y * rows, r1 = r0 + rows < N ? r0 + rows : N;
    float s = 0;
    if (c < M)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += COL_ROWS)
            s += act_load(dy + r * M + c);
    s = column_tree(s, sh);
    if (threadIdx.y == 0 && c < M)
        part[(size_t)blockIdx.y * M + c] = s;
}

template <typename T>
__global__ void relu_bwd_elems(T *dx, const T *dy, const T *y, size_t n, float scale)
{
    for (size_t i = thread_index(); i < n; i += thread_count()) {
        float g = __fmul_rn(act_load(dy + i), scale);
        act_store(dx + i, act_load(y + i) > 0 ? g : 0.0f);
    }
}

// Dropout's multiplier for element i, as the CPU's dropout_mul: inv when kept (its 24 random
// bits >= thr, thr = tfm_dropout_threshold(p); thr 0 keeps all without hashing), else 0.
__device__ __forceinline__ float dropout_mul(uint64_t key, size_t i, uint32_t thr, float inv)
{
    return thr == 0 || tfm_rng_bits24(key, i) >= thr ? inv : 0.0f;
}

// y = x * mul; a dropped element is +0 even when x is Inf or NaN.
template <typename T>
__global__ void dropout_elems(T *y, const T *x, size_t n, uint32_t thr, float inv, uint64_t key)
{
    for (size_t i = thread_index(); i < n; i += thread_count()) {
        float mul = dropout_mul(key, i, thr, inv);
        act_store(y + i, mul > 0 ? __fmul_rn(act_load(x + i), mul) : 0.0f);
    }
}

template <typename T>
__global__ void add_dropout_elems(T *y, const T *a, const T *b, size_t n, uint32_t thr,
                                  float inv, uint64_t key)
{
    for (size_t i = thread_index(); i < n; i += thread_count()) {
        float mul = dropout_mul(key, i, thr, inv);
        act_store(y + i,
                  __fadd_rn(act_load(a + i), mul > 0 ? __fmul_rn(act_load(b + i), mul) : 0.0f));
    }
}

template <typename T> __global__ void axpy_elems(T *y, float alpha, const T *x, size_t n)
{
    for (size_t i = thread_index(); i < n; i += thread_count())
        act_store(y + i, __fadd_rn(act_load(y + i), __fmul_rn(alpha, act_load(x + i))));
}

// Element c of row i: dst[i*dstride + c] = src[(idx ? idx[i] : i)*sstride + c]: a copy of
// the element's bits (T's), no arithmetic.
template <typename T>
__global__ void gather_elems(T *dst, int64_t dstride, const T *src, int64_t sstride,
                             const int32_t *idx, size_t total, int64_t len)
{
    for (size_t k = thread_index(); k < total; k += thread_count()) {
        int64_t i = (int64_t)(k / (size_t)len), c = (int64_t)k - i * len;
        int64_t r = idx ? idx[i] : i;
        dst[i * dstride + c] = src[r * sstride + c];
    }
}

// ---- fused ops -------------------------------------------------------------------------------
// The sequences of the ops above in one kernel each, with the sequences' operations: where
// the sequence stores a value between its ops, act_round rounds it as act_store would, so
// that the result is the sequence's at bf16 too (backend.h, "fused").

// v as the activation type holds it: v at fp32; v rounded to nearest even at bf16.
__device__ __forceinline__ float act_round(float v, const float *) { return v; }
__device__ __forceinline__ float act_round(float v, const bf16 *)
{
    return __bfloat162float(__float2bfloat16_rn(v));
}

// bias_act_elems, then dropout_elems (thr 0: a copy, as dropout with p <= 0).
template <typename T>
__global__ void bias_act_dropout_elems(T *x, const T *b, size_t total, int M, int relu,
                                       uint32_t thr, float inv, uint64_t key)
{
    for (size_t i = thread_index(); i < total; i += thread_count()) {
        float t = __fadd_rn(act_load(x + i), act_load(b + i % (size_t)M));
        t = act_round(relu ? (t > 0 ? t : 0.0f) : t, x);
        float mul = dropout_mul(key, i, thr, inv);
        act_store(x + i, thr == 0 ? t : mul > 0 ? __fmul_rn(t, mul) : 0.0f);
    }
}

// embed_fwd_elems, then dropout_elems.
template <typename T>
__global__ void embed_dropout_elems(T *out, const T *table, const int32_t *ids, size_t total,
                                    int D, float scale, const T *pos, int L, int pos0,
                                    uint32_t thr, float inv, uint64_t key)
{
    for (size_t i = thread_index(); i < total; i += thread_count()) {
        size_t n = i / (size_t)D, c = i - n * (size_t)D;
        float e = __fmul_rn(scale, act_load(table + (size_t)ids[n] * D + c));
        if (pos)
            e = __fadd_rn(e, act_load(pos + (size_t)(pos0 + (int64_t)(n % (size_t)L)) * D + c));
        e = act_round(e, out);
        float mul = dropout_mul(key, i, thr, inv);
        act_store(out + i, thr == 0 ? e : mul > 0 ? __fmul_rn(e, mul) : 0.0f);
    }
}

// Block n: row n of r = a + dropout(b) (add_dropout_elems), then ln_row_finish on it.  Each
// thread reads back only the columns it stored itself, so no barrier is needed between the
// two (block_sum's barriers come after).  r may equal a or b (each element is read before
// it is written, by the same thread); y aliases none of them.
template <typename T>
__global__ void add_dropout_ln_rows(T *y, float *mean, float *rstd, T *r, const T *a,
                                    const T *b, const T *g, const T *bias, int D, float eps,
                                    uint32_t thr, float inv, uint64_t key)
{
    size_t n = blockIdx.x, row = n * D;
    float s = 0;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        size_t i = row + c;
        float mul = dropout_mul(key, i, thr, inv);
        float v = __fadd_rn(act_load(a + i), mul > 0 ? __fmul_rn(act_load(b + i), mul) : 0.0f);
        act_store(r + i, v);
        s += act_round(v, r);
    }
    ln_row_finish(y + row, mean + n, rstd + n, (const T *)r + row, s, g, bias, D, eps);
}

// Block n: dx row n = rstd * (dy*g - mean(dy*g) - xhat * mean(dy*g*xhat)), added to dx
// when accumulate; then, when dxd is given, dxd = dropout(dx) from the value dx stores
// (dropout_elems; thr 0: a copy).
template <typename T>
__global__ void ln_bwd_dropout_rows(T *dx, T *dxd, const T *dy, const T *x, const float *mean,
                                    const float *rstd, const T *g, int D, int accumulate,
                                    uint32_t thr, float inv, uint64_t key)
{
    size_t n = blockIdx.x, row = n * D;
    const T *xr = x + row, *dyr = dy + row;
    T *dxr = dx + row, *dxdr = dxd ? dxd + row : nullptr;
    float mu = mean[n], rs = rstd[n], a = 0, bsum = 0;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float dh = act_load(dyr + c) * act_load(g + c);
        a += dh;
        bsum += dh * (act_load(xr + c) - mu) * rs;
    }
    a = block_sum(a) / D;
    bsum = block_sum(bsum) / D;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float xh = (act_load(xr + c) - mu) * rs;
        float v = rs * (act_load(dyr + c) * act_load(g + c) - a - xh * bsum);
        v = act_round(accumulate ? act_load(dxr + c) + v : v, dxr);
        act_store(dxr + c, v);
        if (dxd) {
            float mul = dropout_mul(key, row + c, thr, inv);
            act_store(dxdr + c, thr == 0 ? v : mul > 0 ? __fmul_rn(v, mul) : 0.0f);
        }
    }
}

// ---- output layer ------------------------------------------------------------------------

// Block n: the row's maximum; the sums of exp(z - max) and of z, in float per thread and
// in double across threads (the CPU: float within blocks, double across); then the
// losses and, when grad_scale != 0, the gradient over the logits.  Each thread writes only
// the columns it read; z[label] is read by all before the first block_reduce's barrier.
template <typename T>
__global__ void xent_rows(T *logits, const int32_t *labels, int V, float eps, int ignore,
                          float *loss, float *nll, float grad_scale)
{
    size_t n = blockIdx.x;
    T *z = logits + n * V;
    int y = labels[n];
    if (y == ignore) {
        if (threadIdx.x == 0)
            loss[n] = nll[n] = 0;
        if (grad_scale != 0)
            for (int c = threadIdx.x; c < V; c += blockDim.x)
                act_store(z + c, 0.0f);
        return;
    }
    float zy = act_load(z + y);
    float mx = -INFINITY;
    for (int c = threadIdx.x; c < V; c += blockDim.x)
        mx = fmaxf(mx, act_load(z + c));
    mx = block_max(mx);
    float se = 0, sz = 0;
    for (int c = threadIdx.x; c < V; c += blockDim.x) {
        float zc = act_load(z + c);
        se += expf(zc - mx);
        sz += zc;
    }
    double sum_e = block_sum((double)se), sum_z = block_sum((double)sz);
    double lse = mx + log(sum_e);
    if (threadIdx.x == 0) {
        nll[n] = (float)(lse - zy);
        loss[n] = (float)(lse - (1.0 - eps) * zy - eps / V * sum_z);
    }
    if (grad_scale == 0)
        return;
    float u = eps / V, l = (float)lse;
    for (int c = threadIdx.x; c < V; c += blockDim.x) {
        float d = grad_scale * (expf(act_load(z + c) - l) - u);
        if (c == y)
            d -= grad_scale * (1.0f - eps);
        act_store(z + c, d);
    }
}

// Block n: y = z - (max + log sum exp(z - max)), sums as in xent_rows.  y may equal x.
template <typename T> __global__ void log_softmax_rows(T *y, const T *x, int V)
{
    size_t n = blockIdx.x;
    const T *z = x + n * V;
    T *o = y + n * V;
    float l = row_log_sum_exp(z, V);
    for (int c = threadIdx.x; c < V; c += blockDim.x)
        act_store(o + c, act_load(z + c) - l);
}

// ---- optimizer --------------------------------------------------------------------------

// The CPU's adam_range, operation for operation (a1, a2: the bias corrections).
__global__ void adam_elems(float *p, float *grad, float *m, float *v, size_t n, float lr,
                           float b1, float b2, float eps, float gscale, float a1, float a2)
{
    for (size_t i = thread_index(); i < n; i += thread_count())
        adam_elem(p, grad, m, v, i, lr, b1, b2, eps, gscale, a1, a2);
}

} // namespace

// ---- the ops -----------------------------------------------------------------------------
// Each picks its kernels' activation type T with BY_ACT_TYPE (cuda.h).

void cuda_embed_fwd(struct tfm_backend *be, float *out, const float *table, const int32_t *ids,
                    int N, int D, float scale, const float *pos, int L, int pos0)
{
    size_t total = (size_t)(N > 0 ? N : 0) * (size_t)(D > 0 ? D : 0);
    if (total == 0)
        return;
    BY_ACT_TYPE(be,
        embed_fwd_elems<T><<<tfm_cuda_blocks(total, THREADS), THREADS, 0, STREAM(be)>>>(
            act_ptr<T>(out), act_ptr<T>(table), ids, total, D, scale, act_ptr<T>(pos), L, pos0);
        LAUNCH_CHECK();
    );
}

// dpos: a block per position row.  dtable: the ids are sorted with their token numbers
// (stable, so equal ids keep token order), then the first block of each run of equal ids
// adds the run's rows to its table row.  Workspace: sorted ids, token numbers before and
// after the sort, CUB's temporary storage.  dtable and dpos are fp32 at every precision,
// dout an activation.
void cuda_embed_bwd(struct tfm_backend *be, float *dtable, float *dpos, const float *dout,
                    const int32_t *ids, int N, int D, int V, float scale, int L, int pos0)
{
    if (N <= 0 || D <= 0)
        return;
    cudaStream_t s = STREAM(be);
    if (dpos && L > 0)
        BY_ACT_TYPE(be,
            embed_bwd_pos<T><<<(unsigned)(N < L ? N : L), THREADS, 0, s>>>(
                dpos, act_ptr<T>(dout), N, D, L, pos0);
            LAUNCH_CHECK();
        );
    const uint32_t *keys_in = reinterpret_cast<const uint32_t *>(ids);  // ids >= 0
    int bits = id_bits(V);
    size_t temp = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, keys_in, (uint32_t *)nullptr,
                                               (const int32_t *)nullptr, (int32_t *)nullptr,
                                               N, 0, bits, s));
    size_t arr = align256((size_t)N * sizeof(int32_t));
    char *w = (char *)tfm_cuda_work(be, 3 * arr + temp);
    uint32_t *keys = (uint32_t *)w;
    int32_t *order_in = (int32_t *)(w + arr), *order = (int32_t *)(w + 2 * arr);
    iota<<<tfm_cuda_blocks((size_t)N, THREADS), THREADS, 0, s>>>(order_in, N);
    LAUNCH_CHECK();
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(w + 3 * arr, temp, keys_in, keys, order_in,
                                               order, N, 0, bits, s));
    BY_ACT_TYPE(be,
        embed_bwd_runs<T><<<(unsigned)N, THREADS, 0, s>>>(dtable, act_ptr<T>(dout), keys, order,
                                                          N, D, scale);
        LAUNCH_CHECK();
    );
}

// mean and rstd are fp32 at every precision.
void cuda_layernorm_fwd(struct tfm_backend *be, float *y, float *mean, float *rstd,
                        const float *x, const float *g, const float *b, int N, int D, float eps)
{
    if (N <= 0 || D <= 0)
        return;
    BY_ACT_TYPE(be,
        ln_fwd_rows<T><<<(unsigned)N, THREADS, 0, STREAM(be)>>>(
            act_ptr<T>(y), mean, rstd, act_ptr<T>(x), act_ptr<T>(g), act_ptr<T>(b), D, eps);
        LAUNCH_CHECK();
    );
}

// The fused op without its dropout (dxd NULL): dg, db first, then dx.
void cuda_layernorm_bwd(struct tfm_backend *be, float *dx, float *dg, float *db, const float *dy,
                        const float *x, const float *mean, const float *rstd, const float *g,
                        int N, int D, int accumulate)
{
    cuda_layernorm_bwd_dropout(be, dx, NULL, dg, db, dy, x, mean, rstd, g, N, D, accumulate, 0,
                               0);
}

void cuda_bias_act(struct tfm_backend *be, float *x, const float *b, int N, int M, int relu)
{
    size_t total = (size_t)(N > 0 ? N : 0) * (size_t)(M > 0 ? M : 0);
    if (total == 0)
        return;
    BY_ACT_TYPE(be,
        bias_act_elems<T><<<tfm_cuda_blocks(total, THREADS), THREADS, 0, STREAM(be)>>>(
            act_ptr<T>(x), act_ptr<T>(b), total, M, relu);
        LAUNCH_CHECK();
    );
}

// db is fp32 at every precision, dy an activation.
void cuda_bias_bwd(struct tfm_backend *be, float *db, const float *dy, int N, int M)
{
    if (N <= 0 || M <= 0)
        return;
    col_plan pl = plan_columns(N);
    float *part = (float *)tfm_cuda_work(be, (size_t)pl.chunks * M * sizeof(float));
    BY_ACT_TYPE(be,
        bias_bwd_partial<T><<<col_grid(M, pl), dim3(COL_TILE, COL_ROWS), 0, STREAM(be)>>>(
            part, act_ptr<T>(dy), N, M, pl.rows);
        LAUNCH_CHECK();
    );
    launch_colsum_finish(be, db, part, pl.chunks, M);
}

void cuda_relu_bwd(struct tfm_backend *be, float *dx, const float *dy, const float *y, size_t n,
                   float scale)
{
    if (n == 0)
        return;
    BY_ACT_TYPE(be,
        relu_bwd_elems<T><<<tfm_cuda_blocks(n, THREADS), THREADS, 0, STREAM(be)>>>(
            act_ptr<T>(dx), act_ptr<T>(dy), act_ptr<T>(y), n, scale);
        LAUNCH_CHECK();
    );
}

// p <= 0 copies; otherwise the CPU's threshold and 1/(1-p) (p >= 1 drops everything).
void cuda_dropout(struct tfm_backend *be, float *y, const float *x, size_t n, float p,
                  uint64_t key)
{
    if (n == 0)
        return;
    if (p <= 0) {
        if (y != x)
            CUDA_CHECK(cudaMemcpyAsync(y, x, n * be->act_size, cudaMemcpyDeviceToDevice,
                                       STREAM(be)));
        return;
    }
    BY_ACT_TYPE(be,
        dropout_elems<T><<<tfm_cuda_blocks(n, THREADS), THREADS, 0, STREAM(be)>>>(
            act_ptr<T>(y), act_ptr<T>(x), n, tfm_dropout_threshold(p), tfm_dropout_scale(p), key);
        LAUNCH_CHECK();
    );
}

// p <= 0: threshold 0 and multiplier 1, y = a + b (as the CPU).
void cuda_add_dropout(struct tfm_backend *be, float *y, const float *a, const float *b, size_t n,
                      float p, uint64_t key)
{
    if (n == 0)
        return;
    float inv = tfm_dropout_scale(p);
    BY_ACT_TYPE(be,
        add_dropout_elems<T><<<tfm_cuda_blocks(n, THREADS), THREADS, 0, STREAM(be)>>>(
            act_ptr<T>(y), act_ptr<T>(a), act_ptr<T>(b), n, tfm_dropout_threshold(p), inv, key);
        LAUNCH_CHECK();
    );
}

void cuda_axpy(struct tfm_backend *be, float *y, float alpha, const float *x, size_t n)
{
    if (n == 0)
        return;
    BY_ACT_TYPE(be,
        axpy_elems<T><<<tfm_cuda_blocks(n, THREADS), THREADS, 0, STREAM(be)>>>(
            act_ptr<T>(y), alpha, act_ptr<T>(x), n);
        LAUNCH_CHECK();
    );
}

void cuda_gather(struct tfm_backend *be, float *dst, int64_t dstride, const float *src,
                 int64_t sstride, const int32_t *idx, int n, int64_t len)
{
    if (n <= 0 || len <= 0)
        return;
    size_t total = (size_t)n * (size_t)len;
    BY_ACT_TYPE(be,
        gather_elems<T><<<tfm_cuda_blocks(total, THREADS), THREADS, 0, STREAM(be)>>>(
            act_ptr<T>(dst), dstride, act_ptr<T>(src), sstride, idx, total, len);
        LAUNCH_CHECK();
    );
}

// ---- fused ops: p <= 0 gives threshold 0 (every element kept, unscaled: the copy that
// dropout makes then), as the CPU.

void cuda_bias_act_dropout(struct tfm_backend *be, float *x, const float *b, int N, int M,
                           int relu, float p, uint64_t key)
{
    size_t total = (size_t)(N > 0 ? N : 0) * (size_t)(M > 0 ? M : 0);
    if (total == 0)
        return;
    float inv = tfm_dropout_scale(p);
    BY_ACT_TYPE(be,
        bias_act_dropout_elems<T><<<tfm_cuda_blocks(total, THREADS), THREADS, 0, STREAM(be)>>>(
            act_ptr<T>(x), act_ptr<T>(b), total, M, relu, tfm_dropout_threshold(p), inv, key);
        LAUNCH_CHECK();
    );
}

void cuda_embed_fwd_dropout(struct tfm_backend *be, float *out, const float *table,
                            const int32_t *ids, int N, int D, float scale, const float *pos,
                            int L, int pos0, float p, uint64_t key)
{
    size_t total = (size_t)(N > 0 ? N : 0) * (size_t)(D > 0 ? D : 0);
    if (total == 0)
        return;
    float inv = tfm_dropout_scale(p);
    BY_ACT_TYPE(be,
        embed_dropout_elems<T><<<tfm_cuda_blocks(total, THREADS), THREADS, 0, STREAM(be)>>>(
            act_ptr<T>(out), act_ptr<T>(table), ids, total, D, scale, act_ptr<T>(pos), L, pos0,
            tfm_dropout_threshold(p), inv, key);
        LAUNCH_CHECK();
    );
}

// A block per row; mean and rstd fp32.
void cuda_add_dropout_layernorm(struct tfm_backend *be, float *y, float *mean, float *rstd,
                                float *r, const float *a, const float *b, const float *g,
                                const float *bias, int N, int D, float eps, float p,
                                uint64_t key)
{
    if (N <= 0 || D <= 0)
        return;
    float inv = tfm_dropout_scale(p);
    BY_ACT_TYPE(be,
        add_dropout_ln_rows<T><<<(unsigned)N, THREADS, 0, STREAM(be)>>>(
            act_ptr<T>(y), mean, rstd, act_ptr<T>(r), act_ptr<T>(a), act_ptr<T>(b),
            act_ptr<T>(g), act_ptr<T>(bias), D, eps, tfm_dropout_threshold(p), inv, key);
        LAUNCH_CHECK();
    );
}

// dg, db (column sums, fp32), then dx and (when dxd is given) dxd, a block per row.
void cuda_layernorm_bwd_dropout(struct tfm_backend *be, float *dx, float *dxd, float *dg,
                                float *db, const float *dy, const float *x, const float *mean,
                                const float *rstd, const float *g, int N, int D,
                                int accumulate, float p, uint64_t key)
{
    if (N <= 0 || D <= 0)
        return;
    cudaStream_t s = STREAM(be);
    col_plan pl = plan_columns(N);
    size_t part_n = (size_t)pl.chunks * D;
    float *part = (float *)tfm_cuda_work(be, 2 * part_n * sizeof(float));
    BY_ACT_TYPE(be,
        ln_bwd_partial<T><<<col_grid(D, pl), dim3(COL_TILE, COL_ROWS), 0, s>>>(
            part, part + part_n, act_ptr<T>(dy), act_ptr<T>(x), mean, rstd, N, D, pl.rows);
        LAUNCH_CHECK();
    );
    launch_colsum_finish(be, dg, part, pl.chunks, D);
    launch_colsum_finish(be, db, part + part_n, pl.chunks, D);
    float inv = tfm_dropout_scale(p);
    BY_ACT_TYPE(be,
        ln_bwd_dropout_rows<T><<<(unsigned)N, THREADS, 0, s>>>(
            act_ptr<T>(dx), act_ptr<T>(dxd), act_ptr<T>(dy), act_ptr<T>(x), mean, rstd,
            act_ptr<T>(g), D, accumulate, tfm_dropout_threshold(p), inv, key);
        LAUNCH_CHECK();
    );
}

// loss and nll are fp32 at every precision, the logits (and their gradient) activations.
void cuda_xent(struct tfm_backend *be, float *logits, const int32_t *labels, int N, int V,
               float eps, int ignore, float *loss, float *nll, float grad_scale)
{
    if (N <= 0 || V <= 0)
        return;
    BY_ACT_TYPE(be,
        xent_rows<T><<<(unsigned)N, THREADS, 0, STREAM(be)>>>(act_ptr<T>(logits), labels, V, eps,
                                                              ignore, loss, nll, grad_scale);
        LAUNCH_CHECK();
    );
}

void cuda_log_softmax(struct tfm_backend *be, float *y, const float *x, int N, int V)
{
    if (N <= 0 || V <= 0)
        return;
    BY_ACT_TYPE(be,
        log_softmax_rows<T><<<(unsigned)N, THREADS, 0, STREAM(be)>>>(act_ptr<T>(y),
                                                                     act_ptr<T>(x), V);
        LAUNCH_CHECK();
    );
}

// sumsq and adam: fp32 at every precision (master weights, gradients, moments).
// The parts come back to the host (the op's one synchronization) and add up there in order.
double cuda_sumsq(struct tfm_backend *be, const float *x, size_t n)
{
    if (n == 0)
        return 0;
    cudaStream_t s = STREAM(be);
    size_t chunk;
    unsigned parts = sumsq_plan(n, &chunk);
    double *part = (double *)tfm_cuda_work(be, parts * sizeof(double));
    sumsq_parts<<<parts, SUMSQ_THREADS, 0, s>>>(part, x, n, chunk);
    LAUNCH_CHECK();
    double host[SUMSQ_PARTS];
    CUDA_CHECK(cudaMemcpyAsync(host, part, parts * sizeof(double), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    double sum = 0;
    for (unsigned k = 0; k < parts; k++)
        sum += host[k];
    return sum;
}

// Bias corrections as cpu_adam (tfm_adam_correction).
void cuda_adam(struct tfm_backend *be, float *p, float *grad, float *m, float *v, size_t n,
               float lr, float b1, float b2, float eps, float gscale, int64_t step)
{
    if (n == 0)
        return;
    adam_elems<<<tfm_cuda_blocks(n, THREADS), THREADS, 0, STREAM(be)>>>(
        p, grad, m, v, n, lr, b1, b2, eps, gscale, tfm_adam_correction(b1, step),
        tfm_adam_correction(b2, step));
    LAUNCH_CHECK();
}

// ---- the workspace of a training step (backend_cuda.cu: reserve_step) -------------------

// The most workspace embed_bwd, layernorm_bwd and bias_bwd ask for over up to `rows` rows,
// biases up to `width` wide, layer norms of D and V classes (each need grows with the
// rows): the column sums' partials, and the ids' sort with CUB's temporary storage.
size_t tfm_cuda_ops_step_work(int64_t rows, int width, int D, int V)
{
    if (rows <= 0)
        return 0;
    int N = rows < INT32_MAX ? (int)rows : INT32_MAX;
    col_plan pl = plan_columns(N);
    size_t bias = (size_t)pl.chunks * (size_t)(width > 0 ? width : 0) * sizeof(float);
    size_t ln = 2 * (size_t)pl.chunks * (size_t)(D > 0 ? D : 0) * sizeof(float);
    size_t temp = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, (const uint32_t *)nullptr,
                                               (uint32_t *)nullptr, (const int32_t *)nullptr,
                                               (int32_t *)nullptr, N, 0, id_bits(V), 0));
    size_t embed = 3 * align256((size_t)N * sizeof(int32_t)) + temp;
    size_t need = bias > ln ? bias : ln;
    return need > embed ? need : embed;
}
