// nccl.cu: the GPU ranks' gradient sums with NCCL (src/dist_nccl.h says what each call
// means; src/cuda_plugin.h carries them to the library).
//
// Communicators are non-blocking (ncclConfig_t.blocking = 0): NCCL calls return at once,
// possibly with ncclInProgress, and the host polls ncclCommGetAsyncError.  So every wait,
// the start of the communicators included, is bounded in time, and a rank that died or
// hangs ends the others with ncclCommAbort and a message, never a hang.  A sum runs on a
// communication stream of its own, after an event recorded on the backend's compute
// stream: the backward pass goes on while finished buckets are summed.
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda.h"

extern "C" {
#include "cuda_plugin.h"
}

struct tfm_nccl {
    struct tfm_backend *be;     // the rank's backend: its GPU and compute stream
    int rank, nranks;
    ncclComm_t comm;
    cudaStream_t stream;        // communication
    cudaEvent_t ready;          // on the compute stream: the gradients so far
    cudaEvent_t done;           // on the communication stream: the sums so far
    int pending;                // sums queued since the last wait
    double timeout;             // for the queueing of a sum (nccl_open's)
    int aborted;
};

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pause_briefly(void)
{
    struct timespec t = {0, 50000};   // 50 us: polling costs nothing next to a step
    nanosleep(&t, NULL);
}

static int nccl_failed(struct tfm_error *err, const struct tfm_nccl *c, const char *call,
                       ncclResult_t r)
{
    const char *last = c && c->comm ? ncclGetLastError(c->comm) : NULL;
    if (c)
        return tfm_fail(err, "GPU rank %d of %d: %s: %s%s%s", c->rank, c->nranks, call,
                        ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
    return tfm_fail(err, "NCCL: %s: %s", call, ncclGetErrorString(r));
}

static int cuda_failed(struct tfm_error *err, const struct tfm_nccl *c, const char *call,
                       cudaError_t e)
{
    cudaGetLastError();
    return tfm_fail(err, "GPU rank %d of %d: %s: %s: %s", c->rank, c->nranks, call,
                    cudaGetErrorName(e), cudaGetErrorString(e));
}

static void abort_comm(struct tfm_nccl *c)
{
    if (c->comm && !c->aborted) {
        ncclCommAbort(c->comm);   // its own result is of no use: the run is ending
        c->comm = NULL;
        c->aborted = 1;
    }
}

// Poll a non-blocking call's communicator until it leaves ncclInProgress: 0 when it is
// ncclSuccess; -1 with err (and the communicator aborted) on an error or past deadline,
// which is `limit` seconds from the call's start (TFM_COLLECTIVE_TIMEOUT's when env).
static int settle(struct tfm_nccl *c, const char *call, double deadline, double limit, int env,
                  struct tfm_error *err)
{
    for (;;) {
        ncclResult_t state;
        ncclResult_t r = ncclCommGetAsyncError(c->comm, &state);
        if (r != ncclSuccess) {
            nccl_failed(err, c, "ncclCommGetAsyncError", r);
            abort_comm(c);
            return -1;
        }
        if (state == ncclSuccess)
            return 0;
        if (state != ncclInProgress) {
            nccl_failed(err, c, call, state);
            abort_comm(c);
            return -1;
        }
        if (seconds() > deadline) {
            tfm_fail(err, "GPU rank %d of %d: %s did not complete within %g s%s: a rank "
                     "stopped or hangs", c->rank, c->nranks, call, limit,
                     env ? " (TFM_COLLECTIVE_TIMEOUT)" : "");
            abort_comm(c);
            return -1;
        }
        pause_briefly();
    }
}

int tfm_cuda_nccl_id(unsigned char *id, struct tfm_error *err)
{
    static_assert(sizeof(ncclUniqueId) == 128, "NCCL_UNIQUE_ID_BYTES is 128");
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess)
        return nccl_failed(err, NULL, "ncclGetUniqueId", r);
    memcpy(id, u.internal, sizeof u.internal);
    return 0;
}

// Teardown goes on past a failed call (the rest is still released) but says so.
static void released(const struct tfm_nccl *c, const char *call, cudaError_t e)
{
    if (e != cudaSuccess)
        fprintf(stderr, "tfm: GPU rank %d of %d: releasing: %s failed: %s: %s\n", c->rank,
                c->nranks, call, cudaGetErrorName(e), cudaGetErrorString(e));
}

void tfm_cuda_nccl_free(struct tfm_nccl *c)
{
    if (!c)
        return;
    released(c, "cudaSetDevice", cudaSetDevice(CU(c->be)->device));
    if (c->comm && !c->aborted) {
        // a clean end: finalize (non-blocking, at most 30 s), then destroy; abort on trouble
        struct tfm_error err;
        ncclResult_t r = ncclCommFinalize(c->comm);
        if (r != ncclSuccess && r != ncclInProgress) {
            nccl_failed(&err, c, "ncclCommFinalize", r);
            fprintf(stderr, "tfm: %s\n", err.msg);
            abort_comm(c);
        } else if (settle(c, "ncclCommFinalize", seconds() + 30, 30, 0, &err) == 0) {
            if ((r = ncclCommDestroy(c->comm)) != ncclSuccess) {
                nccl_failed(&err, c, "ncclCommDestroy", r);
                fprintf(stderr, "tfm: %s\n", err.msg);
            }
            c->comm = NULL;
        } else {
            fprintf(stderr, "tfm: %s\n", err.msg);   // settle aborted it
        }
    }
    if (c->done)
        released(c, "cudaEventDestroy", cudaEventDestroy(c->done));
    if (c->ready)
        released(c, "cudaEventDestroy", cudaEventDestroy(c->ready));
    if (c->stream)
        released(c, "cudaStreamDestroy", cudaStreamDestroy(c->stream));
    free(c);
}

int tfm_cuda_nccl_open(struct tfm_backend **gpus, int n, const unsigned char *id, int nranks,
                     int first, double timeout, struct tfm_nccl **out, struct tfm_error *err)
{
    ncclUniqueId u;
    memcpy(u.internal, id, sizeof u.internal);
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        struct tfm_nccl *c = (struct tfm_nccl *)calloc(1, sizeof *c);
        if (!c) {
            rc = tfm_fail(err, "out of memory");
            break;
        }
        out[i] = c;
        c->be = gpus[i];
        c->rank = first + i;
        c->nranks = nranks;
        c->timeout = timeout;
        cudaError_t e;
        if ((e = cudaSetDevice(CU(c->be)->device)) != cudaSuccess)
            rc = cuda_failed(err, c, "cudaSetDevice", e);
        else if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess)
            rc = cuda_failed(err, c, "cudaStreamCreateWithFlags", e);
        else if ((e = cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming)) != cudaSuccess)
            rc = cuda_failed(err, c, "cudaEventCreateWithFlags", e);
        else if ((e = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming)) != cudaSuccess)
            rc = cuda_failed(err, c, "cudaEventCreateWithFlags", e);
    }
    if (rc == 0) {
        // the ranks of this process join together: one group, each on its own GPU
        ncclResult_t r = ncclGroupStart();
        if (r != ncclSuccess)
            rc = nccl_failed(err, NULL, "ncclGroupStart", r);
        for (int i = 0; i < n && rc == 0; i++) {
            ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
            config.blocking = 0;
            // the communicator belongs to the device current at its creation
            cudaError_t e = cudaSetDevice(CU(out[i]->be)->device);
            if (e != cudaSuccess) {
                rc = cuda_failed(err, out[i], "cudaSetDevice", e);
                break;
            }
            r = ncclCommInitRankConfig(&out[i]->comm, nranks, u, out[i]->rank, &config);
            if (r != ncclSuccess && r != ncclInProgress)
                rc = nccl_failed(err, out[i], "ncclCommInitRankConfig", r);
        }
        r = ncclGroupEnd();
        if (rc == 0 && r != ncclSuccess && r != ncclInProgress)
            rc = nccl_failed(err, NULL, "ncclGroupEnd", r);
        double deadline = seconds() + timeout;
        for (int i = 0; i < n && rc == 0; i++)
            if (out[i]->comm)
                rc = settle(out[i], "joining the run's ranks (ncclCommInitRankConfig)",
                            deadline, timeout, 1, err);
    }
    if (rc) {
        for (int i = 0; i < n; i++) {
            if (out[i])
                abort_comm(out[i]);
            tfm_cuda_nccl_free(out[i]);
            out[i] = NULL;
        }
        return -1;
    }
    return 0;
}

int tfm_cuda_nccl_sum(struct tfm_nccl *c, float *buf, size_t n, struct tfm_error *err)
{
    if (c->aborted)
        return tfm_fail(err, "GPU rank %d of %d: the communicator was aborted", c->rank,
                        c->nranks);
    if (n == 0)
        return 0;
    cudaError_t e;
    if ((e = cudaEventRecord(c->ready, CU(c->be)->stream)) != cudaSuccess)
        return cuda_failed(err, c, "cudaEventRecord", e);
    if ((e = cudaStreamWaitEvent(c->stream, c->ready, 0)) != cudaSuccess)
        return cuda_failed(err, c, "cudaStreamWaitEvent", e);
    ncclResult_t r = ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, c->comm, c->stream);
    if (r != ncclSuccess && r != ncclInProgress) {
        nccl_failed(err, c, "ncclAllReduce", r);
        abort_comm(c);
        return -1;
    }
    c->pending = 1;
    // queued once the communicator leaves ncclInProgress (not yet computed)
    return r == ncclInProgress ? settle(c, "queueing ncclAllReduce", seconds() + c->timeout,
                                        c->timeout, 1, err)
                               : 0;
}

int tfm_cuda_nccl_wait(struct tfm_nccl *c, double timeout, int (*stop)(void *), void *ctx,
                     struct tfm_error *err)
{
    if (c->aborted)
        return tfm_fail(err, "GPU rank %d of %d: the communicator was aborted", c->rank,
                        c->nranks);
    if (!c->pending)
        return 0;
    cudaError_t e;
    if ((e = cudaEventRecord(c->done, c->stream)) != cudaSuccess)
        return cuda_failed(err, c, "cudaEventRecord", e);
    // the optimizer, on the compute stream, reads the sums only after them
    if ((e = cudaStreamWaitEvent(CU(c->be)->stream, c->done, 0)) != cudaSuccess)
        return cuda_failed(err, c, "cudaStreamWaitEvent", e);
    double t0 = seconds();
    for (;;) {
        e = cudaEventQuery(c->done);
        if (e == cudaSuccess)
            break;
        if (e != cudaErrorNotReady) {
            cuda_failed(err, c, "the gradient sum (cudaEventQuery)", e);
            abort_comm(c);
            return -1;
        }
        ncclResult_t state;
        ncclResult_t r = ncclCommGetAsyncError(c->comm, &state);
        if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
            nccl_failed(err, c, "the gradient sum (ncclAllReduce)", r != ncclSuccess ? r : state);
            abort_comm(c);
            return -1;
        }
        if (stop && stop(ctx)) {
            tfm_fail(err, "GPU rank %d of %d: stopped while summing: another rank failed",
                     c->rank, c->nranks);
            abort_comm(c);
            return -1;
        }
        if (seconds() - t0 > timeout) {
            tfm_fail(err, "GPU rank %d of %d: the gradient sum did not complete within %g s "
                     "(TFM_COLLECTIVE_TIMEOUT): a rank stopped or hangs", c->rank, c->nranks,
                     timeout);
            abort_comm(c);
            return -1;
        }
        pause_briefly();
    }
    c->pending = 0;
    return 0;
}
