/* optim.h: the learning-rate schedule and the optimizer step (Adam, gradient clipping).
 *
 * Schedule (section 5.3 of the paper; tfm-config(5): warmup, lr_scale), step s >= 1:
 *     lr(s) = lr_scale * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5)
 * Update: the gradients the model accumulated are of the summed loss; the step divides them
 * by the target tokens of the update (every batch and rank), all-reduces them first when
 * the backend has an all_reduce hook, clips the global L2 norm of that mean gradient to
 * clip_norm (when > 0), and applies Adam (beta1, beta2, eps of the config) with bias
 * correction (backend.h, adam), no weight decay.  Then the gradients are zeroed.
 * Not here: the model (model.h), when to step (train.c).
 */
#ifndef TFM_OPTIM_H
#define TFM_OPTIM_H

#include <stdint.h>

#include "config.h"
#include "error.h"
#include "model.h"

/* The largest norm of the clipped mean gradient a step accepts: no element of a gradient
 * within it squares past FLT_MAX (3.4e38) in Adam's second moment. */
#define TFM_OPTIM_MAX_NORM 1e19

/* lr at step (>= 1; 0 is treated as 1). */
double tfm_optim_lr(const struct tfm_config *cfg, int64_t step);

struct tfm_optim_stats {
    double lr;
    double grad_norm;       /* L2 norm of the mean gradient, before clipping */
    double clip;            /* factor applied (1 when not clipped) */
    double loss, nll;       /* this rank's training batches' sums since the last step */
    int read;               /* the fields above were read (0: the step failed before) */
};

/* Apply update number step (>= 1) to m with the gradients accumulated since the last
 * zero_grad, over tokens target tokens (> 0).  all_reduce (if set) sums the gradient
 * block over ranks first; tokens must then be the total over ranks.  The norm, the
 * clipping and the update happen on the device (backend.h, the step's statistics), which
 * the step reads once, at its end, into st (when given), and zeroes.  Refuses (-1, the
 * parameters untouched, st read) a non-finite gradient norm, naming it; fails too (-1,
 * st read, the update made: the model is to be dropped) when the clipped norm exceeds
 * TFM_OPTIM_MAX_NORM.  Zeroes the gradients. */
int tfm_optim_step(struct tfm_model *m, int64_t step, int64_t tokens,
                   struct tfm_optim_stats *st, struct tfm_error *err);

#endif
