/* cuda_hint.h: what a failed CUDA call's message should add when its error is not the
 * call's own (shared by the CUDA plugin, which prints it, and the unit tests).
 *
 * Kernels and copies run after the call that queued them returns, so an error of theirs
 * (an illegal address, a trap, an uncorrectable ECC error) is returned by whichever call
 * comes next, in whichever op, and by every call after it: the CUDA context is lost.
 */
#ifndef TFM_CUDA_HINT_H
#define TFM_CUDA_HINT_H

/* For the name of a CUDA runtime error (cudaGetErrorName's) or cuBLAS status
 * (cublasGetStatusName's) that a kernel or copy queued earlier may have caused, the sentence
 * saying so and how to find the op it came from; NULL for another name. */
const char *tfm_cuda_error_hint(const char *name);

#endif
