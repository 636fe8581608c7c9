// cuda_attn.cu: fused multi-head attention on the GPU: cuda_attn_fwd, cuda_attn_bwd and
// cuda_attn_decode, the attn_fwd, attn_bwd and attn_decode slots of struct tfm_backend
// (semantics: struct tfm_attn in src/backend.h; reference: attn_*_heads in
// src/backend_cpu.c).
//
// Paths.  attn_fwd and attn_bwd take one of two paths, fixed when the backend opens
// (struct tfm_cuda's attn), so a forward and its backward always agree:
//   mm: batched tensor-core products and a row softmax (cuda_attn_mm.cu), the default at
//     bf16: it rounds the weights P' and dS to bf16 for its products, and the CPU's bf16
//     emulation rounds them at the same places.
//   flash: the online-softmax kernels below, on CUDA cores, the default at fp32 (the
//     reference; at bf16 it keeps P' and dS in fp32).
// TFM_CUDA_ATTN=flash or mm in the environment picks one at every precision.
// attn_decode always runs here.
//
// Design.  Every kernel gives one warp one row: a query row (b,h,i) or a key row (b,h,j).
// Blocks are ROWS warps on ROWS consecutive rows of one head (b,h), so that the rows of the
// other side (keys for a query row, queries for a key row) can be shared in shared memory.
// Nothing is ever added by two threads into one place and every sum runs in a fixed order
// (no atomics), so results are bitwise reproducible.  P is never stored: the forward keeps
// a running ("online") softmax over the keys, saves lse, and the backward recomputes
// P = exp(score - lse), as the CPU does.
//
// Two forms of each kernel, chosen by the head size dk (the same form for the same shape,
// so the bits do not change between calls):
//   tiled (dk <= 256): rows of the other side are staged TILE = 32 at a time in shared
//     memory (stride dk|1, an odd number of floats: conflict-free both for a lane reading
//     its own row and for lanes reading consecutive columns of one row).  A lane computes
//     the dot products of its own row of the tile (x = 0..dk-1 in order); the warp then
//     combines the tile's 32 rows into accumulators held in registers, C columns per lane
//     (column lane + 32c), adding the rows t = 0..31 in order.
//   rows (dk > 256): the same per-row algorithm without staging: each dot product is
//     computed by the whole warp (lanes over columns, then a fixed butterfly), and the
//     accumulators live in the output row itself in global memory (each column belongs to
//     one lane for the whole kernel).
//
// Forward (fwd_tiled / fwd_rows): keys in chunks of 32, one per lane: score = scale q.k;
// the running max m and per-lane partial sums l are rescaled by exp(m_old - m_new) at each
// chunk, and so is the accumulator o.  At the end sum = butterfly of l, lse = m + log(sum),
// o *= 1/sum.  A query row with no valid key gets lse = -inf and o = 0 (its chunks are
// never visited, so no exp(-inf - -inf)).
// Backward, two kernels:
//   bwd_query_*: one warp per query row: pass 1 recomputes P_ij and g_ij = dO_i.v_j
//     (through the dropout) and sums D_i = sum_j P_ij g_ij (per lane in key order, then a
//     butterfly); pass 2 recomputes them and accumulates dq_i = scale sum_j P_ij (g_ij -
//     D_i) k_j in key order.  D_i goes to the workspace.
//   bwd_key_*: one warp per key row j: queries i in order, recomputing P_ij, g_ij and
//     dS_ij = P_ij (g_ij - D_i): dk_j = scale sum_i dS_ij q_i, dv_j = sum_i P'_ij dO_i.
//   Rows that no query attends to get dk = dv = 0, query rows with no key dq = 0: every
//   output is written (overwritten), never accumulated.
// Decode (decode_rows): the "rows" form of the forward for one query row per (r,h), the
// keys of each row found through blk / slot; no mask, no dropout, no lse.
//
// Precision (cuda.h, "the activation type"): every kernel is a template on the activation
// type T of q, k, v, o, dO, dq, dk, dv (float or bf16); lse and D are fp32.  Values are
// widened to fp32 as they are read (the shared-memory tiles and rows hold fp32 at every
// precision), every score, weight and sum is fp32 as at fp32, and an output is rounded
// once, when it is stored: the CPU's emulation runs its fp32 attention on the same bf16
// inputs and rounds its outputs once too.  The rows form accumulates in its output row at
// fp32; at bf16 that would round at every step, so its accumulators are fp32 rows of the
// workspace instead (acc_row below), stored rounded at the end.
#include "cuda.h"

#include <math.h>
#include <string.h>
#include <type_traits>

namespace {

constexpr unsigned FULL = 0xffffffffu;   // all lanes of a warp
constexpr int WARP = 32;
constexpr int ROWS = 8;                  // warps per block, one row each
constexpr int TILE = WARP;               // rows of a shared-memory tile: one per lane
constexpr int MAX_COLS = 8;              // columns per lane of the tiled kernels: dk <= 256

#include "attn.cuh"

// ---- device helpers ---------------------------------------------------------------------

__device__ __forceinline__ int lane_id() { return (int)(threadIdx.x % WARP); }
__device__ __forceinline__ int warp_id() { return (int)(threadIdx.x / WARP); }

// Butterfly sum / max over the warp: every lane gets the same bits (a + b == b + a).
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = WARP / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = WARP / 2; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
    return v;
}

// The block's dynamic shared memory (16-byte aligned).
__device__ __forceinline__ float *smem()
{
    extern __shared__ float4 tfm_attn_smem[];
    return reinterpret_cast<float *>(tfm_attn_smem);
}

// g through the dropout of weight (bh, i, j) (attn.cuh, drop_at).
__device__ __forceinline__ float drop(const Shape &s, int64_t bh, int i, int j, float g)
{
    return drop_at(s, ((uint64_t)bh * (uint64_t)s.Tq + (uint64_t)i) * (uint64_t)s.Tk + (uint64_t)j,
                   g);
}

// a . b over n floats, by one thread, x in order.
__device__ __forceinline__ float dot_seq(const float *a, const float *b, int n)
{
    float d = 0;
#pragma unroll 8
    for (int x = 0; x < n; x++)
        d += a[x] * b[x];
    return d;
}

// a . b over n elements by the whole warp: lane l sums x = l, l+32, ... in order, then the
// butterfly; every lane gets the result.
template <typename A, typename B>
__device__ __forceinline__ float dot_warp(const A *a, const B *b, int n)
{
    float d = 0;
    for (int x = lane_id(); x < n; x += WARP)
        d += act_load(a + x) * act_load(b + x);
    return warp_sum(d);
}

// Copy a row of n elements, widened to fp32, by the warp (lanes over columns).
template <typename T> __device__ __forceinline__ void row_copy(float *dst, const T *src, int n)
{
    for (int x = lane_id(); x < n; x += WARP)
        dst[x] = act_load(src + x);
}

// By all threads of the block: rows r0 .. r0+TILE-1 of a head's matrix src (dk columns,
// row stride ld) into the tile dst (TILE rows of stride ldt); rows at or past `rows` are
// stored as 0 (never garbage: a weight of 0 times garbage could be NaN).
template <typename T>
__device__ void load_tile(float *dst, int ldt, const T *src, int64_t ld, int r0, int rows, int dk)
{
    for (int e = (int)threadIdx.x; e < TILE * dk; e += (int)blockDim.x) {
        int t = e / dk, x = e - t * dk;
        dst[t * ldt + x] = r0 + t < rows ? act_load(src + (int64_t)(r0 + t) * ld + x) : 0.0f;
    }
}

// One step of the online softmax for a chunk of keys, one per lane: sc is the lane's score
// (valid: the lane holds a valid key; at least one lane does).  Updates the running max m
// (the same on every lane) and the lane's partial sum l; returns the lane's exp(sc - m)
// and in alpha the factor exp(m_old - m) for what was accumulated before.
__device__ __forceinline__ float online_step(float sc, bool valid, float &m, float &l,
                                             float &alpha)
{
    float mnew = fmaxf(m, warp_max(valid ? sc : -INFINITY));   // finite
    alpha = expf(m - mnew);                                    // m = -inf: 0
    float pj = valid ? expf(sc - mnew) : 0.0f;
    l = l * alpha + pj;
    m = mnew;
    return pj;
}

// Row r of sentence b (T rows per sentence, row stride ld), at head h's columns.
template <typename F>
__device__ __forceinline__ F *head_row(F *x, int b, int T, int r, int64_t ld, int h, int dk)
{
    return x + ((int64_t)b * T + r) * ld + (int64_t)h * dk;
}

// Tiled kernels: acc[c] += w_t * tile[t][lane + 32c] for rows t = 0 .. cnt-1 in order,
// w_t the value `w` of lane t (columns lane + 32c < dk only).
template <int C>
__device__ __forceinline__ void tile_axpy(float (&acc)[C], float w, const float *tile, int ldt,
                                          int cnt, int dk)
{
    const int lane = lane_id();
    for (int t = 0; t < cnt; t++) {
        float wt = __shfl_sync(FULL, w, t);
        const float *r = tile + t * ldt + lane;
#pragma unroll
        for (int c = 0; c < C; c++)
            if (lane + WARP * c < dk)
                acc[c] += wt * r[WARP * c];
    }
}

// Tiled kernels: out[lane + 32c] = scale * acc[c] (columns < dk).
template <int C, typename T>
__device__ __forceinline__ void tile_store(T *out, const float (&acc)[C], float scale, int dk)
{
    const int lane = lane_id();
#pragma unroll
    for (int c = 0; c < C; c++)
        if (lane + WARP * c < dk)
            act_store(out + lane + WARP * c, scale * acc[c]);
}

// Rows kernels: row[x] = alpha row[x] + sum_t w[t] src[(r0 + t) ld + x], t in order (lanes
// over columns x; w: the warp's weights in shared memory; row: an fp32 accumulator row).
template <typename T>
__device__ __forceinline__ void rows_axpy(float *row, float alpha, const float *w, const T *src,
                                          int64_t ld, int r0, int cnt, int dk)
{
    for (int x = lane_id(); x < dk; x += WARP) {
        float a = row[x] * alpha;
        for (int t = 0; t < cnt; t++)
            a += w[t] * act_load(src + (int64_t)(r0 + t) * ld + x);
        row[x] = a;
    }
}

// The fp32 accumulator of a rows-form kernel's output row `out` (dk elements), warp row
// `row`: at fp32 the output row itself (as it always was); at bf16 row `row` of `work`, a
// (rows, dk) fp32 matrix of the workspace.
template <typename T>
__device__ __forceinline__ float *acc_row(T *out, float *work, int64_t row, int dk)
{
    if constexpr (std::is_same<T, float>::value) {
        (void)work;
        (void)row;
        (void)dk;
        return out;
    } else {
        (void)out;
        return work + row * dk;
    }
}

// Rows kernels: out[x] = scale * acc[x], by the warp (acc may be out: fp32).
template <typename T>
__device__ __forceinline__ void rows_store(T *out, const float *acc, float scale, int dk)
{
    for (int x = lane_id(); x < dk; x += WARP)
        act_store(out + x, acc[x] * scale);
}

// ---- forward ----------------------------------------------------------------------------

// Tiled forward.  Block: ROWS warps on query rows i0 .. i0+ROWS-1 of head bh; grid: B*H *
// ceil(Tq/ROWS) blocks.  Shared: the K and V tiles (TILE x ldt each) and the warps' q rows
// (ROWS x dk).
template <int C, typename T>
__global__ void __launch_bounds__(ROWS * WARP)
    fwd_tiled(Shape s, const T *q, int ldq, const T *k, int ldk, const T *v, int ldv, T *o,
              int ldo, float *lse)
{
    const int dk = s.dk, ldt = dk | 1, lane = lane_id(), w = warp_id();
    const int qblocks = (s.Tq + ROWS - 1) / ROWS;
    const int64_t bh = blockIdx.x / qblocks;
    const int b = (int)(bh / s.H), h = (int)(bh % s.H);
    const int i0 = (int)(blockIdx.x % qblocks) * ROWS, i = i0 + w;
    const bool active = i < s.Tq;
    float *ks = smem(), *vs = ks + TILE * ldt, *qs = vs + TILE * ldt + w * dk;

    const int kl = key_limit(s, b);
    const int n = active ? row_keys(s, kl, i) : 0;
    const int last = (i0 + ROWS < s.Tq ? i0 + ROWS : s.Tq) - 1;
    const int nmax = row_keys(s, kl, last);   // the block's last row has the most keys
    const T *kb = head_row(k, b, s.Tk, 0, ldk, h, dk);
    const T *vb = head_row(v, b, s.Tk, 0, ldv, h, dk);
    if (active)
        row_copy(qs, head_row(q, b, s.Tq, i, ldq, h, dk), dk);

    float m = -INFINITY, l = 0, acc[C];
#pragma unroll
    for (int c = 0; c < C; c++)
        acc[c] = 0;
    for (int j0 = 0; j0 < nmax; j0 += TILE) {
        __syncthreads();   // the previous tile is consumed (first time: the q rows are in)
        load_tile(ks, ldt, kb, ldk, j0, kl, dk);
        load_tile(vs, ldt, vb, ldv, j0, kl, dk);
        __syncthreads();
        if (j0 >= n)       // warp-uniform: this row has no key in the tile
            continue;
        const int j = j0 + lane, cnt = n - j0 < TILE ? n - j0 : TILE;
        const bool valid = j < n;
        float sc = valid ? s.scale * dot_seq(qs, ks + lane * ldt, dk) : 0.0f, alpha;
        float pj = online_step(sc, valid, m, l, alpha);
        if (valid)
            pj = drop(s, bh, i, j, pj);
#pragma unroll
        for (int c = 0; c < C; c++)
            acc[c] *= alpha;
        tile_axpy(acc, pj, vs, ldt, cnt, dk);
    }
    if (!active)
        return;
    float sum = warp_sum(l), r = n > 0 ? 1.0f / sum : 0.0f;
    tile_store(head_row(o, b, s.Tq, i, ldo, h, dk), acc, r, dk);
    if (lane == 0)
        lse[bh * s.Tq + i] = n > 0 ? m + logf(sum) : -INFINITY;
}

// The row a warp of a rows-form kernel owns: row = bh*T + i of the B*H*T rows (T = Tq for
// query rows, Tk for key rows), ROWS warps per block.  False past the last row (the whole
// warp returns).
struct WarpRow {
    int64_t row, bh;
    int i, b, h;
};

__device__ __forceinline__ bool warp_row(const Shape &s, int T, WarpRow &w)
{
    w.row = (int64_t)blockIdx.x * ROWS + warp_id();
    if (w.row >= (int64_t)s.B * s.H * T)
        return false;
    w.bh = w.row / T;
    w.i = (int)(w.row % T);
    w.b = (int)(w.bh / s.H);
    w.h = (int)(w.bh % s.H);
    return true;
}

// Lane t of the warp gets scale * a . (row r0+t of src, stride ld), for t < cnt (else 0);
// each dot product by the whole warp (dot_warp).
template <typename A, typename B>
__device__ float chunk_dots(const A *a, const B *src, int64_t ld, int r0, int cnt, int dk,
                            float scale)
{
    float mine = 0;
    for (int t = 0; t < cnt; t++) {
        float d = scale * dot_warp(a, src + (int64_t)(r0 + t) * ld, dk);
        if (lane_id() == t)
            mine = d;
    }
    return mine;
}

// Forward for any dk.  One warp per query row (bh*Tq + i), ROWS per block; shared: TILE
// weights per warp.  The accumulator: acc_row (o itself at fp32; a row of acc at bf16).
template <typename T>
__global__ void __launch_bounds__(ROWS * WARP)
    fwd_rows(Shape s, const T *q, int ldq, const T *k, int ldk, const T *v, int ldv, T *o,
             int ldo, float *lse, float *acc)
{
    const int dk = s.dk, lane = lane_id();
    WarpRow wr;
    if (!warp_row(s, s.Tq, wr))
        return;   // the whole warp
    const int64_t row = wr.row, bh = wr.bh;
    const int i = wr.i, b = wr.b, h = wr.h;
    float *pw = smem() + warp_id() * TILE;
    const T *qr = head_row(q, b, s.Tq, i, ldq, h, dk);
    const T *kb = head_row(k, b, s.Tk, 0, ldk, h, dk);
    const T *vb = head_row(v, b, s.Tk, 0, ldv, h, dk);
    T *out = head_row(o, b, s.Tq, i, ldo, h, dk);
    float *orow = acc_row(out, acc, row, dk);
    const int n = row_keys(s, key_limit(s, b), i);

    for (int x = lane; x < dk; x += WARP)
        orow[x] = 0;
    float m = -INFINITY, l = 0;
    for (int j0 = 0; j0 < n; j0 += TILE) {
        const int j = j0 + lane, cnt = n - j0 < TILE ? n - j0 : TILE;
        const bool valid = lane < cnt;
        float sc = chunk_dots(qr, kb, ldk, j0, cnt, dk, s.scale), alpha;
        float pj = online_step(sc, valid, m, l, alpha);
        if (valid)
            pj = drop(s, bh, i, j, pj);
        __syncwarp();      // every lane is done reading the previous chunk's weights
        pw[lane] = pj;
        __syncwarp();
        rows_axpy(orow, alpha, pw, vb, ldv, j0, cnt, dk);
    }
    float sum = warp_sum(l), r = n > 0 ? 1.0f / sum : 0.0f;
    rows_store(out, orow, r, dk);
    if (lane == 0)
        lse[row] = n > 0 ? m + logf(sum) : -INFINITY;
}

// ---- backward ---------------------------------------------------------------------------

// For one (query, key) pair of a valid weight: P = exp(scale q.k - L) and g = dO.v through
// the dropout; qk = q.k and gv = dO.v already computed.
__device__ __forceinline__ void prob_grad(const Shape &s, int64_t bh, int i, int j, float qk,
                                          float gv, float L, float &P, float &g)
{
    P = expf(s.scale * qk - L);
    g = drop(s, bh, i, j, gv);
}

// Tiled backward for query rows: dq and D.  Block and grid as fwd_tiled; shared: the K and
// V tiles (TILE x ldt each), the warps' q rows and dO rows (ROWS x dk each).
template <int C, typename T>
__global__ void __launch_bounds__(ROWS * WARP)
    bwd_query_tiled(Shape s, const T *q, int ldq, const T *k, int ldk, const T *v, int ldv,
                    const float *lse, const T *dout, int lddo, T *dq, int lddq, float *Dw)
{
    const int dk = s.dk, ldt = dk | 1, lane = lane_id(), w = warp_id();
    const int qblocks = (s.Tq + ROWS - 1) / ROWS;
    const int64_t bh = blockIdx.x / qblocks;
    const int b = (int)(bh / s.H), h = (int)(bh % s.H);
    const int i0 = (int)(blockIdx.x % qblocks) * ROWS, i = i0 + w;
    const bool active = i < s.Tq;
    float *ks = smem(), *vs = ks + TILE * ldt;
    float *qs = vs + TILE * ldt + w * dk, *gs = vs + TILE * ldt + ROWS * dk + w * dk;

    const int kl = key_limit(s, b);
    const int n = active ? row_keys(s, kl, i) : 0;
    const int last = (i0 + ROWS < s.Tq ? i0 + ROWS : s.Tq) - 1;
    const int nmax = row_keys(s, kl, last);
    const T *kb = head_row(k, b, s.Tk, 0, ldk, h, dk);
    const T *vb = head_row(v, b, s.Tk, 0, ldv, h, dk);
    const float L = n > 0 ? lse[bh * s.Tq + i] : 0.0f;   // finite when n > 0
    if (active) {
        row_copy(qs, head_row(q, b, s.Tq, i, ldq, h, dk), dk);
        row_copy(gs, head_row(dout, b, s.Tq, i, lddo, h, dk), dk);
    }

    // pass 1: D = sum_j P_ij g_ij, per lane over its keys in order, then the butterfly
    float dpart = 0;
    for (int j0 = 0; j0 < nmax; j0 += TILE) {
        __syncthreads();
        load_tile(ks, ldt, kb, ldk, j0, kl, dk);
        load_tile(vs, ldt, vb, ldv, j0, kl, dk);
        __syncthreads();
        const int j = j0 + lane;
        if (j < n) {
            float P, g;
            prob_grad(s, bh, i, j, dot_seq(qs, ks + lane * ldt, dk),
                      dot_seq(gs, vs + lane * ldt, dk), L, P, g);
            dpart += P * g;
        }
    }
    const float D = warp_sum(dpart);

    // pass 2: dq = scale sum_j P_ij (g_ij - D) k_j, keys in order
    float acc[C];
#pragma unroll
    for (int c = 0; c < C; c++)
        acc[c] = 0;
    for (int j0 = 0; j0 < nmax; j0 += TILE) {
        __syncthreads();
        load_tile(ks, ldt, kb, ldk, j0, kl, dk);
        load_tile(vs, ldt, vb, ldv, j0, kl, dk);
        __syncthreads();
        if (j0 >= n)   // warp-uniform
            continue;
        const int j = j0 + lane, cnt = n - j0 < TILE ? n - j0 : TILE;
        float ds = 0;
        if (j < n) {
            float P, g;
            prob_grad(s, bh, i, j, dot_seq(qs, ks + lane * ldt, dk),
                      dot_seq(gs, vs + lane * ldt, dk), L, P, g);
            ds = P * (g - D);
        }
        tile_axpy(acc, ds, ks, ldt, cnt, dk);
    }
    if (!active)
        return;
    tile_store(head_row(dq, b, s.Tq, i, lddq, h, dk), acc, s.scale, dk);
    if (lane == 0)
        Dw[bh * s.Tq + i] = D;
}

// Tiled backward for key rows: dk and dv.  Block: ROWS warps on key rows j0 .. j0+ROWS-1
// of head bh; grid: B*H * ceil(Tk/ROWS) blocks.  Shared: the q and dO tiles (TILE x ldt
// each), the warps' k rows and v rows (ROWS x dk each).
template <int C, typename T>
__global__ void __launch_bounds__(ROWS * WARP)
    bwd_key_tiled(Shape s, const T *q, int ldq, const T *k, int ldk, const T *v, int ldv,
                  const float *lse, const T *dout, int lddo, const float *Dw, T *dk_, int lddk,
                  T *dv, int lddv)
{
    const int dk = s.dk, ldt = dk | 1, lane = lane_id(), w = warp_id();
    const int kblocks = (s.Tk + ROWS - 1) / ROWS;
    const int64_t bh = blockIdx.x / kblocks;
    const int b = (int)(bh / s.H), h = (int)(bh % s.H);
    const int j0 = (int)(blockIdx.x % kblocks) * ROWS, j = j0 + w;
    float *qt = smem(), *gt = qt + TILE * ldt;
    float *kw = gt + TILE * ldt + w * dk, *vw = gt + TILE * ldt + ROWS * dk + w * dk;

    const int kl = key_limit(s, b);
    const bool attended = j < kl;   // j < Tk too: some query may attend to key j
    const T *qb = head_row(q, b, s.Tq, 0, ldq, h, dk);
    const T *gb = head_row(dout, b, s.Tq, 0, lddo, h, dk);
    if (attended) {
        row_copy(kw, head_row(k, b, s.Tk, j, ldk, h, dk), dk);
        row_copy(vw, head_row(v, b, s.Tk, j, ldv, h, dk), dk);
    }

    float ak[C], av[C];
#pragma unroll
    for (int c = 0; c < C; c++)
        ak[c] = av[c] = 0;
    // Queries in tiles; causal: none before the tile holding the block's first key.  The
    // loop bounds are the block's (j0 < kl: some warp's key is attended).
    const int istart = s.causal ? j0 / TILE * TILE : 0;
    for (int i0 = j0 < kl ? istart : s.Tq; i0 < s.Tq; i0 += TILE) {
        __syncthreads();   // the previous tile is consumed (first time: k, v rows are in)
        load_tile(qt, ldt, qb, ldq, i0, s.Tq, dk);
        load_tile(gt, ldt, gb, lddo, i0, s.Tq, dk);
        __syncthreads();
        if (!attended || (s.causal && i0 + TILE - 1 < j))
            continue;      // warp-uniform: no query of the tile attends to key j
        const int i = i0 + lane, cnt = s.Tq - i0 < TILE ? s.Tq - i0 : TILE;
        float ds = 0, pd = 0;
        if (i < s.Tq && (!s.causal || i >= j)) {
            float P, g;
            prob_grad(s, bh, i, j, dot_seq(qt + lane * ldt, kw, dk),
                      dot_seq(gt + lane * ldt, vw, dk), lse[bh * s.Tq + i], P, g);
            ds = P * (g - Dw[bh * s.Tq + i]);
            pd = drop(s, bh, i, j, P);
        }
        tile_axpy(ak, ds, qt, ldt, cnt, dk);
        tile_axpy(av, pd, gt, ldt, cnt, dk);
    }
    if (j >= s.Tk)
        return;
    tile_store(head_row(dk_, b, s.Tk, j, lddk, h, dk), ak, s.scale, dk);
    tile_store(head_row(dv, b, s.Tk, j, lddv, h, dk), av, 1.0f, dk);
}

// Backward for query rows, any dk: one warp per query row (bh*Tq + i), ROWS per block;
// shared: TILE weights per warp; the accumulator: acc_row of dq (a row of acc at bf16).
template <typename T>
__global__ void __launch_bounds__(ROWS * WARP)
    bwd_query_rows(Shape s, const T *q, int ldq, const T *k, int ldk, const T *v, int ldv,
                   const float *lse, const T *dout, int lddo, T *dq, int lddq, float *Dw,
                   float *acc)
{
    const int dk = s.dk, lane = lane_id();
    WarpRow wr;
    if (!warp_row(s, s.Tq, wr))
        return;   // the whole warp
    const int64_t row = wr.row, bh = wr.bh;
    const int i = wr.i, b = wr.b, h = wr.h;
    float *pw = smem() + warp_id() * TILE;
    const T *qr = head_row(q, b, s.Tq, i, ldq, h, dk);
    const T *gr = head_row(dout, b, s.Tq, i, lddo, h, dk);
    const T *kb = head_row(k, b, s.Tk, 0, ldk, h, dk);
    const T *vb = head_row(v, b, s.Tk, 0, ldv, h, dk);
    T *dqout = head_row(dq, b, s.Tq, i, lddq, h, dk);
    float *dqrow = acc_row(dqout, acc, row, dk);
    const int n = row_keys(s, key_limit(s, b), i);
    const float L = n > 0 ? lse[row] : 0.0f;

    // pass 1: D
    float dpart = 0;
    for (int j0 = 0; j0 < n; j0 += TILE) {
        const int j = j0 + lane, cnt = n - j0 < TILE ? n - j0 : TILE;
        float qk = chunk_dots(qr, kb, ldk, j0, cnt, dk, 1.0f);
        float gv = chunk_dots(gr, vb, ldv, j0, cnt, dk, 1.0f);
        if (lane < cnt) {
            float P, g;
            prob_grad(s, bh, i, j, qk, gv, L, P, g);
            dpart += P * g;
        }
    }
    const float D = warp_sum(dpart);

    // pass 2: dq
    for (int x = lane; x < dk; x += WARP)
        dqrow[x] = 0;
    for (int j0 = 0; j0 < n; j0 += TILE) {
        const int j = j0 + lane, cnt = n - j0 < TILE ? n - j0 : TILE;
        float qk = chunk_dots(qr, kb, ldk, j0, cnt, dk, 1.0f);
        float gv = chunk_dots(gr, vb, ldv, j0, cnt, dk, 1.0f);
        float ds = 0;
        if (lane < cnt) {
            float P, g;
            prob_grad(s, bh, i, j, qk, gv, L, P, g);
            ds = P * (g - D);
        }
        __syncwarp();
        pw[lane] = ds;
        __syncwarp();
        rows_axpy(dqrow, 1.0f, pw, kb, ldk, j0, cnt, dk);
    }
    rows_store(dqout, dqrow, s.scale, dk);
    if (lane == 0)
        Dw[row] = D;
}

// Backward for key rows, any dk: one warp per key row (bh*Tk + j), ROWS per block; shared:
// 2 x TILE weights per warp; the accumulators: acc_row of dk and of dv (rows of acc_k and
// acc_v at bf16).
template <typename T>
__global__ void __launch_bounds__(ROWS * WARP)
    bwd_key_rows(Shape s, const T *q, int ldq, const T *k, int ldk, const T *v, int ldv,
                 const float *lse, const T *dout, int lddo, const float *Dw, T *dk_, int lddk,
                 T *dv, int lddv, float *acc_k, float *acc_v)
{
    const int dk = s.dk, lane = lane_id();
    WarpRow wr;
    if (!warp_row(s, s.Tk, wr))
        return;   // the whole warp
    const int64_t bh = wr.bh;
    const int j = wr.i, b = wr.b, h = wr.h;
    float *pw = smem() + warp_id() * 2 * TILE, *dw = pw + TILE;
    const T *kr = head_row(k, b, s.Tk, j, ldk, h, dk);
    const T *vr = head_row(v, b, s.Tk, j, ldv, h, dk);
    const T *qb = head_row(q, b, s.Tq, 0, ldq, h, dk);
    const T *gb = head_row(dout, b, s.Tq, 0, lddo, h, dk);
    T *dkout = head_row(dk_, b, s.Tk, j, lddk, h, dk);
    T *dvout = head_row(dv, b, s.Tk, j, lddv, h, dk);
    float *dkrow = acc_row(dkout, acc_k, wr.row, dk);
    float *dvrow = acc_row(dvout, acc_v, wr.row, dk);

    for (int x = lane; x < dk; x += WARP)
        dkrow[x] = dvrow[x] = 0;
    // the queries that attend to key j: none when j >= kl, else i >= j when causal
    const int istart = j >= key_limit(s, b) ? s.Tq : s.causal ? j : 0;
    for (int i0 = istart; i0 < s.Tq; i0 += TILE) {
        const int i = i0 + lane, cnt = s.Tq - i0 < TILE ? s.Tq - i0 : TILE;
        float qk = chunk_dots(kr, qb, ldq, i0, cnt, dk, 1.0f);
        float gv = chunk_dots(vr, gb, lddo, i0, cnt, dk, 1.0f);
        float ds = 0, pd = 0;
        if (lane < cnt) {
            float P, g;
            prob_grad(s, bh, i, j, qk, gv, lse[bh * s.Tq + i], P, g);
            ds = P * (g - Dw[bh * s.Tq + i]);
            pd = drop(s, bh, i, j, P);
        }
        __syncwarp();
        dw[lane] = ds;
        pw[lane] = pd;
        __syncwarp();
        rows_axpy(dkrow, 1.0f, dw, qb, ldq, i0, cnt, dk);
        rows_axpy(dvrow, 1.0f, pw, gb, lddo, i0, cnt, dk);
    }
    rows_store(dkout, dkrow, s.scale, dk);
    rows_store(dvout, dvrow, 1.0f, dk);
}

// ---- incremental decoding -------------------------------------------------------------

// One warp per (row r, head h) = rh, ROWS per block; shared per warp: TILE key offsets
// (int64) and TILE weights.  Key t of row r (head h) at k + off_t + h*dk, off_t =
// (slot ? slot[r*sstride + t] : blk[r]) * bstride + t*ld; its value at v + the same.
// The accumulator: acc_row of o's row (row rh of acc at bf16).
template <typename T>
__global__ void __launch_bounds__(ROWS * WARP)
    decode_rows(int R, int H, int dk, float scale, const T *q, int ldq, const T *k, const T *v,
                int ld, int64_t bstride, const int32_t *blk, const int32_t *slot, int sstride,
                const int32_t *len, T *o, int ldo, float *acc)
{
    const int lane = lane_id();
    const int64_t rh = (int64_t)blockIdx.x * ROWS + warp_id();
    if (rh >= (int64_t)R * H)
        return;   // the whole warp
    const int r = (int)(rh / H), h = (int)(rh % H), n = len[r];
    int64_t *offs = reinterpret_cast<int64_t *>(smem()) + warp_id() * TILE;
    float *pw = smem() + 2 * ROWS * TILE + warp_id() * TILE;   // after the ROWS*TILE offsets
    const int32_t *sl = slot ? slot + (int64_t)r * sstride : nullptr;
    const int64_t base = sl ? 0 : (int64_t)blk[r] * bstride;
    const T *qr = q + (int64_t)r * ldq + (int64_t)h * dk;
    const T *kh = k + (int64_t)h * dk, *vh = v + (int64_t)h * dk;
    T *out = o + (int64_t)r * ldo + (int64_t)h * dk;
    float *orow = acc_row(out, acc, rh, dk);

    for (int x = lane; x < dk; x += WARP)
        orow[x] = 0;
    float m = -INFINITY, l = 0;
    for (int t0 = 0; t0 < n; t0 += TILE) {
        const int cnt = n - t0 < TILE ? n - t0 : TILE;
        __syncwarp();      // every lane is done with the previous chunk's offsets, weights
        if (lane < cnt) {
            int t = t0 + lane;
            offs[lane] = (sl ? (int64_t)sl[t] * bstride : base) + (int64_t)t * ld;
        }
        __syncwarp();
        float sc = 0, alpha;
        for (int t = 0; t < cnt; t++) {
            float d = scale * dot_warp(qr, kh + offs[t], dk);
            if (lane == t)
                sc = d;
        }
        float pj = online_step(sc, lane < cnt, m, l, alpha);
        pw[lane] = pj;     // pw was last read before the __syncwarp above
        __syncwarp();
        for (int x = lane; x < dk; x += WARP) {
            float a = orow[x] * alpha;
            for (int t = 0; t < cnt; t++)
                a += pw[t] * act_load(vh + offs[t] + x);
            orow[x] = a;
        }
    }
    float sum = warp_sum(l), inv = n > 0 ? 1.0f / sum : 0.0f;
    rows_store(out, orow, inv, dk);
}

// ---- launching ------------------------------------------------------------------------

// Blocks for `items` rows, ROWS per block (or for `items` blocks with per = 1).
unsigned grid_for(int64_t items, int64_t per)
{
    int64_t g = (items + per - 1) / per;
    if (g > 2147483647)
        tfm_cuda_fail(__func__, "a launch", "grid too large", "too many rows", __FILE__,
                      __LINE__);
    return (unsigned)g;
}

// Columns per lane of the tiled kernels for head size dk: 1, 2, 4 or 8; 0 past 256 (the
// rows kernels).
int lane_cols(int dk)
{
    return dk <= 32 ? 1 : dk <= 64 ? 2 : dk <= 128 ? 4 : dk <= WARP * MAX_COLS ? 8 : 0;
}

// Dynamic shared memory of a tiled kernel: two TILE-row tiles, `per_warp` rows per warp.
size_t tiled_smem(int dk, int per_warp)
{
    return sizeof(float) * ((size_t)2 * TILE * (dk | 1) + (size_t)per_warp * ROWS * dk);
}

// Opt in to more than the default 48 KiB of dynamic shared memory where needed (dk > 150
// or so; the tiled kernels need at most about 80 KiB: dk = 256, backward).
template <typename K>
void allow_smem(K *kernel, size_t bytes)
{
    if (bytes > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)bytes));
}

// The fp32 accumulators of the rows form at bf16: `rows` rows of dk floats each, `count`
// matrices, after `skip` bytes of the workspace (256-byte aligned); NULLs at fp32, where
// the outputs accumulate.  acc[0..count) point into the workspace, valid until the next op;
// the workspace itself is returned (NULL when nothing is needed).
template <typename T>
char *rows_work(struct tfm_backend *be, size_t skip, int64_t rows, int dk, int count,
                float **acc)
{
    size_t one = std::is_same<T, float>::value ? 0 : (size_t)rows * (size_t)dk * sizeof(float);
    one = (one + 255) / 256 * 256;
    size_t total = skip + (size_t)count * one;
    char *w = total ? (char *)tfm_cuda_work(be, total) : nullptr;
    for (int c = 0; c < count; c++)
        acc[c] = one ? (float *)(w + skip + (size_t)c * one) : nullptr;
    return w;
}

template <int C, typename T>
void fwd_tiled_launch(struct tfm_backend *be, const Shape &s, const T *q, int ldq, const T *k,
                      int ldk, const T *v, int ldv, T *o, int ldo, float *lse)
{
    size_t bytes = tiled_smem(s.dk, 1);
    auto kernel = fwd_tiled<C, T>;
    allow_smem(kernel, bytes);
    unsigned g = grid_for((int64_t)s.B * s.H * ((s.Tq + ROWS - 1) / ROWS), 1);
    kernel<<<g, ROWS * WARP, bytes, STREAM(be)>>>(s, q, ldq, k, ldk, v, ldv, o, ldo, lse);
    LAUNCH_CHECK();
}

template <int C, typename T>
void bwd_tiled_launch(struct tfm_backend *be, const Shape &s, const T *q, int ldq, const T *k,
                      int ldk, const T *v, int ldv, const float *lse, const T *dout, int lddo,
                      T *dq, int lddq, T *dk, int lddk, T *dv, int lddv, float *Dw)
{
    size_t bytes = tiled_smem(s.dk, 2);
    if (s.Tq > 0) {
        auto kernel = bwd_query_tiled<C, T>;
        allow_smem(kernel, bytes);
        unsigned g = grid_for((int64_t)s.B * s.H * ((s.Tq + ROWS - 1) / ROWS), 1);
        kernel<<<g, ROWS * WARP, bytes, STREAM(be)>>>(s, q, ldq, k, ldk, v, ldv, lse, dout,
                                                      lddo, dq, lddq, Dw);
        LAUNCH_CHECK();
    }
    if (s.Tk > 0) {
        auto kernel = bwd_key_tiled<C, T>;
        allow_smem(kernel, bytes);
        unsigned g = grid_for((int64_t)s.B * s.H * ((s.Tk + ROWS - 1) / ROWS), 1);
        kernel<<<g, ROWS * WARP, bytes, STREAM(be)>>>(s, q, ldq, k, ldk, v, ldv, lse, dout,
                                                      lddo, Dw, dk, lddk, dv, lddv);
        LAUNCH_CHECK();
    }
}

template <typename T>
void attn_fwd(struct tfm_backend *be, const Shape &s, const T *q, int ldq, const T *k, int ldk,
              const T *v, int ldv, T *o, int ldo, float *lse)
{
    switch (lane_cols(s.dk)) {
    case 1:
        fwd_tiled_launch<1>(be, s, q, ldq, k, ldk, v, ldv, o, ldo, lse);
        break;
    case 2:
        fwd_tiled_launch<2>(be, s, q, ldq, k, ldk, v, ldv, o, ldo, lse);
        break;
    case 4:
        fwd_tiled_launch<4>(be, s, q, ldq, k, ldk, v, ldv, o, ldo, lse);
        break;
    case 8:
        fwd_tiled_launch<8>(be, s, q, ldq, k, ldk, v, ldv, o, ldo, lse);
        break;
    default: {
        int64_t rows = (int64_t)s.B * s.H * s.Tq;
        float *acc[1];
        rows_work<T>(be, 0, rows, s.dk, 1, acc);
        unsigned g = grid_for(rows, ROWS);
        fwd_rows<T><<<g, ROWS * WARP, sizeof(float) * ROWS * TILE, STREAM(be)>>>(
            s, q, ldq, k, ldk, v, ldv, o, ldo, lse, acc[0]);
        LAUNCH_CHECK();
    }
    }
}

template <typename T>
void attn_bwd(struct tfm_backend *be, const Shape &s, const T *q, int ldq, const T *k, int ldk,
              const T *v, int ldv, const float *lse, const T *dout, int lddo, T *dq, int lddq,
              T *dk, int lddk, T *dv, int lddv)
{
    // D (B,H,Tq) between the two kernels, at the start of the workspace; then the rows
    // form's accumulators at bf16
    size_t dbytes = (sizeof(float) * ((size_t)s.B * s.H * s.Tq + 1) + 255) / 256 * 256;
    const int cols = lane_cols(s.dk);
    float *acc[3] = {nullptr, nullptr, nullptr};
    char *w;
    if (cols) {
        w = rows_work<float>(be, dbytes, 0, s.dk, 0, acc);
    } else {
        int64_t qrows = (int64_t)s.B * s.H * s.Tq, krows = (int64_t)s.B * s.H * s.Tk;
        int64_t rows = qrows > krows ? qrows : krows;
        w = rows_work<T>(be, dbytes, rows, s.dk, 3, acc);
    }
    float *Dw = (float *)w;
    switch (cols) {
    case 1:
        bwd_tiled_launch<1>(be, s, q, ldq, k, ldk, v, ldv, lse, dout, lddo, dq, lddq, dk, lddk,
                            dv, lddv, Dw);
        break;
    case 2:
        bwd_tiled_launch<2>(be, s, q, ldq, k, ldk, v, ldv, lse, dout, lddo, dq, lddq, dk, lddk,
                            dv, lddv, Dw);
        break;
    case 4:
        bwd_tiled_launch<4>(be, s, q, ldq, k, ldk, v, ldv, lse, dout, lddo, dq, lddq, dk, lddk,
                            dv, lddv, Dw);
        break;
    case 8:
        bwd_tiled_launch<8>(be, s, q, ldq, k, ldk, v, ldv, lse, dout, lddo, dq, lddq, dk, lddk,
                            dv, lddv, Dw);
        break;
    default:
        if (s.Tq > 0) {
            unsigned g = grid_for((int64_t)s.B * s.H * s.Tq, ROWS);
            bwd_query_rows<T><<<g, ROWS * WARP, sizeof(float) * ROWS * TILE, STREAM(be)>>>(
                s, q, ldq, k, ldk, v, ldv, lse, dout, lddo, dq, lddq, Dw, acc[0]);
            LAUNCH_CHECK();
        }
        if (s.Tk > 0) {
            unsigned g = grid_for((int64_t)s.B * s.H * s.Tk, ROWS);
            bwd_key_rows<T><<<g, ROWS * WARP, sizeof(float) * 2 * ROWS * TILE, STREAM(be)>>>(
                s, q, ldq, k, ldk, v, ldv, lse, dout, lddo, Dw, dk, lddk, dv, lddv, acc[1],
                acc[2]);
            LAUNCH_CHECK();
        }
    }
}

template <typename T>
void attn_decode(struct tfm_backend *be, int R, int H, int dk, float scale, const T *q, int ldq,
                 const T *k, const T *v, int ld, int64_t bstride, const int32_t *blk,
                 const int32_t *slot, int sstride, const int32_t *len, T *o, int ldo)
{
    float *acc[1];
    rows_work<T>(be, 0, (int64_t)R * H, dk, 1, acc);
    unsigned g = grid_for((int64_t)R * H, ROWS);
    size_t bytes = (sizeof(int64_t) + sizeof(float)) * ROWS * TILE;
    decode_rows<T><<<g, ROWS * WARP, bytes, STREAM(be)>>>(R, H, dk, scale, q, ldq, k, v, ld,
                                                          bstride, blk, slot, sstride, len, o,
                                                          ldo, acc[0]);
    LAUNCH_CHECK();
}

}   // namespace

// Whether attn_fwd and attn_bwd run the products (cuda_attn_mm.cu): asked for, or bf16
// unless the kernels here are asked for.
static bool by_products(struct tfm_backend *be)
{
    int p = CU(be)->attn;
    return p == TFM_CUDA_ATTN_MM || (p == TFM_CUDA_ATTN_AUTO && tfm_cuda_bf16(be));
}

void cuda_attn_fwd(struct tfm_backend *be, const struct tfm_attn *a, const float *q, int ldq,
                   const float *k, int ldk, const float *v, int ldv, float *o, int ldo,
                   float *lse)
{
    if (by_products(be)) {
        tfm_cuda_attn_mm_fwd(be, a, q, ldq, k, ldk, v, ldv, o, ldo, lse);
        return;
    }
    Shape s = make_shape(a);
    if ((int64_t)s.B * s.H * s.Tq <= 0 || s.dk <= 0)
        return;
    BY_ACT_TYPE(be, attn_fwd<T>(be, s, act_ptr<T>(q), ldq, act_ptr<T>(k), ldk, act_ptr<T>(v),
                                ldv, act_ptr<T>(o), ldo, lse););
}

void cuda_attn_bwd(struct tfm_backend *be, const struct tfm_attn *a, const float *q, int ldq,
                   const float *k, int ldk, const float *v, int ldv, const float *o, int ldo,
                   const float *lse, const float *dout, int lddo, float *dq, int lddq,
                   float *dk, int lddk, float *dv, int lddv)
{
    (void)o;   // D_i is recomputed from P and dO.v, as on the CPU, not taken as dO_i . o_i
    (void)ldo;
    if (by_products(be)) {
        tfm_cuda_attn_mm_bwd(be, a, q, ldq, k, ldk, v, ldv, lse, dout, lddo, dq, lddq, dk, lddk,
                             dv, lddv);
        return;
    }
    Shape s = make_shape(a);
    if ((int64_t)s.B * s.H <= 0 || s.dk <= 0)
        return;
    BY_ACT_TYPE(be, attn_bwd<T>(be, s, act_ptr<T>(q), ldq, act_ptr<T>(k), ldk, act_ptr<T>(v),
                                ldv, lse, act_ptr<T>(dout), lddo, act_ptr<T>(dq), lddq,
                                act_ptr<T>(dk), lddk, act_ptr<T>(dv), lddv););
}

void cuda_attn_decode(struct tfm_backend *be, int R, int H, int dk, float scale, const float *q,
                      int ldq, const float *k, const float *v, int ld, int64_t bstride,
                      const int32_t *blk, const int32_t *slot, int sstride, const int32_t *len,
                      float *o, int ldo)
{
    if ((int64_t)R * H <= 0 || dk <= 0)
        return;
    BY_ACT_TYPE(be, attn_decode<T>(be, R, H, dk, scale, act_ptr<T>(q), ldq, act_ptr<T>(k),
                                   act_ptr<T>(v), ld, bstride, blk, slot, sstride, len,
                                   act_ptr<T>(o), ldo););
}

// ---- the workspace of a training step (backend_cuda.cu: reserve_step) -------------------

// The most workspace attn_fwd and attn_bwd ask for when B * Tq and B * Tk are at most
// `rows`, with H heads of dk: on the products path, tfm_cuda_attn_mm_work's; here the
// backward's D (B,H,Tq) and, at bf16 past the tiled kernels' dk, the rows form's fp32
// accumulators (one forward, three backward).
size_t tfm_cuda_attn_step_work(struct tfm_backend *be, int64_t rows, int H, int dk)
{
    if (rows <= 0 || H <= 0 || dk <= 0)
        return 0;
    if (by_products(be))
        return tfm_cuda_attn_mm_work(be, rows, H);
    size_t hr = (size_t)rows * (size_t)H;
    size_t dbytes = (sizeof(float) * (hr + 1) + 255) / 256 * 256;
    size_t acc = 0;
    if (!lane_cols(dk) && tfm_cuda_bf16(be))
        acc = (hr * (size_t)dk * sizeof(float) + 255) / 256 * 256;
    size_t bwd = dbytes + 3 * acc;
    return bwd > acc ? bwd : acc;
}
