/* cuda_hint.c: the hint for a CUDA error a kernel or copy queued earlier caused
 * (cuda_hint.h).  Plain C, no CUDA header: the names are compared as text. */
#include "cuda_hint.h"

#include <string.h>

/* The errors of a kernel's or copy's execution (the CUDA runtime API's documentation of
 * cudaError: "the process must be terminated and relaunched"), and cuBLAS's status for a
 * product whose kernel failed. */
static const char *const async_errors[] = {
    "cudaErrorIllegalAddress",      "cudaErrorLaunchFailure",
    "cudaErrorMisalignedAddress",   "cudaErrorAssert",
    "cudaErrorHardwareStackError",  "cudaErrorIllegalInstruction",
    "cudaErrorInvalidAddressSpace", "cudaErrorInvalidPc",
    "cudaErrorLaunchTimeout",       "cudaErrorECCUncorrectable",
    "cudaErrorTensorMemoryLeak",    "CUBLAS_STATUS_EXECUTION_FAILED",
};

const char *tfm_cuda_error_hint(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof async_errors / sizeof *async_errors; i++)
        if (strcmp(name, async_errors[i]) == 0)
            return "an error of a kernel or copy queued before this call, returned by the "
                   "first call after it, so not necessarily of this op (the GPU's context is "
                   "lost: every later call fails too); with CUDA_LAUNCH_BLOCKING=1 each op "
                   "reports its own kernels' errors, and compute-sanitizer names the access";
    return NULL;
}
