/* attention.c: the attention stream's writer (attention.h). */
#include "attention.h"

#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "output.h"
#include "spm.h"

struct tfm_attn_writer {
    struct tfm_writer *w;
    struct tfm_model *m;
    struct tfm_spm *spm;
    int all, N, H;
    float *buf;             /* the largest tensor of a sentence so far */
    size_t cap;             /* floats */
    char *text;             /* pieces */
    size_t tcap;
};

struct tfm_attn_writer *tfm_attn_open(struct tfm_output *out, struct tfm_model *m,
                                      const void *spm, size_t spm_size, int all,
                                      const char *producer, const char *model_path,
                                      struct tfm_error *err)
{
    const struct tfm_config *c = tfm_model_config(m);
    struct tfm_attn_writer *a = calloc(1, sizeof *a);
    if (!a) {
        if (out)
            tfm_output_abort(out);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    a->m = m;
    a->all = all;
    a->N = c->layers;
    a->H = c->heads;
    if (!(a->spm = tfm_spm_load(spm, spm_size, err))) {
        tfm_error_prefix(err, "the model's vocabulary");
        if (out)
            tfm_output_abort(out);
        free(a);
        return NULL;
    }
    struct tfm_header h;
    tfm_header_init(&h, TFM_KIND_ATTENTION);
    if (tfm_header_set_spm(&h, spm, spm_size, err) ||
        (producer && tfm_header_set(&h, "producer", producer, err)) ||
        tfm_header_set(&h, "model", model_path, err) ||
        tfm_header_setf(&h, err, "layers", "%d", a->N) ||
        tfm_header_setf(&h, err, "heads", "%d", a->H) ||
        tfm_header_set(&h, "attention", all ? "all" : "cross", err) ||
        !(a->w = tfm_writer_open_output(out, &h, 0, err))) {
        if (out)
            tfm_output_abort(out);      /* nothing left to do once the writer took it */
        tfm_header_free(&h);
        tfm_spm_free(a->spm);
        free(a);
        return NULL;
    }
    tfm_header_free(&h);
    return a;
}

/* The pieces of ids[0..n) appended to a->text at *len, each followed by a newline. */
static int pieces(struct tfm_attn_writer *a, const int32_t *ids, int n, size_t *len,
                  struct tfm_error *err)
{
    for (int i = 0; i < n; i++) {
        const char *p = tfm_spm_piece(a->spm, ids[i]);
        if (!p)
            return tfm_fail(err, "id %d: outside the vocabulary", ids[i]);
        size_t k = strlen(p);
        if (*len + k + 1 > a->tcap) {
            size_t nc = (*len + k + 1) * 2;
            char *t = realloc(a->text, nc);
            if (!t)
                return tfm_fail(err, "out of memory");
            a->text = t;
            a->tcap = nc;
        }
        for (size_t j = 0; j < k; j++)
            a->text[(*len)++] = (unsigned char)p[j] < 0x20 || p[j] == 0x7f ? '?' : p[j];
        a->text[(*len)++] = '\n';
    }
    return 0;
}

int tfm_attn_put(struct tfm_attn_writer *a, int64_t index, const int32_t *src, int S,
                 const int32_t *tgt, int T, struct tfm_error *err)
{
    size_t nc = (size_t)a->N * a->H * T * S, ne = 0, nd = 0;
    if (a->all) {
        ne = (size_t)a->N * a->H * S * S;
        nd = (size_t)a->N * a->H * T * T;
    }
    if (nc + ne + nd > a->cap) {
        float *b = realloc(a->buf, (nc + ne + nd) * sizeof *b);
        if (!b)
            return tfm_fail(err, "%s: out of memory for the attention of %d x %d tokens",
                            tfm_writer_name(a->w), S, T);
        a->buf = b;
        a->cap = nc + ne + nd;
    }
    float *cross = a->buf, *enc = a->all ? cross + nc : NULL, *dec = a->all ? enc + ne : NULL;
    if (tfm_model_attention(a->m, S, T, src, tgt, cross, enc, dec, err))
        return tfm_error_prefix(err, "%s: sentence %lld", tfm_writer_name(a->w),
                                (long long)index + 1);
    size_t len = 0;
    if (pieces(a, src, S, &len, err) || pieces(a, tgt, T, &len, err))
        return tfm_error_prefix(err, "%s: sentence %lld", tfm_writer_name(a->w),
                                (long long)index + 1);
    int64_t one = 1, s = S, t = T, nlen = (int64_t)len;
    int64_t dc[4] = {a->N, a->H, T, S}, de[4] = {a->N, a->H, S, S}, dd[4] = {a->N, a->H, T, T};
    if (tfm_writer_put(a->w, "attn.index", TFM_I64, 1, &one, &index, err) ||
        tfm_writer_put(a->w, "attn.src", TFM_I32, 1, &s, src, err) ||
        tfm_writer_put(a->w, "attn.tgt", TFM_I32, 1, &t, tgt, err) ||
        tfm_writer_put(a->w, "attn.pieces", TFM_U8, 1, &nlen, a->text, err) ||
        tfm_writer_put(a->w, "attn.cross", TFM_F32, 4, dc, cross, err))
        return -1;
    if (a->all && (tfm_writer_put(a->w, "attn.enc", TFM_F32, 4, de, enc, err) ||
                   tfm_writer_put(a->w, "attn.dec", TFM_F32, 4, dd, dec, err)))
        return -1;
    return 0;
}

static void release(struct tfm_attn_writer *a)
{
    tfm_spm_free(a->spm);
    free(a->buf);
    free(a->text);
    free(a);
}

int tfm_attn_close(struct tfm_attn_writer *a, struct tfm_error *err)
{
    int rc = tfm_writer_close(a->w, err);
    release(a);
    return rc;
}

void tfm_attn_abort(struct tfm_attn_writer *a)
{
    if (!a)
        return;
    tfm_writer_abort(a->w);
    release(a);
}
