/* device.h: which device a tool computes on.  "auto" takes the GPUs when a CUDA build
 * sees any and the CPU otherwise, saying so; "cuda" without a GPU is an error; "cpu" is
 * always there.  The decision is made once, here, and logged by the caller, never silent. */
#ifndef TFM_DEVICE_H
#define TFM_DEVICE_H

#include <stddef.h>

#include "error.h"

enum tfm_device_kind { TFM_DEVICE_CPU = 0, TFM_DEVICE_CUDA = 1 };

struct tfm_device {
    enum tfm_device_kind kind;
    int count;              /* GPUs used (0 on CPU) */
    char note[512];         /* what was found and chosen, one line, for the log */
};

/* want: "auto", "cpu" or "cuda".  Returns 0 and fills dev, or -1 with err. */
int tfm_device_choose(const char *want, struct tfm_device *dev, struct tfm_error *err);
/* Number of CUDA devices visible (0 in a CPU-only build or without a GPU); msg gets a
 * description of the CUDA runtime and libraries, or "built without CUDA". */
int tfm_device_cuda_count(char *msg, size_t n);

#endif
