/* dump_grads.c: writes what tests/ref/torch_ref.py checks: a tiny model's config,
 * parameters, one batch, and tfm's loss and gradient of every parameter on that batch,
 * as a tfm stream (kind checkpoint):
 *   "config" u8, "batch.src" i32 [B,S], "batch.tgt" i32 [B,T],
 *   "param.NAME" f32, "grad.NAME" f32 (gradient of the summed loss),
 *   "loss" f32 [3]: label-smoothed loss sum, nll sum, target tokens.
 * The parameters are moved away from their initial values (LN gains 1, biases 0) by a few
 * Adam steps on another batch first, so every term of the gradient is exercised.
 * Usage: dump_grads OUT.tfm [key=value]...    (dropout is forced to 0)
 * Built by tests/ref/check_torch from the sources; not part of the library.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "model.h"
#include "optim.h"
#include "stream.h"

static uint64_t rs = 2024;
static int rnd(int n)
{
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int)((rs >> 33) % (uint64_t)n);
}

/* A batch of B rows, lengths random in [2, L], ids in [4, V), eos last, pad 0. */
static void make_batch(int32_t *x, int B, int L, int V)
{
    for (int b = 0; b < B; b++) {
        int n = b == 0 ? L : 2 + rnd(L - 1);
        for (int t = 0; t < L; t++)
            x[b * L + t] = t < n - 1 ? 4 + rnd(V - 4) : t == n - 1 ? 3 : 0;
    }
}

int main(int argc, char **argv)
{
    struct tfm_error err;
    struct tfm_config c;
    if (argc < 2) {
        fprintf(stderr, "usage: dump_grads OUT.tfm [key=value]...\n");
        return 2;
    }
    tfm_config_defaults(&c);
    c.layers = 2;
    c.d_model = 16;
    c.heads = 4;
    c.d_ff = 32;
    c.vocab = 23;
    c.max_len = 16;
    c.tokens = 64;
    c.label_smoothing = 0.1;
    c.warmup = 5;
    c.lr_scale = 0.1;   /* moderate steps: parameters move, softmaxes do not saturate */
    c.seed = 3;
    for (int i = 2; i < argc; i++)
        if (tfm_config_set(&c, argv[i], "argument", &err) < 0) {
            fprintf(stderr, "dump_grads: %s\n", err.msg);
            return 2;
        }
    c.dropout = c.attn_dropout = c.relu_dropout = 0;
    struct tfm_backend *be = tfm_backend_cpu(1, &err);
    struct tfm_model *m = be ? tfm_model_create(&c, be, 0, &err) : NULL;
    if (!m) {
        fprintf(stderr, "dump_grads: %s\n", err.msg);
        return 1;
    }
    enum { B = 4, S = 7, T = 6 };
    int32_t src[B * S], tgt[B * T];
    struct tfm_loss l;
    struct tfm_optim_stats st;
    for (int s = 1; s <= 3; s++) {
        make_batch(src, B, S, c.vocab);
        make_batch(tgt, B, T, c.vocab);
        if (tfm_model_train_batch(m, B, S, T, src, tgt, (uint64_t)s, &l, &err) < 0 ||
            tfm_optim_step(m, s, l.tokens, &st, &err) < 0) {
            fprintf(stderr, "dump_grads: %s\n", err.msg);
            return 1;
        }
    }
    make_batch(src, B, S, c.vocab);
    make_batch(tgt, B, T, c.vocab);
    if (tfm_model_train_batch(m, B, S, T, src, tgt, 99, &l, &err) < 0) {
        fprintf(stderr, "dump_grads: %s\n", err.msg);
        return 1;
    }
    int64_t n = tfm_model_count(m);
    float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g);
    tfm_model_download(m, TFM_PARAMS, p);
    tfm_model_download(m, TFM_GRADS, g);
    struct tfm_header h;
    tfm_header_init(&h, TFM_KIND_CHECKPOINT);
    tfm_header_set(&h, "producer", "dump_grads", &err);
    struct tfm_writer *w = tfm_writer_open(argv[1], &h, 0, &err);
    if (!w) {
        fprintf(stderr, "dump_grads: %s\n", err.msg);
        return 1;
    }
    char *text = tfm_config_format(&c);
    int64_t d[2] = {(int64_t)strlen(text), 0};
    int rc = tfm_writer_put(w, "config", TFM_U8, 1, d, text, &err);
    d[0] = B; d[1] = S;
    rc |= tfm_writer_put(w, "batch.src", TFM_I32, 2, d, src, &err);
    d[1] = T;
    rc |= tfm_writer_put(w, "batch.tgt", TFM_I32, 2, d, tgt, &err);
    for (int i = 0; i < tfm_model_nparams(m) && rc == 0; i++) {
        const struct tfm_param *q = tfm_model_param(m, i);
        char name[128];
        snprintf(name, sizeof name, "param.%s", q->name);
        rc |= tfm_writer_put(w, name, TFM_F32, q->rank, q->dims, p + q->offset, &err);
        snprintf(name, sizeof name, "grad.%s", q->name);
        rc |= tfm_writer_put(w, name, TFM_F32, q->rank, q->dims, g + q->offset, &err);
    }
    float lv[3] = {(float)l.loss, (float)l.nll, (float)l.tokens};
    d[0] = 3;
    rc |= tfm_writer_put(w, "loss", TFM_F32, 1, d, lv, &err);
    if (rc != 0 || tfm_writer_close(w, &err) < 0) {
        fprintf(stderr, "dump_grads: %s\n", err.msg);
        return 1;
    }
    free(text);
    free(p);
    free(g);
    tfm_header_free(&h);
    tfm_model_free(m);
    be->destroy(be);
    return 0;
}
