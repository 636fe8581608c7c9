/* optim.c: the learning-rate schedule and the Adam step with clipping (optim.h).
 * Not here: the model's arenas (model.c), when to step (train.c).
 */
#include "optim.h"

#include <math.h>

double tfm_optim_lr(const struct tfm_config *cfg, int64_t step)
{
    double s = step < 1 ? 1.0 : (double)step;
    double w = (double)cfg->warmup;
    double a = 1.0 / sqrt(s), b = s * pow(w, -1.5);
    return cfg->lr_scale * pow((double)cfg->d_model, -0.5) * (a < b ? a : b);
}

int tfm_optim_step(struct tfm_model *m, int64_t step, int64_t tokens,
                   struct tfm_optim_stats *st, struct tfm_error *err)
{
    const struct tfm_config *cfg = tfm_model_config(m);
    struct tfm_backend *be = tfm_model_backend(m);
    if (st)
        st->read = 0;
    if (step < 1)
        return tfm_fail(err, "optimizer step %lld: must be >= 1", (long long)step);
    if (tokens < 1)
        return tfm_fail(err, "optimizer step %lld: no target tokens in the update",
                        (long long)step);
    float *g = tfm_model_block(m, TFM_GRADS);
    size_t n = (size_t)tfm_model_count(m);
    if (be->all_reduce && be->all_reduce(be->all_reduce_ctx, g, n, err) < 0)
        return tfm_error_prefix(err, "all-reduce of the gradients");
    /* The norm, the clipping factor and Adam's scale stay on the device (backend.h,
     * grad_clip and adam_scaled; the update is skipped there when the norm is not finite) */
    struct tfm_step_stats *dst = tfm_model_step_stats(m), h;
    double gs = 1.0 / (double)tokens;
    double lr = tfm_optim_lr(cfg, step);
    be->grad_clip(be, dst, g, n, gs, cfg->clip_norm);
    be->adam_scaled(be, tfm_model_block(m, TFM_PARAMS), g, tfm_model_block(m, TFM_ADAM_M),
                    tfm_model_block(m, TFM_ADAM_V), n, (float)lr, (float)cfg->adam_beta1,
                    (float)cfg->adam_beta2, (float)cfg->adam_eps, dst, step);
    /* the gradients are zero now, unless the update was skipped (adam_scaled clears them
     * as it reads them); the ops read the new weights through their compute copy (bf16:
     * made once per update; the same copy again after a skipped one), queued before the
     * read so that the read waits for it too */
    tfm_model_sync_weights(m);
    /* The step's one read of the device: its statistics, the batches' losses with them.
     * Then they start again from zero for the next step. */
    be->download(be, &h, dst, sizeof h);
    be->zero(be, dst, sizeof h);
    if (st) {
        st->lr = lr;
        st->grad_norm = h.grad_norm;
        st->clip = h.clip;
        st->loss = h.loss;
        st->nll = h.nll;
        st->read = 1;
    }
    if (!isfinite(h.grad_norm))
        return tfm_fail(err, "optimizer step %lld: gradient norm is %s (diverged); "
                        "parameters not updated", (long long)step,
                        isnan(h.grad_norm) ? "NaN" : "Inf");
    /* Adam squares each element of the (clipped) mean gradient into its second moment in
     * fp32: beyond TFM_OPTIM_MAX_NORM an element may square past FLT_MAX, and the Inf
     * moment would freeze its parameter for good and poison every later checkpoint */
    if (h.grad_norm * h.clip > TFM_OPTIM_MAX_NORM)
        return tfm_fail(err, "optimizer step %lld: gradient norm is %.3g, past what Adam's "
                        "fp32 moments hold (diverged)", (long long)step, h.grad_norm * h.clip);
    return 0;
}
