/* device.c: choosing the compute device (see device.h). */
#include "device.h"

#include <stdio.h>
#include <string.h>

#include "backend.h"

#ifdef TFM_CUDA
int tfm_cuda_probe(int *count, char *msg, size_t n);   /* kernels/device.cu */
#else
/* kernels/backend_cuda.cu in a CUDA build */
struct tfm_backend *tfm_backend_cuda(int device, struct tfm_error *err)
{
    (void)device;
    tfm_fail(err, "the CUDA backend: built without CUDA");
    return NULL;
}
#endif

int tfm_device_cuda_count(char *msg, size_t n)
{
#ifdef TFM_CUDA
    int count = 0;
    tfm_cuda_probe(&count, msg, n);
    return count;
#else
    snprintf(msg, n, "built without CUDA");
    return 0;
#endif
}

int tfm_device_choose(const char *want, struct tfm_device *dev, struct tfm_error *err)
{
    char cuda[384];
    memset(dev, 0, sizeof *dev);
    if (strcmp(want, "cpu") == 0) {
        snprintf(dev->note, sizeof dev->note, "device: cpu (as asked)");
        return 0;
    }
    if (strcmp(want, "auto") != 0 && strcmp(want, "cuda") != 0)
        return tfm_fail(err, "unknown device '%s' (auto, cpu or cuda)", want);
    int n = tfm_device_cuda_count(cuda, sizeof cuda);
    if (n > 0) {
        dev->kind = TFM_DEVICE_CUDA;
        dev->count = n;
        snprintf(dev->note, sizeof dev->note, "device: cuda (%s)", cuda);
        return 0;
    }
    if (strcmp(want, "cuda") == 0)
        return tfm_fail(err, "--device cuda: no CUDA device (%s)", cuda);
    snprintf(dev->note, sizeof dev->note, "device: cpu, no GPU found (%s)", cuda);
    return 0;
}
