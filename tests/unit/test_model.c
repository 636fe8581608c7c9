/* test_model.c: the whole model (model.h) and the optimizer (optim.h).
 *
 * Whole-model gradient check: a tiny model (2+2 layers, d_model 8, 2 heads, d_ff 16,
 * vocab 11), dropout 0, label smoothing 0.1, a padded batch of 3 pairs.  For EVERY
 * element of EVERY parameter tensor, the gradient of the summed loss from the backward
 * is compared with the central difference (h = 1e-3) of the forward loss.  Bound, per
 * tensor:  max |analytic - numeric| <= 5e-3 * max(1, max |numeric|)   (fp32 model, loss
 * ~25 nats: its rounding over 2h gives ~5e-4; measured worst 2.3e-3).  An element whose
 * left and right one-sided slopes differ by more than the bound has a ReLU kink within
 * +-h and is not differentiable there: it is skipped (decided from forward values only),
 * and at most 1% of the values may be skipped (measured: 0 to 13 of ~3500).
 * Run for post-norm and pre-norm, tied and untied, sinusoidal and learned positions.
 */
#include "check.h"

#include "model.h"
#include "optim.h"
#include "topk.h"

static struct tfm_backend *be;
#ifndef GH
#define GH 1e-3f
#endif
#ifndef GTOL
#define GTOL 5e-3
#endif

static void tiny(struct tfm_config *c, int norm, int tie, int pos)
{
    tfm_config_defaults(c);
    c->layers = 2;
    c->d_model = 8;
    c->heads = 2;
    c->d_ff = 16;
    c->vocab = 11;
    c->max_len = 8;
    c->tokens = 32;
    c->norm = norm;
    c->tie = tie;
    c->pos = pos;
    c->dropout = 0;
    c->label_smoothing = 0.1;
    c->seed = 7;
}

/* 3 pairs, padded: sources of 5, 3, 4 tokens; targets of 4, 2, 3 (eos = 3 last). */
enum { B = 3, S = 5, T = 4 };
static const int32_t src[B * S] = {5, 6, 7, 8, 3, 9, 4, 3, 0, 0, 10, 5, 5, 3, 0};
static const int32_t tgt[B * T] = {7, 8, 9, 3, 4, 3, 0, 0, 6, 10, 3, 0};

static double eval_loss(struct tfm_model *m)
{
    struct tfm_loss l;
    struct tfm_error err;
    if (tfm_model_eval_batch(m, B, S, T, src, tgt, &l, &err) < 0) {
        printf("# %s\n", err.msg);
        return NAN;
    }
    return l.loss;
}

static void gradcheck_model(int norm, int tie, int pos)
{
    struct tfm_config c;
    struct tfm_error err;
    tiny(&c, norm, tie, pos);
    struct tfm_model *m = tfm_model_create(&c, be, 0, &err);
    CHECK(m != NULL);
    if (!m) {
        printf("# %s\n", err.msg);
        return;
    }
    struct tfm_loss l;
    CHECK(tfm_model_train_batch(m, B, S, T, src, tgt, 1, &l, &err) == 0);
    CHECK_EQ_INT(l.tokens, 9);
    CHECK_EQ_INT(l.src_tokens, 12);
    double l0 = eval_loss(m);
    CHECK_NEAR(l.loss, l0, 1e-6);      /* dropout 0: train and eval forward agree */
    int64_t n = tfm_model_count(m);
    float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g);
    tfm_model_download(m, TFM_PARAMS, p);
    tfm_model_download(m, TFM_GRADS, g);
    double worst = 0;
    const char *worst_name = "";
    int64_t skipped = 0;
    for (int t = 0; t < tfm_model_nparams(m); t++) {
        const struct tfm_param *P = tfm_model_param(m, t);
        double *num = malloc(P->count * sizeof *num), *kink = malloc(P->count * sizeof *kink);
        double maxn = 0, maxe = 0;
        for (int64_t i = 0; i < P->count; i++) {
            float *x = p + P->offset + i, save = *x;
            *x = save + GH;
            tfm_model_upload(m, TFM_PARAMS, p);
            double lp = eval_loss(m);
            *x = save - GH;
            tfm_model_upload(m, TFM_PARAMS, p);
            double lm = eval_loss(m);
            *x = save;
            num[i] = (lp - lm) / (2 * (double)GH);
            kink[i] = fabs((lp - l0) - (l0 - lm)) / (double)GH;   /* |right - left| slope */
            maxn = fmax(maxn, fabs(num[i]));
        }
        double bound = GTOL * fmax(1, maxn);
        for (int64_t i = 0; i < P->count; i++) {
            if (kink[i] > bound) {      /* a ReLU kink within +-h: not differentiable there */
                skipped++;
                continue;
            }
            maxe = fmax(maxe, fabs(num[i] - g[P->offset + i]));
        }
        free(num);
        free(kink);
        double rel = maxe / fmax(1, maxn);
        if (rel > worst) {
            worst = rel;
            worst_name = P->name;
        }
        if (!(maxe <= bound)) {
            printf("#   %s: max |analytic - numeric| = %.3g (max |grad| %.3g)\n", P->name, maxe,
                   maxn);
            CHECK(maxe <= bound);
        }
    }
    CHECK(skipped * 100 <= n);      /* at most 1% of the values sit on a kink */
    tfm_model_upload(m, TFM_PARAMS, p);
    printf("#   norm=%s tie=%d pos=%s: %d tensors, %lld values (%lld on a kink), worst %.2g "
           "(%s)\n", norm ? "pre" : "post", tie, pos ? "learned" : "sinusoid",
           tfm_model_nparams(m), (long long)n, (long long)skipped, worst, worst_name);
    free(p);
    free(g);
    tfm_model_free(m);
}

static void test_grad_post_tied(void) { gradcheck_model(TFM_NORM_POST, 1, TFM_POS_SINUSOID); }
static void test_grad_pre_untied(void) { gradcheck_model(TFM_NORM_PRE, 0, TFM_POS_LEARNED); }
static void test_grad_post_untied_learned(void) { gradcheck_model(TFM_NORM_POST, 0, TFM_POS_LEARNED); }
static void test_grad_pre_tied(void) { gradcheck_model(TFM_NORM_PRE, 1, TFM_POS_SINUSOID); }

static void test_param_names(void)
{
    struct tfm_config c;
    struct tfm_error err;
    tiny(&c, TFM_NORM_PRE, 0, TFM_POS_LEARNED);
    struct tfm_model *m = tfm_model_create(&c, be, 0, &err);
    CHECK(m != NULL);
    if (!m)
        return;
    const struct tfm_param *p = tfm_model_find(m, "enc.1.self.wqkv");
    CHECK(p && p->dims[0] == 8 && p->dims[1] == 24);
    CHECK(tfm_model_find(m, "dec.0.cross.wkv") != NULL);
    CHECK(tfm_model_find(m, "dec.ln.g") != NULL);
    CHECK(tfm_model_find(m, "src_emb") && tfm_model_find(m, "out"));
    CHECK(tfm_model_find(m, "emb") == NULL);
    CHECK_EQ_INT(tfm_model_param_memory(&c), tfm_model_count(m) * 16);
    /* initialization: LN gain 1, biases 0, xavier bound for wqkv: sqrt(6/16) */
    float *h = malloc(tfm_model_count(m) * 4);
    tfm_model_download(m, TFM_PARAMS, h);
    const struct tfm_param *g = tfm_model_find(m, "enc.0.ln1.g");
    const struct tfm_param *b = tfm_model_find(m, "enc.0.self.bqkv");
    CHECK(h[g->offset] == 1.0f && h[b->offset + 5] == 0.0f);
    double mx = 0;
    for (int64_t i = 0; i < p->count; i++)
        mx = fmax(mx, fabs(h[p->offset + i]));
    CHECK(mx <= sqrt(6.0 / 16) && mx > 0.5 * sqrt(6.0 / 16));
    free(h);
    /* set: wrong count is refused with the name */
    float one = 1;
    CHECK(tfm_model_set(m, TFM_PARAMS, "enc.0.ln1.g", &one, 1, &err) < 0);
    CHECK(strstr(err.msg, "enc.0.ln1.g") != NULL);
    CHECK(tfm_model_set(m, TFM_PARAMS, "nope", &one, 1, &err) < 0);
    tfm_model_free(m);
}

static void test_batch_errors(void)
{
    struct tfm_config c;
    struct tfm_error err;
    struct tfm_loss l;
    tiny(&c, 0, 1, 0);
    struct tfm_model *m = tfm_model_create(&c, be, 12, &err);
    CHECK(m != NULL);
    if (!m)
        return;
    /* 3 x 5 = 15 source tokens > budget 12 */
    CHECK(tfm_model_train_batch(m, B, S, T, src, tgt, 1, &l, &err) < 0);
    CHECK(strstr(err.msg, "token budget 12") != NULL);
    int32_t bad[4] = {5, 0, 6, 3}, ok[4] = {5, 6, 3, 0}, big[4] = {5, 11, 3, 0};
    CHECK(tfm_model_eval_batch(m, 1, 4, 4, bad, ok, &l, &err) < 0);
    CHECK(strstr(err.msg, "after padding") != NULL);
    CHECK(tfm_model_eval_batch(m, 1, 4, 4, ok, big, &l, &err) < 0);
    CHECK(strstr(err.msg, "out of the vocabulary") != NULL);
    int32_t longs[9] = {4, 4, 4, 4, 4, 4, 4, 4, 3};
    CHECK(tfm_model_eval_batch(m, 1, 9, 4, longs, ok, &l, &err) < 0);
    CHECK(strstr(err.msg, "max_len 8") != NULL);
    CHECK(tfm_model_eval_batch(m, 1, 4, 4, ok, ok, &l, &err) == 0);
    CHECK_EQ_INT(l.tokens, 3);
    tfm_model_free(m);
    /* memory grows with the budget, by its activations alone: the model's part (at
     * least the parameter arena) is the same at every budget; 0 for an invalid config */
    CHECK(tfm_model_memory(&c, 64) > tfm_model_memory(&c, 32));
    size_t a32 = tfm_model_activation_memory(&c, 32), a64 = tfm_model_activation_memory(&c, 64);
    CHECK(a32 > 0 && a64 > a32);
    CHECK_EQ_INT(tfm_model_memory(&c, 64) - a64, tfm_model_memory(&c, 32) - a32);
    CHECK(tfm_model_memory(&c, 32) - a32 >= tfm_model_param_memory(&c));
    c.heads = 3;
    CHECK_EQ_INT(tfm_model_memory(&c, 32), 0);
    CHECK_EQ_INT(tfm_model_activation_memory(&c, 32), 0);
}

/* Padding does not change a sentence's loss: a pair alone = the same pair in a batch. */
static void test_padding_invariance(void)
{
    struct tfm_config c;
    struct tfm_error err;
    tiny(&c, 0, 1, 0);
    struct tfm_model *m = tfm_model_create(&c, be, 0, &err);
    struct tfm_loss all, one;
    float lp_all[B * T * 11], lp_one[T * 11];
    CHECK(tfm_model_logprobs(m, B, S, T, src, tgt, lp_all, &err) == 0);
    /* pair 1 alone, unpadded: source 3 tokens, target 2 */
    int32_t s1[3] = {9, 4, 3}, t1[2] = {4, 3};
    CHECK(tfm_model_logprobs(m, 1, 3, 2, s1, t1, lp_one, &err) == 0);
    double e = 0;
    for (int i = 0; i < 2 * 11; i++)
        e = fmax(e, fabs(lp_one[i] - lp_all[(1 * T) * 11 + i]));
    CHECK(e < 1e-5);
    CHECK(tfm_model_eval_batch(m, B, S, T, src, tgt, &all, &err) == 0);
    CHECK(tfm_model_eval_batch(m, 1, 3, 2, s1, t1, &one, &err) == 0);
    CHECK(one.loss > 0 && one.loss < all.loss);
    tfm_model_free(m);
}

/* Dropout: the same rng_step reproduces the loss and gradients bit for bit; another
 * step changes them. */
static void test_dropout_reproducible(void)
{
    struct tfm_config c;
    struct tfm_error err;
    tiny(&c, 0, 1, 0);
    c.dropout = 0.3;
    c.attn_dropout = 0.2;
    c.relu_dropout = 0.2;
    struct tfm_model *m = tfm_model_create(&c, be, 0, &err);
    int64_t n = tfm_model_count(m);
    float *g1 = malloc(n * 4), *g2 = malloc(n * 4);
    struct tfm_loss a, b, d;
    tfm_model_train_batch(m, B, S, T, src, tgt, 42, &a, &err);
    tfm_model_download(m, TFM_GRADS, g1);
    tfm_model_zero_grad(m);
    tfm_model_train_batch(m, B, S, T, src, tgt, 42, &b, &err);
    tfm_model_download(m, TFM_GRADS, g2);
    CHECK(a.loss == b.loss);
    CHECK(memcmp(g1, g2, n * 4) == 0);
    tfm_model_zero_grad(m);
    tfm_model_train_batch(m, B, S, T, src, tgt, 43, &d, &err);
    CHECK(d.loss != a.loss);
    /* accumulation: two calls add */
    tfm_model_zero_grad(m);
    tfm_model_train_batch(m, B, S, T, src, tgt, 42, &b, &err);
    tfm_model_train_batch(m, B, S, T, src, tgt, 42, &b, &err);
    tfm_model_download(m, TFM_GRADS, g2);
    int ok = 1;
    for (int64_t i = 0; i < n; i++)
        ok &= fabsf(g2[i] - 2 * g1[i]) <= 1e-6f * (1 + fabsf(g1[i]));
    CHECK(ok);
    free(g1);
    free(g2);
    tfm_model_free(m);
}

/* Incremental decoding equals teacher-forced logits, with rows reordered and duplicated. */
static void decode_case(int norm, int pos)
{
    struct tfm_config c;
    struct tfm_error err;
    tiny(&c, norm, 1, pos);
    c.max_len = 8;
    struct tfm_model *m = tfm_model_create(&c, be, 8, &err);   /* small budget: groups */
    CHECK(m != NULL);
    if (!m)
        return;
    int V = 11;
    /* teacher-forced log-probs, one sentence at a time */
    float full[B][T * 11];
    int slen[B] = {5, 3, 4};
    for (int b = 0; b < B; b++)
        CHECK(tfm_model_logprobs(m, 1, slen[b], T, src + b * S, tgt + b * T, full[b], &err) == 0);
    struct tfm_decoder *d = tfm_decoder_create(m, B, S, 6, T, &err);
    CHECK(d != NULL);
    if (!d) {
        printf("# %s\n", err.msg);
        tfm_model_free(m);
        return;
    }
    CHECK(tfm_decoder_encode(d, B, S, src, &err) == 0);
    int32_t row_src[6] = {0, 1, 2}, last[6];
    int R = 3;
    float logp[6 * 11];
    double e = 0;
    for (int t = 0; t < T; t++) {
        for (int r = 0; r < R; r++)
            last[r] = t == 0 ? TFM_BOS : tgt[row_src[r] * T + t - 1];
        CHECK(tfm_decoder_step(d, R, last, row_src, logp, &err) == 0);
        for (int r = 0; r < R; r++)
            for (int v = 0; v < V; v++)
                e = fmax(e, fabs(logp[r * V + v] - full[row_src[r]][t * V + v]));
        if (t == 1) {           /* reorder: rows 2, 0, 1, 2, 0 */
            int32_t keep[5] = {2, 0, 1, 2, 0}, ns[5];
            for (int i = 0; i < 5; i++)
                ns[i] = row_src[keep[i]];
            CHECK(tfm_decoder_select(d, 5, keep, &err) == 0);
            R = 5;
            memcpy(row_src, ns, sizeof ns);
        }
    }
    printf("#   norm=%s pos=%s: max |incremental - full| = %.2g\n", norm ? "pre" : "post",
           pos ? "learned" : "sinusoid", e);
    CHECK(e <= 1e-5);
    CHECK_EQ_INT(tfm_decoder_steps(d), T);
    /* misuse */
    CHECK(tfm_decoder_step(d, R, last, row_src, logp, &err) < 0);   /* past max_steps */
    int32_t bad[1] = {7};
    CHECK(tfm_decoder_select(d, 1, bad, &err) < 0);
    tfm_decoder_free(d);
    tfm_model_free(m);
}

static void test_decode_post(void) { decode_case(TFM_NORM_POST, TFM_POS_SINUSOID); }
static void test_decode_pre(void) { decode_case(TFM_NORM_PRE, TFM_POS_LEARNED); }

/* Known values: positions and the schedule. */
static void test_known_values(void)
{
    CHECK_NEAR(tfm_model_sinusoid(1, 0, 512), sin(1.0), 1e-15);
    CHECK_NEAR(tfm_model_sinusoid(1, 1, 512), cos(1.0), 1e-15);
    CHECK_NEAR(tfm_model_sinusoid(0, 0, 512), 0.0, 0);
    CHECK_NEAR(tfm_model_sinusoid(0, 1, 512), 1.0, 0);
    /* dims 2i and 2i+1 share the frequency 1/10000^(2i/d): pos 10, dims 100, 101, d 512 */
    CHECK_NEAR(tfm_model_sinusoid(10, 100, 512), sin(10 / pow(1e4, 100.0 / 512)), 1e-15);
    CHECK_NEAR(tfm_model_sinusoid(10, 101, 512), cos(10 / pow(1e4, 100.0 / 512)), 1e-15);
    struct tfm_config c;
    tfm_config_defaults(&c);
    CHECK_NEAR(tfm_optim_lr(&c, 4000), 6.9877124296868e-4, 1e-15);
    CHECK_NEAR(tfm_optim_lr(&c, 100), 1.746928107421711e-05, 1e-15);
    CHECK_NEAR(tfm_optim_lr(&c, 16000), pow(512, -0.5) / sqrt(16000), 1e-15);
    c.d_model = 1024;
    CHECK_NEAR(tfm_optim_lr(&c, 4000), 4.941058844013093e-4, 1e-15);
    c.lr_scale = 2;
    CHECK_NEAR(tfm_optim_lr(&c, 4000), 2 * 4.941058844013093e-4, 1e-15);
}

/* A few Adam steps on one batch lower its loss; clipping caps the norm. */
static void test_optim(void)
{
    struct tfm_config c;
    struct tfm_error err;
    tiny(&c, 0, 1, 0);
    c.warmup = 10;
    c.lr_scale = 0.1;
    c.clip_norm = 1.0;
    struct tfm_model *m = tfm_model_create(&c, be, 0, &err);
    struct tfm_loss l;
    struct tfm_optim_stats st;
    double first = 0, last = 0;
    for (int s = 1; s <= 30; s++) {
        CHECK(tfm_model_train_batch(m, B, S, T, src, tgt, (uint64_t)s, &l, &err) == 0);
        CHECK(tfm_optim_step(m, s, l.tokens, &st, &err) == 0);
        CHECK_NEAR(st.lr, tfm_optim_lr(&c, s), 1e-12);
        CHECK(st.clip <= 1.0);
        if (st.grad_norm > 1.0)
            CHECK_NEAR(st.clip * st.grad_norm, 1.0, 1e-9);
        if (s == 1)
            first = l.loss / l.tokens;
        last = l.loss / l.tokens;
    }
    printf("#   loss per token %.3f -> %.3f\n", first, last);
    CHECK(last < 0.5 * first);
    /* gradients were zeroed by the step */
    float *g = malloc(tfm_model_count(m) * 4);
    tfm_model_download(m, TFM_GRADS, g);
    CHECK(g[0] == 0 && g[tfm_model_count(m) - 1] == 0);
    free(g);
    /* non-finite gradients are refused */
    const struct tfm_param *p = tfm_model_param(m, 0);
    float inf = INFINITY;
    be->upload(be, p->grad, &inf, 4);
    CHECK(tfm_optim_step(m, 31, 9, &st, &err) < 0);
    CHECK(strstr(err.msg, "not updated") != NULL);
    CHECK(strstr(err.msg, "gradient norm is Inf (diverged)") != NULL);
    float nan = NAN;            /* named as NaN, not as printf's "-nan" or "nan" */
    be->upload(be, p->grad, &nan, 4);
    CHECK(tfm_optim_step(m, 31, 9, &st, &err) < 0);
    CHECK(strstr(err.msg, "gradient norm is NaN (diverged)") != NULL);
    free(NULL);
    tfm_model_free(m);
    /* a finite gradient whose square is past fp32 would make Adam's second moment Inf
     * for good: the step fails, naming the norm; clipped, the same gradient is taken */
    for (int clip = 0; clip < 2; clip++) {
        c.clip_norm = clip;
        m = tfm_model_create(&c, be, 0, &err);
        float big = 1e30f;
        be->upload(be, tfm_model_param(m, 0)->grad, &big, 4);
        int rc = tfm_optim_step(m, 1, 1, &st, &err);
        CHECK(clip ? rc == 0 : rc < 0 && strstr(err.msg, "gradient norm is 1e+30, past what "
                                                "Adam's fp32 moments hold (diverged)") != NULL);
        float *v = malloc(tfm_model_count(m) * 4);
        tfm_model_download(m, TFM_ADAM_V, v);
        CHECK(clip ? isfinite(v[0]) && v[0] > 0 : 1);
        free(v);
        tfm_model_free(m);
    }
}

/* tfm_decoder_step_top gives, bit for bit, the best tokens of tfm_decoder_step's
 * log-probabilities: on the CPU backend through its log_softmax_top (or out_top), on sim
 * (which has neither) through the host path; and sim's log-probabilities are the CPU's. */
static void test_decode_top(void)
{
    struct tfm_error err;
    static float cpu_logp[T][3 * 11];
    int same_as_cpu = 1;
    for (int which = 0; which < 2; which++) {
        struct tfm_backend *b = which ? tfm_backend_sim(1, &err) : be;
        CHECK(b != NULL && (which ? !b->log_softmax_top : b->log_softmax_top != NULL));
        if (!b)
            return;
        struct tfm_config c;
        tiny(&c, 0, 1, 0);
        struct tfm_model *m = tfm_model_create(&c, b, 8, &err);
        CHECK(m != NULL);
        struct tfm_decoder *d1 = m ? tfm_decoder_create(m, B, S, 6, T, &err) : NULL;
        struct tfm_decoder *d2 = m ? tfm_decoder_create(m, B, S, 6, T, &err) : NULL;
        CHECK(d1 && d2);
        if (d1 && d2) {
            CHECK(tfm_decoder_encode(d1, B, S, src, &err) == 0);
            CHECK(tfm_decoder_encode(d2, B, S, src, &err) == 0);
            int32_t row_src[3] = {0, 1, 2}, last[3], ban[3] = {0, 2, 3};
            enum { K = 4, V = 11 };
            float logp[3 * V], top[3 * K], also[3], want[K];
            int32_t tok[3 * K], want_tok[K];
            int same = 1;
            for (int t = 0; t < T; t++) {
                for (int r = 0; r < 3; r++)
                    last[r] = t == 0 ? TFM_BOS : tgt[row_src[r] * T + t - 1];
                int nban = t == 0 ? 3 : 2;          /* eos banned at the first step */
                CHECK(tfm_decoder_step(d1, 3, last, row_src, logp, &err) == 0);
                if (which)
                    same_as_cpu &= memcmp(cpu_logp[t], logp, sizeof logp) == 0;
                else
                    memcpy(cpu_logp[t], logp, sizeof logp);
                CHECK(tfm_decoder_step_top(d2, 3, last, row_src, K, ban, nban, 3, top, tok,
                                           also, &err) == 0);
                for (int r = 0; r < 3; r++) {
                    tfm_topk_row(logp + r * V, 0.0f, V, K, ban, nban, NULL, 0, want, want_tok);
                    same &= memcmp(want, top + r * K, sizeof want) == 0 &&
                            memcmp(want_tok, tok + r * K, sizeof want_tok) == 0 &&
                            memcmp(&logp[r * V + 3], &also[r], sizeof(float)) == 0;
                    for (int j = 0; j < K; j++)     /* the list is what it claims */
                        same &= tok[r * K + j] != 0 && tok[r * K + j] != 2 &&
                                (t > 0 || tok[r * K + j] != 3) &&
                                (j == 0 || top[r * K + j] <= top[r * K + j - 1]);
                }
            }
            CHECK(same);
            CHECK(tfm_decoder_step_top(d2, 3, last, row_src, V + 1, ban, 2, 3, top, tok, also,
                                       &err) < 0);
        }
        tfm_decoder_free(d1);
        tfm_decoder_free(d2);
        tfm_model_free(m);
        if (which)
            b->destroy(b);
    }
    CHECK(same_as_cpu);
}

/* Steps of decoders d1 and d2 over the first nsent sentences give the same bits. */
static int same_steps(struct tfm_decoder *d1, struct tfm_decoder *d2, int nsent, int steps)
{
    struct tfm_error err;
    int ok = tfm_decoder_encode(d1, nsent, S, src, &err) == 0 &&
             tfm_decoder_encode(d2, nsent, S, src, &err) == 0;
    int32_t row_src[6] = {0, 1, 2, 0, 1, 2}, last[6];
    float l1[6 * 11], l2[6 * 11];
    int R = nsent;
    for (int t = 0; t < steps && ok; t++) {
        for (int r = 0; r < R; r++)
            last[r] = t == 0 ? TFM_BOS : tgt[row_src[r] * T + t - 1];
        ok &= tfm_decoder_step(d1, R, last, row_src, l1, &err) == 0 &&
              tfm_decoder_step(d2, R, last, row_src, l2, &err) == 0 &&
              memcmp(l1, l2, (size_t)R * 11 * sizeof *l1) == 0;
        if (t == 0 && nsent == B) {     /* two rows per sentence from here */
            int32_t keep[6] = {0, 1, 2, 0, 1, 2};
            ok &= tfm_decoder_select(d1, 6, keep, &err) == 0 &&
                  tfm_decoder_select(d2, 6, keep, &err) == 0;
            R = 6;
        }
    }
    return ok;
}

/* A decoder reshaped for other sizes (bigger, then smaller) computes what a new one does. */
static void test_decoder_reshape(void)
{
    struct tfm_config c;
    struct tfm_error err;
    tiny(&c, 0, 1, 0);
    struct tfm_model *m = tfm_model_create(&c, be, 8, &err);
    struct tfm_decoder *used = m ? tfm_decoder_create(m, 1, 2, 1, 1, &err) : NULL;
    struct tfm_decoder *big = m ? tfm_decoder_create(m, B, S, 6, T, &err) : NULL;
    struct tfm_decoder *small = m ? tfm_decoder_create(m, 1, S, 1, 2, &err) : NULL;
    CHECK(m && used && big && small);
    if (m && used && big && small) {
        int32_t one[2] = {5, 3}, last = TFM_BOS, rs = 0;
        float lp[11];
        CHECK(tfm_decoder_encode(used, 1, 2, one, &err) == 0);
        CHECK(tfm_decoder_step(used, 1, &last, &rs, lp, &err) == 0);
        CHECK(tfm_decoder_reshape(used, B, S, 6, T, &err) == 0);
        CHECK(same_steps(used, big, B, T));
        CHECK(tfm_decoder_reshape(used, 1, S, 1, 2, &err) == 0);
        CHECK(same_steps(used, small, 1, 2));
        /* sizes are checked again, and a refused reshape leaves it refusing work */
        CHECK(tfm_decoder_reshape(used, 1, S, 1, c.max_len + 1, &err) < 0);
        CHECK(tfm_decoder_encode(used, 1, S, src, &err) < 0);
        CHECK(tfm_decoder_reshape(used, 2, S, 2, 2, &err) == 0);
        CHECK(tfm_decoder_encode(used, 2, S, src, &err) == 0);
    }
    tfm_decoder_free(used);
    tfm_decoder_free(big);
    tfm_decoder_free(small);
    tfm_model_free(m);
}

/* An inference model's layers share two activation sets (model.c, carve): with 5 layers
 * (odd, so the last layer's set is the first's) and both norms, its losses, log-probs,
 * attention maps and decoding steps must be a training model's bits for the same
 * parameters. */
static void test_inference_layer_sets(void)
{
    for (int norm = 0; norm < 2; norm++) {
        struct tfm_config c;
        struct tfm_error err;
        tiny(&c, norm, 0, TFM_POS_SINUSOID);
        c.layers = 5;
        struct tfm_model *tr = tfm_model_create(&c, be, 0, &err);
        struct tfm_model *in = tfm_model_create_inference(&c, be, 0, &err);
        CHECK(tr && in);
        if (!tr || !in) {
            tfm_model_free(tr);
            tfm_model_free(in);
            return;
        }
        float *h = malloc(tfm_model_count(tr) * sizeof *h);
        tfm_model_download(tr, TFM_PARAMS, h);
        tfm_model_upload(in, TFM_PARAMS, h);
        free(h);
        struct tfm_loss l1, l2;
        CHECK(tfm_model_eval_batch(tr, B, S, T, src, tgt, &l1, &err) == 0);
        CHECK(tfm_model_eval_batch(in, B, S, T, src, tgt, &l2, &err) == 0);
        CHECK(l1.loss == l2.loss && l1.nll == l2.nll);
        static float p1[B * T * 11], p2[B * T * 11];
        CHECK(tfm_model_logprobs(tr, B, S, T, src, tgt, p1, &err) == 0);
        CHECK(tfm_model_logprobs(in, B, S, T, src, tgt, p2, &err) == 0);
        CHECK(memcmp(p1, p2, sizeof p1) == 0);
        enum { N = 5, H = 2, Sa = 5, Ta = 4 };
        const int32_t s1[Sa] = {5, 6, 7, 8, 3}, t1[Ta] = {7, 8, 9, 3};
        static float cr[2][N * H * Ta * Sa], en[2][N * H * Sa * Sa], de[2][N * H * Ta * Ta];
        CHECK(tfm_model_attention(tr, Sa, Ta, s1, t1, cr[0], en[0], de[0], &err) == 0);
        CHECK(tfm_model_attention(in, Sa, Ta, s1, t1, cr[1], en[1], de[1], &err) == 0);
        CHECK(memcmp(cr[0], cr[1], sizeof cr[0]) == 0);
        CHECK(memcmp(en[0], en[1], sizeof en[0]) == 0);
        CHECK(memcmp(de[0], de[1], sizeof de[0]) == 0);
        /* without the encoder's maps, the cross and decoder maps are the same */
        memset(cr[1], 0, sizeof cr[1]);
        CHECK(tfm_model_attention(in, Sa, Ta, s1, t1, cr[1], NULL, de[1], &err) == 0);
        CHECK(memcmp(cr[0], cr[1], sizeof cr[0]) == 0);
        /* decoding steps, the two in lockstep, with a reorder */
        struct tfm_decoder *d[2] = {tfm_decoder_create(tr, B, S, 6, T, &err),
                                    tfm_decoder_create(in, B, S, 6, T, &err)};
        CHECK(d[0] && d[1]);
        if (d[0] && d[1]) {
            static float lp[2][6 * 11];
            int32_t row_src[6] = {0, 1, 2}, last[6], keep[5] = {2, 0, 1, 2, 0}, ns[5];
            int R = 3, same = 1;
            for (int k = 0; k < 2; k++)
                CHECK(tfm_decoder_encode(d[k], B, S, src, &err) == 0);
            for (int t = 0; t < T; t++) {
                for (int r = 0; r < R; r++)
                    last[r] = t == 0 ? TFM_BOS : tgt[row_src[r] * T + t - 1];
                for (int k = 0; k < 2; k++)
                    CHECK(tfm_decoder_step(d[k], R, last, row_src, lp[k], &err) == 0);
                same &= memcmp(lp[0], lp[1], (size_t)R * 11 * sizeof(float)) == 0;
                if (t == 1) {
                    for (int k = 0; k < 2; k++)
                        CHECK(tfm_decoder_select(d[k], 5, keep, &err) == 0);
                    for (int r = 0; r < 5; r++)
                        ns[r] = row_src[keep[r]];
                    R = 5;
                    memcpy(row_src, ns, sizeof ns);
                }
            }
            CHECK(same);
        }
        tfm_decoder_free(d[0]);
        tfm_decoder_free(d[1]);
        tfm_model_free(tr);
        tfm_model_free(in);
    }
}

/* Attention weights (tfm_model_attention): distributions, causal, the decoder's inputs
 * shifted right, and layer 0's encoder self-attention recomputed here from the
 * parameters: x = sqrt(D) E[id] + PE(pos), q|k = x wqkv + bqkv, softmax(q.k / sqrt(dk)). */
static void test_attention(void)
{
    struct tfm_config c;
    struct tfm_error err;
    tiny(&c, TFM_NORM_POST, 1, TFM_POS_SINUSOID);
    struct tfm_model *m = tfm_model_create(&c, be, 0, &err);
    CHECK(m != NULL);
    if (!m)
        return;
    enum { N = 2, H = 2, D = 8, dk = 4, Sa = 5, Ta = 4 };
    const int32_t s1[Sa] = {5, 6, 7, 8, 3}, t1[Ta] = {7, 8, 9, 3};
    float cr[N * H * Ta * Sa], en[N * H * Sa * Sa], de[N * H * Ta * Ta];
    CHECK(tfm_model_attention(m, Sa, Ta, s1, t1, cr, en, de, &err) == 0);
    double worst = 0;
    int causal_ok = 1, nonuniform = 0;
    for (int r = 0; r < N * H * Ta; r++) {
        double a = 0, b = 0;
        for (int j = 0; j < Sa; j++) {
            a += cr[r * Sa + j];
            nonuniform |= fabs(cr[r * Sa + j] - 1.0 / Sa) > 1e-3;
        }
        for (int j = 0; j < Ta; j++) {
            b += de[r * Ta + j];
            if (j > r % Ta && de[r * Ta + j] != 0.0f)
                causal_ok = 0;
        }
        worst = fmax(worst, fmax(fabs(a - 1), fabs(b - 1)));
    }
    for (int r = 0; r < N * H * Sa; r++) {
        double a = 0;
        for (int j = 0; j < Sa; j++)
            a += en[r * Sa + j];
        worst = fmax(worst, fabs(a - 1));
    }
    CHECK(worst < 1e-6);
    CHECK(causal_ok);
    CHECK(nonuniform);          /* random weights: not the trivial answer */
    /* the first decoder row sees bos alone: it attends to itself with weight 1 */
    CHECK(de[0] == 1.0f);
    /* layer 0's encoder self-attention, recomputed */
    float *h = malloc(tfm_model_count(m) * sizeof *h);
    tfm_model_download(m, TFM_PARAMS, h);
    const struct tfm_param *E = tfm_model_find(m, "emb"), *W = tfm_model_find(m, "enc.0.self.wqkv"),
                           *Bq = tfm_model_find(m, "enc.0.self.bqkv");
    CHECK(E && W && Bq);
    double x[Sa][D], q[Sa][3 * D], err0 = 0;
    for (int i = 0; i < Sa; i++)
        for (int d = 0; d < D; d++)
            x[i][d] = sqrt((double)D) * h[E->offset + s1[i] * D + d] + tfm_model_sinusoid(i, d, D);
    for (int i = 0; i < Sa; i++)
        for (int o = 0; o < 3 * D; o++) {
            q[i][o] = h[Bq->offset + o];
            for (int d = 0; d < D; d++)
                q[i][o] += x[i][d] * h[W->offset + d * 3 * D + o];
        }
    for (int hd = 0; hd < H; hd++)
        for (int i = 0; i < Sa; i++) {
            double sc[Sa], mx = -1e300, sum = 0;
            for (int j = 0; j < Sa; j++) {
                sc[j] = 0;
                for (int e = 0; e < dk; e++)
                    sc[j] += q[i][hd * dk + e] * q[j][D + hd * dk + e];
                sc[j] /= sqrt((double)dk);
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j < Sa; j++)
                sum += sc[j] = exp(sc[j] - mx);
            for (int j = 0; j < Sa; j++)
                err0 = fmax(err0, fabs(sc[j] / sum - en[(hd * Sa + i) * Sa + j]));
        }
    CHECK(err0 < 1e-5);
    free(h);
    /* the last target token is a label, never an input: no weight changes with it */
    const int32_t t2[Ta] = {7, 8, 9, 10};
    float cr2[N * H * Ta * Sa], de2[N * H * Ta * Ta], en2[N * H * Sa * Sa];
    CHECK(tfm_model_attention(m, Sa, Ta, s1, t2, cr2, en2, de2, &err) == 0);
    CHECK(memcmp(cr, cr2, sizeof cr) == 0 && memcmp(de, de2, sizeof de) == 0);
    CHECK(memcmp(en, en2, sizeof en) == 0);
    /* the first is the input of row 1 on: row 0 stays, row 1 moves */
    const int32_t t3[Ta] = {4, 8, 9, 3};
    CHECK(tfm_model_attention(m, Sa, Ta, s1, t3, cr2, NULL, NULL, &err) == 0);
    CHECK(memcmp(cr, cr2, Sa * sizeof *cr) == 0);
    CHECK(memcmp(cr + Sa, cr2 + Sa, Sa * sizeof *cr) != 0);
    /* padding inside, and lengths past max_len, are refused */
    const int32_t t4[Ta] = {7, 0, 9, 3};
    CHECK(tfm_model_attention(m, Sa, Ta, s1, t4, cr2, NULL, NULL, &err) < 0);
    int32_t long_src[9] = {5, 5, 5, 5, 5, 5, 5, 5, 3};
    CHECK(tfm_model_attention(m, 9, Ta, long_src, t1, cr2, NULL, NULL, &err) < 0);
    CHECK(strstr(err.msg, "max_len") != NULL);
    tfm_model_free(m);
}

/* tfm_model_train_batch_dev leaves the losses on the device (on sim, where reading is
 * counted: no read); the optimizer step reads them once, with the same bits as
 * tfm_model_train_batch returns them, summed in batch order, and the update is the same;
 * tfm_model_zero_grad starts the sums again. */
static void test_train_dev(void)
{
    struct tfm_error err;
    struct tfm_backend *sim = tfm_backend_sim(2, &err);
    CHECK(sim != NULL);
    if (!sim)
        return;
    struct tfm_config c;
    tiny(&c, 0, 1, 0);
    c.dropout = 0.1;
    c.clip_norm = 0.5;
    struct tfm_model *m1 = tfm_model_create(&c, be, 0, &err);
    struct tfm_model *m2 = tfm_model_create(&c, sim, 0, &err);
    CHECK(m1 && m2);
    if (!m1 || !m2)
        goto done;
    struct tfm_loss a1, b1, a2, b2;
    struct tfm_optim_stats s1, s2;
    CHECK(tfm_model_train_batch(m1, B, S, T, src, tgt, 1, &a1, &err) == 0);
    CHECK(tfm_model_train_batch(m1, B, S, T, src, tgt, 2, &b1, &err) == 0);
    CHECK(tfm_optim_step(m1, 1, a1.tokens + b1.tokens, &s1, &err) == 0);
    long r0 = tfm_backend_sim_reads(sim);
    CHECK(tfm_model_train_batch_dev(m2, B, S, T, src, tgt, 1, &a2, &err) == 0);
    CHECK(tfm_model_train_batch_dev(m2, B, S, T, src, tgt, 2, &b2, &err) == 0);
    CHECK(tfm_backend_sim_reads(sim) == r0);
    CHECK(a2.loss == 0 && a2.nll == 0 && a2.tokens == a1.tokens &&
          a2.src_tokens == a1.src_tokens);
    CHECK(tfm_optim_step(m2, 1, a2.tokens + b2.tokens, &s2, &err) == 0);
    CHECK_EQ_INT(tfm_backend_sim_reads(sim) - r0, 1);
    CHECK(s1.read && s2.read);
    CHECK(s1.loss == a1.loss + b1.loss && s1.nll == a1.nll + b1.nll);
    CHECK(s2.loss == s1.loss && s2.nll == s1.nll);
    CHECK(s2.grad_norm == s1.grad_norm && s2.clip == s1.clip && s1.clip < 1);
    int64_t n = tfm_model_count(m1);
    float *p1 = malloc(n * 4), *p2 = malloc(n * 4);
    tfm_model_download(m1, TFM_PARAMS, p1);
    tfm_model_download(m2, TFM_PARAMS, p2);
    CHECK(memcmp(p1, p2, n * 4) == 0);
    free(p1);
    free(p2);
    /* a batch's sums, then zero_grad: the next step has only the batch after it */
    CHECK(tfm_model_train_batch_dev(m2, B, S, T, src, tgt, 3, &a2, &err) == 0);
    tfm_model_zero_grad(m2);
    CHECK(tfm_model_train_batch_dev(m2, B, S, T, src, tgt, 4, &b2, &err) == 0);
    CHECK(tfm_optim_step(m2, 2, b2.tokens, &s2, &err) == 0);
    CHECK(tfm_model_train_batch(m1, B, S, T, src, tgt, 4, &b1, &err) == 0);
    CHECK(s2.loss == b1.loss && s2.nll == b1.nll);
done:
    tfm_model_free(m1);
    tfm_model_free(m2);
    sim->destroy(sim);
}

/* A training model sizes its step's workspace once, at creation, for its token budget and
 * shapes (backend.h, reserve_step), and fails when that fails; an inference model does
 * not ask. */
static int rs_calls, rs_D, rs_F, rs_H, rs_V;
static int64_t rs_rows;
static int record_reserve_step(struct tfm_backend *b, int64_t rows, int D, int F, int H, int V,
                               struct tfm_error *err)
{
    (void)b;
    (void)err;
    rs_calls++;
    rs_rows = rows;
    rs_D = D;
    rs_F = F;
    rs_H = H;
    rs_V = V;
    return 0;
}
static int refuse_reserve_step(struct tfm_backend *b, int64_t rows, int D, int F, int H, int V,
                               struct tfm_error *err)
{
    (void)b, (void)rows, (void)D, (void)F, (void)H, (void)V;
    return tfm_fail(err, "no room");
}

static void test_reserve_step(void)
{
    struct tfm_error err;
    struct tfm_backend b = *be;         /* the CPU's table with a reserve_step */
    b.reserve_step = record_reserve_step;
    struct tfm_config c;
    tiny(&c, 0, 1, 0);
    struct tfm_model *m = tfm_model_create(&c, &b, 100, &err);
    CHECK(m != NULL);
    CHECK(rs_calls == 1 && rs_rows == 100 && rs_D == c.d_model && rs_F == c.d_ff &&
          rs_H == c.heads && rs_V == c.vocab);
    tfm_model_free(m);
    m = tfm_model_create_inference(&c, &b, 100, &err);
    CHECK(m != NULL && rs_calls == 1);
    tfm_model_free(m);
    b.reserve_step = refuse_reserve_step;
    CHECK(tfm_model_create(&c, &b, 100, &err) == NULL);
    CHECK(strstr(err.msg, "no room") != NULL);
}

int main(void)
{
    struct tfm_error err;
    be = tfm_backend_cpu(2, &err);
    if (!be) {
        printf("not ok 1 - backend: %s\n", err.msg);
        return 1;
    }
    t_run("gradient check, every parameter: post-norm, tied, sinusoid", test_grad_post_tied);
    t_run("gradient check, every parameter: pre-norm, untied, learned", test_grad_pre_untied);
    t_run("gradient check, every parameter: post-norm, untied, learned",
          test_grad_post_untied_learned);
    t_run("gradient check, every parameter: pre-norm, tied, sinusoid", test_grad_pre_tied);
    t_run("parameter names, shapes and initialization", test_param_names);
    t_run("batch validation and the token budget", test_batch_errors);
    t_run("padding does not change a sentence's log-probs", test_padding_invariance);
    t_run("dropout reproducible from the rng step; gradients accumulate", test_dropout_reproducible);
    t_run("incremental decoding = teacher forcing (post-norm)", test_decode_post);
    t_run("incremental decoding = teacher forcing (pre-norm, learned)", test_decode_pre);
    t_run("a reshaped decoder = a new one", test_decoder_reshape);
    t_run("decoder's best tokens = best of its log-probs (cpu op, host path)", test_decode_top);
    t_run("known values: positions, learning-rate schedule", test_known_values);
    t_run("attention weights: distributions, causal, shifted, recomputed", test_attention);
    t_run("an inference model's shared layer activations: the training model's bits",
          test_inference_layer_sets);
    t_run("Adam with clipping lowers the loss", test_optim);
    t_run("losses on the device until the optimizer step reads them once", test_train_dev);
    t_run("a training model reserves its step's workspace at creation", test_reserve_step);
    be->destroy(be);
    return t_done();
}
