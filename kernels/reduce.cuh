// reduce.cuh: the reductions the kernels share, in one place so that every kernel that must
// give another's bits (log_softmax and log_softmax_top's row sums) runs the same code.
// Deterministic: a fixed butterfly within a warp, then the same over the warps' results;
// no atomics.  What each thread adds before the butterfly, and in which order, is said at
// each use.  Included inside each .cu file's anonymous namespace, after cuda.h.
#ifndef TFM_KERNELS_REDUCE_CUH
#define TFM_KERNELS_REDUCE_CUH

struct SumOp {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// op over the 32 lanes of a warp in a fixed butterfly; every lane gets lane 0's result.
template <typename T, typename Op> __device__ T warp_reduce(T v, Op op)
{
    for (int o = 16; o > 0; o /= 2)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return __shfl_sync(0xffffffffu, v, 0);
}

// op over every thread of the block (blockDim.x a multiple of 32, every thread calling):
// warps first, then every warp reduces the warps' results the same way, so all threads
// return the same bits.  `identity` fills the lanes beyond the block's warps.
template <typename T, typename Op> __device__ T block_reduce(T v, Op op, T identity)
{
    __shared__ T part[32];
    unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_reduce(v, op);
    __syncthreads();                    // an earlier call may still be reading part
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    return warp_reduce(lane < blockDim.x / 32 ? part[lane] : identity, op);
}

__device__ __forceinline__ float block_sum(float v) { return block_reduce(v, SumOp(), 0.0f); }
__device__ __forceinline__ double block_sum(double v) { return block_reduce(v, SumOp(), 0.0); }
__device__ __forceinline__ float block_max(float v) { return block_reduce(v, MaxOp(), -INFINITY); }

// The log-sum-exp l of row z (V entries) that log_softmax subtracts, max + log(sum of
// exp(z - max)).  Thread t takes the groups of VW<T> columns t, t + blockDim.x, ... (cuda.h,
// "16-byte vectors": one load each where z allows) and sums its columns in order; the
// block's sums add in double: the same bits for the same blockDim in every kernel that
// calls it, vectors or not.  The sums are written __fadd_rn, __dadd_rn: nvcc may otherwise
// contract a sum with the product that ends the inlined expf or log into an FMA, and
// whether it does depends on the code around, which differs between the .cu files that
// must agree here bit for bit.
// The largest of row z's V entries, to every thread of the block (groups as below; vec:
// z is 16-byte aligned).  A maximum is exact, so its order does not matter.
template <typename T> __device__ float row_max(const T *z, int V, bool vec)
{
    constexpr int W = VW<T>;
    float f[W];
    float mx = -INFINITY;
    for (int c0 = (int)threadIdx.x * W; c0 < V; c0 += (int)blockDim.x * W) {
        int cnt = group_cnt<T>(V, c0);
        group_load(f, z + c0, cnt, vec);
#pragma unroll
        for (int e = 0; e < W; e++)
            if (e < cnt)
                mx = fmaxf(mx, f[e]);
    }
    return block_max(mx);
}

template <typename T> __device__ float row_log_sum_exp(const T *z, int V)
{
    constexpr int W = VW<T>;
    const bool vec = vec_aligned(z);
    float f[W];
    const float mx = row_max(z, V, vec);
    float se = 0;
    for (int c0 = (int)threadIdx.x * W; c0 < V; c0 += (int)blockDim.x * W) {
        int cnt = group_cnt<T>(V, c0);
        group_load(f, z + c0, cnt, vec);
#pragma unroll
        for (int e = 0; e < W; e++)
            if (e < cnt)
                se = __fadd_rn(se, expf(__fsub_rn(f[e], mx)));
    }
    return (float)__dadd_rn((double)mx, log(block_sum((double)se)));
}

// ---- a sum of squares in parts (sumsq and grad_clip give the same bits) ------------------
// At most SUMSQ_PARTS chunks of at least SUMSQ_MIN_CHUNK elements, a multiple of 4 each (so
// that every chunk starts on a 16-byte boundary when x does); block k, of SUMSQ_THREADS
// threads, sums chunk k into part[k]: thread t takes the float4 groups t, t +
// SUMSQ_THREADS, ... of the chunk (one load each when x is 16-byte aligned, cuda.h) and
// adds its elements in order in a double, then the block tree; the caller adds the parts
// in order.
constexpr size_t SUMSQ_PARTS = 1024, SUMSQ_MIN_CHUNK = 4096;
constexpr unsigned SUMSQ_THREADS = 256;

__global__ void sumsq_parts(double *part, const float *x, size_t n, size_t chunk)
{
    size_t a = (size_t)blockIdx.x * chunk, len = n - a < chunk ? n - a : chunk;
    const float *xa = x + a;
    const bool vec = vec_aligned(xa);
    double s = 0;
    for (size_t g = (size_t)threadIdx.x * 4; g < len; g += (size_t)blockDim.x * 4) {
        float f[4];
        int cnt = len - g < 4 ? (int)(len - g) : 4;
        group_load(f, xa + g, cnt, vec);
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (e < cnt)
                s += (double)f[e] * f[e];
    }
    s = block_sum(s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

// The parts of n elements (0 for none) and their chunk size.
static inline unsigned sumsq_plan(size_t n, size_t *chunk)
{
    size_t c = (n + SUMSQ_PARTS - 1) / SUMSQ_PARTS;
    c = (c + 3) / 4 * 4;
    *chunk = c < SUMSQ_MIN_CHUNK ? SUMSQ_MIN_CHUNK : c;
    return (unsigned)((n + *chunk - 1) / *chunk);
}

#endif
