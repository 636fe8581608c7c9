// cuda_step.cu: the step's statistics on the device (cuda.h; backend.h, struct
// tfm_step_stats), so that a training step reads the GPU once, at its end:
//
//   cuda_loss_sum     a batch's summed loss and nll, added to the statistics
//   cuda_grad_clip    the gradient's norm, the clipping factor and Adam's scale
//   cuda_adam_scaled  Adam reading its gradient scale from the statistics
//
// The CPU backend's twins (backend_cpu.c) are the reference.  Deterministic: no atomics;
// each sum is a fixed tree over threads that add their strided elements in order (the
// losses: block_sum2 below; the gradient: reduce.cuh's sumsq_parts, cuda_sumsq's own, a
// thread's float4 groups in order), and
// the gradient's parts add up in order, as cuda_sumsq's do on the host: the norm is
// cuda_sumsq's sum, bit for bit (backend.h, grad_clip).  Every kernel runs on the
// backend's stream, so the statistics are ready for the next op without a
// synchronization; the host reads them with a download.
#include "cuda.h"

#include <math.h>
#include <stdint.h>

namespace {

constexpr unsigned THREADS = 256;         // threads per block: a power of two

#include "reduce.cuh"

// The sums of a and b over the block's THREADS threads (every thread calling), each by
// the same fixed tree in shared memory; every thread gets the results.
__device__ void block_sum2(double *a, double *b)
{
    __shared__ double sa[THREADS], sb[THREADS];
    unsigned t = threadIdx.x;
    sa[t] = *a;
    sb[t] = *b;
    __syncthreads();
    for (unsigned h = THREADS / 2; h > 0; h /= 2) {
        if (t < h) {
            sa[t] += sa[t + h];
            sb[t] += sb[t + h];
        }
        __syncthreads();
    }
    *a = sa[0];
    *b = sb[0];
    __syncthreads();        // sa, sb may be written again by a later call
}

// One block: st->loss += the sum of loss, st->nll += the sum of nll.
__global__ void loss_sum_block(tfm_step_stats *st, const float *loss, const float *nll, int n)
{
    double l = 0, q = 0;
    for (int i = (int)threadIdx.x; i < n; i += THREADS) {
        l += loss[i];
        q += nll[i];
    }
    block_sum2(&l, &q);
    if (threadIdx.x == 0) {
        st->loss += l;
        st->nll += q;
    }
}

// One thread: the parts in order, then the CPU's cpu_grad_clip, in double.
__global__ void clip_finish(tfm_step_stats *st, const double *part, unsigned parts,
                            double gscale, double clip_norm)
{
    double s = 0;
    for (unsigned k = 0; k < parts; k++)
        s += part[k];
    double norm = __dmul_rn(sqrt(s), gscale), clip = 1.0;
    if (clip_norm > 0 && norm > clip_norm)
        clip = __ddiv_rn(clip_norm, norm);
    st->grad_norm = norm;
    st->clip = clip;
    st->scale = __dmul_rn(gscale, clip);
}

// cuda_ops.cu's adam_elems (adam_range, cuda.h: the CPU's adam_range, operation for
// operation) with the gradient scale from st; every thread returns at once when the norm
// is not finite.
__global__ void adam_scaled_elems(float *p, float *grad, float *m, float *v, size_t n,
                                  float lr, float b1, float b2, float eps,
                                  const tfm_step_stats *st, float a1, float a2)
{
    if (!isfinite(st->grad_norm))
        return;
    adam_range(p, grad, m, v, n, lr, b1, b2, eps, (float)st->scale, a1, a2);
}

} // namespace

void cuda_loss_sum(struct tfm_backend *be, struct tfm_step_stats *st, const float *loss,
                   const float *nll, int n)
{
    if (n <= 0)
        return;
    loss_sum_block<<<1, THREADS, 0, STREAM(be)>>>(st, loss, nll, n);
    LAUNCH_CHECK();
}

// The parts live in the workspace (8 KiB at most): allocated once, at the first step,
// when no op before has grown the workspace past that.
void cuda_grad_clip(struct tfm_backend *be, struct tfm_step_stats *st, const float *g,
                    size_t n, double gscale, double clip_norm)
{
    cudaStream_t s = STREAM(be);
    size_t chunk;
    unsigned parts = sumsq_plan(n, &chunk);     // sumsq's parts (reduce.cuh): its bits
    double *part = (double *)tfm_cuda_work(be, (parts ? parts : 1) * sizeof(double));
    if (parts) {
        sumsq_parts<<<parts, SUMSQ_THREADS, 0, s>>>(part, g, n, chunk);
        LAUNCH_CHECK();
    }
    clip_finish<<<1, 1, 0, s>>>(st, part, parts, gscale, clip_norm);
    LAUNCH_CHECK();
}

// Bias corrections as cpu_adam: 1 / (1 - b^t) in double, then float (on the host: they
// depend on the step only).
void cuda_adam_scaled(struct tfm_backend *be, float *p, float *grad, float *m, float *v,
                      size_t n, float lr, float b1, float b2, float eps,
                      const struct tfm_step_stats *st, int64_t step)
{
    if (n == 0)
        return;
    adam_scaled_elems<<<tfm_cuda_blocks((n + 3) / 4, THREADS), THREADS, 0, STREAM(be)>>>(
        p, grad, m, v, n, lr, b1, b2, eps, st, tfm_adam_correction(b1, step),
        tfm_adam_correction(b2, step));
    LAUNCH_CHECK();
}
