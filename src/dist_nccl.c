/* dist_nccl.c: GPU ranks' sums through the CUDA plugin's NCCL (dist_nccl.h). */
#include "dist_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_plugin.h"
#include "dist.h"

int tfm_gpu_comm_timeout(double *seconds, struct tfm_error *err)
{
    return tfm_dist_env_seconds("TFM_COLLECTIVE_TIMEOUT", 300, seconds, err);
}

static const struct tfm_cuda_plugin *plugin(struct tfm_error *err)
{
    char why[512];
    const struct tfm_cuda_plugin *p = tfm_cuda_plugin(why, sizeof why);
    if (!p)
        tfm_fail(err, "NCCL: %s", why);
    return p;
}

int tfm_gpu_comm_share_id(struct tfm_comm *procs, int first,
                          unsigned char id[TFM_GPU_COMM_ID_BYTES], struct tfm_error *err)
{
    /* a sum over the processes: process 0 adds its bytes as doubles, the others zeros;
     * every byte value is exact in a double */
    double v[TFM_GPU_COMM_ID_BYTES];
    for (int i = 0; i < TFM_GPU_COMM_ID_BYTES; i++)
        v[i] = first ? id[i] : 0;
    if (tfm_comm_sum_f64(procs, 0, v, TFM_GPU_COMM_ID_BYTES, err))
        return tfm_error_prefix(err, "passing the NCCL id");
    for (int i = 0; i < TFM_GPU_COMM_ID_BYTES; i++) {
        if (!(v[i] >= 0 && v[i] <= 255 && v[i] == (int)v[i]))
            return tfm_fail(err, "passing the NCCL id: byte %d arrived as %g (more than one "
                            "process 0?)", i, v[i]);
        id[i] = (unsigned char)v[i];
    }
    return 0;
}

int tfm_gpu_comm_id(struct tfm_comm *procs, int first, unsigned char id[TFM_GPU_COMM_ID_BYTES],
                    struct tfm_error *err)
{
    if (first) {
        const struct tfm_cuda_plugin *p = plugin(err);
        if (!p || p->nccl_id(id, err))
            return -1;
    }
    return procs ? tfm_gpu_comm_share_id(procs, first, id, err) : 0;
}

int tfm_gpu_comm_open(struct tfm_backend **gpus, int n, const unsigned char *id, int nranks,
                      int first, double timeout, struct tfm_gpu_comm **out,
                      struct tfm_error *err)
{
    const struct tfm_cuda_plugin *p = plugin(err);
    if (!p)
        return -1;
    return p->nccl_open(gpus, n, id, nranks, first, timeout, (struct tfm_nccl **)out, err);
}

int tfm_gpu_comm_sum(struct tfm_gpu_comm *c, float *buf, size_t n, struct tfm_error *err)
{
    return tfm_cuda_plugin(NULL, 0)->nccl_sum((struct tfm_nccl *)c, buf, n, err);
}

int tfm_gpu_comm_wait(struct tfm_gpu_comm *c, double timeout, int (*stop)(void *), void *ctx,
                      struct tfm_error *err)
{
    return tfm_cuda_plugin(NULL, 0)->nccl_wait((struct tfm_nccl *)c, timeout, stop, ctx, err);
}

void tfm_gpu_comm_free(struct tfm_gpu_comm *c)
{
    if (c)
        tfm_cuda_plugin(NULL, 0)->nccl_free((struct tfm_nccl *)c);
}
