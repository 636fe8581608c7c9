// backend_cuda.cu: the CUDA backend's table (src/backend.h): device memory, copies through
// a pinned staging ring (never a synchronization the caller did not ask for), matrix
// products through cuBLAS and cuBLASLt, one stream that every op is issued on, the
// workspace shared by the ops, and the constructor.  The ops themselves are in cuda_ops.cu,
// cuda_attn.cu and cuda_topk.cu.
//
// Which product goes where: gemm and gemm_grad through cuBLAS (below); gemm_bias, the
// products with a bias (every linear layer's forward, and the FFN's first layer with its
// ReLU when no dropout follows it: src/model.c), through cuBLASLt with the bias and the
// ReLU in the product's epilogue (CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU_BIAS), so
// that the product's output is written once, biased and activated, instead of being
// written, read and written again by a bias pass.  A shape cuBLASLt has no algorithm for,
// or misaligned operands, fall back to gather + gemm + ReLU (same result).  The bias
// gradients stay bias_bwd: cuBLASLt's BGRAD epilogues overwrite where tfm accumulates
// ("products with their bias and ReLU" below says why).
//
// Precision (src/backend.h, "precision"; tfm-config(5), precision): bf16 by default
// (auto), fp32 when asked.
//   fp32: cublasSgemm in the handle's default math mode (no TF32), and gemm_bias's
//     cublasLtMatmul in CUBLAS_COMPUTE_32F (not ..._FAST_TF32), so a product differs from
//     the CPU's only in the order of its sums: the reference the bf16 paths are tested
//     against, as it is tested against the CPU.
//   bf16: activations are stored as bf16 (act_size 2).  Products are cublasGemmEx on the
//     tensor cores: bf16 A and B, fp32 accumulation (CUBLAS_COMPUTE_32F), C bf16 for gemm
//     (read as bf16 when beta != 0, rounded once when written) and fp32 for gemm_grad;
//     gemm_bias's cublasLtMatmul likewise, its bias bf16 too and C rounded once after the
//     bias and ReLU.  The handle forbids reductions in the output type
//     (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION), and gemm_bias's plans allow only
//     the compute type's (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE): a split-K product adds
//     its partial sums in fp32, never in bf16.
// cuBLAS gets a workspace of its own (BLAS_WORK_BYTES, set once on the handle), so it never
// allocates inside an op and picks its kernels from the same workspace on every run;
// cuBLASLt gets the same one (its plans are chosen for it, and every cublasLtMatmul is
// handed it: one stream, so cuBLAS and cuBLASLt never use it at once).
#include "cuda.h"

extern "C" {
#include "cuda_hint.h"
}

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// cuBLAS's workspace: 32 MiB, what cuBLAS asks for on sm_90 (its documentation,
// cublasSetWorkspace), more than enough on sm_80.
static const size_t BLAS_WORK_BYTES = (size_t)32 << 20;

// When the error is one a kernel or copy queued earlier may have caused (or the runtime
// holds such an error behind a cuBLAS failure), a second line says so (cuda_hint.h): the
// op named is where it surfaced, not necessarily where it happened.
void tfm_cuda_fail(const char *op, const char *call, const char *name, const char *msg,
                   const char *file, int line)
{
    int dev = -1;
    cudaGetDevice(&dev);
    fprintf(stderr, "tfm: CUDA backend, GPU %d, op %s: %s failed: %s: %s (%s:%d)\n", dev, op,
            call, name, msg, file, line);
    const char *hint = tfm_cuda_error_hint(name);
    cudaError_t last = cudaPeekAtLastError();
    if (!hint && last != cudaSuccess && (hint = tfm_cuda_error_hint(cudaGetErrorName(last)))) {
        name = cudaGetErrorName(last);
        fprintf(stderr, "tfm: the CUDA runtime's error: %s: %s\n", name,
                cudaGetErrorString(last));
    }
    if (hint)
        fprintf(stderr, "tfm: %s is %s\n", name, hint);
    abort();
}

void *tfm_cuda_work(struct tfm_backend *be, size_t bytes)
{
    tfm_cuda *c = CU(be);
    if (bytes <= c->work_bytes)
        return c->work;
    size_t want = (bytes + bytes / 4 + 255) / 256 * 256;   // headroom: few regrowths
    if (c->work)
        CUDA_CHECK(cudaFree(c->work));                     // waits for ops still using it
    c->work = NULL;
    c->work_bytes = 0;
    cudaError_t e = cudaMalloc(&c->work, want);
    if (e != cudaSuccess) {
        char m[160];
        snprintf(m, sizeof m, "workspace of %zu bytes: %s", want, cudaGetErrorString(e));
        tfm_cuda_fail(__func__, "cudaMalloc", cudaGetErrorName(e), m, __FILE__, __LINE__);
    }
    c->work_bytes = want;
    c->work_grows++;
    return c->work;
}

// The plugin's work_grows (src/cuda_plugin.h): how many times be's ops grew the workspace
// (struct tfm_cuda's work_grows).  A read of a host counter: no synchronization.
long tfm_cuda_work_grows(struct tfm_backend *be) { return CU(be)->work_grows; }
long tfm_cuda_bias_fallbacks(struct tfm_backend *be) { return CU(be)->bias_fallbacks; }

// ---- memory ----------------------------------------------------------------------------

static void *cu_alloc(struct tfm_backend *be, size_t bytes, struct tfm_error *err)
{
    void *p = NULL;
    size_t n = bytes ? bytes : 256;            // a valid pointer even for nothing
    cudaError_t e = cudaMalloc(&p, n);         // 256-byte aligned
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        tfm_fail(err, "GPU %d: cannot allocate %.1f MiB (%.1f MiB free of %.1f): %s",
                 CU(be)->device, n / 1048576.0, free_b / 1048576.0, total_b / 1048576.0,
                 cudaGetErrorString(e));
        return NULL;
    }
    CUDA_CHECK(cudaMemsetAsync(p, 0, n, STREAM(be)));
    return p;
}

static void cu_free(struct tfm_backend *be, void *p)
{
    (void)be;
    if (p)
        CUDA_CHECK(cudaFree(p));
}

// ---- staging ------------------------------------------------------------------------------
//
// A copy from pageable host memory is staged by the driver, which may wait for the stream
// before it returns (the CUDA runtime's "API synchronization behavior"): an upload in the
// middle of a training step (the ids of an update's second batch) would wait for the GPU
// to drain, and the GPU would then wait for the host to queue the next ops.  So copies go
// through pinned memory of the backend's own: a ring of STAGE_SEGS segments of
// STAGE_SEG_BYTES.  An upload copies the host's bytes into the ring and queues the copy to
// the device from there, and returns: the caller may reuse its memory at once, and nothing
// waits.  A segment is written again only after the copies out of it are done: done[s] is
// recorded on the stream when the ring moves on from s and waited for when it comes back
// to s, STAGE_SEGS - 1 segments later (long done by then, unless uploads outrun the GPU
// by a whole ring).  Copies larger than the ring (weights at load, once) go from pageable
// memory, as do all copies when the pinned allocation failed.

static const size_t STAGE_SEG_BYTES = (size_t)2 << 20;

// n <= stage_seg free bytes of the ring; the caller queues its copy before the next take.
static unsigned char *stage_take(tfm_cuda *c, size_t n)
{
    if (c->stage_used + n > c->stage_seg) {
        CUDA_CHECK(cudaEventRecord(c->stage_done[c->stage_at], c->stream));
        c->stage_at = (c->stage_at + 1) % STAGE_SEGS;
        // an event never recorded (the ring's first round) is complete
        CUDA_CHECK(cudaEventSynchronize(c->stage_done[c->stage_at]));
        c->stage_used = 0;
    }
    unsigned char *p = c->stage + (size_t)c->stage_at * c->stage_seg + c->stage_used;
    c->stage_used += (n + 255) / 256 * 256;
    return p;
}

static bool staged(const tfm_cuda *c, size_t bytes)
{
    return c->stage && bytes <= (size_t)STAGE_SEGS * c->stage_seg;
}

// Returns once host may be reused; the copy itself is ordered on the stream like any op.
static void cu_upload(struct tfm_backend *be, void *dst, const void *host, size_t bytes)
{
    tfm_cuda *c = CU(be);
    if (!bytes)
        return;
    if (!staged(c, bytes)) {   // pageable: returns once the driver has staged the bytes
        CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, STREAM(be)));
        return;
    }
    const unsigned char *h = static_cast<const unsigned char *>(host);
    unsigned char *d = static_cast<unsigned char *>(dst);
    for (size_t i = 0; i < bytes; i += c->stage_seg) {
        size_t m = bytes - i < c->stage_seg ? bytes - i : c->stage_seg;
        unsigned char *s = stage_take(c, m);
        memcpy(s, h + i, m);
        CUDA_CHECK(cudaMemcpyAsync(d + i, s, m, cudaMemcpyHostToDevice, STREAM(be)));
    }
}

// Waits for the stream (every op queued before it), then copies.  Up to a segment through
// the ring (a pinned copy, then memcpy: the step's statistics, a search step's best
// tokens), larger ones straight into pageable memory.
static void cu_download(struct tfm_backend *be, void *host, const void *src, size_t bytes)
{
    tfm_cuda *c = CU(be);
    if (!bytes)
        return;
    if (!c->stage || bytes > c->stage_seg) {
        CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, STREAM(be)));
        CUDA_CHECK(cudaStreamSynchronize(STREAM(be)));
        return;
    }
    unsigned char *s = stage_take(c, bytes);
    CUDA_CHECK(cudaMemcpyAsync(s, src, bytes, cudaMemcpyDeviceToHost, STREAM(be)));
    CUDA_CHECK(cudaStreamSynchronize(STREAM(be)));
    memcpy(host, s, bytes);
}

static void cu_copy(struct tfm_backend *be, void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src)
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, STREAM(be)));
}

// At fp32 the bytes as they are.  At bf16 the n values come down into the upper half of
// host's 4n bytes, then widen in place from the front (tfm_bf16_float, exact): float i
// takes bytes [4i, 4i + 4), and the bf16 values not yet read, j > i, lie at 2n + 2j >=
// 4i + 4 (j >= i + 1, i < n), so none is overwritten before it is read.  No allocation.
static void cu_download_act(struct tfm_backend *be, float *host, const void *src, size_t n)
{
    if (!tfm_cuda_bf16(be)) {
        cu_download(be, host, src, n * sizeof(float));
        return;
    }
    unsigned char *bytes = reinterpret_cast<unsigned char *>(host);
    const unsigned char *half = bytes + n * sizeof(uint16_t);
    cu_download(be, bytes + n * sizeof(uint16_t), src, n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) {
        uint16_t b;
        memcpy(&b, half + i * sizeof b, sizeof b);
        host[i] = tfm_bf16_float(b);
    }
}

// At bf16 the host floats are rounded on the host by tfm_bf16_bits (the CPU's upload_act
// rounds with the same function: the same bits, NaN included), straight into the staging
// ring a segment at a time; without the ring, into a chunk on the stack, each chunk's copy
// returning once the driver has staged it (pageable memory), so the chunk is free again.
enum { UPLOAD_CHUNK = 16384 };

static void round_bf16(uint16_t *dst, const float *src, size_t n)
{
    for (size_t k = 0; k < n; k++)
        dst[k] = tfm_bf16_bits(src[k]);
}

static void cu_upload_act(struct tfm_backend *be, void *dst, const float *host, size_t n)
{
    tfm_cuda *c = CU(be);
    if (!tfm_cuda_bf16(be)) {
        cu_upload(be, dst, host, n * sizeof(float));
        return;
    }
    char *d = static_cast<char *>(dst);
    if (staged(c, n * sizeof(uint16_t))) {
        const size_t seg = c->stage_seg / sizeof(uint16_t);
        for (size_t i = 0; i < n; i += seg) {
            size_t m = n - i < seg ? n - i : seg;
            uint16_t *s = reinterpret_cast<uint16_t *>(stage_take(c, m * sizeof(uint16_t)));
            round_bf16(s, host + i, m);
            CUDA_CHECK(cudaMemcpyAsync(d + i * sizeof(uint16_t), s, m * sizeof(uint16_t),
                                       cudaMemcpyHostToDevice, STREAM(be)));
        }
        return;
    }
    uint16_t chunk[UPLOAD_CHUNK];
    for (size_t i = 0; i < n; i += UPLOAD_CHUNK) {
        size_t m = n - i < UPLOAD_CHUNK ? n - i : UPLOAD_CHUNK;
        round_bf16(chunk, host + i, m);
        CUDA_CHECK(cudaMemcpyAsync(d + i * sizeof(uint16_t), chunk, m * sizeof(uint16_t),
                                   cudaMemcpyHostToDevice, STREAM(be)));
    }
}

// Activations as bf16 (on) or fp32 (off); tfm_backend_set_precision has checked that no
// model lives on be.
static int cu_set_bf16(struct tfm_backend *be, int on, struct tfm_error *err)
{
    (void)err;
    be->act_size = on ? sizeof(bf16) : sizeof(float);
    return 0;
}

static void cu_zero(struct tfm_backend *be, void *dst, size_t bytes)
{
    if (bytes)
        CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, STREAM(be)));
}

static void cu_sync(struct tfm_backend *be) { CUDA_CHECK(cudaStreamSynchronize(STREAM(be))); }

// The workspace for a training step's ops, allocated once now (at model creation) rather
// than grown inside the steps; as tfm_cuda_work, but a failure is the caller's error.
// The widest bias is the FFN's (F) or the attention's q, k, v (3D).
static int cu_reserve_step(struct tfm_backend *be, int64_t rows, int D, int F, int H, int V,
                           struct tfm_error *err)
{
    tfm_cuda *c = CU(be);
    size_t a = tfm_cuda_ops_step_work(rows, F > 3 * D ? F : 3 * D, D, V);
    size_t b = tfm_cuda_attn_step_work(be, rows, H, H > 0 ? D / H : D);
    size_t want = (a > b ? a : b) + 8192;
    if (want <= c->work_bytes)
        return 0;
    if (c->work)
        CUDA_CHECK(cudaFree(c->work));
    c->work = NULL;
    c->work_bytes = 0;
    cudaError_t e = cudaMalloc(&c->work, want);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return tfm_fail(err, "GPU %d: cannot allocate a workspace of %.1f MiB: %s", c->device,
                        want / 1048576.0, cudaGetErrorString(e));
    }
    c->work_bytes = want;
    return 0;
}

static int cu_reserve(struct tfm_backend *be, int max_tq, int max_tk, struct tfm_error *err)
{
    (void)err;
    tfm_cuda *c = CU(be);
    if (max_tq > c->max_tq)
        c->max_tq = max_tq;
    if (max_tk > c->max_tk)
        c->max_tk = max_tk;
    return 0;
}

// ---- matrix products ---------------------------------------------------------------------
//
// cuBLAS is column-major.  A row-major matrix with row stride ld is, read column-major,
// its transpose with the same ld; so the row-major C = op(A) op(B) is the column-major
// C^T = op(B)^T op(A)^T: the operands swap places and keep their transpose flags.

namespace {

// C (M,N) = beta C (a product with K = 0 and beta != 0, 1), in fp32, rounded to T.
template <typename T>
__global__ void scale_rows(T *C, int64_t ldc, int M, int N, float beta)
{
    size_t total = (size_t)M * (size_t)N;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        int64_t i = (int64_t)(e / (size_t)N), j = (int64_t)(e % (size_t)N);
        T *c = C + i * ldc + j;
        act_store(c, __fmul_rn(beta, act_load(c)));
    }
}

// C (M,N) = relu(C) in place, ldc apart: gemm_bias's fallback, after the biased product
// (rounded once at bf16; a bf16 value's ReLU is a bf16 value: no second rounding).  As the
// CPU's bias_act: not (x > 0), NaN included, gives +0.
template <typename T> __global__ void relu_rows(T *C, int64_t ldc, int M, int N)
{
    size_t total = (size_t)M * (size_t)N;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        int64_t i = (int64_t)(e / (size_t)N), j = (int64_t)(e % (size_t)N);
        T *c = C + i * ldc + j;
        float v = act_load(c);
        act_store(c, v > 0 ? v : 0.0f);
    }
}

// fp32 master weights to bf16, rounded to nearest even (cuda.h, "16-byte vectors"): when
// both arrays are 16-byte aligned, groups of 8 (two 16-byte loads, one 16-byte store) and
// the tail element by element; otherwise every element alone.  An element's rounding is
// the same either way.
__global__ void to_bf16(bf16 *dst, const float *src, size_t n, bool vec)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t done = 0;
    if (vec) {
        const size_t groups = n / 8;
        for (size_t g = t; g < groups; g += stride) {
            float a[4], b[4], f[8];
            vec_load(a, src + 8 * g);
            vec_load(b, src + 8 * g + 4);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                f[k] = a[k];
                f[4 + k] = b[k];
            }
            vec_store(dst + 8 * g, f);
        }
        done = groups * 8;
    }
    for (size_t i = done + t; i < n; i += stride)
        act_store(dst + i, src[i]);
}

}   // namespace

// The product with K <= 0: C = beta C, C (M,N) of `size` bytes an element (4: fp32, 2:
// bf16); C is not read when beta == 0.
static void gemm_empty(struct tfm_backend *be, int M, int N, float beta, void *C, int ldc,
                       size_t size)
{
    if (beta == 0) {
        CUDA_CHECK(cudaMemset2DAsync(C, (size_t)ldc * size, 0, (size_t)N * size, (size_t)M,
                                     STREAM(be)));
    } else if (beta != 1) {
        // a kernel, not cublasSgeam: geam is documented in place for C = A or C = B, not
        // for A, B and C one matrix
        const unsigned threads = 256, blocks = tfm_cuda_blocks((size_t)M * (size_t)N, threads);
        if (size == sizeof(float))
            scale_rows<<<blocks, threads, 0, STREAM(be)>>>(static_cast<float *>(C), ldc, M, N,
                                                           beta);
        else
            scale_rows<<<blocks, threads, 0, STREAM(be)>>>(static_cast<bf16 *>(C), ldc, M, N,
                                                           beta);
        LAUNCH_CHECK();
    }
}

// bf16 A and B on the tensor cores with fp32 accumulation; C of type ctype (CUDA_R_16BF:
// gemm; CUDA_R_32F: gemm_grad).  Operands swapped as above.
static void gemm_bf16(struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc, cudaDataType_t ctype)
{
    BLAS_CHECK(cublasGemmEx(CU(be)->blas, blas_op(tb), blas_op(ta), N, M, K, &alpha, B, CUDA_R_16BF, ldb,
                            A, CUDA_R_16BF, lda, &beta, C, ctype, ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

void cuda_gemm(struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    const bool h = tfm_cuda_bf16(be);
    if (K <= 0)
        gemm_empty(be, M, N, beta, C, ldc, h ? sizeof(bf16) : sizeof(float));
    else if (h)
        gemm_bf16(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_16BF);
    else
        BLAS_CHECK(cublasSgemm(CU(be)->blas, blas_op(tb), blas_op(ta), N, M, K, &alpha, B, ldb, A, lda,
                               &beta, C, ldc));
}

// Parameter gradients: C is fp32 at every precision (src/backend.h); at bf16 A and B are
// bf16 activations and weights as in gemm.
void cuda_gemm_grad(struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C,
                    int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0)
        gemm_empty(be, M, N, beta, C, ldc, sizeof(float));
    else if (tfm_cuda_bf16(be))
        gemm_bf16(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_32F);
    else
        BLAS_CHECK(cublasSgemm(CU(be)->blas, blas_op(tb), blas_op(ta), N, M, K, &alpha, B, ldb, A, lda,
                               &beta, C, ldc));
}

// ---- products with their bias and ReLU: cuBLASLt ------------------------------------------
//
// gemm_bias (backend.h) is one cublasLtMatmul with the bias (and the ReLU) in its epilogue
// (CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU_BIAS): the fp32 sums, plus the bias, then
// the ReLU, rounded once when stored.  Operands swapped as in cuda_gemm: cuBLASLt computes
// the column-major D = C^T (N rows, M columns, ld ldc) = op(B)^T op(A)^T.  Its bias vector
// has one value per row of D (cuBLASLt's documentation, CUBLASLT_EPILOGUE_BIAS: its length
// is D's row count, broadcast over D's columns), and a row of D is a column of C: one value
// per column of C, the same for every row, as gemm_bias asks.
//   bf16: A, B, C and the bias bf16, CUBLAS_COMPUTE_32F (fp32 products and sums on the
//     tensor cores), and only split-K reductions in the compute type
//     (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE), as the cuBLAS handle forbids reductions in
//     bf16 for gemm.
//   fp32: everything fp32, CUBLAS_COMPUTE_32F without TF32: the reference.
// The heuristic's choice is kept per shape (M, N, K, ta, tb, lda, ldb, ldc, relu, precision)
// with its descriptors, in LT_PLANS plans: the query runs once per shape while the shape
// stays in the table (a training run's batches have many row counts M; a new shape takes
// a free plan, or the plans in turn).  The algorithm is asked for 16-byte alignment of
// every pointer (the bias's too: the query sees an address aligned to 16 and no more) and
// cuBLAS's workspace; the call takes the cuBLASLt path only when A, B, C and the bias are
// 16-byte aligned and lda, ldb, ldc are multiples of 16 bytes.  Otherwise, or when the
// heuristic has no algorithm, the same result by other ops: the bias gathered into C's
// rows, gemm with beta 1 (the sums and the bias rounded once), then the ReLU (exact).
// Not here: the bias gradients.  The one product that reads dy along the right dimension
// is the weight gradient, dW += x^T dy (gemm_grad, K = the rows), where BGRADB would sum
// dy's columns on the way.  But the BGRAD epilogues (BGRADA, BGRADB, DRELU_BGRAD) write
// those sums into the bias pointer, overwriting it, while beta 1 accumulates only into C;
// tfm's gradients accumulate (db += colsum dy, backend.h: the batches of a step add up
// before an update), so a fused bias gradient would need a scratch vector and an add
// after each product, one more op where bias_bwd's one pass over dy is already all it
// takes.  And the epilogue's sums would run in whatever order the algorithm splits K,
// where bias_bwd adds the rows in order.  So a linear layer's backward stays gemm_grad +
// bias_bwd.

enum { LT_PLANS = 64, LT_KEY = 10 };

struct tfm_lt_plan {
    int key[LT_KEY];            // M, N, K, ta, tb, lda, ldb, ldc, relu, bf16
    bool used;                  // key is a shape (its descriptors exist)
    bool ok;                    // the heuristic found an algorithm: algo
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;     // cuBLASLt's A (our B), B (our A), C = D (our C)
    cublasLtMatmulAlgo_t algo;
};

// Release a plan's descriptors (teardown: a failure is said, the rest still released).
static void lt_release(const char *call, cublasStatus_t s)
{
    if (s != CUBLAS_STATUS_SUCCESS)
        fprintf(stderr, "tfm: CUDA backend: releasing: %s failed: %s: %s\n", call,
                cublasGetStatusName(s), cublasGetStatusString(s));
}

static void lt_plan_free(tfm_lt_plan *p)
{
    if (p->op)
        lt_release("cublasLtMatmulDescDestroy", cublasLtMatmulDescDestroy(p->op));
    if (p->a)
        lt_release("cublasLtMatrixLayoutDestroy", cublasLtMatrixLayoutDestroy(p->a));
    if (p->b)
        lt_release("cublasLtMatrixLayoutDestroy", cublasLtMatrixLayoutDestroy(p->b));
    if (p->d)
        lt_release("cublasLtMatrixLayoutDestroy", cublasLtMatrixLayoutDestroy(p->d));
    memset(p, 0, sizeof *p);
}

#define LT_SET(desc, attr, v)                                                            \
    BLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &(v), sizeof(v)))
#define LT_PREF(pref, attr, v)                                                           \
    BLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &(v), sizeof(v)))

// The descriptors of shape key and the heuristic's best algorithm for them (p->ok), or none
// (p->ok false: the caller falls back).  Descriptors that cannot be made are fatal, as any
// failed call inside an op.
static void lt_plan_make(struct tfm_backend *be, tfm_lt_plan *p, const int *key)
{
    tfm_cuda *c = CU(be);
    const int M = key[0], N = key[1], K = key[2], ta = key[3], tb = key[4], lda = key[5],
              ldb = key[6], ldc = key[7], relu = key[8];
    const cudaDataType_t t = key[9] ? CUDA_R_16BF : CUDA_R_32F;
    memcpy(p->key, key, sizeof p->key);
    p->used = true;
    p->ok = false;
    BLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t opa = blas_op(tb), opb = blas_op(ta), bias_type = t;
    const uint32_t epilogue = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    // the query reads no bias, only its address's alignment: 16 bytes, the least we call with
    const void *probe = reinterpret_cast<const void *>(uintptr_t{16});
    LT_SET(p->op, CUBLASLT_MATMUL_DESC_TRANSA, opa);
    LT_SET(p->op, CUBLASLT_MATMUL_DESC_TRANSB, opb);
    LT_SET(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    LT_SET(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type);
    LT_SET(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, probe);
    // column-major: a row-major (r, c) matrix with row stride ld is the (c, r) one, ld ld
    BLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, t, tb ? K : N, tb ? N : K, ldb));
    BLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, t, ta ? M : K, ta ? K : M, lda));
    BLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, t, N, M, ldc));

    cublasLtMatmulPreference_t pref;
    BLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t work = BLAS_WORK_BYTES;
    const uint32_t align = 16, schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    LT_PREF(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, work);
    LT_PREF(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align);
    LT_PREF(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align);
    LT_PREF(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align);
    LT_PREF(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align);
    if (t == CUDA_R_16BF)
        LT_PREF(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, schemes);
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    int found = 0;
    cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->a, p->b, p->d, p->d, pref, 1, &r, &found);
    lt_release("cublasLtMatmulPreferenceDestroy", cublasLtMatmulPreferenceDestroy(pref));
    // NOT_SUPPORTED: no heuristic for this configuration; INVALID_VALUE: one cuBLASLt does
    // not take.  Either way the fallback computes it; anything else is a failure.
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE)
        return;
    BLAS_CHECK(s);
    if (found > 0 && r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= BLAS_WORK_BYTES) {
        p->algo = r.algo;
        p->ok = true;
    }
}

// The plan for shape key: the one made before, or a new one in a free plan or the next in
// turn.
static tfm_lt_plan *lt_plan(struct tfm_backend *be, const int *key)
{
    tfm_cuda *c = CU(be);
    for (int i = 0; i < LT_PLANS; i++)
        if (c->plans[i].used && memcmp(c->plans[i].key, key, sizeof c->plans[i].key) == 0)
            return &c->plans[i];
    tfm_lt_plan *p = NULL;
    for (int i = 0; i < LT_PLANS && !p; i++)
        if (!c->plans[i].used)
            p = &c->plans[i];
    if (!p) {
        p = &c->plans[c->next_plan];
        c->next_plan = (c->next_plan + 1) % LT_PLANS;
        lt_plan_free(p);
    }
    lt_plan_make(be, p, key);
    return p;
}

static bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void cuda_gemm_bias(struct tfm_backend *be, int ta, int tb, int M, int N, int K, const float *A,
                    int lda, const float *B, int ldb, const float *bias, int relu, float *C,
                    int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    const bool h = tfm_cuda_bf16(be);
    const size_t size = h ? sizeof(bf16) : sizeof(float);
    const bool fits = K > 0 && aligned16(A) && aligned16(B) && aligned16(C) &&
                      aligned16(bias) && (size_t)lda * size % 16 == 0 &&
                      (size_t)ldb * size % 16 == 0 && (size_t)ldc * size % 16 == 0;
    if (fits) {
        const int key[LT_KEY] = {M, N, K, ta != 0, tb != 0, lda, ldb, ldc, relu != 0, h};
        tfm_lt_plan *p = lt_plan(be, key);
        if (p->ok) {
            tfm_cuda *c = CU(be);
            const float one = 1, zero = 0;
            const void *bp = bias;
            LT_SET(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bp);
            BLAS_CHECK(cublasLtMatmul(c->lt, p->op, &one, B, p->a, A, p->b, &zero, C, p->d, C,
                                      p->d, &p->algo, c->blas_work, BLAS_WORK_BYTES,
                                      STREAM(be)));
            return;
        }
    }
    // the fallback: the bias in C's rows, the product added to it (one rounding), the ReLU
    CU(be)->bias_fallbacks++;
    cuda_gather(be, C, ldc, bias, 0, NULL, M, N);
    cuda_gemm(be, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc);
    if (relu) {
        const unsigned threads = 256, blocks = tfm_cuda_blocks((size_t)M * (size_t)N, threads);
        BY_ACT_TYPE(be, relu_rows<T><<<blocks, threads, 0, STREAM(be)>>>(act_ptr<T>(C), ldc,
                                                                          M, N);
                        LAUNCH_CHECK(););
    }
}

// The compute copy of the weights: at fp32, the same bits; at bf16, rounded.
void cuda_weights_copy(struct tfm_backend *be, float *dst, const float *src, size_t n)
{
    if (n == 0)
        return;
    if (tfm_cuda_bf16(be)) {
        const unsigned threads = 256;
        const bool vec = vec_aligned(dst) && vec_aligned(src);
        to_bf16<<<tfm_cuda_blocks(vec ? n / 8 + 1 : n, threads), threads, 0, STREAM(be)>>>(
            act_ptr<bf16>(dst), src, n, vec);
        LAUNCH_CHECK();
    } else if (dst != src) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                   STREAM(be)));
    }
}

// ---- lifetime ---------------------------------------------------------------------------

static void cu_bind(struct tfm_backend *be) { CUDA_CHECK(cudaSetDevice(CU(be)->device)); }

// Teardown continues past a failed call (the rest is still released) but says so.
static void teardown(const char *call, cudaError_t e)
{
    if (e != cudaSuccess)
        fprintf(stderr, "tfm: CUDA backend: releasing: %s failed: %s: %s\n", call,
                cudaGetErrorName(e), cudaGetErrorString(e));
}

static void cu_destroy(struct tfm_backend *be)
{
    if (!be)
        return;
    tfm_cuda *c = CU(be);
    if (c) {
        teardown("cudaSetDevice", cudaSetDevice(c->device));
        if (c->stream)
            teardown("cudaStreamSynchronize", cudaStreamSynchronize(c->stream));
        if (c->blas) {
            cublasStatus_t s = cublasDestroy(c->blas);
            if (s != CUBLAS_STATUS_SUCCESS)
                fprintf(stderr, "tfm: CUDA backend: releasing: cublasDestroy failed: %s: %s\n",
                        cublasGetStatusName(s), cublasGetStatusString(s));
        }
        if (c->plans)
            for (int i = 0; i < LT_PLANS; i++)
                lt_plan_free(&c->plans[i]);
        free(c->plans);
        if (c->lt)
            lt_release("cublasLtDestroy", cublasLtDestroy(c->lt));
        if (c->work)
            teardown("cudaFree", cudaFree(c->work));
        if (c->blas_work)
            teardown("cudaFree", cudaFree(c->blas_work));
        for (int i = 0; i < STAGE_SEGS; i++)
            if (c->stage_done[i])
                teardown("cudaEventDestroy", cudaEventDestroy(c->stage_done[i]));
        if (c->stage)
            teardown("cudaFreeHost", cudaFreeHost(c->stage));
        if (c->stream)
            teardown("cudaStreamDestroy", cudaStreamDestroy(c->stream));
        free(c);
    }
    free(be);
}

// A failed call while opening the backend: err names the GPU, the call and the error.
static int open_failed(struct tfm_error *err, int device, const char *call, cudaError_t e)
{
    cudaGetLastError();
    return tfm_fail(err, "GPU %d: %s: %s: %s", device, call, cudaGetErrorName(e),
                    cudaGetErrorString(e));
}

static int blas_failed(struct tfm_error *err, int device, const char *call, cublasStatus_t s)
{
    return tfm_fail(err, "GPU %d: %s: %s: %s", device, call, cublasGetStatusName(s),
                    cublasGetStatusString(s));
}

struct tfm_backend *tfm_cuda_backend_open(int device, struct tfm_error *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        open_failed(err, device, "cudaGetDeviceCount", e);
        return NULL;
    }
    if (device < 0 || device >= n) {
        tfm_fail(err, "GPU %d: no such device (%d visible)", device, n);
        return NULL;
    }
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
        open_failed(err, device, "cudaGetDeviceProperties", e);
        return NULL;
    }
    if (prop.major < 8) {   // the kernels are built for sm_80 and newer (Makefile)
        tfm_fail(err, "GPU %d (%s) is sm_%d%d; this build needs sm_80 or newer", device,
                 prop.name, prop.major, prop.minor);
        return NULL;
    }
    if ((e = cudaSetDevice(device)) != cudaSuccess) {
        open_failed(err, device, "cudaSetDevice", e);
        return NULL;
    }
    struct tfm_backend *be = (struct tfm_backend *)calloc(1, sizeof *be);
    tfm_cuda *c = (tfm_cuda *)calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    be->impl = c;
    c->device = device;
    if ((c->attn = tfm_cuda_attn_choice(getenv("TFM_CUDA_ATTN"), err)) < 0) {
        cu_destroy(be);
        return NULL;
    }
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        c->stream = NULL;
        open_failed(err, device, "cudaStreamCreateWithFlags", e);
        cu_destroy(be);
        return NULL;
    }
    cublasStatus_t s = cublasCreate(&c->blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        c->blas = NULL;
        blas_failed(err, device, "cublasCreate", s);
        cu_destroy(be);
        return NULL;
    }
    // The stream first: cublasSetStream resets the workspace to cuBLAS's own pool.
    if ((s = cublasSetStream(c->blas, c->stream)) != CUBLAS_STATUS_SUCCESS) {
        blas_failed(err, device, "cublasSetStream", s);
        cu_destroy(be);
        return NULL;
    }
    if ((e = cudaMalloc(&c->blas_work, BLAS_WORK_BYTES)) != cudaSuccess) {
        c->blas_work = NULL;
        char call[96];
        snprintf(call, sizeof call, "cudaMalloc of the cuBLAS workspace (%zu MiB)",
                 BLAS_WORK_BYTES >> 20);
        open_failed(err, device, call, e);
        cu_destroy(be);
        return NULL;
    }
    if ((s = cublasSetWorkspace(c->blas, c->blas_work, BLAS_WORK_BYTES)) !=
        CUBLAS_STATUS_SUCCESS) {
        blas_failed(err, device, "cublasSetWorkspace", s);
        cu_destroy(be);
        return NULL;
    }
    for (int i = 0; i < STAGE_SEGS; i++)
        if ((e = cudaEventCreateWithFlags(&c->stage_done[i], cudaEventDisableTiming)) !=
            cudaSuccess) {
            c->stage_done[i] = NULL;
            open_failed(err, device, "cudaEventCreateWithFlags (staging)", e);
            cu_destroy(be);
            return NULL;
        }
    // Pinned memory is a limited resource: without it copies still work, from pageable
    // memory (synchronous as the driver stages them), so a failure here is not fatal.
    void *stage = NULL;
    if (cudaHostAlloc(&stage, (size_t)STAGE_SEGS * STAGE_SEG_BYTES, cudaHostAllocDefault) ==
        cudaSuccess) {
        c->stage = static_cast<unsigned char *>(stage);
        c->stage_seg = STAGE_SEG_BYTES;
    } else {
        cudaGetLastError();
    }
    // The default math mode: no TF32 for fp32 (the reference), tensor cores for bf16; and
    // no reduction in a product's output type (a split-K bf16 product adds in fp32).  Read
    // back, so a cuBLAS that drops a flag is caught here, not in the numbers.
    const cublasMath_t mode = static_cast<cublasMath_t>(
        CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    cublasMath_t got = CUBLAS_DEFAULT_MATH;
    if ((s = cublasSetMathMode(c->blas, mode)) != CUBLAS_STATUS_SUCCESS ||
        (s = cublasGetMathMode(c->blas, &got)) != CUBLAS_STATUS_SUCCESS) {
        blas_failed(err, device, "setting the cuBLAS math mode", s);
        cu_destroy(be);
        return NULL;
    }
    if ((got & mode) != mode) {      // every flag set is kept (more may be reported)
        tfm_fail(err, "GPU %d: cuBLAS math mode is 0x%x after setting 0x%x", device,
                 (unsigned)got, (unsigned)mode);
        cu_destroy(be);
        return NULL;
    }

    if ((s = cublasLtCreate(&c->lt)) != CUBLAS_STATUS_SUCCESS) {
        c->lt = NULL;
        blas_failed(err, device, "cublasLtCreate", s);
        cu_destroy(be);
        return NULL;
    }
    if (!(c->plans = static_cast<tfm_lt_plan *>(calloc(LT_PLANS, sizeof *c->plans)))) {
        tfm_fail(err, "out of memory");
        cu_destroy(be);
        return NULL;
    }

    be->name = "cuda";
    be->kind = TFM_BACKEND_CUDA;
    // fp32 until a precision is set (tfm_backend_set_precision); auto means bf16 here
    be->precision = TFM_PRECISION_FP32;
    be->auto_precision = TFM_PRECISION_BF16;
    be->act_size = sizeof(float);
    be->set_bf16 = cu_set_bf16;
    be->threads = 1;
    be->host_memory = 0;
    be->alloc = cu_alloc;
    be->free = cu_free;
    be->upload = cu_upload;
    be->download = cu_download;
    be->copy = cu_copy;
    be->zero = cu_zero;
    be->download_act = cu_download_act;
    be->upload_act = cu_upload_act;
    be->sync = cu_sync;
    be->bind = cu_bind;
    be->reserve = cu_reserve;
    be->reserve_step = cu_reserve_step;
#define CUDA_OP(ret, name, params, args, devs) be->name = cuda_##name;
    TFM_BACKEND_OPS(CUDA_OP)
#undef CUDA_OP
    be->log_softmax_top = cuda_log_softmax_top;     // cuda_topk.cu
    be->destroy = cu_destroy;
    return be;
}
