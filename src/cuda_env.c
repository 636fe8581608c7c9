/* cuda_env.c: the CUDA backend's settings from the environment (cuda_env.h). */
#include "cuda_env.h"

#include <string.h>

int tfm_cuda_attn_choice(const char *value, struct tfm_error *err)
{
    if (!value || !*value)
        return TFM_CUDA_ATTN_AUTO;
    if (strcmp(value, "flash") == 0)
        return TFM_CUDA_ATTN_FLASH;
    if (strcmp(value, "mm") == 0)
        return TFM_CUDA_ATTN_MM;
    return tfm_fail(err, "TFM_CUDA_ATTN=%s: flash or mm", value);
}
