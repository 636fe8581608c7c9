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
//                                         element-wise, grid-stride loops (map_elems)
//   cuda_bias_act_dropout, cuda_embed_fwd_dropout, cuda_add_dropout_layernorm,
//   cuda_layernorm_bwd_dropout            the fused sequences (backend.h): the element-wise
//                                         ones grid-stride, the layer norms a block per row
//   cuda_xent, cuda_log_softmax           a block per row
//   cuda_sumsq, cuda_adam                 the optimizer's
//
// Memory (cuda.h, "16-byte vectors"): every kernel here but gather and the column sums'
// second pass moves groups of VW<T> elements (8 at bf16, 4 at fp32) as one 16-byte load or
// store where the arrays' addresses allow, element by element where they do not (odd
// rows, offset pointers, tails); which thread takes which element, and the order of every
// sum, is the same on both paths.
//
// Determinism (no atomics, a fixed order for every sum):
//  - sums along a row: thread t takes the groups of VW<T> columns t, t + blockDim.x, ...
//    and adds its columns in order, then block_reduce combines the threads in a fixed
//    tree; the layer norms' blocks have row_threads(D) threads, a function of D and T, so
//    that a fused op sums as its sequence does;
//  - sums down columns (bias, layer-norm gains): fixed chunks of rows, each column's rows
//    of a chunk summed in a fixed order (col_width: a thread takes 1 or VW<T> columns,
//    which changes no column's order) and tree into a partial row of the workspace, then
//    one thread per column adds the partials in chunk order (colsum_*);
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

// Blocks for a grid-stride loop over n elements in groups of VW<T> (cuda.h, "16-byte
// vectors"): a thread a group.  The unaligned path walks the same loop one element a step.
template <typename T> unsigned vec_blocks(size_t n)
{
    return tfm_cuda_blocks((n + VW<T> - 1) / VW<T>, THREADS);
}

// The threads of a block that handles a row of D (the layer norms, the embeddings'
// gradients): one per group of VW<T> columns, rounded up to whole warps, at most THREADS.
// A function of D and T only, so a fused op and the sequence it stands for sum a row with
// the same threads.
template <typename T> unsigned row_threads(int D)
{
    int64_t groups = ((int64_t)D + VW<T> - 1) / VW<T>;
    int64_t t = (groups + 31) / 32 * 32;
    return (unsigned)(t < (int64_t)THREADS ? t : (int64_t)THREADS);
}

// W consecutive elements at p into f: one vector (W = VW<T>, p 16-byte aligned) or, for
// W = 1, one element.
template <int W, typename T> __device__ __forceinline__ void load_w(float (&f)[W], const T *p)
{
    if constexpr (W == 1)
        f[0] = act_load(p);
    else
        vec_load(f, p);
}

// y[i] = f(i, x0[i], x1[i]) for i < n (x1 may be NULL: f gets 0 for it), in the groups of
// VW<T> elements of cuda.h: one vector load or store each when y, x0 and x1 are all
// 16-byte aligned, else (and for the tail) element by element.  y may equal x0 or x1:
// each element is read before it is written, by the same thread.
template <typename T, typename F>
__device__ __forceinline__ void map_elems(T *y, const T *x0, const T *x1, size_t n, F f)
{
    constexpr int W = VW<T>;
    const bool vec = vec_aligned(y) && vec_aligned(x0) && (!x1 || vec_aligned(x1));
    const size_t w = vec ? W : 1;
    float a[W], b[W];
    for (size_t i = thread_index() * w; i < n; i += thread_count() * w) {
        int cnt = n - i < w ? (int)(n - i) : (int)w;
        group_load(a, x0 + i, cnt, vec);
        if (x1)
            group_load(b, x1 + i, cnt, vec);
#pragma unroll
        for (int e = 0; e < W; e++)
            if (e < cnt)
                a[e] = f(i + e, a[e], x1 ? b[e] : 0.0f);
        group_store(y + i, a, cnt, vec);
    }
}

// ---- column sums: out (M) += sums over the rows of an (N,M) matrix -----------------------
//
// Pass 1: a block of COL_TILE x W columns, COL_ROWS threads per column, sums one chunk of
// rows (thread (x, y) takes the W columns from (tile x + x) W and rows y, y + COL_ROWS, ...
// of the chunk, adding each column's rows in order; then a tree over y) into row `chunk`
// of a (chunks, M) workspace.  W is VW<T> when the rows allow vector loads (M a multiple
// of it, the matrices 16-byte aligned: col_width) and 1 otherwise; each column's sum is
// the same either way.  Pass 2 (colsum_finish): one thread per column adds the chunks in
// order.  The chunks depend on N only.

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

// The most chunks plan_columns(n) cuts a column sum into for any n <= N (a workspace for N
// rows must hold them): its chunks are not monotone in n (20000 rows: 254 chunks of 79;
// 16640: 256 of 65), but never pass COL_MAX_CHUNKS, nor n / COL_MIN_ROWS rounded up.
int max_chunks(int N)
{
    int64_t c = ((int64_t)N + COL_MIN_ROWS - 1) / COL_MIN_ROWS;
    return (int)(c < COL_MAX_CHUNKS ? c : COL_MAX_CHUNKS);
}

dim3 col_grid(int M, const col_plan &pl, int W)
{
    int64_t tile = (int64_t)COL_TILE * W;
    return dim3((unsigned)(((int64_t)M + tile - 1) / tile), (unsigned)pl.chunks);
}

// The columns a pass-1 thread takes for (N,M) activations at a and b (b may be NULL).
template <typename T> int col_width(int M, const void *a, const void *b)
{
    return M % VW<T> == 0 && vec_aligned(a) && (!b || vec_aligned(b)) ? VW<T> : 1;
}

// Sums of v[e] over threadIdx.y in a fixed tree (the same for every W), valid where
// threadIdx.y == 0; sh holds COL_ROWS rows of COL_TILE * W.
template <int W> __device__ void column_tree(float (&v)[W], float (*sh)[COL_TILE * W])
{
    unsigned x = threadIdx.x, y = threadIdx.y;
#pragma unroll
    for (int e = 0; e < W; e++)
        sh[y][e * COL_TILE + x] = v[e];
    __syncthreads();
    for (unsigned h = COL_ROWS / 2; h > 0; h /= 2) {
        if (y < h)
#pragma unroll
            for (int e = 0; e < W; e++)
                sh[y][e * COL_TILE + x] += sh[y + h][e * COL_TILE + x];
        __syncthreads();
    }
#pragma unroll
    for (int e = 0; e < W; e++)
        v[e] = sh[0][e * COL_TILE + x];
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

// Dropout's multiplier for element i, as the CPU's dropout_mul: inv when kept (its 24 random
// bits >= thr, thr = tfm_dropout_threshold(p); thr 0 keeps all without hashing), else 0.
// The element's index, never its group's: a vector computes each element's own.
__device__ __forceinline__ float dropout_mul(uint64_t key, size_t i, uint32_t thr, float inv)
{
    return thr == 0 || tfm_rng_bits24(key, i) >= thr ? inv : 0.0f;
}

// v as the activation type holds it: v at fp32; v rounded to nearest even at bf16.  Where
// a fused op's sequence stores a value between its ops, act_round rounds it as act_store
// would, so that the result is the sequence's at bf16 too (backend.h, "fused").
__device__ __forceinline__ float act_round(float v, const float *) { return v; }
__device__ __forceinline__ float act_round(float v, const bf16 *)
{
    return __bfloat162float(__float2bfloat16_rn(v));
}

// ---- embeddings ----------------------------------------------------------------------------

// out[n][c] = scale * table[ids[n]][c] (+ pos[pos0 + n % L][c]), then dropout (thr 0: kept
// as is, embed_fwd itself; else rounded as embed_fwd stores it, then dropout_elems's
// operations: embed_fwd_dropout).  Groups of VW<T> when D is a multiple of it and the
// three arrays are 16-byte aligned (every group then lies in one row), else one element a
// step.
template <typename T>
__global__ void embed_elems(T *out, const T *table, const int32_t *ids, size_t total, int D,
                            float scale, const T *pos, int L, int pos0, uint32_t thr,
                            float inv, uint64_t key)
{
    constexpr int W = VW<T>;
    const bool vec = D % W == 0 && vec_aligned(out) && vec_aligned(table) &&
                     (!pos || vec_aligned(pos));
    const size_t w = vec ? W : 1;
    float e[W], q[W];
    for (size_t i = thread_index() * w; i < total; i += thread_count() * w) {
        int cnt = total - i < w ? (int)(total - i) : (int)w;
        size_t n = i / (size_t)D, c = i - n * (size_t)D;
        group_load(e, table + (size_t)ids[n] * D + c, cnt, vec);
        if (pos)
            group_load(q, pos + (size_t)(pos0 + (int64_t)(n % (size_t)L)) * D + c, cnt, vec);
#pragma unroll
        for (int k = 0; k < W; k++)
            if (k < cnt) {
                float v = __fmul_rn(scale, e[k]);
                if (pos)
                    v = __fadd_rn(v, q[k]);
                v = act_round(v, out);
                float mul = dropout_mul(key, i + k, thr, inv);
                e[k] = thr == 0 ? v : mul > 0 ? __fmul_rn(v, mul) : 0.0f;
            }
        group_store(out + i, e, cnt, vec);
    }
}

// W (a multiple of 4) consecutive fp32 words at p into f, as W / 4 float4 loads when vec
// and the group is whole, else the first cnt one by one (the others 0); and back.  The
// embeddings' gradients (fp32) in the groups of their activations' VW<T>.
template <int W>
__device__ __forceinline__ void f32_load(float (&f)[W], const float *p, int cnt, bool vec)
{
    if (vec && cnt == W) {
#pragma unroll
        for (int k = 0; k < W / 4; k++) {
            float4 u = reinterpret_cast<const float4 *>(p)[k];
            f[4 * k] = u.x;
            f[4 * k + 1] = u.y;
            f[4 * k + 2] = u.z;
            f[4 * k + 3] = u.w;
        }
    } else {
#pragma unroll
        for (int e = 0; e < W; e++)
            f[e] = e < cnt ? p[e] : 0.0f;
    }
}
template <int W>
__device__ __forceinline__ void f32_store(float *p, const float (&f)[W], int cnt, bool vec)
{
    if (vec && cnt == W) {
#pragma unroll
        for (int k = 0; k < W / 4; k++)
            reinterpret_cast<float4 *>(p)[k] =
                make_float4(f[4 * k], f[4 * k + 1], f[4 * k + 2], f[4 * k + 3]);
    } else {
#pragma unroll
        for (int e = 0; e < W; e++)
            if (e < cnt)
                p[e] = f[e];
    }
}

// dpos[pos0 + l] += dout[l] + dout[l + L] + ... in row order: block l owns position row l;
// each thread a group of VW<T> columns at a time (vectors when D is a multiple of VW<T> and
// both arrays 16-byte aligned), each column's rows added in order.
template <typename T>
__global__ void embed_bwd_pos(float *dpos, const T *dout, int N, int D, int L, int pos0)
{
    constexpr int W = VW<T>;
    const bool vec = D % W == 0 && vec_aligned(dpos) && vec_aligned(dout);
    int l = blockIdx.x;
    float *row = dpos + (size_t)(pos0 + l) * D;
    float acc[W], d[W];
    for (int c0 = (int)threadIdx.x * W; c0 < D; c0 += (int)blockDim.x * W) {
        int cnt = group_cnt<T>(D, c0);
        f32_load(acc, row + c0, cnt, vec);
        for (int64_t n = l; n < N; n += L) {
            group_load(d, dout + (size_t)n * D + c0, cnt, vec);
#pragma unroll
            for (int e = 0; e < W; e++)
                acc[e] = __fadd_rn(acc[e], d[e]);
        }
        f32_store(row + c0, acc, cnt, vec);
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
// permutation, so token order): the CPU's operations in the CPU's order.  Each thread a
// group of VW<T> columns at a time, as embed_bwd_pos.
template <typename T>
__global__ void embed_bwd_runs(float *dtable, const T *dout, const uint32_t *keys,
                               const int32_t *order, int N, int D, float scale)
{
    constexpr int W = VW<T>;
    int64_t s = blockIdx.x;
    uint32_t id = keys[s];
    if (s > 0 && keys[s - 1] == id)
        return;                         // inside a run: its first block does it
    int64_t e = run_end(keys, s, N, id);
    const bool vec = D % W == 0 && vec_aligned(dtable) && vec_aligned(dout);
    float *row = dtable + (size_t)id * D;
    float acc[W], d[W];
    for (int c0 = (int)threadIdx.x * W; c0 < D; c0 += (int)blockDim.x * W) {
        int cnt = group_cnt<T>(D, c0);
        f32_load(acc, row + c0, cnt, vec);
        for (int64_t k = s; k < e; k++) {
            group_load(d, dout + (size_t)order[k] * D + c0, cnt, vec);
#pragma unroll
            for (int j = 0; j < W; j++)
                acc[j] = __fadd_rn(acc[j], __fmul_rn(scale, d[j]));
        }
        f32_store(row + c0, acc, cnt, vec);
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
// A block of row_threads(D) per row; thread t takes the groups of VW<T> columns t, t +
// blockDim.x, ... (cuda.h, "16-byte vectors": one load or store each where the row's
// array is 16-byte aligned) and adds its columns in order; then block_sum's fixed tree.

// The rest of a row's layer norm once each thread has summed its columns of the row xr
// into s: the mean (the block tree of s), the biased variance (each thread's columns in
// order, then the tree), *mean, *rstd (thread 0), yr = (x - mean) * rstd * g + b.  Each
// thread reads and writes only its own columns, so yr may equal xr.
template <typename T>
__device__ void ln_row_finish(T *yr, float *mean, float *rstd, const T *xr, float s,
                              const T *g, const T *b, int D, float eps)
{
    constexpr int W = VW<T>;
    const bool vx = vec_aligned(xr), vy = vec_aligned(yr), vg = vec_aligned(g),
               vb = vec_aligned(b);
    float f[W], gg[W], bb[W];
    float mu = block_sum(s) / D;
    float v = 0;
    for (int c0 = (int)threadIdx.x * W; c0 < D; c0 += (int)blockDim.x * W) {
        int cnt = group_cnt<T>(D, c0);
        group_load(f, xr + c0, cnt, vx);
#pragma unroll
        for (int e = 0; e < W; e++)
            if (e < cnt) {
                float d = f[e] - mu;
                v += d * d;
            }
    }
    float rs = 1.0f / sqrtf(block_sum(v) / D + eps);
    if (threadIdx.x == 0) {
        *mean = mu;
        *rstd = rs;
    }
    for (int c0 = (int)threadIdx.x * W; c0 < D; c0 += (int)blockDim.x * W) {
        int cnt = group_cnt<T>(D, c0);
        group_load(f, xr + c0, cnt, vx);
        group_load(gg, g + c0, cnt, vg);
        group_load(bb, b + c0, cnt, vb);
#pragma unroll
        for (int e = 0; e < W; e++)
            f[e] = (f[e] - mu) * rs * gg[e] + bb[e];
        group_store(yr + c0, f, cnt, vy);
    }
}

// Block n normalizes row n (ln_row_finish); y may equal x.
template <typename T>
__global__ void ln_fwd_rows(T *y, float *mean, float *rstd, const T *x, const T *g, const T *b,
                            int D, float eps)
{
    constexpr int W = VW<T>;
    size_t n = blockIdx.x;
    const T *xr = x + n * D;
    const bool vx = vec_aligned(xr);
    float f[W], s = 0;
    for (int c0 = (int)threadIdx.x * W; c0 < D; c0 += (int)blockDim.x * W) {
        int cnt = group_cnt<T>(D, c0);
        group_load(f, xr + c0, cnt, vx);
#pragma unroll
        for (int e = 0; e < W; e++)
            if (e < cnt)
                s += f[e];
    }
    ln_row_finish(y + n * D, mean + n, rstd + n, xr, s, g, b, D, eps);
}

// Pass 1 of dg += sum_n dy * xhat and db += sum_n dy (column sums above; W: col_width).
template <typename T, int W>
__global__ void ln_bwd_partial(float *part_g, float *part_b, const T *dy, const T *x,
                               const float *mean, const float *rstd, int N, int D, int rows)
{
    __shared__ float sh_g[COL_ROWS][COL_TILE * W], sh_b[COL_ROWS][COL_TILE * W];
    int64_t c = ((int64_t)blockIdx.x * COL_TILE + threadIdx.x) * W;
    int64_t r0 = (int64_t)blockIdx.y * rows, r1 = r0 + rows < N ? r0 + rows : N;
    float sg[W], sb[W], d[W], xv[W];
#pragma unroll
    for (int e = 0; e < W; e++)
        sg[e] = sb[e] = 0;
    if (c < D)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += COL_ROWS) {
            load_w(d, dy + r * D + c);
            load_w(xv, x + r * D + c);
            float mu = mean[r], rs = rstd[r];
#pragma unroll
            for (int e = 0; e < W; e++) {
                sg[e] += d[e] * (xv[e] - mu) * rs;
                sb[e] += d[e];
            }
        }
    column_tree(sg, sh_g);
    column_tree(sb, sh_b);
    if (threadIdx.y == 0 && c < D)
#pragma unroll
        for (int e = 0; e < W; e++) {
            part_g[(size_t)blockIdx.y * D + c + e] = sg[e];
            part_b[(size_t)blockIdx.y * D + c + e] = sb[e];
        }
}

// ---- element-wise ---------------------------------------------------------------------------
// Grid-stride loops over the groups of map_elems (VW<T> elements a vector where the
// arrays allow); the operations on each element are its own, so the path changes no bits.

// x[n][c] += b[c]; then relu (or not); then, unless thr is 0, dropout_elems's operations
// on the value bias_act stores (bias_act_dropout; thr 0: bias_act itself).  Groups of
// VW<T> when M is a multiple of it and x and b are 16-byte aligned (a group then lies in
// one row, and its bias is a group of b), else one element a step.
template <typename T>
__global__ void bias_act_dropout_elems(T *x, const T *b, size_t total, int M, int relu,
                                       uint32_t thr, float inv, uint64_t key)
{
    constexpr int W = VW<T>;
    const bool vec = M % W == 0 && vec_aligned(x) && vec_aligned(b);
    const size_t w = vec ? W : 1;
    float f[W], bb[W];
    for (size_t i = thread_index() * w; i < total; i += thread_count() * w) {
        int cnt = total - i < w ? (int)(total - i) : (int)w;
        group_load(f, x + i, cnt, vec);
        group_load(bb, b + i % (size_t)M, cnt, vec);
#pragma unroll
        for (int e = 0; e < W; e++)
            if (e < cnt) {
                float t = __fadd_rn(f[e], bb[e]);
                t = act_round(relu ? (t > 0 ? t : 0.0f) : t, x);
                float mul = dropout_mul(key, i + e, thr, inv);
                f[e] = thr == 0 ? t : mul > 0 ? __fmul_rn(t, mul) : 0.0f;
            }
        group_store(x + i, f, cnt, vec);
    }
}

// Pass 1 of db += column sums of dy (W: col_width).
template <typename T, int W>
__global__ void bias_bwd_partial(float *part, const T *dy, int N, int M, int rows)
{
    __shared__ float sh[COL_ROWS][COL_TILE * W];
    int64_t c = ((int64_t)blockIdx.x * COL_TILE + threadIdx.x) * W;
    int64_t r0 = (int64_t)blockIdx.y * rows, r1 = r0 + rows < N ? r0 + rows : N;
    float s[W], d[W];
#pragma unroll
    for (int e = 0; e < W; e++)
        s[e] = 0;
    if (c < M)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += COL_ROWS) {
            load_w(d, dy + r * M + c);
#pragma unroll
            for (int e = 0; e < W; e++)
                s[e] += d[e];
        }
    column_tree(s, sh);
    if (threadIdx.y == 0 && c < M)
#pragma unroll
        for (int e = 0; e < W; e++)
            part[(size_t)blockIdx.y * M + c + e] = s[e];
}

template <typename T>
__global__ void relu_bwd_elems(T *dx, const T *dy, const T *y, size_t n, float scale)
{
    map_elems(dx, dy, y, n, [=](size_t, float d, float yv) {
        float g = __fmul_rn(d, scale);
        return yv > 0 ? g : 0.0f;
    });
}

// y = x * mul; a dropped element is +0 even when x is Inf or NaN.
template <typename T>
__global__ void dropout_elems(T *y, const T *x, size_t n, uint32_t thr, float inv, uint64_t key)
{
    map_elems(y, x, (const T *)nullptr, n, [=](size_t i, float xv, float) {
        float mul = dropout_mul(key, i, thr, inv);
        return mul > 0 ? __fmul_rn(xv, mul) : 0.0f;
    });
}

template <typename T>
__global__ void add_dropout_elems(T *y, const T *a, const T *b, size_t n, uint32_t thr,
                                  float inv, uint64_t key)
{
    map_elems(y, a, b, n, [=](size_t i, float av, float bv) {
        float mul = dropout_mul(key, i, thr, inv);
        return __fadd_rn(av, mul > 0 ? __fmul_rn(bv, mul) : 0.0f);
    });
}

template <typename T> __global__ void axpy_elems(T *y, float alpha, const T *x, size_t n)
{
    map_elems(y, (const T *)y, x, n,
              [=](size_t, float yv, float xv) { return __fadd_rn(yv, __fmul_rn(alpha, xv)); });
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
// The sequences of the ops above in one kernel each, with the sequences' operations and, for
// the row sums, the sequences' threads and orders (the same row_threads, the same groups):
// bias_act_dropout_elems and embed_elems above; the layer norms here.

// Block n: row n of r = a + dropout(b) (add_dropout_elems), then ln_row_finish on it: the
// sum s is layernorm_fwd's, the stored values of r added in the same groups and order.
// Each thread reads back only the columns it stored itself, so no barrier is needed
// between the two (block_sum's barriers come after).  r may equal a or b (each element is
// read before it is written, by the same thread); y aliases none of them.
template <typename T>
__global__ void add_dropout_ln_rows(T *y, float *mean, float *rstd, T *r, const T *a,
                                    const T *b, const T *g, const T *bias, int D, float eps,
                                    uint32_t thr, float inv, uint64_t key)
{
    constexpr int W = VW<T>;
    size_t n = blockIdx.x, row = n * D;
    const bool vr = vec_aligned(r + row), va = vec_aligned(a + row), vb = vec_aligned(b + row);
    float fa[W], fb[W], s = 0;
    for (int c0 = (int)threadIdx.x * W; c0 < D; c0 += (int)blockDim.x * W) {
        int cnt = group_cnt<T>(D, c0);
        size_t i = row + c0;
        group_load(fa, a + i, cnt, va);
        group_load(fb, b + i, cnt, vb);
#pragma unroll
        for (int e = 0; e < W; e++) {
            float mul = e < cnt ? dropout_mul(key, i + e, thr, inv) : 0.0f;
            fa[e] = __fadd_rn(fa[e], mul > 0 ? __fmul_rn(fb[e], mul) : 0.0f);
        }
        group_store(r + i, fa, cnt, vr);
#pragma unroll
        for (int e = 0; e < W; e++)
            if (e < cnt)
                s += act_round(fa[e], r);
    }
    ln_row_finish(y + row, mean + n, rstd + n, (const T *)r + row, s, g, bias, D, eps);
}

// Block n: dx row n = rstd * (dy*g - mean(dy*g) - xhat * mean(dy*g*xhat)), added to dx
// when accumulate; then, when dxd is given, dxd = dropout(dx) from the value dx stores
// (dropout_elems; thr 0: a copy).  The two row sums: each thread's columns in order (its
// groups), then block_sum's tree.
template <typename T>
__global__ void ln_bwd_dropout_rows(T *dx, T *dxd, const T *dy, const T *x, const float *mean,
                                    const float *rstd, const T *g, int D, int accumulate,
                                    uint32_t thr, float inv, uint64_t key)
{
    constexpr int W = VW<T>;
    size_t n = blockIdx.x, row = n * D;
    const T *xr = x + row, *dyr = dy + row;
    T *dxr = dx + row, *dxdr = dxd ? dxd + row : nullptr;
    const bool vx = vec_aligned(xr), vdy = vec_aligned(dyr), vg = vec_aligned(g),
               vdx = vec_aligned(dxr), vdxd = vec_aligned(dxdr);
    float fx[W], fdy[W], fg[W], fo[W];
    float mu = mean[n], rs = rstd[n], a = 0, bsum = 0;
    for (int c0 = (int)threadIdx.x * W; c0 < D; c0 += (int)blockDim.x * W) {
        int cnt = group_cnt<T>(D, c0);
        group_load(fdy, dyr + c0, cnt, vdy);
        group_load(fg, g + c0, cnt, vg);
        group_load(fx, xr + c0, cnt, vx);
#pragma unroll
        for (int e = 0; e < W; e++)
            if (e < cnt) {
                float dh = fdy[e] * fg[e];
                a += dh;
                bsum += dh * (fx[e] - mu) * rs;
            }
    }
    a = block_sum(a) / D;
    bsum = block_sum(bsum) / D;
    for (int c0 = (int)threadIdx.x * W; c0 < D; c0 += (int)blockDim.x * W) {
        int cnt = group_cnt<T>(D, c0);
        group_load(fdy, dyr + c0, cnt, vdy);
        group_load(fg, g + c0, cnt, vg);
        group_load(fx, xr + c0, cnt, vx);
        if (accumulate)
            group_load(fo, dxr + c0, cnt, vdx);
#pragma unroll
        for (int e = 0; e < W; e++) {
            float xh = (fx[e] - mu) * rs;
            float v = rs * (fdy[e] * fg[e] - a - xh * bsum);
            fo[e] = act_round(accumulate ? fo[e] + v : v, dxr);
        }
        group_store(dxr + c0, fo, cnt, vdx);
        if (dxd) {
#pragma unroll
            for (int e = 0; e < W; e++) {
                float mul = e < cnt ? dropout_mul(key, row + c0 + e, thr, inv) : 0.0f;
                fo[e] = thr == 0 ? fo[e] : mul > 0 ? __fmul_rn(fo[e], mul) : 0.0f;
            }
            group_store(dxdr + c0, fo, cnt, vdxd);
        }
    }
}

// ---- output layer ------------------------------------------------------------------------
// A block of THREADS per row; thread t takes the groups of VW<T> columns t, t + THREADS, ...
// (one load or store each when the row is 16-byte aligned: V a multiple of VW<T>) and adds
// its columns in order.

// Block n: the row's maximum; the sums of exp(z - max) and of z, in float per thread and
// in double across threads (the CPU: float within blocks, double across); then the
// losses and, when grad_scale != 0, the gradient over the logits.  Each thread writes only
// the columns it read; z[label] is read by all before the first block_reduce's barrier.
template <typename T>
__global__ void xent_rows(T *logits, const int32_t *labels, int V, float eps, int ignore,
                          float *loss, float *nll, float grad_scale)
{
    constexpr int W = VW<T>;
    size_t n = blockIdx.x;
    T *z = logits + n * V;
    const bool vz = vec_aligned(z);
    float f[W];
    int y = labels[n];
    if (y == ignore) {
        if (threadIdx.x == 0)
            loss[n] = nll[n] = 0;
        if (grad_scale != 0) {
#pragma unroll
            for (int e = 0; e < W; e++)
                f[e] = 0;
            for (int c0 = (int)threadIdx.x * W; c0 < V; c0 += (int)blockDim.x * W)
                group_store(z + c0, f, group_cnt<T>(V, c0), vz);
        }
        return;
    }
    float zy = act_load(z + y);
    const float mx = row_max(z, V, vz);
    float se = 0, sz = 0;
    for (int c0 = (int)threadIdx.x * W; c0 < V; c0 += (int)blockDim.x * W) {
        int cnt = group_cnt<T>(V, c0);
        group_load(f, z + c0, cnt, vz);
#pragma unroll
        for (int e = 0; e < W; e++)
            if (e < cnt) {
                se += expf(f[e] - mx);
                sz += f[e];
            }
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
    for (int c0 = (int)threadIdx.x * W; c0 < V; c0 += (int)blockDim.x * W) {
        int cnt = group_cnt<T>(V, c0);
        group_load(f, z + c0, cnt, vz);
#pragma unroll
        for (int e = 0; e < W; e++) {
            float d = grad_scale * (expf(f[e] - l) - u);
            if (c0 + e == y)
                d -= grad_scale * (1.0f - eps);
            f[e] = d;
        }
        group_store(z + c0, f, cnt, vz);
    }
}

// Block n: y = z - (max + log sum exp(z - max)) (row_log_sum_exp, reduce.cuh: the groups
// and orders above).  y may equal x: every read of the row comes before block_sum's
// last barrier, every write after it.
template <typename T> __global__ void log_softmax_rows(T *y, const T *x, int V)
{
    constexpr int W = VW<T>;
    size_t n = blockIdx.x;
    const T *z = x + n * V;
    T *o = y + n * V;
    const bool vz = vec_aligned(z), vo = vec_aligned(o);
    float l = row_log_sum_exp(z, V);
    float f[W];
    for (int c0 = (int)threadIdx.x * W; c0 < V; c0 += (int)blockDim.x * W) {
        int cnt = group_cnt<T>(V, c0);
        group_load(f, z + c0, cnt, vz);
#pragma unroll
        for (int e = 0; e < W; e++)
            f[e] = f[e] - l;
        group_store(o + c0, f, cnt, vo);
    }
}

// ---- optimizer --------------------------------------------------------------------------

// The CPU's adam_range, operation for operation (a1, a2: the bias corrections), float4
// groups where the arrays allow (adam_range, cuda.h).
__global__ void adam_elems(float *p, float *grad, float *m, float *v, size_t n, float lr,
                           float b1, float b2, float eps, float gscale, float a1, float a2)
{
    adam_range(p, grad, m, v, n, lr, b1, b2, eps, gscale, a1, a2);
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
        embed_elems<T><<<vec_blocks<T>(total), THREADS, 0, STREAM(be)>>>(
            act_ptr<T>(out), act_ptr<T>(table), ids, total, D, scale, act_ptr<T>(pos), L, pos0,
            0, 1.0f, 0);
        LAUNCH_CHECK();
    );
}

// dpos: a block (row_threads) per position row.  dtable: the ids are sorted with their
// token numbers (stable, so equal ids keep token order), then the first block of each run
// of equal ids adds the run's rows to its table row.  Workspace: sorted ids, token numbers before and
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
            embed_bwd_pos<T><<<(unsigned)(N < L ? N : L), row_threads<T>(D), 0, s>>>(
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
        embed_bwd_runs<T><<<(unsigned)N, row_threads<T>(D), 0, s>>>(
            dtable, act_ptr<T>(dout), keys, order, N, D, scale);
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
        ln_fwd_rows<T><<<(unsigned)N, row_threads<T>(D), 0, STREAM(be)>>>(
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
        bias_act_dropout_elems<T><<<vec_blocks<T>(total), THREADS, 0, STREAM(be)>>>(
            act_ptr<T>(x), act_ptr<T>(b), total, M, relu, 0, 1.0f, 0);
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
    dim3 block(COL_TILE, COL_ROWS);
    BY_ACT_TYPE(be,
        if (col_width<T>(M, dy, NULL) > 1)
            bias_bwd_partial<T, VW<T>><<<col_grid(M, pl, VW<T>), block, 0, STREAM(be)>>>(
                part, act_ptr<T>(dy), N, M, pl.rows);
        else
            bias_bwd_partial<T, 1><<<col_grid(M, pl, 1), block, 0, STREAM(be)>>>(
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
        relu_bwd_elems<T><<<vec_blocks<T>(n), THREADS, 0, STREAM(be)>>>(
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
        dropout_elems<T><<<vec_blocks<T>(n), THREADS, 0, STREAM(be)>>>(
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
        add_dropout_elems<T><<<vec_blocks<T>(n), THREADS, 0, STREAM(be)>>>(
            act_ptr<T>(y), act_ptr<T>(a), act_ptr<T>(b), n, tfm_dropout_threshold(p), inv, key);
        LAUNCH_CHECK();
    );
}

void cuda_axpy(struct tfm_backend *be, float *y, float alpha, const float *x, size_t n)
{
    if (n == 0)
        return;
    BY_ACT_TYPE(be,
        axpy_elems<T><<<vec_blocks<T>(n), THREADS, 0, STREAM(be)>>>(
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
        bias_act_dropout_elems<T><<<vec_blocks<T>(total), THREADS, 0, STREAM(be)>>>(
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
        embed_elems<T><<<vec_blocks<T>(total), THREADS, 0, STREAM(be)>>>(
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
        add_dropout_ln_rows<T><<<(unsigned)N, row_threads<T>(D), 0, STREAM(be)>>>(
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
    dim3 block(COL_TILE, COL_ROWS);
    BY_ACT_TYPE(be,
        if (col_width<T>(D, dy, x) > 1)
            ln_bwd_partial<T, VW<T>><<<col_grid(D, pl, VW<T>), block, 0, s>>>(
                part, part + part_n, act_ptr<T>(dy), act_ptr<T>(x), mean, rstd, N, D, pl.rows);
        else
            ln_bwd_partial<T, 1><<<col_grid(D, pl, 1), block, 0, s>>>(
                part, part + part_n, act_ptr<T>(dy), act_ptr<T>(x), mean, rstd, N, D, pl.rows);
        LAUNCH_CHECK();
    );
    launch_colsum_finish(be, dg, part, pl.chunks, D);
    launch_colsum_finish(be, db, part + part_n, pl.chunks, D);
    float inv = tfm_dropout_scale(p);
    BY_ACT_TYPE(be,
        ln_bwd_dropout_rows<T><<<(unsigned)N, row_threads<T>(D), 0, s>>>(
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
    adam_elems<<<tfm_cuda_blocks((n + 3) / 4, THREADS), THREADS, 0, STREAM(be)>>>(
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
    const int chunks = max_chunks(N);
    size_t bias = (size_t)chunks * (size_t)(width > 0 ? width : 0) * sizeof(float);
    size_t ln = 2 * (size_t)chunks * (size_t)(D > 0 ? D : 0) * sizeof(float);
    size_t temp = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, (const uint32_t *)nullptr,
                                               (uint32_t *)nullptr, (const int32_t *)nullptr,
                                               (int32_t *)nullptr, N, 0, id_bits(V), 0));
    size_t embed = 3 * align256((size_t)N * sizeof(int32_t)) + temp;
    size_t need = bias > ln ? bias : ln;
    return need > embed ? need : embed;
}
