/* dist_nccl.h: sums of GPU ranks' gradients on the GPUs, with NCCL (in libtfm-cuda.so,
 * reached through cuda_plugin.h), for the trainer.
 *
 * One communicator per GPU rank: the R ranks of this process are opened together (one
 * NCCL group), as ranks g*R .. g*R+R-1 of the W*R ranks of the run; the run's unique id is
 * made by process 0 and carried to the others over the processes' own rendezvous
 * (tfm_comm_procs in dist.h), as torchrun and llm.c carry theirs.  A sum is queued on a
 * communication stream of its GPU, after the work the compute stream has queued so far,
 * so sums of finished buckets overlap the rest of the backward pass; tfm_gpu_comm_wait
 * makes the compute stream wait for them and waits on the host, bounded in time.
 * Sums are in NCCL's order, not the CPU's rank order: GPU runs are deterministic for a
 * fixed NCCL configuration only.  CPU ranks (and sim) sum through host memory (dist.h).
 */
#ifndef TFM_DIST_NCCL_H
#define TFM_DIST_NCCL_H

#include <stddef.h>

#include "error.h"

struct tfm_backend;
struct tfm_comm;
struct tfm_gpu_comm;

#define TFM_GPU_COMM_ID_BYTES 128

/* The seconds a gradient sum (or the communicators' start) may take before the run is
 * ended: TFM_COLLECTIVE_TIMEOUT, default 300.  -1 with err when the variable is not a
 * positive number. */
int tfm_gpu_comm_timeout(double *seconds, struct tfm_error *err);

/* The run's unique id: made here when first (this is process 0), else received from
 * process 0 over procs (NULL: one process).  Every process calls it, in step. */
int tfm_gpu_comm_id(struct tfm_comm *procs, int first, unsigned char id[TFM_GPU_COMM_ID_BYTES],
                    struct tfm_error *err);

/* The sharing part of tfm_gpu_comm_id: first's bytes reach every process over procs. */
int tfm_gpu_comm_share_id(struct tfm_comm *procs, int first,
                          unsigned char id[TFM_GPU_COMM_ID_BYTES], struct tfm_error *err);

/* Open the communicators of this process's n GPU ranks (gpus[i] is rank first + i of
 * nranks) into out[n].  Waits at most timeout seconds for every rank of the run to join. */
int tfm_gpu_comm_open(struct tfm_backend **gpus, int n, const unsigned char *id, int nranks,
                      int first, double timeout, struct tfm_gpu_comm **out,
                      struct tfm_error *err);

/* Queue the sum over the ranks of buf[0..n) (device memory of the rank's GPU), in place. */
int tfm_gpu_comm_sum(struct tfm_gpu_comm *c, float *buf, size_t n, struct tfm_error *err);

/* Wait for every sum queued: the compute stream waits on the device, the host polls until
 * they are done, NCCL reports an error, stop(ctx) returns non-zero (another rank of this
 * process failed), or timeout seconds pass; in the last three cases the communicator is
 * aborted and err says why, naming this rank. */
int tfm_gpu_comm_wait(struct tfm_gpu_comm *c, double timeout, int (*stop)(void *), void *ctx,
                      struct tfm_error *err);

void tfm_gpu_comm_free(struct tfm_gpu_comm *c);

#endif
