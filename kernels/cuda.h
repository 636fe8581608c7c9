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

extern "C" {
#include "backend.h"
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

// Which attention forward and backward run (cuda_attn.cu's header): AUTO, the products
// (cuda_attn_mm.cu) at bf16 and the online-softmax kernels (cuda_attn.cu) at fp32; FLASH
// or MM, that one at every precision (TFM_CUDA_ATTN=flash or mm; tfm-train(1)).  Fixed
// for the backend's life, so a forward and its backward take the same path.
enum tfm_cuda_attn { TFM_CUDA_ATTN_AUTO = 0, TFM_CUDA_ATTN_FLASH, TFM_CUDA_ATTN_MM };
// The path TFM_CUDA_ATTN's value names (NULL or empty: AUTO); -1 with err for another.
int tfm_cuda_attn_choice(const char *value, struct tfm_error *err);

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
// workspace's growths after it, tfm_cuda_work below).
typedef __nv_bfloat16 bf16;

static inline bool tfm_cuda_bf16(const struct tfm_backend *be)
{
    return be->precision == TFM_PRECISION_BF16;
}

__device__ __forceinline__ float act_load(const float *p) { return *p; }
__device__ __forceinline__ float act_load(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void act_store(float *p, float v) { *p = v; }
__device__ __forceinline__ void act_store(bf16 *p, float v) { *p = __float2bfloat16_rn(v); }

// Adam on element i (backend.h, adam), operation for operation as the CPU's adam_range
// (a1, a2: the bias corrections): both Adam kernels (cuda_ops.cu, cuda_step.cu) call it.
__device__ __forceinline__ void adam_elem(float *p, float *grad, float *m, float *v, size_t i,
                                          float lr, float b1, float b2, float eps,
                                          float gscale, float a1, float a2)
{
    float g = __fmul_rn(gscale, grad[i]);
    grad[i] = 0;
    float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(1.0f - b1, g));
    float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(1.0f - b2, g), g));
    m[i] = mi;
    v[i] = vi;
    float num = __fmul_rn(lr, __fmul_rn(mi, a1));
    float den = __fadd_rn(__fsqrt_rn(__fmul_rn(vi, a2)), eps);
    p[i] = __fsub_rn(p[i], __fdiv_rn(num, den));
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
