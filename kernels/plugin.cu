// plugin.cu: the entry point of libtfm-cuda.so (src/cuda_plugin.h): the table the tools
// reach the CUDA code through, and the probe of what the CUDA runtime can use.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>

#include "cuda.h"

extern "C" {
#include "cuda_plugin.h"
}

// This build's kernels are compiled for sm_80 and newer (Makefile: CUDA_ARCH); an older
// GPU would fail at its first launch, so it is refused here, named, instead.
enum { MIN_MAJOR = 8 };

static void probe(int *count, char *msg, size_t n)
{
    int runtime = 0, driver = 0, nccl = 0, cublas_major = 0, cublas_minor = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    ncclGetVersion(&nccl);
    cublasGetProperty(MAJOR_VERSION, &cublas_major);
    cublasGetProperty(MINOR_VERSION, &cublas_minor);
    *count = 0;
    int w = snprintf(msg, n, "CUDA runtime %d.%d (driver %d.%d), cuBLAS %d.%d, NCCL %d.%d.%d: ",
                     runtime / 1000, runtime % 1000 / 10, driver / 1000, driver % 1000 / 10,
                     cublas_major, cublas_minor, nccl / 10000, nccl % 10000 / 100, nccl % 100);
    if (w < 0 || (size_t)w >= n)
        w = 0;
    char *at = msg + w;
    size_t left = n - (size_t)w;
    int c = 0;
    cudaError_t e = cudaGetDeviceCount(&c);
    if (e != cudaSuccess) {
        snprintf(at, left, "no GPU (cudaGetDeviceCount: %s: %s)", cudaGetErrorName(e),
                 cudaGetErrorString(e));
        cudaGetLastError();   // clear the error so later calls are not refused with it
        return;
    }
    if (c == 0) {
        snprintf(at, left, "no GPU");
        return;
    }
    // Every visible GPU must be usable: ranks and device numbers are positions in the
    // visible list, and a hole would shift them.
    cudaDeviceProp p;
    for (int i = 0; i < c; i++) {
        if ((e = cudaGetDeviceProperties(&p, i)) != cudaSuccess) {
            snprintf(at, left, "GPU %d: cudaGetDeviceProperties: %s: %s", i, cudaGetErrorName(e),
                     cudaGetErrorString(e));
            cudaGetLastError();
            return;
        }
        if (p.major < MIN_MAJOR) {
            snprintf(at, left, "GPU %d (%s) is sm_%d%d, older than the sm_%d0 this build "
                     "needs; not used (CUDA_VISIBLE_DEVICES can leave it out)", i, p.name,
                     p.major, p.minor, MIN_MAJOR);
            return;
        }
    }
    cudaGetDeviceProperties(&p, 0);
    snprintf(at, left, "%d GPU%s, %s (sm_%d%d, %.0f GiB)", c, c == 1 ? "" : "s", p.name, p.major,
             p.minor, p.totalGlobalMem / 1073741824.0);
    *count = c;
}

static const struct tfm_cuda_plugin table = {
    TFM_CUDA_PLUGIN_ABI,
    probe,
    tfm_cuda_backend_open,
    tfm_cuda_nccl_id,
    tfm_cuda_nccl_open,
    tfm_cuda_nccl_sum,
    tfm_cuda_nccl_wait,
    tfm_cuda_nccl_free,
    tfm_cuda_work_grows,
    tfm_cuda_bias_fallbacks,
};

extern "C" __attribute__((visibility("default"))) const struct tfm_cuda_plugin *
tfm_cuda_plugin_entry(void)
{
    return &table;
}
