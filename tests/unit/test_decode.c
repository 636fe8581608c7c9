/* test_decode: the batch plan of tfm-decode (src/decode.c), and the search (beam.c) run on
 * a real Transformer's incremental decoder (model.h): every hypothesis' log-probability
 * must equal the teacher-forced log-probability of the same sequence. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "beam.h"
#include "check.h"
#include "config.h"
#include "decode.h"
#include "model.h"

static void test_plan(void)
{
    /* lengths and steps of 7 sentences; width 2 */
    int32_t len[7] = {5, 3, 8, 3, 1, 8, 2};
    int32_t steps[7] = {10, 6, 12, 20, 3, 12, 4};
    int64_t order[7], first[8];
    int64_t nb = tfm_decode_plan(7, len, steps, 2, 60, order, first);
    CHECK(nb > 1);
    /* longest first, ties in input order */
    int64_t want[7] = {2, 5, 0, 1, 3, 6, 4};
    for (int i = 0; i < 7; i++)
        CHECK_EQ_INT(order[i], want[i]);
    CHECK_EQ_INT(first[0], 0);
    CHECK_EQ_INT(first[nb], 7);
    for (int64_t b = 0; b < nb; b++) {
        int64_t k = first[b + 1] - first[b], L = 0, T = 0;
        CHECK(k >= 1);
        for (int64_t i = first[b]; i < first[b + 1]; i++) {
            L = len[order[i]] > L ? len[order[i]] : L;
            T = steps[order[i]] > T ? steps[order[i]] : T;
        }
        int64_t per = L > 2 * T ? L : 2 * T;
        CHECK(k == 1 || k * per <= 60);
    }
    /* 2 and 5 (cost 24 each) fit together; 3 needs 40 alone with 0 and 1? 3 * 40 > 60 */
    CHECK_EQ_INT(first[1], 2);
    /* a budget below one sentence still gives one sentence a batch */
    CHECK_EQ_INT(tfm_decode_plan(7, len, steps, 2, 1, order, first), 7);
    /* a huge budget: one batch */
    CHECK_EQ_INT(tfm_decode_plan(7, len, steps, 2, 1 << 30, order, first), 1);
    CHECK_EQ_INT(tfm_decode_plan(0, len, steps, 2, 10, order, first), 0);
    CHECK_EQ_INT(first[0], 0);
    CHECK_EQ_INT(tfm_decode_plan(7, len, steps, 0, 10, order, first), -1);
}

struct real {
    struct tfm_decoder *d;
};

static int real_step(void *ctx, int nrows, const int32_t *last, const int32_t *src, float *logp,
                     struct tfm_error *err)
{
    return tfm_decoder_step(((struct real *)ctx)->d, nrows, last, src, logp, err);
}

static int real_select(void *ctx, int nrows, const int32_t *keep, struct tfm_error *err)
{
    return tfm_decoder_select(((struct real *)ctx)->d, nrows, keep, err);
}

static void test_incremental_matches_teacher_forcing(void)
{
    struct tfm_error err;
    struct tfm_backend *be = tfm_backend_cpu(1, &err);
    CHECK(be != NULL);
    if (!be)
        return;
    struct tfm_config c;
    tfm_config_defaults(&c);
    c.layers = 2;
    c.d_model = 16;
    c.d_ff = 32;
    c.heads = 2;
    c.vocab = 12;
    c.max_len = 16;
    c.dropout = 0;
    c.seed = 3;
    struct tfm_model *m = tfm_model_create(&c, be, 64, &err);
    CHECK(m != NULL);
    if (!m) {
        be->destroy(be);
        return;
    }
    /* sharpen the random model so that hypotheses differ in length: scale the output
     * embedding (tied) up */
    int64_t n = tfm_model_count(m);
    float *p = malloc((size_t)n * sizeof *p);
    tfm_model_download(m, TFM_PARAMS, p);
    for (int64_t i = 0; i < n; i++)
        p[i] *= 3.0f;
    tfm_model_upload(m, TFM_PARAMS, p);
    free(p);
    enum { B = 3, S = 6, K = 3 };
    int32_t src[B * S] = {4, 5, 6, 7, 3, 0, 8, 3, 0, 0, 0, 0, 9, 10, 11, 4, 5, 3};
    int max_len[B] = {8, 5, 10};
    struct real r = {tfm_decoder_create(m, B, S, B * K, 11, &err)};
    CHECK(r.d != NULL);
    CHECK(r.d && tfm_decoder_encode(r.d, B, S, src, &err) == 0);
    struct tfm_step_model sm = {&r, c.vocab, real_step, real_select, NULL};
    struct tfm_beam_opts o;
    tfm_beam_defaults(&o);
    o.beam = K;
    o.nbest = K;
    o.alpha = 0.6;
    struct tfm_hyps h = {0};
    int rc = r.d ? tfm_beam_search(&sm, B, max_len, NULL, &o, &h, &err) : -1;
    CHECK(rc == 0);
    if (rc)
        printf("# %s\n", err.msg);
    CHECK_EQ_INT(h.n, B * K);
    int lengths_differ = 0;
    for (int64_t i = 0; i < h.n; i++) {
        int s = h.sent[i], len = (int)(h.offsets[i + 1] - h.offsets[i]);
        int32_t tgt[16];
        memcpy(tgt, h.ids + h.offsets[i], (size_t)len * sizeof *tgt);
        tgt[len] = 3;
        int T = len + 1;
        float *lp = malloc((size_t)T * c.vocab * sizeof *lp);
        CHECK(tfm_model_logprobs(m, 1, S, T, src + s * S, tgt, lp, &err) == 0);
        double sum = 0;
        for (int t = 0; t < T; t++)
            sum += lp[t * c.vocab + tgt[t]];
        CHECK_NEAR(h.logp[i], sum, 1e-4);
        CHECK_NEAR(h.score[i], sum / tfm_beam_lp(T, 0.6), 1e-4);
        CHECK(len <= max_len[s]);
        if (i > 0 && h.offsets[i] - h.offsets[i - 1] != len)
            lengths_differ = 1;
        free(lp);
    }
    CHECK(lengths_differ);
    tfm_hyps_free(&h);
    tfm_decoder_free(r.d);
    tfm_model_free(m);
    be->destroy(be);
}

int main(void)
{
    t_run("batch plan: longest first, within the budget", test_plan);
    t_run("search on the incremental decoder matches teacher forcing",
          test_incremental_matches_teacher_forcing);
    return t_done();
}
