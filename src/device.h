/* device.h: which device a tool computes on.  "auto" takes the GPUs when a CUDA build
 * sees any and the CPU otherwise, saying so; "cuda" without a GPU is an error; "cpu" is
 * always there.  The decision is made once, here, and logged by the caller, never silent. */
#ifndef TFM_DEVICE_H
#define TFM_DEVICE_H

#include <stddef.h>

#include "backend.h"
#include "error.h"

/* kind: the backend the tool makes (TFM_BACKEND_SIM, the CPU behind device memory, is
 * asked for by name only: it tests the GPU paths of the tools on any machine). */
struct tfm_device {
    enum tfm_backend_kind kind;
    int count;              /* GPUs used (0 on CPU) */
    char note[768];         /* what was found and chosen, one line, for the log */
};

/* The names a tool's --device takes, for messages, and whether want is one of them. */
#define TFM_DEVICE_NAMES "auto, cpu, cuda or sim"
int tfm_device_name_ok(const char *want);

/* The environment of the backends, checked whichever device is then chosen: a value the
 * CUDA backend (TFM_CUDA_ATTN), the CPU backend (TFM_BLAS_BUFFER_MB) or the sim backend
 * (TFM_SIM_PACKED) would refuse is an error on every device, not only on the one that reads it (tfm_device_open_gpus checks
 * it first).  0, or -1 with err naming the variable. */
int tfm_device_env_check(struct tfm_error *err);

/* want: one of TFM_DEVICE_NAMES.  Returns 0 and fills dev, or -1 with err. */
int tfm_device_choose(const char *want, struct tfm_device *dev, struct tfm_error *err);
/* How far a device's result a is from the CPU's b (n floats): the largest difference,
 * relative where |b| > 1; NaN when one has a NaN or an Inf where the other does not. */
double tfm_device_diff(const float *a, const float *b, size_t n);

/* Check backend be against the CPU backend before trusting it: a small model (2 layers,
 * d_model 32, dropout on, padded sentences) built on both from the same seed must have the
 * same parameters after upload and download, and agree on one training batch (the loss to
 * 1e-5, every gradient to 1e-4), one Adam step (1e-5) and three incremental decoding steps
 * (log-probabilities to 1e-4); differences relative where a value exceeds 1.  At fp32.
 * Why: a GPU, driver or build the project's GPU tests have not run on must not train or
 * decode wrongly in silence.  Returns 0 with a one-line summary in note, or -1 with err
 * naming what differs and by how much. */
struct tfm_backend;
int tfm_device_check(struct tfm_backend *be, char *note, size_t n, struct tfm_error *err);

/* The same check with be at bf16 against the CPU's emulation of bf16, to bf16's bounds
 * (device.c says why): the loss to 1e-3 relative, each gradient to 2e-2 of its tensor's
 * largest magnitude, the Adam step to 1e-4, log-probabilities to 2e-2 of max(|cpu|, 1);
 * the stage that fails is named "NAME at bf16: ...".  be must hold no model; it is left
 * at fp32.  0 with note, -1 with err (also when be cannot compute in bf16). */
int tfm_device_check_bf16(struct tfm_backend *be, char *note, size_t n, struct tfm_error *err);

/* The check a run at precision (enum tfm_precision, as the config asks) needs: fp32's,
 * then bf16's when be can compute in bf16 and the run will (bf16 asked, or auto where
 * be->auto_precision is bf16).  0 with note: be is fit for the run; when auto's bf16 failed,
 * be->auto_precision is set to fp32 and note ends "bf16 failed its check (WHY): computing
 * in fp32".  -1 with err: the fp32 check failed; -2 with err ("precision bf16: ..."): bf16
 * was asked for and failed. */
int tfm_device_check_for(struct tfm_backend *be, int precision, char *note, size_t n,
                         struct tfm_error *err);

enum { TFM_DEVICE_MAX = 64 };

/* What tfm_device_open_gpus opened, and why. */
struct tfm_gpus {
    struct tfm_backend *be[TFM_DEVICE_MAX];
    int count;          /* backends opened; 0: compute on the CPU */
    /* a GPU was there but is not used as asked: "auto" computing on the CPU because the
     * GPU failed to open or its check, or in fp32 because its bf16 check failed.  A tool
     * logs note on a fallback even where it logs nothing else about the device: a
     * fallback is never silent. */
    int fallback;
    char note[2048];    /* what was found and chosen, and why */
};

/* Choose as tfm_device_choose and, for GPUs, open n of them (GPUs first .. first+n-1, or
 * 0 .. n-1 when exactly n are visible: a launcher gave the process its own;
 * n 0: every visible GPU from first on, up to TFM_DEVICE_MAX; for "sim", n stand-ins, 1
 * for n 0, sharing `threads` CPU threads, 0: all) into out->be, each bound to the calling
 * thread in turn and checked for a run at precision (tfm_device_check_for; when one GPU
 * fails at bf16 under auto, every one computes auto at fp32).  0: out->count backends
 * opened, or 0 for "compute on the CPU" (no GPU, or "auto" with a GPU that failed to open
 * or to pass the fp32 check).  -1 with err: an unknown name, more GPUs than there are,
 * "cuda"/"sim" that cannot be had, or precision bf16 asked on a GPU that failed the bf16
 * check (whatever the device name: the CPU would be far slower than the GPU at fp32, a
 * choice left to the user). */
int tfm_device_open_gpus(const char *want, int precision, int threads, int first, int n,
                         struct tfm_gpus *out, struct tfm_error *err);

/* Number of CUDA devices visible (0 in a CPU-only build or without a GPU); msg gets a
 * description of the CUDA runtime and libraries, or "built without CUDA". */
int tfm_device_cuda_count(char *msg, size_t n);

#endif
