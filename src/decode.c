/* decode.c: tfm-decode's work (decode.h): models, sources, batches, search, output.
 *
 * Life of a run: load every checkpoint and build its model on one backend; read all
 * source sentences (a tokens stream, or a batch stream whose rows are un-padded); plan
 * batches longest first; per batch, create each member's incremental decoder sized for
 * exactly that batch, encode, search (beam.c) through the ensemble adapter below, and
 * append the hypotheses; finally write them in input order.
 */
#include "decode.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attention.h"
#include "backend.h"
#include "checkpoint.h"
#include "config.h"
#include "corpus.h"
#include "device.h"
#include "hypread.h"
#include "model.h"
#include "output.h"
#include "spm.h"
#include "stream.h"
#include "treecon.h"
#include "util.h"

void tfm_decode_defaults(struct tfm_decode_opts *o)
{
    memset(o, 0, sizeof *o);
    tfm_beam_defaults(&o->search);
    o->max_len_b = -1;
    o->tokens = TFM_DECODE_TOKENS;
    o->device = "auto";
}

/* ---- one model, one batch of sources --------------------------------------------------- */

static int one_step(void *ctx, int nrows, const int32_t *last, const int32_t *src, float *logp,
                    struct tfm_error *err)
{
    return tfm_decoder_step(ctx, nrows, last, src, logp, err);
}

static int one_step_top(void *ctx, int nrows, const int32_t *last, const int32_t *src, int k,
                        const int32_t *ban, int nban, int32_t also, float *top_lp,
                        int32_t *top_tok, float *also_lp, struct tfm_error *err)
{
    return tfm_decoder_step_top(ctx, nrows, last, src, k, ban, nban, also, top_lp, top_tok,
                                also_lp, err);
}

static int one_select(void *ctx, int nrows, const int32_t *keep, struct tfm_error *err)
{
    return tfm_decoder_select(ctx, nrows, keep, err);
}

int tfm_decode_sources(struct tfm_model *m, int B, int S, const int32_t *src,
                       const struct tfm_beam_opts *o, int max_len_b, struct tfm_hyps *out,
                       struct tfm_error *err)
{
    memset(out, 0, sizeof *out);
    const struct tfm_config *c = tfm_model_config(m);
    if (B < 1 || S < 1 || max_len_b < 0 || o->nbest != 1)
        return tfm_fail(err, "decode: %d sources of %d tokens, max_len_b %d, nbest %d", B, S,
                        max_len_b, o->nbest);
    int *max_len = malloc((size_t)B * sizeof *max_len);
    if (!max_len)
        return tfm_fail(err, "out of memory for %d sentences", B);
    int T = 1;
    for (int b = 0; b < B; b++) {
        int L = 0;                                  /* tokens before the padding, eos too */
        while (L < S && src[(size_t)b * S + L] != TFM_PAD)
            L++;
        int64_t lim = (int64_t)(L > 0 ? L - 1 : 0) + max_len_b;
        max_len[b] = (int)(lim < c->max_len - 1 ? lim : c->max_len - 1);
        T = max_len[b] + 1 > T ? max_len[b] + 1 : T;
    }
    int width = o->sample ? o->nbest : o->beam;
    struct tfm_decoder *d = tfm_decoder_create(m, B, S, B * width, T, err);
    int rc = -1;
    if (d && tfm_decoder_encode(d, B, S, src, err) == 0) {
        struct tfm_step_model sm = {d, c->vocab, one_step, one_select, one_step_top};
        rc = tfm_beam_search(&sm, B, max_len, NULL, o, out, err);
    }
    tfm_decoder_free(d);
    free(max_len);
    return rc;
}

/* ---- batching ---------------------------------------------------------------------- */

static const int32_t *g_len;    /* qsort context: lengths, for the order below */

static int by_len_desc(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    if (g_len[a] != g_len[b])
        return g_len[a] < g_len[b] ? 1 : -1;
    return (a > b) - (a < b);
}

int64_t tfm_decode_plan(int64_t n, const int32_t *len, const int32_t *steps, int width,
                        int64_t budget, int64_t *order, int64_t *first)
{
    if (n < 0 || width < 1 || budget < 1)
        return -1;
    for (int64_t i = 0; i < n; i++) {
        if (len[i] < 0 || steps[i] < 0)
            return -1;
        order[i] = i;
    }
    g_len = len;
    qsort(order, (size_t)n, sizeof *order, by_len_desc);
    int64_t nb = 0, i = 0;
    while (i < n) {
        first[nb++] = i;
        /* the leader is the longest source; steps need not follow lengths, so track both */
        int64_t L = 0, T = 0, k = 0;
        while (i < n) {
            int64_t l = len[order[i]] > L ? len[order[i]] : L;
            int64_t t = steps[order[i]] > T ? steps[order[i]] : T;
            int64_t per = l > width * t ? l : width * t;
            if (k > 0 && (k + 1) * per > budget)
                break;
            L = l;
            T = t;
            k++;
            i++;
        }
    }
    first[nb] = n;
    return nb;
}

/* ---- the ensemble as a step model ------------------------------------------------- */

struct member {
    const char *path;
    struct tfm_config cfg;
    struct tfm_model *model;
    struct tfm_decoder *dec;
};

struct ensemble {
    int n, vocab;
    struct member *m;
    float *tmp;             /* (rows, vocab) for members after the first */
};

static int ens_step(void *ctx, int nrows, const int32_t *last, const int32_t *src, float *logp,
                    struct tfm_error *err)
{
    struct ensemble *e = ctx;
    if (tfm_decoder_step(e->m[0].dec, nrows, last, src, logp, err))
        return tfm_error_prefix(err, "%s", e->m[0].path);
    if (e->n == 1)
        return 0;
    size_t cnt = (size_t)nrows * (size_t)e->vocab;
    for (int i = 1; i < e->n; i++) {
        if (tfm_decoder_step(e->m[i].dec, nrows, last, src, e->tmp, err))
            return tfm_error_prefix(err, "%s", e->m[i].path);
        for (size_t j = 0; j < cnt; j++)
            logp[j] += e->tmp[j];
    }
    float inv = 1.0f / (float)e->n;
    for (size_t j = 0; j < cnt; j++)
        logp[j] *= inv;
    return 0;
}

/* One model: the search's candidates straight from the model (ensembles average whole
 * distributions, so they take ens_step). */
static int ens_step_top(void *ctx, int nrows, const int32_t *last, const int32_t *src, int k,
                        const int32_t *ban, int nban, int32_t also, float *top_lp,
                        int32_t *top_tok, float *also_lp, struct tfm_error *err)
{
    struct ensemble *e = ctx;
    if (tfm_decoder_step_top(e->m[0].dec, nrows, last, src, k, ban, nban, also, top_lp, top_tok,
                             also_lp, err))
        return tfm_error_prefix(err, "%s", e->m[0].path);
    return 0;
}

static int ens_select(void *ctx, int nrows, const int32_t *keep, struct tfm_error *err)
{
    struct ensemble *e = ctx;
    for (int i = 0; i < e->n; i++)
        if (tfm_decoder_select(e->m[i].dec, nrows, keep, err))
            return tfm_error_prefix(err, "%s", e->m[i].path);
    return 0;
}

/* ---- loading ------------------------------------------------------------------------ */

/* The model of checkpoint ck (read from path) into mb on backend be; hdr (when not NULL)
 * gets its header.  The checkpoint must hold exactly the model its config describes
 * (tfm_checkpoint_check), looked at before the model's memory is allocated.  On the CPU
 * the model reads its weights in ck's memory map (tfm_checkpoint_share_model): ck lives
 * until the model is freed. */
static int member_load(struct member *mb, const char *path, const struct tfm_checkpoint *ck,
                       struct tfm_backend *be, struct tfm_header *hdr, struct tfm_error *err)
{
    mb->path = path;
    if (tfm_checkpoint_config(ck, &mb->cfg, err))
        return -1;
    if (!ck->header.spm)
        return tfm_fail(err, "%s: the checkpoint has no vocabulary", path);
    if (tfm_checkpoint_check(ck, &mb->cfg, 0, err))
        return -1;
    /* the activation arena serves the encoder only: groups of up to 1024 source tokens */
    mb->model = tfm_model_create_inference(&mb->cfg, be,
                                           mb->cfg.max_len > 1024 ? mb->cfg.max_len : 1024, err);
    if (!mb->model)
        return tfm_error_prefix(err, "%s", path);
    if (tfm_checkpoint_share_model(ck, mb->model, err) < 0)
        return -1;
    if (hdr && tfm_header_copy(hdr, &ck->header, err))
        return -1;
    return 0;
}

/* The checkpoints paths[0..n) into cks (mapped, without Adam moments), the first one's
 * config into first, and the precision the device is checked for: bf16 when one asks for
 * it, else auto when one does, else fp32.  0, or -1 with err (the checkpoints loaded are
 * left in cks to free). */
static int checkpoints_load(const char *const *paths, int n, struct tfm_checkpoint **cks,
                            struct tfm_config *first, int *precision, struct tfm_error *err)
{
    *precision = TFM_PRECISION_FP32;
    for (int i = 0; i < n; i++) {
        struct tfm_config c;
        cks[i] = tfm_checkpoint_load(paths[i], TFM_CKPT_SKIP_OPTIMIZER | TFM_CKPT_MAPPED, err);
        if (!cks[i] || tfm_checkpoint_config(cks[i], &c, err))
            return -1;
        if (i == 0)
            *first = c;
        if (c.precision == TFM_PRECISION_BF16 ||
            (c.precision == TFM_PRECISION_AUTO && *precision == TFM_PRECISION_FP32))
            *precision = c.precision;
    }
    return 0;
}

/* ---- sources -------------------------------------------------------------------------- */

/* Rows of a batch stream become sentences (tokens before the padding); their numbers
 * come from batch.index.  Sentences are appended to c, numbers to *index.  Of
 * concatenated batch streams, each one's numbers go on after the stream before it: its
 * sentences= count, or its largest number. */
static int read_batches(struct tfm_reader *r, struct tfm_corpus *c, int64_t **index,
                        int64_t *cap, int vocab, struct tfm_error *err)
{
    struct tfm_record rec;
    int k;
    int64_t B = -1;     /* rows announced by the last batch.index, -1: none pending */
    uint64_t member = 0;
    int64_t base = 0, next = 0, count = tfm_header_int(tfm_reader_header(r), "sentences");
    while ((k = tfm_reader_next(r, &rec, err)) == 1) {
        if (rec.member != member) {
            if (B >= 0)
                return tfm_reader_fail(r, &rec, err, "the stream before this one ends where "
                                       "'batch.src' was expected");
            if (count > INT64_MAX - base)
                return tfm_reader_fail(r, &rec, err, "too many sentences");
            if (count >= 0 && base + count > next)
                next = base + count;
            base = next;
            count = tfm_header_int(tfm_reader_member_header(r), "sentences");
            member = rec.member;
        }
        if (strcmp(rec.name, "batch.index") == 0) {
            if (rec.dtype != TFM_I64 || rec.rank != 1)
                return tfm_reader_fail(r, &rec, err, "batch.index must be i64 [B]");
            if (B >= 0)
                return tfm_reader_fail(r, &rec, err, "batch.src expected");
            B = rec.dims[0];
            if (c->n + B > *cap) {
                int64_t nc = (c->n + B) * 2;
                int64_t *p = realloc(*index, (size_t)nc * sizeof *p);
                if (!p)
                    return tfm_fail(err, "out of memory");
                *index = p;
                *cap = nc;
            }
            const int64_t *ix = rec.data;
            for (int64_t i = 0; i < B; i++) {
                if (ix[i] < 0)
                    return tfm_reader_fail(r, &rec, err, "negative sentence number");
                if (ix[i] >= INT64_MAX - base)
                    return tfm_reader_fail(r, &rec, err, "sentence number too large");
                (*index)[c->n + i] = base + ix[i];
                if (base + ix[i] >= next)
                    next = base + ix[i] + 1;
            }
        } else if (strcmp(rec.name, "batch.src") == 0) {
            if (B < 0)
                return tfm_reader_fail(r, &rec, err, "batch.index expected");
            if (rec.dtype != TFM_I32 || rec.rank != 2 || rec.dims[0] != B)
                return tfm_reader_fail(r, &rec, err, "batch.src must be i32 [%lld,S]",
                                       (long long)B);
            const int32_t *ids = rec.data;
            int64_t S = rec.dims[1];
            for (int64_t b = 0; b < B; b++) {
                const int32_t *row = ids + b * S;
                int64_t len = 0;
                while (len < S && row[len] != TFM_PAD_ID)
                    len++;
                for (int64_t j = 0; j < S; j++)
                    if (row[j] < 0 || row[j] >= vocab || (j > len && row[j] != TFM_PAD_ID))
                        return tfm_reader_fail(r, &rec, err, "row %lld: id %d at %lld: %s",
                                               (long long)b, row[j], (long long)j,
                                               row[j] < 0 || row[j] >= vocab
                                                   ? "outside the vocabulary"
                                                   : "after the padding");
                if (tfm_corpus_push(c, row, len, err))
                    return -1;
            }
            B = -1;
        } else if (strcmp(rec.name, "batch.tgt") == 0) {
            continue;   /* references are not needed to decode */
        } else {
            return tfm_reader_fail(r, &rec, err, "not a batch record");
        }
    }
    if (k < 0)
        return -1;
    if (B >= 0)
        return tfm_fail(err, "%s: batch.index without batch.src at the end", tfm_reader_name(r));
    return 0;
}

/* ---- output ------------------------------------------------------------------------- */

struct hypset {                 /* hypotheses in decoding order */
    struct tfm_corpus c;        /* ids, offsets, index = input position, score */
    int64_t cap;
};

static int hypset_add(struct hypset *hs, const struct tfm_hyps *h, const int64_t *pos,
                      struct tfm_error *err)
{
    for (int64_t i = 0; i < h->n; i++) {
        if (hs->c.n + 1 > hs->cap) {
            int64_t nc = hs->cap ? hs->cap * 2 : 1024;
            int64_t *ix = realloc(hs->c.index, (size_t)nc * sizeof *ix);
            if (ix)
                hs->c.index = ix;
            float *sc = realloc(hs->c.score, (size_t)nc * sizeof *sc);
            if (sc)
                hs->c.score = sc;
            if (!ix || !sc)
                return tfm_fail(err, "out of memory for hypotheses");
            hs->cap = nc;
        }
        /* tfm_corpus_push grows index/score only when it owns them: keep ours in step */
        int64_t *keep_ix = hs->c.index;
        float *keep_sc = hs->c.score;
        hs->c.index = NULL;
        hs->c.score = NULL;
        int rc = tfm_corpus_push(&hs->c, h->ids + h->offsets[i], h->offsets[i + 1] - h->offsets[i],
                                 err);
        hs->c.index = keep_ix;
        hs->c.score = keep_sc;
        if (rc)
            return -1;
        hs->c.index[hs->c.n - 1] = pos[h->sent[i]];
        hs->c.score[hs->c.n - 1] = h->score[i];
    }
    return 0;
}

/* The hypotheses in input order (stable: n-best order kept), with hyp.index set to
 * number[position]. */
static int hypset_ordered(const struct hypset *hs, const int64_t *number, int64_t nsent,
                          struct tfm_corpus *out, struct tfm_error *err)
{
    int64_t n = hs->c.n, m = n ? hs->c.offsets[n] : 0;
    int64_t *count = calloc((size_t)nsent + 1, sizeof *count);
    int64_t *slot = malloc((size_t)(n ? n : 1) * sizeof *slot);
    tfm_corpus_init(out);
    out->offsets = malloc((size_t)(n + 1) * sizeof *out->offsets);
    out->ids = malloc((size_t)(m ? m : 1) * sizeof *out->ids);
    out->index = malloc((size_t)(n ? n : 1) * sizeof *out->index);
    out->score = malloc((size_t)(n ? n : 1) * sizeof *out->score);
    int rc = -1;
    if (!count || !slot || !out->offsets || !out->ids || !out->index || !out->score) {
        tfm_fail(err, "out of memory for %lld hypotheses", (long long)n);
        goto done;
    }
    out->n = n;
    out->cap_n = n + 1;
    out->cap_ids = m ? m : 1;
    /* counting sort by input position */
    for (int64_t i = 0; i < n; i++)
        count[hs->c.index[i] + 1]++;
    for (int64_t p = 0; p < nsent; p++)
        count[p + 1] += count[p];
    for (int64_t i = 0; i < n; i++)
        slot[count[hs->c.index[i]]++] = i;
    out->offsets[0] = 0;
    for (int64_t j = 0; j < n; j++) {
        int64_t i = slot[j], len = tfm_corpus_len(&hs->c, i);
        memcpy(out->ids + out->offsets[j], tfm_corpus_sent(&hs->c, i), (size_t)len * sizeof(int32_t));
        out->offsets[j + 1] = out->offsets[j] + len;
        out->index[j] = number[hs->c.index[i]];
        out->score[j] = hs->c.score[i];
    }
    rc = 0;
done:
    free(count);
    free(slot);
    if (rc)
        tfm_corpus_free(out);
    return rc;
}

/* Text lines, gathered in a buffer and written a chunk at a time to stdout or to an
 * output (output.h: a file whole or not at all, a device or FIFO in place). */
struct text_out {
    struct tfm_output *out; /* NULL: stdout */
    int nbest_format;       /* "INDEX ||| TEXT ||| SCORE" lines */
    const char *name;
    char *buf;
    size_t used, cap;
};

#define TEXT_CHUNK (1 << 16)

static int text_flush(struct text_out *to, struct tfm_error *err)
{
    if (to->used == 0)
        return 0;
    size_t n = to->used;
    to->used = 0;
    if (to->out)
        return tfm_output_write(to->out, to->buf, n, err);
    if (fwrite(to->buf, 1, n, stdout) != n)
        return tfm_fail(err, "<stdout>: write error: %s", strerror(errno));
    return 0;
}

static int put_text(void *ctx, const struct tfm_hyp *h, struct tfm_error *err)
{
    struct text_out *to = ctx;
    /* the line's length: the text, and the index and score around it */
    size_t need = h->len + 64;
    if (to->used + need > to->cap) {
        if (text_flush(to, err))
            return -1;
        if (need > to->cap) {
            size_t cap = need > TEXT_CHUNK ? need : TEXT_CHUNK;
            char *b = realloc(to->buf, cap);
            if (!b)
                return tfm_fail(err, "out of memory");
            to->buf = b;
            to->cap = cap;
        }
    }
    char *p = to->buf + to->used;
    size_t room = to->cap - to->used;
    int k = to->nbest_format
                ? snprintf(p, room, "%lld ||| %s ||| %.6f\n", (long long)h->index, h->text,
                           h->score)
                : snprintf(p, room, "%s\n", h->text);
    if (k < 0 || (size_t)k >= room)
        return tfm_fail(err, "%s: hypothesis %lld: cannot format its line", to->name,
                        (long long)h->n);
    to->used += (size_t)k;
    return to->used >= TEXT_CHUNK ? text_flush(to, err) : 0;
}

/* The text of c into out (NULL: stdout, flushed), not committed. */
static int write_text(struct tfm_output *out, const struct tfm_corpus *c, const void *spm_proto,
                      size_t spm_size, int nbest_format, struct tfm_error *err)
{
    struct tfm_spm *spm = tfm_spm_load(spm_proto, spm_size, err);
    if (!spm)
        return tfm_error_prefix(err, "the model's vocabulary");
    struct text_out to = {.out = out, .nbest_format = nbest_format,
                          .name = out ? out->path : "<stdout>"};
    int rc = tfm_hypread_corpus(c, spm, 0, NULL, put_text, &to, err);
    if (rc == 0)
        rc = text_flush(&to, err);
    tfm_spm_free(spm);
    free(to.buf);
    if (!out && fflush(stdout) && rc == 0)
        rc = tfm_fail(err, "<stdout>: write error: %s", strerror(errno));
    return rc;
}

/* The hypothesis stream of c on out (NULL: stdout), which it takes over: the writer, its
 * records written but not closed, or NULL with err. */
static struct tfm_writer *write_stream(struct tfm_output *out, const struct tfm_corpus *c,
                                       const struct tfm_header *model_hdr,
                                       const char *const *paths, int nmodels,
                                       const struct tfm_decode_opts *o, int max_len_b,
                                       struct tfm_error *err)
{
    struct tfm_header h;
    tfm_header_init(&h, TFM_KIND_HYPOTHESES);
    struct tfm_writer *w = NULL;
    const struct tfm_beam_opts *s = &o->search;
    if (tfm_header_set_spm(&h, model_hdr->spm, model_hdr->spm_size, err) ||
        (o->producer && tfm_header_set(&h, "producer", o->producer, err)) ||
        tfm_header_set(&h, "model", paths[0], err) ||
        tfm_header_setf(&h, err, "models", "%d", nmodels) ||
        tfm_header_setf(&h, err, "search", "%s", s->sample ? "sample" : s->beam == 1 ? "greedy" : "beam") ||
        tfm_header_setf(&h, err, "beam", "%d", s->beam) ||
        tfm_header_setf(&h, err, "alpha", "%.9g", s->alpha) ||
        tfm_header_setf(&h, err, "max_len_b", "%d", max_len_b) ||
        tfm_header_setf(&h, err, "min_len", "%d", s->min_len) ||
        tfm_header_setf(&h, err, "nbest", "%d", s->nbest))
        goto done;
    if (s->sample && (tfm_header_setf(&h, err, "topk", "%d", s->topk) ||
                      tfm_header_setf(&h, err, "topp", "%.9g", s->topp) ||
                      tfm_header_setf(&h, err, "temperature", "%.9g", s->temperature) ||
                      tfm_header_setf(&h, err, "seed", "%llu", (unsigned long long)s->seed)))
        goto done;
    w = tfm_writer_open_output(out, &h, 0, err);
    if (w && tfm_corpus_write(w, c, err)) {
        tfm_writer_abort(w);
        w = NULL;
    }
done:
    if (out)
        tfm_output_abort(out);      /* nothing left to do once the writer took it */
    tfm_header_free(&h);
    return w;
}

/* The attention stream of the best hypothesis of every source (out: the hypotheses in
 * input order, best first), under the first model, in input order, on file (NULL:
 * stdout), which it takes over: the writer, its sentences written but not closed, or
 * NULL with err. */
static struct tfm_attn_writer *write_attention(struct tfm_output *file,
                                               const struct tfm_corpus *src,
                                               const int64_t *number,
                                               const struct tfm_corpus *out, struct member *mb,
                                               const struct tfm_header *hdr,
                                               const struct tfm_decode_opts *o,
                                               struct tfm_error *err)
{
    struct tfm_attn_writer *a = tfm_attn_open(file, mb->model, hdr->spm, hdr->spm_size,
                                              o->attention_all, o->producer, mb->path, err);
    if (!a)
        return NULL;
    int32_t *tgt = malloc(((size_t)mb->cfg.max_len + 1) * sizeof *tgt);
    if (!tgt) {
        tfm_attn_abort(a);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    int64_t p = 0;      /* the source of out's entry j: entries follow the sources' order */
    for (int64_t j = 0; j < out->n; j++) {
        if (j > 0 && out->index[j] == out->index[j - 1])
            continue;                               /* n-best: the best only */
        while (p < src->n && number[p] != out->index[j])
            p++;
        int64_t T = tfm_corpus_len(out, j) + 1;
        if (p == src->n || T > mb->cfg.max_len) {
            free(tgt);
            tfm_attn_abort(a);
            tfm_fail(err, "internal error: hypothesis %lld without its source", (long long)j);
            return NULL;
        }
        memcpy(tgt, tfm_corpus_sent(out, j), (size_t)(T - 1) * sizeof *tgt);
        tgt[T - 1] = TFM_EOS_ID;
        if (tfm_attn_put(a, out->index[j], tfm_corpus_sent(src, p), (int)tfm_corpus_len(src, p),
                         tgt, (int)T, err)) {
            free(tgt);
            tfm_attn_abort(a);      /* its errors name the file */
            return NULL;
        }
        p++;
    }
    free(tgt);
    return a;
}

/* The outputs of a run.  Paths are opened once the input is read, before decoding, so that
 * one that cannot be written fails before the work, not after it (a FIFO does not wait
 * there for its reader: output.h).  The data go to the files' temporaries first, then to
 * what cannot be taken back (standard output, a FIFO, a device), the attention before
 * the hypotheses, each of those finished as it is written so that a reader of one FIFO
 * and then the other gets both; the files are committed at the very end, the hypotheses
 * before the attention: a run that fails leaves neither file, where the attention had
 * been written whole before the hypotheses failed. */
struct outputs {
    struct tfm_output hyp, attn;    /* open when written to a path (not "-") */
    int hyp_file, attn_file;
    struct tfm_writer *hw;          /* the hypothesis stream, being written */
    struct tfm_attn_writer *aw;     /* the attention stream, being written */
};

static int outputs_open(struct outputs *so, const char *out_path, const char *attention,
                        struct tfm_error *err)
{
    so->hyp.fd = so->attn.fd = -1;
    so->hyp_file = out_path && strcmp(out_path, "-") != 0;
    so->attn_file = attention && strcmp(attention, "-") != 0;
    if (so->hyp_file && tfm_output_open(&so->hyp, out_path, err))
        return -1;
    if (so->attn_file && tfm_output_open(&so->attn, attention, err))
        return -1;
    return 0;
}

static void outputs_abort(struct outputs *so)
{
    tfm_writer_abort(so->hw);
    tfm_attn_abort(so->aw);
    so->hw = NULL;
    so->aw = NULL;
    tfm_output_abort(&so->hyp);     /* nothing when a writer took it or it was committed */
    tfm_output_abort(&so->attn);
}

/* ---- the run -------------------------------------------------------------------------- */


struct run {
    struct tfm_backend *be;
    struct ensemble ens;
    struct tfm_header hdr;      /* of the first model: its vocabulary */
    int have_hdr;
    struct tfm_corpus src;      /* sources, eos-terminated, cut to max_len */
    int64_t *number;            /* [n] hyp.index of each source */
    int64_t ncap;
    int32_t *len, *steps;       /* [n] tokens with eos; decoder steps at most */
    int64_t *order, *first;
    struct hypset hs;
    struct tfm_corpus out;
    struct tfm_treecon *tree;   /* the tree constraint (--tree), or NULL */
};

static void run_free(struct run *R)
{
    for (int i = 0; i < R->ens.n; i++) {
        tfm_decoder_free(R->ens.m[i].dec);
        tfm_model_free(R->ens.m[i].model);
    }
    free(R->ens.m);
    free(R->ens.tmp);
    if (R->be)
        R->be->destroy(R->be);
    if (R->have_hdr)
        tfm_header_free(&R->hdr);
    tfm_corpus_free(&R->src);
    free(R->number);
    free(R->len);
    free(R->steps);
    free(R->order);
    free(R->first);
    tfm_corpus_free(&R->hs.c);
    tfm_corpus_free(&R->out);
    tfm_treecon_free(R->tree);
}

static const int64_t *g_num;    /* qsort context: sentence numbers */

static int by_number(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    if (g_num[a] != g_num[b])
        return g_num[a] < g_num[b] ? -1 : 1;
    return (a > b) - (a < b);
}

/* Read the sources of in_path, check the vocabulary, make them eos-terminated and cut to
 * max_src tokens. */
static int read_sources(struct run *R, const char *in_path, const char *model_path, int vocab,
                        int max_src, struct tfm_decode_opts *o, struct tfm_error *err)
{
    struct tfm_reader *r = tfm_reader_open(in_path, err);
    if (!r)
        return -1;
    const struct tfm_header *h = tfm_reader_header(r);
    const char *name = tfm_reader_name(r);
    struct tfm_corpus raw;
    tfm_corpus_init(&raw);
    int rc = -1;
    uint32_t want = tfm_header_vocab_id(&R->hdr), have = tfm_header_vocab_id(h);
    int tokens = strcmp(h->kind, TFM_KIND_TOKENS) == 0;
    if (!tokens && strcmp(h->kind, TFM_KIND_BATCHES) != 0) {
        tfm_fail(err, "%s: a '%s' stream, expected tokens or batches", name, h->kind);
        goto done;
    }
    if (have != want) {
        if (!h->spm)
            tfm_fail(err, "%s: the stream has no vocabulary; %s has vocabulary %08x", name,
                     model_path, (unsigned)want);
        else
            tfm_fail(err, "%s: vocabulary %08x differs from the model's (%s: %08x)", name,
                     (unsigned)have, model_path, (unsigned)want);
        goto done;
    }
    if (tokens) {
        if (tfm_corpus_read(r, &raw, vocab, err))
            goto done;
        /* the model takes a pad for the end of the sentence: refuse one inside it here,
         * where the input's line can be named */
        for (int64_t i = 0; i < raw.n; i++) {
            const int32_t *s = tfm_corpus_sent(&raw, i);
            for (int64_t j = 0; j < tfm_corpus_len(&raw, i); j++)
                if (s[j] == TFM_PAD_ID) {
                    tfm_fail(err, "%s: line %lld: pad id %d inside a sentence (at token %lld)",
                             name, (long long)i + 1, TFM_PAD_ID, (long long)j + 1);
                    goto done;
                }
        }
        R->ncap = raw.n ? raw.n : 1;
        R->number = malloc((size_t)R->ncap * sizeof *R->number);
        if (!R->number) {
            tfm_fail(err, "out of memory");
            goto done;
        }
        for (int64_t i = 0; i < raw.n; i++)
            R->number[i] = i;
    } else if (read_batches(r, &raw, &R->number, &R->ncap, vocab, err)) {
        goto done;
    }
    /* input order: a batch stream's sentences by their numbers (stable) */
    int64_t *perm = malloc((size_t)(raw.n ? raw.n : 1) * sizeof *perm);
    int64_t *num = malloc((size_t)(raw.n ? raw.n : 1) * sizeof *num);
    int32_t *buf = malloc(((size_t)max_src + 1) * sizeof *buf);
    if (!perm || !num || !buf) {
        free(perm);
        free(num);
        free(buf);
        tfm_fail(err, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < raw.n; i++)
        perm[i] = i;
    g_num = R->number;
    qsort(perm, (size_t)raw.n, sizeof *perm, by_number);
    for (int64_t i = 0; i < raw.n; i++)
        num[i] = R->number[perm[i]];
    free(R->number);
    R->number = num;
    for (int64_t i = 0; i < raw.n; i++) {
        int64_t len = tfm_corpus_len(&raw, perm[i]);
        const int32_t *s = tfm_corpus_sent(&raw, perm[i]);
        if (len > 0 && s[len - 1] == TFM_EOS_ID)
            len--;
        if (len + 1 > max_src) {
            len = max_src - 1;
            o->stats.truncated++;
        }
        memcpy(buf, s, (size_t)len * sizeof *buf);
        buf[len] = TFM_EOS_ID;
        if (tfm_corpus_push(&R->src, buf, len + 1, err)) {
            free(buf);
            free(perm);
            goto done;
        }
    }
    free(buf);
    free(perm);
    rc = 0;
done:
    if (rc == 0 && R->src.n == 0 && tfm_corpus_push(&R->src, NULL, 0, err) == 0)
        R->src.n = 0;   /* allocates offsets[0] for an empty corpus */
    tfm_corpus_free(&raw);
    tfm_reader_close(r);
    return rc;
}

/* Decode the k sources ids[0..k) as one batch. */
static int decode_batch(struct run *R, const int64_t *ids, int64_t k, const struct tfm_decode_opts *o,
                        int width, struct tfm_error *err)
{
    int S = 0, T = 0;
    for (int64_t j = 0; j < k; j++) {
        if (R->len[ids[j]] > S)
            S = R->len[ids[j]];
        if (R->steps[ids[j]] > T)
            T = R->steps[ids[j]];
    }
    int B = (int)k;
    int32_t *src = calloc((size_t)B * (size_t)S, sizeof *src);
    int *max_len = malloc((size_t)B * sizeof *max_len);
    int64_t *pos = malloc((size_t)B * sizeof *pos);
    int64_t *num = malloc((size_t)B * sizeof *num);
    struct tfm_hyps h = {0};
    int rc = -1;
    if (!src || !max_len || !pos || !num) {
        tfm_fail(err, "out of memory for a batch of %d sentences", B);
        goto done;
    }
    for (int b = 0; b < B; b++) {
        int64_t i = ids[b];
        memcpy(src + (size_t)b * S, tfm_corpus_sent(&R->src, i), (size_t)R->len[i] * sizeof *src);
        max_len[b] = R->steps[i] - 1;
        pos[b] = i;
    }
    if (R->ens.n > 1) {            /* the other members' log-probs, (rows, vocab) */
        float *t = realloc(R->ens.tmp, (size_t)B * width * (size_t)R->ens.vocab * sizeof *t);
        if (!t) {
            tfm_fail(err, "out of memory for a batch of %d sentences", B);
            goto done;
        }
        R->ens.tmp = t;
    }
    for (int i = 0; i < R->ens.n; i++) {        /* one decoder per model, reshaped */
        struct member *mb = &R->ens.m[i];
        int bad = mb->dec ? tfm_decoder_reshape(mb->dec, B, S, B * width, T, err)
                          : !(mb->dec = tfm_decoder_create(mb->model, B, S, B * width, T, err));
        if (bad || tfm_decoder_encode(mb->dec, B, S, src, err)) {
            tfm_error_prefix(err, "%s", mb->path);
            goto done;
        }
    }
    /* the sampler's draws are keyed by the input sentence number, not the batch */
    for (int b = 0; b < B; b++)
        num[b] = R->number[ids[b]];
    struct tfm_step_model sm = {&R->ens, R->ens.vocab, ens_step, ens_select,
                                R->ens.n == 1 ? ens_step_top : NULL};
    if (R->tree && tfm_treecon_begin(R->tree, &sm, B, S, src, max_len, &sm, err))
        goto done;
    if (tfm_beam_search(&sm, B, max_len, num, &o->search, &h, err) ||
        hypset_add(&R->hs, &h, pos, err))
        goto done;
    rc = 0;
done:
    tfm_hyps_free(&h);
    free(src);
    free(max_len);
    free(pos);
    free(num);
    return rc;
}

/* --nbest against a beam from the model's config (bin/tfm-decode.c checks a --beam given):
 * the user's to mend, so o->usage_error is set. */
static int nbest_check(struct tfm_decode_opts *o, const char *path, const struct tfm_config *c,
                       struct tfm_error *err)
{
    if (o->search.sample || o->beam_given || o->search.nbest <= c->beam)
        return 0;
    o->usage_error = 1;
    return tfm_fail(err, "--nbest %d exceeds the beam %d of %s's config (beam = %d): give "
                    "--beam %d or more", o->search.nbest, c->beam, path, c->beam,
                    o->search.nbest);
}

/* The hypotheses (text, or the stream into so->hw) on out (NULL: stdout), finished when
 * finish (the stream closed, the text committed), else left for the commit. */
static int outputs_hyps(struct outputs *so, struct tfm_output *out, int finish,
                        const struct run *R, const char *const *paths, int n,
                        const struct tfm_decode_opts *o, int max_len_b, struct tfm_error *err)
{
    if (o->text) {
        /* several hypotheses a sentence, searched or sampled, need their numbers; one
         * each is a plain line, as a reference has it (tfm-score, tfm-score --restore) */
        if (write_text(out, &R->out, R->hdr.spm, R->hdr.spm_size, o->search.nbest > 1, err))
            return -1;
        return finish && out ? tfm_output_commit(out, err) : 0;
    }
    so->hw = write_stream(out, &R->out, &R->hdr, paths, n, o, max_len_b, err);
    if (!so->hw)
        return -1;
    if (!finish)
        return 0;
    int rc = tfm_writer_close(so->hw, err);
    so->hw = NULL;
    return rc;
}

int tfm_decode_run(const char *const *paths, int n, const char *in_path, const char *out_path,
                   struct tfm_decode_opts *o, struct tfm_error *err)
{
    if (n < 1 || n > TFM_DECODE_MAX_MODELS)
        return tfm_fail(err, "%d models: between 1 and %d expected", n, TFM_DECODE_MAX_MODELS);
    struct run R;
    memset(&R, 0, sizeof R);
    struct outputs so = {.hyp = {.fd = -1}, .attn = {.fd = -1}};
    int rc = -1;
    int precision;
    /* the checkpoints first: the device is checked for the precision they compute at */
    struct tfm_checkpoint *cks[TFM_DECODE_MAX_MODELS] = {NULL};
    struct tfm_config cfg;
    struct tfm_gpus gpu;
    if (checkpoints_load(paths, n, cks, &cfg, &precision, err) ||
        nbest_check(o, paths[0], &cfg, err) ||
        tfm_device_open_gpus(o->device ? o->device : "auto", precision, o->threads, 0, 1,
                             &gpu, err) ||
        !(R.be = gpu.count ? gpu.be[0] : tfm_backend_cpu(o->threads, err))) {
        for (int i = 0; i < n; i++)
            tfm_checkpoint_free(cks[i]);
        return -1;
    }
    snprintf(o->stats.device, sizeof o->stats.device, "%s", gpu.note);
    o->stats.fallback = gpu.fallback;
    R.ens.m = calloc((size_t)n, sizeof *R.ens.m);
    if (!R.ens.m) {
        tfm_fail(err, "out of memory");
        goto done;
    }
    /* models: the first gives the vocabulary and the defaults */
    int max_pos = 0;
    for (int i = 0; i < n; i++) {
        struct tfm_header *hp = i == 0 ? &R.hdr : NULL;
        struct tfm_header hi;
        if (i > 0)
            hp = &hi;
        int bad = member_load(&R.ens.m[i], paths[i], cks[i], R.be, hp, err);
        if (!bad && !tfm_model_shared(R.ens.m[i].model)) {    /* a copy: not needed again */
            tfm_checkpoint_free(cks[i]);
            cks[i] = NULL;
        }
        if (bad) {
            R.ens.n = i + (R.ens.m[i].model != NULL);
            goto done;
        }
        R.ens.n = i + 1;
        if (i == 0) {
            R.have_hdr = 1;
        } else {
            uint32_t a = tfm_header_vocab_id(&R.hdr), b = tfm_header_vocab_id(&hi);
            int va = R.ens.m[0].cfg.vocab, vb = R.ens.m[i].cfg.vocab;
            tfm_header_free(&hi);
            if (a != b || va != vb) {
                tfm_fail(err, "%s: vocabulary %08x differs from %s's (%08x)", paths[i],
                         (unsigned)b, paths[0], (unsigned)a);
                goto done;
            }
        }
        int ml = R.ens.m[i].cfg.max_len;
        max_pos = i == 0 || ml < max_pos ? ml : max_pos;
    }
    const struct tfm_config *cfg0 = &R.ens.m[0].cfg;
    R.ens.vocab = cfg0->vocab;
    if (!o->beam_given)
        o->search.beam = cfg0->beam;
    if (!o->alpha_given)
        o->search.alpha = cfg0->alpha;
    if (!o->min_len_given)
        o->search.min_len = cfg0->min_len;
    int max_len_b = o->max_len_b >= 0 ? o->max_len_b : cfg0->max_len_b;
    if (tfm_beam_check(&o->search, R.ens.vocab, err))
        goto done;
    if (max_pos < 2) {
        tfm_fail(err, "%s: max_len %d leaves no room to decode", paths[0], max_pos);
        goto done;
    }
    if (o->tree != TFM_TREE_OFF) {
        struct tfm_spm *spm = tfm_spm_load(R.hdr.spm, R.hdr.spm_size, err);
        const char **pieces = spm ? malloc((size_t)R.ens.vocab * sizeof *pieces) : NULL;
        if (spm && !pieces)
            tfm_fail(err, "out of memory");
        if (pieces) {
            for (int v = 0; v < R.ens.vocab; v++)
                pieces[v] = tfm_spm_piece(spm, v);
            R.tree = tfm_treecon_create(pieces, R.ens.vocab, o->tree, err);
        }
        free(pieces);
        tfm_spm_free(spm);
        if (!R.tree) {
            tfm_error_prefix(err, "%s", paths[0]);
            goto done;
        }
    }
    int width = o->search.sample ? o->search.nbest : o->search.beam;
    /* the outputs after the input (a process that writes the input, then reads the output
     * through FIFOs, gets both), before the decoding */
    if (read_sources(&R, in_path, paths[0], R.ens.vocab, max_pos, o, err) ||
        outputs_open(&so, out_path, o->attention, err))
        goto done;
    int64_t ns = R.src.n;
    o->stats.sentences = ns;
    R.len = malloc((size_t)(ns ? ns : 1) * sizeof *R.len);
    R.steps = malloc((size_t)(ns ? ns : 1) * sizeof *R.steps);
    R.order = malloc((size_t)(ns ? ns : 1) * sizeof *R.order);
    R.first = malloc((size_t)(ns + 1) * sizeof *R.first);
    if (!R.len || !R.steps || !R.order || !R.first) {
        tfm_fail(err, "out of memory for %lld sentences", (long long)ns);
        goto done;
    }
    for (int64_t i = 0; i < ns; i++) {
        int64_t L = tfm_corpus_len(&R.src, i);
        int64_t out = L - 1 + max_len_b;            /* tokens before eos */
        if (out > max_pos - 1)
            out = max_pos - 1;
        R.len[i] = (int32_t)L;
        R.steps[i] = (int32_t)out + 1;              /* bos .. forced eos */
    }
    int64_t nb = tfm_decode_plan(ns, R.len, R.steps, width, o->tokens > 0 ? o->tokens : TFM_DECODE_TOKENS,
                                 R.order, R.first);
    if (nb < 0) {
        tfm_fail(err, "bad batch plan");
        goto done;
    }
    double t0 = tfm_now();
    for (int64_t b = 0; b < nb; b++) {
        int64_t k = R.first[b + 1] - R.first[b];
        if (decode_batch(&R, R.order + R.first[b], k, o, width, err))
            goto done;
        o->stats.done += k;
        o->stats.batches++;
        o->stats.seconds = tfm_now() - t0;
        if (o->progress)
            o->progress(o->progress_ctx, &o->stats, 0);
    }
    if (hypset_ordered(&R.hs, R.number, ns, &R.out, err))
        goto done;
    o->stats.hyps = R.out.n;
    for (int64_t i = 0; i < R.out.n; i++)
        if (i == 0 || R.out.index[i] != R.out.index[i - 1])
            o->stats.tokens += tfm_corpus_len(&R.out, i);
    /* what can be taken back first, then what cannot, commits at the end (struct
     * outputs) */
    int attn_tmp = so.attn_file && so.attn.tmp, hyp_tmp = so.hyp_file && so.hyp.tmp;
    if (attn_tmp &&
        !(so.aw = write_attention(&so.attn, &R.src, R.number, &R.out, &R.ens.m[0], &R.hdr, o,
                                  err)))
        goto done;
    if (hyp_tmp && outputs_hyps(&so, &so.hyp, 0, &R, paths, n, o, max_len_b, err))
        goto done;
    if (o->attention && !attn_tmp) {
        so.aw = write_attention(so.attn_file ? &so.attn : NULL, &R.src, R.number, &R.out,
                                &R.ens.m[0], &R.hdr, o, err);
        int bad = !so.aw || tfm_attn_close(so.aw, err);
        so.aw = NULL;
        if (bad)
            goto done;
    }
    if (!hyp_tmp && outputs_hyps(&so, so.hyp_file ? &so.hyp : NULL, 1, &R, paths, n, o,
                                 max_len_b, err))
        goto done;
    if (so.hw) {
        int bad = tfm_writer_close(so.hw, err);
        so.hw = NULL;
        if (bad)
            goto done;
    } else if (hyp_tmp && tfm_output_commit(&so.hyp, err)) {
        goto done;
    }
    if (so.aw) {
        int bad = tfm_attn_close(so.aw, err);
        so.aw = NULL;
        if (bad)
            goto done;
    }
    o->stats.seconds = tfm_now() - t0;
    if (o->progress)
        o->progress(o->progress_ctx, &o->stats, 1);
    rc = 0;
done:
    outputs_abort(&so);
    run_free(&R);                   /* the models first: they read the checkpoints' maps */
    for (int i = 0; i < n; i++)
        tfm_checkpoint_free(cks[i]);
    return rc;
}
