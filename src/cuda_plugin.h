/* cuda_plugin.h: the boundary between the tools and the CUDA code.
 *
 * Everything that needs the CUDA runtime, cuBLAS or NCCL (the .cu files of kernels/) is
 * built into one shared object, libtfm-cuda.so, which the tools load with dlopen only when
 * a GPU may be used, and only after the NVIDIA driver has said there is a GPU.  So a binary built with
 * CUDA starts, and computes on the CPU saying why, on a machine without a GPU, without a
 * driver, with a driver too old for the toolkit, without the CUDA libraries, or under an
 * address-space limit the CUDA libraries do not fit in (they map close to 1 GB).
 *
 * The object exports one symbol, tfm_cuda_plugin_entry, returning the table below; the
 * table's abi must equal TFM_CUDA_PLUGIN_ABI (a table of another build is refused).
 *
 * Where the object is looked for, first found wins:
 *   $TFM_CUDA_LIB                       (a path, relative to the working directory even
 *                                        without a slash; empty: never load CUDA)
 *   <tool's directory>/../lib/tfm/libtfm-cuda.so                    (make install)
 *   the build directory the tool was built with                     (an in-tree build)
 *
 * A file whose headers describe more bytes than it has (a truncated copy) is refused
 * before dlopen, which would map the missing bytes and die of SIGBUS reading them: the
 * plugin, the libraries it needs (the CUDA runtime, cuBLAS, cuBLASLt, NCCL) where the
 * loader would find them, and the driver's libcuda.so.1 where the loader would find it: in a directory of
 * LD_LIBRARY_PATH or its glibc-hwcaps subdirectories, else through the loader's cache
 * (/etc/ld.so.cache: where a driver install puts it), else in the system's library
 * directories (cuda_load.c, driver_whole).  So is one that is no regular file: the loader
 * would wait in open(2) for a FIFO's writer.
 *
 * Not here: choosing a device and checking it against the CPU (device.h), the backend
 * table itself (backend.h).
 */
#ifndef TFM_CUDA_PLUGIN_H
#define TFM_CUDA_PLUGIN_H

#include <stddef.h>

#include "error.h"

#define TFM_CUDA_PLUGIN_ABI 7
#define TFM_CUDA_PLUGIN_NAME "libtfm-cuda.so"

struct tfm_backend;
struct tfm_nccl;    /* one GPU rank's NCCL communicator (kernels/nccl.cu) */

struct tfm_cuda_plugin {
    int abi;                            /* TFM_CUDA_PLUGIN_ABI */
    /* The GPUs this build can compute on (visible, sm_80 or newer) into *count, and one
     * line for the log: library versions, the GPUs seen, why any is not used. */
    void (*probe)(int *count, char *msg, size_t n);
    /* The CUDA backend on GPU `device` (backend.h: tfm_backend_cuda). */
    struct tfm_backend *(*backend)(int device, struct tfm_error *err);
    /* NCCL, with the meanings of dist_nccl.h's tfm_gpu_comm_* (which calls these): a unique
     * id (128 bytes), the communicators of n GPU ranks, a queued sum, the wait, the end. */
    int (*nccl_id)(unsigned char *id, struct tfm_error *err);
    int (*nccl_open)(struct tfm_backend **gpus, int n, const unsigned char *id, int nranks,
                     int first, double timeout, struct tfm_nccl **out, struct tfm_error *err);
    int (*nccl_sum)(struct tfm_nccl *c, float *buf, size_t n, struct tfm_error *err);
    int (*nccl_wait)(struct tfm_nccl *c, double timeout, int (*stop)(void *), void *ctx,
                     struct tfm_error *err);
    void (*nccl_free)(struct tfm_nccl *c);
    /* For tests: how many times the ops of backend be (one of this plugin's) have grown
     * its device workspace (tfm_backend_cuda_work_grows below). */
    long (*work_grows)(struct tfm_backend *be);
    /* For tests: how many gemm_bias calls of be took the fallback instead of cuBLASLt's
     * epilogue (tfm_backend_cuda_bias_fallbacks below). */
    long (*bias_fallbacks)(struct tfm_backend *be);
};

/* The plugin, loaded on first call (thread-safe); NULL when CUDA cannot be used here, with
 * the reason in why ("no NVIDIA driver (libcuda.so.1 not found)", "the NVIDIA driver
 * supports CUDA 12.4; this build needs 13.0 or newer", "no GPU", "cannot load ...": one
 * phrase, no program name).  The answer is computed once and kept. */
const struct tfm_cuda_plugin *tfm_cuda_plugin(char *why, size_t n);

/* The GPUs the NVIDIA driver counted when tfm_cuda_plugin looked (it looks, once, on the
 * first call of either): 0 when there is no driver (libcuda.so.1 nowhere on the loader's
 * search path) or it says there is no GPU, or in a build without CUDA; -1 when a driver is
 * there and could not say (it cannot be loaded, is too old, did not start). */
int tfm_cuda_driver_gpus(void);

/* How many times the ops of CUDA backend be have grown its device workspace (a cudaFree
 * and cudaMalloc inside an op, which waits for the device) since it was opened, not
 * counting reserve_step's allocation: it stays put for as long as the ops of a training
 * step fit in what reserve_step set aside (backend.h, reserve_step).  -1 for another
 * backend.  For tests (test_gpu_ops); no synchronization. */
long tfm_backend_cuda_work_grows(const struct tfm_backend *be);

/* How many gemm_bias calls of CUDA backend be computed the bias and ReLU apart (gather,
 * gemm, ReLU: three launches) instead of in one cuBLASLt product's epilogue, because an
 * operand was not 16-byte aligned or cuBLASLt had no algorithm for the shape.  -1 for
 * another backend.  For tests (test_gpu_ops); no synchronization. */
long tfm_backend_cuda_bias_fallbacks(const struct tfm_backend *be);

#endif
