// backend_cuda.cu: the CUDA backend's table (src/backend.h): device memory, matrix
// products through cuBLAS, one stream that every op is issued on, the workspace shared by
// the ops, and the constructor.  The ops themselves are in cuda_ops.cu and cuda_attn.cu.
//
// Precision: fp32 throughout, cuBLAS in its default math mode (no TF32), so a product
// differs from the CPU's only in the order of its sums.  This is the backend the
// tensor-core (bf16) paths will be tested against, as it is tested against the CPU.
#include "cuda.h"

#include <stdio.h>
#include <stdlib.h>

void tfm_cuda_fail(const char *op, const char *call, const char *name, const char *msg,
                   const char *file, int line)
{
    int dev = -1;
    cudaGetDevice(&dev);
    fprintf(stderr, "tfm: CUDA backend, GPU %d, op %s: %s failed: %s: %s (%s:%d)\n", dev, op,
            call, name, msg, file, line);
    abort();
}

#define BLAS_CHECK(x)                                                                    \
    do {                                                                                 \
        cublasStatus_t s_ = (x);                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                 \
            tfm_cuda_fail(__func__, #x, cublasGetStatusName(s_), cublasGetStatusString(s_), \
                          __FILE__, __LINE__);                                           \
    } while (0)

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
    return c->work;
}

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

// From pageable host memory the call returns once the data is staged, so the caller may
// reuse `host` at once; the copy itself is ordered on the stream like any op.
static void cu_upload(struct tfm_backend *be, void *dst, const void *host, size_t bytes)
{
    if (bytes)
        CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, STREAM(be)));
}

static void cu_download(struct tfm_backend *be, void *host, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, STREAM(be)));
    CUDA_CHECK(cudaStreamSynchronize(STREAM(be)));
}

static void cu_copy(struct tfm_backend *be, void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src)
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, STREAM(be)));
}

// act_size is 4 (fp32): the bytes as they are
static void cu_download_act(struct tfm_backend *be, float *host, const void *src, size_t n)
{
    cu_download(be, host, src, n * sizeof(float));
}

static void cu_upload_act(struct tfm_backend *be, void *dst, const float *host, size_t n)
{
    cu_upload(be, dst, host, n * sizeof(float));
}

static void cu_zero(struct tfm_backend *be, void *dst, size_t bytes)
{
    if (bytes)
        CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, STREAM(be)));
}

static void cu_sync(struct tfm_backend *be) { CUDA_CHECK(cudaStreamSynchronize(STREAM(be))); }

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

static cublasOperation_t op(int t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

void cuda_gemm(struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {                        // C = beta C; C is not read when beta == 0
        if (beta == 0) {
            CUDA_CHECK(cudaMemset2DAsync(C, (size_t)ldc * sizeof(float), 0,
                                         (size_t)N * sizeof(float), (size_t)M, STREAM(be)));
        } else if (beta != 1) {
            const float zero = 0;        // in place: C = beta C + 0 C
            BLAS_CHECK(cublasSgeam(CU(be)->blas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, &beta, C, ldc,
                                   &zero, C, ldc, C, ldc));
        }
        return;
    }
    BLAS_CHECK(cublasSgemm(CU(be)->blas, op(tb), op(ta), N, M, K, &alpha, B, ldb, A, lda, &beta,
                           C, ldc));
}

// Parameter gradients: fp32 at every precision, the same product (src/backend.h).
void cuda_gemm_grad(struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C,
                    int ldc)
{
    cuda_gemm(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// The compute copy of the weights: at fp32, the same bits.
void cuda_weights_copy(struct tfm_backend *be, float *dst, const float *src, size_t n)
{
    if (n && dst != src)
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                   STREAM(be)));
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
                fprintf(stderr, "tfm: CUDA backend: releasing: cublasDestroy failed: %s\n",
                        cublasGetStatusString(s));
        }
        if (c->work)
            teardown("cudaFree", cudaFree(c->work));
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
    if ((s = cublasSetStream(c->blas, c->stream)) != CUBLAS_STATUS_SUCCESS ||
        // fp32 products, no TF32: the reference the tensor-core paths are tested against
        (s = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS) {
        blas_failed(err, device, "configuring the cuBLAS handle", s);
        cu_destroy(be);
        return NULL;
    }

    be->name = "cuda";
    be->kind = TFM_BACKEND_CUDA;
    // fp32 only until the bf16 kernels exist: set_bf16 stays NULL, so precision = bf16 is
    // refused and auto means fp32 here
    be->precision = TFM_PRECISION_FP32;
    be->auto_precision = TFM_PRECISION_FP32;
    be->act_size = sizeof(float);
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
#define CUDA_OP(ret, name, params, args, devs) be->name = cuda_##name;
    TFM_BACKEND_OPS(CUDA_OP)
#undef CUDA_OP
    be->destroy = cu_destroy;
    return be;
}
