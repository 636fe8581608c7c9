/* cuda_env.h: the CUDA backend's settings from the environment, read in plain C: by the
 * CUDA plugin when it opens a GPU, and by the tools before they choose a device, so that a
 * bad value is an error whatever the device (device.c), not only on a GPU.  No CUDA
 * header. */
#ifndef TFM_CUDA_ENV_H
#define TFM_CUDA_ENV_H

#include "error.h"

/* Which attention forward and backward a GPU runs: AUTO, the products at bf16 and the
 * online-softmax kernels at fp32; FLASH or MM, that one at every precision
 * (TFM_CUDA_ATTN=flash or mm; tfm-train(1)). */
enum tfm_cuda_attn { TFM_CUDA_ATTN_AUTO = 0, TFM_CUDA_ATTN_FLASH, TFM_CUDA_ATTN_MM };

/* The path TFM_CUDA_ATTN's value names (NULL or empty: AUTO); -1 with err for another. */
int tfm_cuda_attn_choice(const char *value, struct tfm_error *err);

#endif
