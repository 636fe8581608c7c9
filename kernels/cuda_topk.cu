// cuda_topk.cu: cuda_log_softmax_top, the CUDA backend's optional log_softmax_top slot
// (src/backend.h): for each row of logits, the k best log-softmax values and their ids as
// src/topk.h's tfm_topk_row orders them (value descending, ties by smaller id; banned ids,
// -inf and NaN skipped; -inf and id -1 pad the list), and the log-probability of one
// `also` token, without writing the log-probabilities anywhere.  A search step then
// downloads N (k + k + 1) words instead of the (N,V) log-probabilities.
//
// The values are the bits a search reads on the host path (src/model.c,
// tfm_decoder_step_top without the slot): cuda_log_softmax's output as download_act gives
// it, i.e. y = z - l with z and l computed exactly as log_softmax_rows (cuda_ops.cu)
// computes them, rounded to the activation type T and widened back.  Both take l from
// row_log_sum_exp (reduce.cuh) with the same block size (THREADS), so that l has the same
// bits; test_gpu_ops checks the whole result against log_softmax followed by tfm_topk_row
// on the host, bit for bit.
//
// Selection, one block of THREADS per row (deterministic: no atomics; the result is a
// function of the row alone, since (value, id) is a total order on the candidates):
//  - each warp scans chunks of 32 consecutive columns, 256 apart, and keeps its own sorted
//    list of at most TOP_MAX candidates in shared memory: a column enters when it beats the
//    list's last entry (or the list is not full) and is not banned; the lanes that qualify
//    insert one at a time in lane order, the whole warp placing each (a count of the
//    entries before it, then a shift of those after it, TOP_MAX / 32 entries a lane);
//    after the first chunks almost no column qualifies, so the scan costs about one read
//    of the row;
//  - thread 0 merges the warps' lists into the row's output.
// A call with k > TOP_MAX runs passes of TOP_MAX entries: each pass takes only candidates
// that come after the previous pass's last entry in the order, so any k works (at the cost
// of a read of the rows per pass).
//
// Status: compiled, never yet run on a GPU; test_gpu_ops ("log_softmax_top") is its first
// test.
#include "cuda.h"

#include <math.h>
#include <stdint.h>

namespace {

// The threads per row: must be cuda_ops.cu's THREADS, with which log_softmax_rows sums a
// row, for l to have log_softmax's bits.
constexpr unsigned THREADS = 256;
constexpr unsigned WARPS = THREADS / 32;
constexpr int TOP_MAX = 128;              // entries a pass selects per row
static_assert(TOP_MAX % 32 == 0, "a warp shifts TOP_MAX / 32 entries a lane");

#include "reduce.cuh"

// v as an activation of type T holds it (act_store, then act_load): itself at fp32, v
// rounded to bf16 at bf16.
template <typename T> __device__ __forceinline__ float as_stored(float v)
{
    T t;
    act_store(&t, v);
    return act_load(&t);
}

// (ay, aid) comes before (by, bid): a larger value, or the same value and a smaller id.
__device__ __forceinline__ bool before(float ay, int aid, float by, int bid)
{
    return ay > by || (ay == by && aid < bid);
}

// Block n: row n's l as log_softmax_rows computes it; then entries off .. off + kk - 1 of
// the row's k best into oy, oid (N,k), and, in the first pass (off 0), y[also] into oalso.
// A pass after the first takes only the candidates after entry off - 1 (written by the
// previous pass); if that entry is padding, so is all of this pass.
template <typename T>
__global__ void top_rows(const T *x, int V, int k, int off, int kk, const int32_t *ban,
                         int nban, int also, float *oy, int32_t *oid, float *oalso)
{
    __shared__ float sy[WARPS][TOP_MAX];
    __shared__ int32_t sid[WARPS][TOP_MAX];
    __shared__ int scnt[WARPS];
    size_t n = blockIdx.x;
    const T *z = x + n * V;
    float l = row_log_sum_exp(z, V);        // log_softmax's (reduce.cuh)

    float *ry = oy + n * k;
    int32_t *rid = oid + n * k;
    if (off == 0 && threadIdx.x == 0)
        oalso[n] = also >= 0 && also < V ? as_stored<T>(act_load(z + also) - l) : NAN;
    int bounded = off > 0, done = 0;
    float by = 0;
    int32_t bid = 0;
    if (bounded) {
        by = ry[off - 1];
        bid = rid[off - 1];
        done = bid < 0;
    }

    unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float *wy = sy[warp];
    int32_t *wid = sid[warp];
    int cnt = 0;                        // the warp's list's length, the same in every lane
    float ty = 0;                       // its last entry once full
    int32_t tid = 0;
    for (int c0 = (int)(warp * 32); c0 < V && !done; c0 += (int)THREADS) {
        int c = c0 + (int)lane;
        float y = 0;
        bool q = false;
        if (c < V) {
            y = as_stored<T>(act_load(z + c) - l);
            q = y > -INFINITY && (!bounded || before(by, bid, y, c)) &&
                (cnt < kk || before(y, c, ty, tid));
        }
        unsigned m = __ballot_sync(0xffffffffu, q);
        while (m) {                     // the qualifying lanes' columns, in lane order
            int src = __ffs(m) - 1;
            m &= m - 1;
            float cy = __shfl_sync(0xffffffffu, y, src);
            int cc = __shfl_sync(0xffffffffu, c, src);
            // still better than the list's last entry (an earlier insertion may have
            // raised it), and not banned: the same answer in every lane
            bool ok = cnt < kk || before(cy, cc, wy[kk - 1], wid[kk - 1]);
            if (ok && nban > 0) {
                bool hit = false;
                for (int b = (int)lane; b < nban; b += 32)
                    hit |= ban[b] == cc;
                ok = !__any_sync(0xffffffffu, hit);
            }
            if (!ok)
                continue;
            // its place p: the entries before it; those from p on move down one (the last
            // drops off a full list), each lane moving entries lane, lane + 32, ...
            float ey[TOP_MAX / 32];
            int32_t eid[TOP_MAX / 32];
            int p = 0;
#pragma unroll
            for (int j = 0; j < TOP_MAX / 32; j++) {
                int i = (int)lane + 32 * j;
                bool in = i < cnt;
                ey[j] = in ? wy[i] : 0.0f;
                eid[j] = in ? wid[i] : 0;
                p += __popc(__ballot_sync(0xffffffffu, in && before(ey[j], eid[j], cy, cc)));
            }
            __syncwarp();               // every entry read before any is overwritten
#pragma unroll
            for (int j = 0; j < TOP_MAX / 32; j++) {
                int i = (int)lane + 32 * j;
                if (i >= p && i < cnt && i + 1 < kk) {
                    wy[i + 1] = ey[j];
                    wid[i + 1] = eid[j];
                }
            }
            if (lane == 0) {
                wy[p] = cy;
                wid[p] = cc;
            }
            if (cnt < kk)
                cnt++;
            __syncwarp();               // the insertion, seen by every lane
        }
        if (cnt == kk) {
            ty = wy[kk - 1];
            tid = wid[kk - 1];
        }
        __syncwarp();                   // read before the next chunk's insertions
    }
    if (lane == 0)
        scnt[warp] = cnt;
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    int head[WARPS];
    for (unsigned w = 0; w < WARPS; w++)
        head[w] = 0;
    for (int i = 0; i < kk; i++) {
        int best = -1;
        for (unsigned w = 0; w < WARPS; w++)
            if (head[w] < scnt[w] &&
                (best < 0 || before(sy[w][head[w]], sid[w][head[w]], sy[best][head[best]],
                                    sid[best][head[best]])))
                best = (int)w;
        if (best < 0) {
            ry[off + i] = -INFINITY;
            rid[off + i] = -1;
        } else {
            ry[off + i] = sy[best][head[best]];
            rid[off + i] = sid[best][head[best]];
            head[best]++;
        }
    }
}

// The workspace's parts, each 256-byte aligned.
size_t part_bytes(size_t bytes) { return (bytes + 255) / 256 * 256; }

} // namespace

// x (N,V) device activations; ban (nban), top_y, top_id (N,k), also_y (N) host.  One
// upload of the ban list, ceil(k / TOP_MAX) launches, then the results come down in three
// copies on the stream and one synchronization.
void cuda_log_softmax_top(struct tfm_backend *be, const float *x, int N, int V, int k,
                          const int32_t *ban, int nban, int also, float *top_y,
                          int32_t *top_id, float *also_y)
{
    if (N <= 0 || k <= 0)
        return;
    size_t nk = (size_t)N * k;
    if (V <= 0) {                       // nothing to select: all padding
        for (size_t i = 0; i < nk; i++) {
            top_y[i] = -INFINITY;
            top_id[i] = -1;
        }
        for (int i = 0; i < N; i++)
            also_y[i] = NAN;
        return;
    }
    if (nban < 0)
        nban = 0;
    size_t by = part_bytes(nk * sizeof(float)), bid = part_bytes(nk * sizeof(int32_t));
    size_t ba = part_bytes((size_t)N * sizeof(float));
    size_t bb = part_bytes((size_t)nban * sizeof(int32_t));
    char *w = static_cast<char *>(tfm_cuda_work(be, by + bid + ba + (bb ? bb : 256)));
    float *dy = reinterpret_cast<float *>(w);
    int32_t *did = reinterpret_cast<int32_t *>(w + by);
    float *dalso = reinterpret_cast<float *>(w + by + bid);
    int32_t *dban = reinterpret_cast<int32_t *>(w + by + bid + ba);
    cudaStream_t s = STREAM(be);
    if (nban > 0)
        CUDA_CHECK(cudaMemcpyAsync(dban, ban, (size_t)nban * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, s));
    for (int off = 0; off < k; off += TOP_MAX) {
        int kk = k - off < TOP_MAX ? k - off : TOP_MAX;
        BY_ACT_TYPE(be,
            top_rows<T><<<(unsigned)N, THREADS, 0, s>>>(act_ptr<T>(x), V, k, off, kk, dban,
                                                        nban, also, dy, did, dalso);
            LAUNCH_CHECK();
        );
    }
    CUDA_CHECK(cudaMemcpyAsync(top_y, dy, nk * sizeof(float), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaMemcpyAsync(top_id, did, nk * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaMemcpyAsync(also_y, dalso, (size_t)N * sizeof(float),
                               cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
}
