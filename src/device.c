/* device.c: choosing the compute device and checking it against the CPU (see device.h). */
#include "device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "blas.h"
#include "cuda_env.h"
#include "cuda_plugin.h"
#include "model.h"
#include "optim.h"

int tfm_device_cuda_count(char *msg, size_t n)
{
    const struct tfm_cuda_plugin *p = tfm_cuda_plugin(msg, n);
    if (!p)
        return 0;
    int count = 0;
    p->probe(&count, msg, n);
    return count;
}

int tfm_device_name_ok(const char *want)
{
    static const char *const names[] = {"auto", "cpu", "cuda", "sim"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(want, names[i]) == 0)
            return 1;
    return 0;
}

int tfm_device_choose(const char *want, struct tfm_device *dev, struct tfm_error *err)
{
    char cuda[384];
    if (!tfm_device_name_ok(want))
        return tfm_fail(err, "unknown device '%s' (" TFM_DEVICE_NAMES ")", want);
    memset(dev, 0, sizeof *dev);
    if (strcmp(want, "cpu") == 0) {
        snprintf(dev->note, sizeof dev->note, "device: cpu (as asked); %s", tfm_blas_fit());
        return 0;
    }
    if (strcmp(want, "sim") == 0) {
        dev->kind = TFM_BACKEND_SIM;
        dev->count = 1;
        snprintf(dev->note, sizeof dev->note, "device: sim (the CPU behind device memory, "
                 "as asked)");
        return 0;
    }
    int n = tfm_device_cuda_count(cuda, sizeof cuda);
    if (n > 0) {
        dev->kind = TFM_BACKEND_CUDA;
        dev->count = n;
        snprintf(dev->note, sizeof dev->note, "device: cuda (%s)", cuda);
        return 0;
    }
    /* no GPU: no driver, or one that sees none; else a GPU this build cannot use (a
     * broken or old driver, the CUDA code missing or turned off, the runtime refusing) */
    int none = tfm_cuda_driver_gpus() == 0;
    if (strcmp(want, "cuda") == 0)
        return none ? tfm_fail(err, "--device cuda: no CUDA device (%s)", cuda)
                    : tfm_fail(err, "--device cuda: the GPU cannot be used (%s)", cuda);
    snprintf(dev->note, sizeof dev->note, "device: cpu, %s (%s); %s",
             none ? "no GPU found" : "GPU not usable", cuda, tfm_blas_fit());
    return 0;
}

/* ---- a backend checked against the CPU ---------------------------------------------------- */

double tfm_device_diff(const float *a, const float *b, size_t n)
{
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i]) || isinf(a[i]) != isinf(b[i]))
            return NAN;
        if (isnan(b[i]) || isinf(b[i]))
            continue;
        double s = fabs(b[i]) > 1 ? fabs(b[i]) : 1, d = fabs((double)a[i] - b[i]) / s;
        e = d > e ? d : e;
    }
    return e;
}

enum { CB = 4, CS = 9, CT = 7, CSTEPS = 3 };

/* How far a from b (n floats) measured against b's largest magnitude: max |a - b| over
 * max |b| (1e-30 at least), NaN as in tfm_device_diff.  For the bf16 pass's gradients: a
 * stored bf16 value is off by a unit of its own size, and a gradient tensor's values are
 * may all lie far below 1, where tfm_device_diff's absolute measure would pass anything. */
static double diff_scaled(const float *a, const float *b, size_t n)
{
    double big = 1e-30, e = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i]) || isinf(a[i]) != isinf(b[i]))
            return NAN;
        if (isnan(b[i]) || isinf(b[i]))
            continue;
        double d = fabs((double)a[i] - b[i]);
        e = d > e ? d : e;
        big = fabs(b[i]) > big ? fabs(b[i]) : big;
    }
    return e / big;
}

/* The bounds of one pass: the loss (relative), every gradient, the parameters after an Adam
 * step, the log-probabilities of decoding. */
struct bounds {
    double loss, grad, step, logp;
    int grad_scaled;            /* gradients measured by diff_scaled, not tfm_device_diff */
};

/* fp32: rounding differences are ~1e-6 (other summation orders, other exp); a wrong op is
 * off by far more. */
static const struct bounds fp32_bounds = {1e-5, 1e-4, 1e-5, 1e-4, 0};

/* bf16, against the CPU's emulation of it: each stored activation is rounded to 8
 * significant bits (2^-8 relative) on both sides, but a GPU's products sum their bf16
 * inputs in fp32 in another order than the CPU's (and its exp, its attention's blocks), so
 * where a sum lies near a rounding boundary its stored value lands one bf16 unit away from
 * the CPU's, and such units propagate and grow through two layers, forward and back.
 * Measured on this model: the products summed in double instead of the CPU's fp32 order
 * leave the bf16 results bit for bit the emulation's (bf16 products are exact in fp32 and
 * K is 32 to 64: the flips are rare); the whole of bf16 rounding, the emulation against
 * fp32, moves the loss by 6e-5 relative, the gradients by up to 4e-2 of their tensor's
 * largest magnitude, the Adam step's weights by 1.4e-6 and the log-probabilities by 1e-2:
 * a correct GPU, rounding where the emulation does, is a fraction of that away.  A wrong op
 * (a bad bf16 kernel, a misused vector path, an epilogue that drops its bias) is off by
 * O(1), and 5 per cent on one element in sixteen of a product is caught (the unit tests).
 * So: the loss to 1e-3 relative; each gradient to 2e-2 of its tensor's largest magnitude
 * (a tensor's gradients may all lie far below 1, where fp32's measure, absolute, would pass
 * anything); the weights after the Adam step to 1e-4 (master weights and Adam are fp32; at
 * step one Adam moves a weight by about the learning rate whatever its gradient's size, so
 * a gradient near zero whose sign differs moves it by twice that); log-probabilities to
 * 2e-2 of max(|cpu|, 1). */
static const struct bounds bf16_bounds = {1e-3, 2e-2, 1e-4, 2e-2, 1};

/* One pass of the check at precision prec (FP32 or BF16): be against a CPU backend at the
 * same precision (at bf16 the CPU's exact emulation).  The models are freed before it
 * returns, so the backend's precision may change again. */
static int check_at(struct tfm_backend *be, enum tfm_precision prec, char *note, size_t n,
                    struct tfm_error *err)
{
    const struct bounds *bd = prec == TFM_PRECISION_BF16 ? &bf16_bounds : &fp32_bounds;
    char who[64];
    snprintf(who, sizeof who, "%s%s", be->name, prec == TFM_PRECISION_BF16 ? " at bf16" : "");
    struct tfm_config c;
    tfm_config_defaults(&c);
    c.layers = 2;
    c.d_model = 32;
    c.heads = 4;
    c.d_ff = 64;
    c.vocab = 50;
    c.max_len = 16;
    c.tokens = 64;
    c.dropout = 0.1;            /* the same masks on both: the hash is part of the contract */
    c.label_smoothing = 0.1;
    c.seed = 11;
    /* never auto (bf16 on CUDA, fp32 on the CPU): both sides compute at prec; a tool's own
     * model sets the precision it asks for afterwards */
    c.precision = prec;
    int32_t src[CB * CS], tgt[CB * CT];
    for (int i = 0; i < CB * CS; i++)   /* sentences of 9, 8, 7, 6 tokens, then padding */
        src[i] = i % CS < CS - i / CS ? 4 + (i * 17) % 46 : 0;
    for (int i = 0; i < CB * CT; i++)
        tgt[i] = i % CT < CT - i / CT ? 4 + (i * 29) % 46 : 0;

    int rc = -1;
    struct tfm_backend *cpu = tfm_backend_cpu(1, err);
    struct tfm_model *mc = NULL, *mb = NULL;
    struct tfm_decoder *dc = NULL, *db = NULL;
    float *hc = NULL, *hb = NULL;
    if (!cpu || !(mc = tfm_model_create(&c, cpu, 0, err)) ||
        !(mb = tfm_model_create(&c, be, 0, err)))
        goto done;
    size_t cnt = (size_t)tfm_model_count(mc), out = (size_t)CB * (size_t)c.vocab;
    size_t len = cnt > out ? cnt : out;
    if (!(hc = malloc(len * sizeof *hc)) || !(hb = malloc(len * sizeof *hb))) {
        tfm_fail(err, "out of memory");
        goto done;
    }
    /* the same initialization, through upload and download */
    tfm_model_download(mc, TFM_PARAMS, hc);
    tfm_model_download(mb, TFM_PARAMS, hb);
    if (memcmp(hc, hb, cnt * sizeof *hc) != 0) {
        tfm_fail(err, "%s: the parameters differ from the CPU's after upload and download",
                 who);
        goto done;
    }
    /* one training batch: the loss and every gradient */
    struct tfm_loss lc, lb;
    if (tfm_model_train_batch(mc, CB, CS, CT, src, tgt, 1, &lc, err) ||
        tfm_model_train_batch(mb, CB, CS, CT, src, tgt, 1, &lb, err))
        goto done;
    double el = fabs(lb.loss - lc.loss) / (fabs(lc.loss) > 1 ? fabs(lc.loss) : 1);
    if (lb.tokens != lc.tokens || !(el <= bd->loss)) {
        tfm_fail(err, "%s: the loss of a training batch is %.9g over %lld tokens, the CPU's "
                 "%.9g over %lld", who, lb.loss, (long long)lb.tokens, lc.loss,
                 (long long)lc.tokens);
        goto done;
    }
    tfm_model_download(mc, TFM_GRADS, hc);
    tfm_model_download(mb, TFM_GRADS, hb);
    double eg = 0;
    for (int i = 0; i < tfm_model_nparams(mc); i++) {
        const struct tfm_param *p = tfm_model_param(mc, i);
        double e = bd->grad_scaled
                       ? diff_scaled(hb + p->offset, hc + p->offset, (size_t)p->count)
                       : tfm_device_diff(hb + p->offset, hc + p->offset, (size_t)p->count);
        if (!(e <= bd->grad)) {
            tfm_fail(err, "%s: the gradient of %s differs from the CPU's by %.3g (bound %g)",
                     who, p->name, e, bd->grad);
            goto done;
        }
        eg = e > eg ? e : eg;
    }
    /* one Adam step */
    if (tfm_optim_step(mc, 1, lc.tokens, NULL, err) || tfm_optim_step(mb, 1, lb.tokens, NULL, err))
        goto done;
    tfm_model_download(mc, TFM_PARAMS, hc);
    tfm_model_download(mb, TFM_PARAMS, hb);
    double ep = tfm_device_diff(hb, hc, cnt);
    if (!(ep <= bd->step)) {
        tfm_fail(err, "%s: the parameters after an Adam step differ from the CPU's by %.3g "
                 "(bound %g)", who, ep, bd->step);
        goto done;
    }
    /* incremental decoding: CSTEPS steps of CB rows, each feeding the CPU's best token */
    if (!(dc = tfm_decoder_create(mc, CB, CS, CB, CSTEPS, err)) ||
        !(db = tfm_decoder_create(mb, CB, CS, CB, CSTEPS, err)) ||
        tfm_decoder_encode(dc, CB, CS, src, err) || tfm_decoder_encode(db, CB, CS, src, err))
        goto done;
    int32_t tok[CB] = {0}, rows[CB] = {0, 1, 2, 3};
    double ed = 0;
    for (int s = 0; s < CSTEPS; s++) {
        if (tfm_decoder_step(dc, CB, tok, rows, hc, err) ||
            tfm_decoder_step(db, CB, tok, rows, hb, err))
            goto done;
        double e = tfm_device_diff(hb, hc, (size_t)CB * c.vocab);
        if (!(e <= bd->logp)) {
            tfm_fail(err, "%s: decoding step %d: log-probabilities differ from the CPU's by "
                     "%.3g (bound %g)", who, s + 1, e, bd->logp);
            goto done;
        }
        ed = e > ed ? e : ed;
        for (int r = 0; r < CB; r++) {
            int best = 0;
            for (int v = 1; v < c.vocab; v++)
                best = hc[(size_t)r * c.vocab + v] > hc[(size_t)r * c.vocab + best] ? v : best;
            tok[r] = best;
        }
    }
    if (prec == TFM_PRECISION_BF16)
        snprintf(note, n, "at bf16 against the CPU's emulation: within %.1g, %.1g, %.1g, %.1g",
                 el, eg, ep, ed);
    else
        snprintf(note, n, "checked against the CPU on a 2-layer model: loss, gradients, an "
                 "Adam step and %d decoding steps within %.1g, %.1g, %.1g, %.1g", CSTEPS, el,
                 eg, ep, ed);
    rc = 0;
done:
    free(hc);
    free(hb);
    tfm_decoder_free(dc);
    tfm_decoder_free(db);
    tfm_model_free(mb);
    tfm_model_free(mc);
    if (cpu)
        cpu->destroy(cpu);
    return rc;
}

int tfm_device_check(struct tfm_backend *be, char *note, size_t n, struct tfm_error *err)
{
    return check_at(be, TFM_PRECISION_FP32, note, n, err);
}

int tfm_device_check_bf16(struct tfm_backend *be, char *note, size_t n, struct tfm_error *err)
{
    if (!be->set_bf16)
        return tfm_fail(err, "%s backend: precision bf16: not in this build (fp32 only)",
                        be->name);
    int rc = check_at(be, TFM_PRECISION_BF16, note, n, err);
    struct tfm_error e2;
    if (tfm_backend_set_precision(be, TFM_PRECISION_FP32, rc ? &e2 : err) < 0)
        rc = -1;
    return rc;
}

int tfm_device_check_for(struct tfm_backend *be, int precision, char *note, size_t n,
                         struct tfm_error *err)
{
    char fp32[256], bf[512];
    if (tfm_device_check(be, fp32, sizeof fp32, err))
        return -1;
    int at_bf16 = precision == TFM_PRECISION_BF16 ||
                  (precision == TFM_PRECISION_AUTO && be->auto_precision == TFM_PRECISION_BF16);
    if (!be->set_bf16 || !at_bf16) {
        snprintf(note, n, "%s", fp32);
        return 0;
    }
    if (tfm_device_check_bf16(be, bf, sizeof bf, err) == 0) {
        snprintf(note, n, "%s; %s", fp32, bf);
        return 0;
    }
    if (precision == TFM_PRECISION_BF16) {
        tfm_error_prefix(err, "precision bf16");
        return -2;
    }
    /* auto: the device computes right at fp32, so it computes so, saying why */
    be->auto_precision = TFM_PRECISION_FP32;
    snprintf(note, n, "%s; bf16 failed its check (%.300s): computing in fp32", fp32, err->msg);
    return 0;
}

int tfm_device_env_check(struct tfm_error *err)
{
    size_t bytes;
    int packed;
    if (tfm_cuda_attn_choice(getenv("TFM_CUDA_ATTN"), err) < 0 ||
        tfm_backend_cpu_buffer_env(&bytes, err) || tfm_backend_sim_packed_env(&packed, err))
        return -1;
    return 0;
}

int tfm_device_open_gpus(const char *want, int precision, int threads, int first, int n,
                         struct tfm_gpus *out, struct tfm_error *err)
{
    struct tfm_device dev;
    struct tfm_backend **gpus = out->be;
    int *count = &out->count;
    char *note = out->note;
    size_t len = sizeof out->note;
    *count = 0;
    out->fallback = 0;
    note[0] = '\0';
    if (tfm_device_env_check(err) || tfm_device_choose(want, &dev, err))
        return -1;
    if (dev.kind == TFM_BACKEND_CPU) {
        snprintf(note, len, "%s", dev.note);
        return 0;
    }
    int sim = dev.kind == TFM_BACKEND_SIM;
    /* A launcher that gives each process its own GPUs (srun --gpus-per-task, a wrapper
     * setting CUDA_VISIBLE_DEVICES per local rank) leaves a process seeing exactly the n
     * it wants, numbered from 0, whatever its place on the node: it takes those.  Without
     * CUDA_VISIBLE_DEVICES nothing bound it: a second process on a node of one GPU is
     * refused here, not left to share that GPU with the first. */
    char bound[160] = "";
    if (!sim && first > 0 && n > 0 && dev.count == n && getenv("CUDA_VISIBLE_DEVICES")) {
        if (n == 1)
            snprintf(bound, sizeof bound, " of the 1 this process sees (its launcher's, in "
                     "place of GPU %d of the node)", first);
        else
            snprintf(bound, sizeof bound, " of the %d this process sees (its launcher's, in "
                     "place of GPUs %d to %d of the node)", n, first, first + n - 1);
        first = 0;
    }
    int have = sim ? TFM_DEVICE_MAX : dev.count - first;
    if (n > TFM_DEVICE_MAX || n > have || have < 1) {
        tfm_fail(err, "%d GPU%s wanted from GPU %d on, %d %s", n > 0 ? n : 1, n > 1 ? "s" : "",
                 first, have < TFM_DEVICE_MAX ? (have > 0 ? have : 0) : TFM_DEVICE_MAX,
                 have < TFM_DEVICE_MAX ? "visible" : "at most");
        return tfm_error_prefix(err, "--device %s", want);
    }
    if (n < 1)
        n = sim ? 1 : have < TFM_DEVICE_MAX ? have : TFM_DEVICE_MAX;
    if (threads < 1) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cpus > 0 ? (int)cpus : 1;
    }
    /* checked: what the check said (of the last device, or of the one where bf16 failed:
     * then "auto" computes in fp32 on every device, the later ones unchecked at bf16) */
    char checked[1024] = "", c1[1024];
    int ok = 1, bf16_failed = 0;
    for (int i = 0; i < n && ok; i++) {
        struct tfm_backend *be = sim ? tfm_backend_sim(threads / n > 0 ? threads / n : 1, err)
                                     : tfm_backend_cuda(first + i, err);
        if (be && be->bind)
            be->bind(be);
        if (be && bf16_failed)
            be->auto_precision = TFM_PRECISION_FP32;
        enum tfm_precision was = be ? be->auto_precision : TFM_PRECISION_FP32;
        int rc = be ? tfm_device_check_for(be, precision, c1, sizeof c1, err) : -1;
        if (rc == 0) {
            gpus[(*count)++] = be;
            if (!bf16_failed)
                snprintf(checked, sizeof checked, "%s", c1);
            bf16_failed |= be->auto_precision != was;
            continue;
        }
        if (be) {
            tfm_error_prefix(err, "%s %d", sim ? "sim" : "GPU", first + i);
            be->destroy(be);
        }
        if (rc == -2) {         /* bf16 asked and wrong: an error whatever the device */
            while (*count > 0) {
                struct tfm_backend *b = gpus[--*count];
                b->destroy(b);
            }
            return tfm_error_prefix(err, "--device %s", want);
        }
        ok = 0;
    }
    if (ok) {
        for (int i = 0; i < *count && bf16_failed; i++)
            gpus[i]->auto_precision = TFM_PRECISION_FP32;
        out->fallback = bf16_failed;
        if (n == 1 && sim)
            snprintf(note, len, "%s; sim %s", dev.note, checked);
        else if (n == 1)
            snprintf(note, len, "%s; GPU %d%s %s", dev.note, first, bound, checked);
        else
            snprintf(note, len, "%s; %d %s%s, each %s", dev.note, n,
                     sim ? "sim devices" : "GPUs", bound, checked);
        return 0;
    }
    while (*count > 0) {
        struct tfm_backend *be = gpus[--*count];
        be->destroy(be);
    }
    if (strcmp(want, "auto") != 0)
        return tfm_error_prefix(err, "--device %s", want);
    snprintf(note, len, "%s; computing on the cpu instead: %s", dev.note, err->msg);
    out->fallback = 1;
    return 0;
}
