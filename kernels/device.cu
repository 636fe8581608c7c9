// device.cu: what the CUDA runtime can see, for src/device.c.  The runtime API only (no
// -lcuda), so a binary built with CUDA starts on a machine with no GPU or no driver:
// cudaGetDeviceCount then fails, or returns 0, and tfm uses the CPU backend.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>

extern "C" int tfm_cuda_probe(int *count, char *msg, size_t n)
{
    int runtime = 0, nccl = 0, cublas_major = 0, cublas_minor = 0;
    cudaRuntimeGetVersion(&runtime);
    ncclGetVersion(&nccl);
    cublasGetProperty(MAJOR_VERSION, &cublas_major);
    cublasGetProperty(MINOR_VERSION, &cublas_minor);
    int c = 0;
    cudaError_t e = cudaGetDeviceCount(&c);
    if (e != cudaSuccess) {
        c = 0;
        cudaGetLastError();   // clear the sticky error
    }
    *count = c;
    int w = snprintf(msg, n, "CUDA runtime %d.%d, cuBLAS %d.%d, NCCL %d.%d.%d: ", runtime / 1000,
                     runtime % 1000 / 10, cublas_major, cublas_minor, nccl / 10000,
                     nccl % 10000 / 100, nccl % 100);
    if (w < 0 || (size_t)w >= n)
        return 0;
    if (e != cudaSuccess) {
        snprintf(msg + w, n - (size_t)w, "no GPU (%s)", cudaGetErrorString(e));
    } else {
        cudaDeviceProp p;
        if (c > 0 && cudaGetDeviceProperties(&p, 0) == cudaSuccess)
            snprintf(msg + w, n - (size_t)w, "%d GPU%s, %s (sm_%d%d)", c, c == 1 ? "" : "s",
                     p.name, p.major, p.minor);
        else
            snprintf(msg + w, n - (size_t)w, "%d GPUs", c);
    }
    return 0;
}
