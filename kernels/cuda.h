// cuda.h: what the CUDA backend's files share (kernels/*.cu only; the library's C code
// sees only the table of src/cuda_plugin.h, which plugin.cu fills).
//
//   plugin.cu        the entry point of libtfm-cuda.so and the probe of the GPUs
//   backend_cuda.cu  the table: memory, gemm (cuBLAS), gemm_bias (cuBLASLt with the bias
//                    and ReLU epilogues, plans per shape, a fallback; new: compiled at fp32
//                    and bf16, never yet run on a GPU: test_gpu_ops's "gemm_bias" tests
//                    are its first run), sync, reserve, lifetime, workspace
//   cuda_ops.cu      embeddings, layer norm, element-wise ops, cross-entropy, log-softmax,
//                    sumsq, Adam
//   cuda_attn.cu     attention: forward, backward (online softmax on CUDA cores; picks the
//                    path), incremental decoding
//   cuda_attn_mm.cu  attention forward and backward through batched tensor-core products
//                    and a row softmax (the default at bf16; compiled, never yet run)
//   cuda_step.cu     the step's statistics on the device: loss sums, gradient norm and
//                    clipping, Adam with its scale read there
//   cuda_topk.cu     log_softmax_top: a search step's k best tokens per row, selected on
//                    the device (new: compiled, never yet run on a GPU; test_gpu_ops's
//                    "log_softmax_top" test is its first run)
//   reduce.cuh       the block reductions and the row log-sum-exp the kernels share
//   attn.cuh         the attention shape, key counts and dropout both attention paths share
//   nccl.cu          the GPU ranks' gradient sums (NCCL)
//
// Every op has the signature and the semantics of its slot in struct tfm_backend
// (src/backend.h); the CPU backend (src/backend_cpu.c) is the reference it is tested
// against (tests/unit/test_gpu_ops.c, `make check-gpu`).  All ops are issued on the
// backend's one stream, in order, so a later op sees an earlier op's results without any
// synchronization.  Ops are deterministic: no atomics, reductions in a fixed order.
#ifndef TFM_KERNELS_CUDA_H
#define TFM_KERNELS_CUDA_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend.h"
#include "cuda_env.h"
}

struct tfm_nccl;
struct tfm_lt_plan;             // a gemm_bias shape's cuBLASLt plan (backend_cuda.cu)

enum { STAGE_SEGS = 4 };    // segments of the pinned staging ring (struct tfm_cuda)

struct tfm_cuda {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_work;        // cuBLAS's workspace (BLAS_WORK_BYTES), set on the handle
                            // and handed to every cublasLtMatmul
    cublasLtHandle_t lt;    // cuBLASLt: gemm_bias's products with their epilogues
    struct tfm_lt_plan *plans;  // their plans, one per shape (LT_PLANS, reused in turn)
    int next_plan;          // the plan a new shape takes when none is free
    void *work;             // workspace (tfm_cuda_work), grows only
    size_t work_bytes;
    long work_grows;        // times an op found it too small and it was allocated again
                            // (not reserve_step's allocation): tfm_backend_cuda_work_grows
    long bias_fallbacks;    // gemm_bias calls computed without cuBLASLt's epilogue:
                            // tfm_backend_cuda_bias_fallbacks
    int max_tq, max_tk;     // attention sizes promised by reserve()
    int attn;               // enum tfm_cuda_attn: TFM_CUDA_ATTN, read when opened
    // Pinned staging for uploads and small downloads (backend_cuda.cu, "staging"): NULL
    // when cudaHostAlloc failed (then the copies go from pageable memory, correct but
    // synchronous).  STAGE_SEGS segments of stage_seg bytes, filled in turn; done[s] is
    // recorded on the stream when the copies out of segment s have all been issued.
    unsigned char *stage;
    size_t stage_seg, stage_used;
    int stage_at;
    cudaEvent_t stage_done[STAGE_SEGS];
};

// Which attention forward and backward run: enum tfm_cuda_attn and tfm_cuda_attn_choice
// (src/cuda_env.h): AUTO, the products (cuda_attn_mm.cu) at bf16 and the online-softmax
// kernels (cuda_attn.cu) at fp32.  Fixed for the backend's life, so a forward and its
// backward take the same path.

static inline tfm_cuda *CU(struct tfm_backend *be) { return (tfm_cuda *)be->impl; }
static inline cudaStream_t STREAM(struct tfm_backend *be) { return CU(be)->stream; }

// ---- the activation type ----------------------------------------------------------------
//
// Activations (src/backend.h, "precision") are fp32 words at fp32 and bf16 at bf16
// (be->act_size 2, set by set_bf16).  The kernels that touch them are templates on the
// activation type T, float or bf16; they load through act_load (bf16 widens exactly to
// fp32), compute and accumulate in fp32, and store through act_store (bf16: round to
// nearest even, __float2bfloat16_rn, the bits of tfm_bf16_bits for every non-NaN value; a
// NaN stays a NaN, the GPU's canonical one).  Statistics, parameter gradients, sumsq and
// Adam are fp32 at every precision, as backend.h says.  Each cuda_<op> picks the
// instantiation with BY_ACT_TYPE (below).
// Status: the bf16 paths (every bf16 instantiation, gemm_bf16 and gemm_empty at bf16 in
// backend_cuda.cu, download_act/upload_act at bf16, the rows form's fp32 accumulators)
// have been compiled but not yet run on a GPU; test_gpu_ops with
// TFM_GPU_OPS_PRECISION=bf16 (make gpu-report) is their first test.  So have the fused
// ops' kernels (cuda_ops.cu: bias_act_dropout, embed_fwd_dropout, add_dropout_layernorm,
// layernorm_bwd_dropout) at both types: test_gpu_ops's "fused" tests are their first.
// So has the pinned staging ring of upload, download and upload_act (backend_cuda.cu,
// "staging"): test_gpu_ops's memory test sends 72 MB through it.  So have the step's
// statistics (cuda_step.cu: test_gpu_ops, "the step's statistics") and the workspace
// sizes of reserve_step (backend_cuda.cu; test_gpu_ops's "workspace" tests count the
// workspace's growths after it, tfm_cuda_work below).  So have the 16-byte vector paths
// below (every kernel of cuda_ops.cu and cuda_step.cu that moves activations, statistics
// or optimizer state in bulk, and the weights' bf16 copy in backend_cuda.cu).
typedef __nv_bfloat16 bf16;

static inline bool tfm_cuda_bf16(const struct tfm_backend *be)
{
    return be->precision == TFM_PRECISION_BF16;
}

__device__ __forceinline__ float act_load(const float *p) { return *p; }
__device__ __forceinline__ float act_load(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void act_store(float *p, float v) { *p = v; }
__device__ __forceinline__ void act_store(bf16 *p, float v) { *p = __float2bfloat16_rn(v); }

// ---- 16-byte vectors ----------------------------------------------------------------------
//
// The memory-bound kernels (cuda_ops.cu, cuda_step.cu, reduce.cuh) move 16 bytes a load or
// store where the data allows: a group of VW<T> elements, 4 at fp32 and 8 at bf16, loaded
// as one uint4 (vec_load, vec_store: the same widening and rounding as act_load,
// act_store, element by element).  The rule: a group goes as a vector when its address is
// a multiple of 16 bytes and it is whole; otherwise (a pointer offset from a 16-byte
// boundary, a row length or leading dimension that is not a multiple of VW<T>, so that
// rows start off the boundary, a tail of fewer than VW<T> elements) its elements go one
// by one (group_load, group_store).  The kernels test the addresses themselves
// (vec_aligned), per array or per row, so no caller has to promise anything.
// In every sum, which elements a thread adds, and in which order, is the same on both
// paths (groups of VW<T> consecutive elements, group g to thread g mod the threads, each
// thread's groups in order), and an element-wise result is its own element's operations:
// whether a group moves as a vector changes no result's bits.
// Status: compiled, never yet run on a GPU (test_gpu_ops's cases with odd lengths and
// pointers one element off the boundary are its first run).
template <typename T> constexpr int VW = 16 / (int)sizeof(T);

__host__ __device__ __forceinline__ bool vec_aligned(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

__device__ __forceinline__ void vec_load(float (&f)[4], const float *p)
{
    float4 u = *reinterpret_cast<const float4 *>(p);
    f[0] = u.x;
    f[1] = u.y;
    f[2] = u.z;
    f[3] = u.w;
}
// Each 32-bit word holds two bf16, the lower address in the low half; a bf16 is the upper
// half of its fp32 value, so widening is a shift (exact, as __bfloat162float).
__device__ __forceinline__ void vec_load(float (&f)[8], const bf16 *p)
{
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        f[2 * k] = __uint_as_float(w[k] << 16);
        f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
}
__device__ __forceinline__ void vec_store(float *p, const float (&f)[4])
{
    *reinterpret_cast<float4 *>(p) = make_float4(f[0], f[1], f[2], f[3]);
}
__device__ __forceinline__ void vec_store(bf16 *p, const float (&f)[8])
{
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
        w[k] = (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * k])) |
               (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * k + 1])) << 16;
    *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

// The columns of a group that starts at column c0 of a row of D: VW<T>, fewer at the end.
template <typename T> __device__ __forceinline__ int group_cnt(int D, int c0)
{
    return D - c0 < VW<T> ? D - c0 : VW<T>;
}

// The first cnt (<= VW<T>) elements at p into f, as one vector when vec and the group is
// whole, else one by one; f's other entries 0.
template <typename T>
__device__ __forceinline__ void group_load(float (&f)[VW<T>], const T *p, int cnt, bool vec)
{
    if (vec && cnt == VW<T>) {
        vec_load(f, p);
    } else {
#pragma unroll
        for (int e = 0; e < VW<T>; e++)
            f[e] = e < cnt ? act_load(p + e) : 0.0f;
    }
}
// f's first cnt entries to p, the same way.
template <typename T>
__device__ __forceinline__ void group_store(T *p, const float (&f)[VW<T>], int cnt, bool vec)
{
    if (vec && cnt == VW<T>) {
        vec_store(p, f);
    } else {
#pragma unroll
        for (int e = 0; e < VW<T>; e++)
            if (e < cnt)
                act_store(p + e, f[e]);
    }
}

// Adam on one element (backend.h, adam), operation for operation as the CPU's adam_range
// (a1, a2: the bias corrections): p, g (the gradient, cleared), m, v updated in place.
__device__ __forceinline__ void adam_val(float &p, float &grad, float &m, float &v, float lr,
                                         float b1, float b2, float eps, float gscale, float a1,
                                         float a2)
{
    float g = __fmul_rn(gscale, grad);
    grad = 0;
    float mi = __fadd_rn(__fmul_rn(b1, m), __fmul_rn(1.0f - b1, g));
    float vi = __fadd_rn(__fmul_rn(b2, v), __fmul_rn(__fmul_rn(1.0f - b2, g), g));
    m = mi;
    v = vi;
    float num = __fmul_rn(lr, __fmul_rn(mi, a1));
    float den = __fadd_rn(__fsqrt_rn(__fmul_rn(vi, a2)), eps);
    p = __fsub_rn(p, __fdiv_rn(num, den));
}

// adam_val over elements [0, n) in a grid-stride loop: float4 groups when the four arrays
// are 16-byte aligned (each element's operations are its own, so the path changes no
// bits), the tail and unaligned arrays one element at a time.  Both Adam kernels
// (cuda_ops.cu, cuda_step.cu) call it; launch about n / 4 threads.
__device__ __forceinline__ void adam_range(float *p, float *grad, float *m, float *v, size_t n,
                                           float lr, float b1, float b2, float eps,
                                           float gscale, float a1, float a2)
{
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x, i0 = 0;
    if (vec_aligned(p) && vec_aligned(grad) && vec_aligned(m) && vec_aligned(v)) {
        for (size_t k = t; k < n / 4; k += stride) {
            float4 pp = reinterpret_cast<float4 *>(p)[k], gg = reinterpret_cast<float4 *>(grad)[k];
            float4 mm = reinterpret_cast<float4 *>(m)[k], vv = reinterpret_cast<float4 *>(v)[k];
            adam_val(pp.x, gg.x, mm.x, vv.x, lr, b1, b2, eps, gscale, a1, a2);
            adam_val(pp.y, gg.y, mm.y, vv.y, lr, b1, b2, eps, gscale, a1, a2);
            adam_val(pp.z, gg.z, mm.z, vv.z, lr, b1, b2, eps, gscale, a1, a2);
            adam_val(pp.w, gg.w, mm.w, vv.w, lr, b1, b2, eps, gscale, a1, a2);
            reinterpret_cast<float4 *>(p)[k] = pp;
            reinterpret_cast<float4 *>(grad)[k] = gg;
            reinterpret_cast<float4 *>(m)[k] = mm;
            reinterpret_cast<float4 *>(v)[k] = vv;
        }
        i0 = n / 4 * 4;
    }
    for (size_t i = i0 + t; i < n; i += stride)
        adam_val(p[i], grad[i], m[i], v[i], lr, b1, b2, eps, gscale, a1, a2);
}

// The statements in ... with T the backend's activation type: the one place an op chooses
// its kernels' instantiation.  A macro, not a lambda, so that __func__ in CUDA_CHECK still
// names the op.
#define BY_ACT_TYPE(be, ...)                                                             \
    do {                                                                                 \
        if (tfm_cuda_bf16(be)) {                                                         \
            using T = bf16;                                                              \
            __VA_ARGS__                                                                  \
        } else {                                                                         \
            using T = float;                                                             \
            __VA_ARGS__                                                                  \
        }                                                                                \
    } while (0)

// An op's activation pointer (declared float * in backend.h) as the type it holds.
template <typename T> static inline T *act_ptr(float *p) { return reinterpret_cast<T *>(p); }
template <typename T> static inline const T *act_ptr(const float *p)
{
    return reinterpret_cast<const T *>(p);
}

// The backend on GPU `device` (the plugin's `backend`; backend.h: tfm_backend_cuda).
struct tfm_backend *tfm_cuda_backend_open(int device, struct tfm_error *err);

// NCCL (nccl.cu): the plugin's nccl_* entries (src/cuda_plugin.h, src/dist_nccl.h).
int tfm_cuda_nccl_id(unsigned char *id, struct tfm_error *err);
int tfm_cuda_nccl_open(struct tfm_backend **gpus, int n, const unsigned char *id, int nranks,
                       int first, double timeout, struct tfm_nccl **out, struct tfm_error *err);
int tfm_cuda_nccl_sum(struct tfm_nccl *c, float *buf, size_t n, struct tfm_error *err);
int tfm_cuda_nccl_wait(struct tfm_nccl *c, double timeout, int (*stop)(void *), void *ctx,
                       struct tfm_error *err);
void tfm_cuda_nccl_free(struct tfm_nccl *c);

// Device workspace of at least `bytes` (256-byte aligned), for use by one op: the next op
// may reuse it.  Grows with cudaMalloc when too small (which waits for earlier ops), so
// sizes seen in the first training step are the only allocations.  A failed allocation
// is fatal (ops do not fail, backend.h): the message names the size.  Each growth is
// counted (work_grows), so that a test can see a training step allocate after
// reserve_step: tfm_cuda_work_grows returns the count (the plugin's work_grows, read by
// src/cuda_load.c's tfm_backend_cuda_work_grows).
void *tfm_cuda_work(struct tfm_backend *be, size_t bytes);
long tfm_cuda_work_grows(struct tfm_backend *be);
// gemm_bias calls that took the fallback (gather + gemm + ReLU) instead of one cuBLASLt
// product with the epilogue: misaligned operands, or no algorithm from the heuristic (the
// plugin's bias_fallbacks; no synchronization).
long tfm_cuda_bias_fallbacks(struct tfm_backend *be);
// What the ops of a training step ask of it at most (reserve_step, backend_cuda.cu):
// cuda_ops.cu's (embeddings, layer norm, biases) and cuda_attn.cu's; the step's statistics
// (cuda_step.cu) need 8 KiB, below either.
size_t tfm_cuda_ops_step_work(int64_t rows, int width, int D, int V);
size_t tfm_cuda_attn_step_work(struct tfm_backend *be, int64_t rows, int H, int dk);

// The products path (cuda_attn_mm.cu): attn_fwd and attn_bwd's semantics (attn_bwd
// without o, which it does not read), and its workspace for a training step (as
// tfm_cuda_attn_step_work; keys up to reserve's max_tk).
void tfm_cuda_attn_mm_fwd(struct tfm_backend *be, const struct tfm_attn *a, const float *q,
                          int ldq, const float *k, int ldk, const float *v, int ldv, float *o,
                          int ldo, float *lse);
void tfm_cuda_attn_mm_bwd(struct tfm_backend *be, const struct tfm_attn *a, const float *q,
                          int ldq, const float *k, int ldk, const float *v, int ldv,
                          const float *lse, const float *dout, int lddo, float *dq, int lddq,
                          float *dk, int lddk, float *dv, int lddv);
size_t tfm_cuda_attn_mm_work(struct tfm_backend *be, int64_t rows, int H);

// A CUDA or cuBLAS call that fails inside an op is a lost device or a bug (ops do not
// fail, backend.h): print the op (the function it failed in), the call, the error's name
// and text, and where, on stderr, and abort.
void tfm_cuda_fail(const char *op, const char *call, const char *name, const char *msg,
                   const char *file, int line);
#define CUDA_CHECK(x)                                                                    \
    do {                                                                                 \
        cudaError_t e_ = (x);                                                            \
        if (e_ != cudaSuccess)                                                           \
            tfm_cuda_fail(__func__, #x, cudaGetErrorName(e_), cudaGetErrorString(e_),    \
                          __FILE__, __LINE__);                                           \
    } while (0)
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())
// The same for a cuBLAS or cuBLASLt call (both return cublasStatus_t).
#define BLAS_CHECK(x)                                                                    \
    do {                                                                                 \
        cublasStatus_t s_ = (x);                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                 \
            tfm_cuda_fail(__func__, #x, cublasGetStatusName(s_), cublasGetStatusString(s_), \
                          __FILE__, __LINE__);                                           \
    } while (0)

// cuBLAS's transpose flag for a product's ta or tb (non-zero: transposed).
static inline cublasOperation_t blas_op(int t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

// Blocks of `threads` covering n items.
static inline unsigned tfm_cuda_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 0 ? (b < 2147483647u ? b : 2147483647u) : 1);
}

// ---- the ops: cuda_<name> for each X of TFM_BACKEND_OPS (src/backend.h), with its
// parameters; cuda_gemm, cuda_gemm_grad, cuda_gemm_bias and cuda_weights_copy in
// backend_cuda.cu, attention in cuda_attn.cu, loss_sum, grad_clip and adam_scaled in
// cuda_step.cu, the rest in cuda_ops.cu.
#define TFM_CUDA_DECL(ret, name, params, args, devs) ret cuda_##name params;
TFM_BACKEND_OPS(TFM_CUDA_DECL)
#undef TFM_CUDA_DECL

// The optional slot log_softmax_top (backend.h), in cuda_topk.cu.
void cuda_log_softmax_top(struct tfm_backend *be, const float *x, int N, int V, int k,
                          const int32_t *ban, int nban, int also, float *top_y,
                          int32_t *top_id, float *also_y);

#endif
