/* test_cuda_hint.c: a failed CUDA call whose error a kernel or copy queued earlier may
 * have caused gets the sentence saying so (the op named is where it surfaced); the
 * call's own errors (a bad argument, no memory) get none. */
#include "check.h"
#include "cuda_hint.h"

static void test_hint(void)
{
    static const char *const later[] = {"cudaErrorIllegalAddress", "cudaErrorLaunchFailure",
                                        "cudaErrorMisalignedAddress", "cudaErrorAssert",
                                        "cudaErrorECCUncorrectable",
                                        "CUBLAS_STATUS_EXECUTION_FAILED"};
    for (size_t i = 0; i < sizeof later / sizeof *later; i++) {
        const char *h = tfm_cuda_error_hint(later[i]);
        CHECK(h != NULL);
        CHECK(h && strstr(h, "not necessarily of this op") != NULL);
        CHECK(h && strstr(h, "CUDA_LAUNCH_BLOCKING=1") != NULL);
    }
    static const char *const own[] = {"cudaErrorMemoryAllocation", "cudaErrorInvalidValue",
                                      "cudaErrorLaunchOutOfResources",
                                      "CUBLAS_STATUS_NOT_SUPPORTED", "cudaErrorIllegal", ""};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        CHECK(tfm_cuda_error_hint(own[i]) == NULL);
    CHECK(tfm_cuda_error_hint(NULL) == NULL);
}

int main(void)
{
    t_run("tfm_cuda_error_hint: errors of earlier kernels and copies, and the call's own",
          test_hint);
    return t_done();
}
