/* device.c: choosing the compute device and checking it against the CPU (see device.h). */
#include "device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
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
        snprintf(dev->note, sizeof dev->note, "device: cpu (as asked)");
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
    if (strcmp(want, "cuda") == 0)
        return tfm_fail(err, "--device cuda: no CUDA device (%s)", cuda);
    snprintf(dev->note, sizeof dev->note, "device: cpu, no GPU found (%s)", cuda);
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

/* Bounds: rounding differences are ~1e-6 (other summation orders, other exp); a wrong op
 * is off by far more. */
#define BOUND_LOSS 1e-5
#define BOUND_GRAD 1e-4
#define BOUND_STEP 1e-5
#define BOUND_LOGP 1e-4

int tfm_device_check(struct tfm_backend *be, char *note, size_t n, struct tfm_error *err)
{
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
    /* fp32 against the CPU's fp32 (the bounds above are fp32's): auto would be bf16 on
     * CUDA; a tool's own model sets the precision it asks for afterwards */
    c.precision = TFM_PRECISION_FP32;
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
                 be->name);
        goto done;
    }
    /* one training batch: the loss and every gradient */
    struct tfm_loss lc, lb;
    if (tfm_model_train_batch(mc, CB, CS, CT, src, tgt, 1, &lc, err) ||
        tfm_model_train_batch(mb, CB, CS, CT, src, tgt, 1, &lb, err))
        goto done;
    double el = fabs(lb.loss - lc.loss) / (fabs(lc.loss) > 1 ? fabs(lc.loss) : 1);
    if (lb.tokens != lc.tokens || !(el <= BOUND_LOSS)) {
        tfm_fail(err, "%s: the loss of a training batch is %.9g over %lld tokens, the CPU's "
                 "%.9g over %lld", be->name, lb.loss, (long long)lb.tokens, lc.loss,
                 (long long)lc.tokens);
        goto done;
    }
    tfm_model_download(mc, TFM_GRADS, hc);
    tfm_model_download(mb, TFM_GRADS, hb);
    double eg = 0;
    for (int i = 0; i < tfm_model_nparams(mc); i++) {
        const struct tfm_param *p = tfm_model_param(mc, i);
        double e = tfm_device_diff(hb + p->offset, hc + p->offset, (size_t)p->count);
        if (!(e <= BOUND_GRAD)) {
            tfm_fail(err, "%s: the gradient of %s differs from the CPU's by %.3g (bound %g)",
                     be->name, p->name, e, BOUND_GRAD);
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
    if (!(ep <= BOUND_STEP)) {
        tfm_fail(err, "%s: the parameters after an Adam step differ from the CPU's by %.3g "
                 "(bound %g)", be->name, ep, BOUND_STEP);
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
        if (!(e <= BOUND_LOGP)) {
            tfm_fail(err, "%s: decoding step %d: log-probabilities differ from the CPU's by "
                     "%.3g (bound %g)", be->name, s + 1, e, BOUND_LOGP);
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
    snprintf(note, n, "checked against the CPU on a 2-layer model: loss, gradients, an Adam "
             "step and %d decoding steps within %.1g, %.1g, %.1g, %.1g", CSTEPS, el, eg, ep, ed);
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

int tfm_device_open_gpus(const char *want, int threads, int first, int n,
                         struct tfm_backend **gpus, int *count, char *note, size_t len,
                         struct tfm_error *err)
{
    struct tfm_device dev;
    *count = 0;
    if (tfm_device_choose(want, &dev, err))
        return -1;
    if (dev.kind == TFM_BACKEND_CPU) {
        snprintf(note, len, "%s", dev.note);
        return 0;
    }
    int sim = dev.kind == TFM_BACKEND_SIM, have = sim ? TFM_DEVICE_MAX : dev.count - first;
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
    char checked[256] = "";
    int ok = 1;
    for (int i = 0; i < n && ok; i++) {
        struct tfm_backend *be = sim ? tfm_backend_sim(threads / n > 0 ? threads / n : 1, err)
                                     : tfm_backend_cuda(first + i, err);
        if (be && be->bind)
            be->bind(be);
        if (be && tfm_device_check(be, checked, sizeof checked, err) == 0) {
            gpus[(*count)++] = be;
            continue;
        }
        if (be) {
            tfm_error_prefix(err, "%s %d", sim ? "sim" : "GPU", first + i);
            be->destroy(be);
        }
        ok = 0;
    }
    if (ok) {
        if (n == 1 && sim)
            snprintf(note, len, "%s; sim %s", dev.note, checked);
        else if (n == 1)
            snprintf(note, len, "%s; GPU %d %s", dev.note, first, checked);
        else
            snprintf(note, len, "%s; %d %s, each %s", dev.note, n,
                     sim ? "sim devices" : "GPUs", checked);
        return 0;
    }
    while (*count > 0) {
        struct tfm_backend *be = gpus[--*count];
        be->destroy(be);
    }
    if (strcmp(want, "auto") != 0)
        return tfm_error_prefix(err, "--device %s", want);
    snprintf(note, len, "%s; computing on the cpu instead: %s", dev.note, err->msg);
    return 0;
}
