/* batch.c: planning, writing and reading batch streams (see batch.h for the layout, the
 * order of sentences and batches, the sharding rule and the memory model).
 * Not here: option parsing and messages for people (bin/tfm-batch.c), the record layout
 * (stream.c). */
#include "batch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "spm.h"
#include "util.h"

void tfm_batch_defaults(struct tfm_batch_opts *o)
{
    memset(o, 0, sizeof *o);
    o->tokens = TFM_BATCH_TOKENS;
    o->max_len = TFM_BATCH_MAX_LEN;
    o->seed = 1;
}

void tfm_batch_plan_free(struct tfm_batch_plan *p)
{
    free(p->order);
    free(p->start);
    free(p->perm);
    p->order = p->start = p->perm = NULL;
}

static double pad_fraction(int64_t tokens, int64_t cells)
{
    return cells > 0 ? 1.0 - (double)tokens / (double)cells : 0.0;
}

double tfm_batch_pad_src(const struct tfm_batch_plan *p)
{
    return pad_fraction(p->src_tokens, p->src_cells);
}

double tfm_batch_pad_tgt(const struct tfm_batch_plan *p)
{
    return pad_fraction(p->tgt_tokens, p->tgt_cells);
}

/* ---- randomness: splitmix64 (util.h), the same numbers on every machine ------------- */

static void shuffle(int64_t *a, int64_t n, uint64_t *s)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)tfm_rng_below(s, (uint64_t)i + 1);
        int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* ---- planning ---------------------------------------------------------------------- */

static int64_t sent_len(const struct tfm_corpus *c, int eos, int64_t i)
{
    return c->offsets[i + 1] - c->offsets[i] + eos;
}

/* The corpora being batched.  key_len: sentence i's source length (KEY_SRC), target
 * length (KEY_TGT) or the longer of the two (KEY_MAX), eos included. */
struct sides {
    const struct tfm_corpus *src, *tgt;     /* tgt NULL: source only */
    int src_eos, tgt_eos;
};
enum { KEY_SRC, KEY_TGT, KEY_MAX };

static int64_t key_len(const struct sides *sd, int key, int64_t i)
{
    int64_t ls = key == KEY_TGT ? 0 : sent_len(sd->src, sd->src_eos, i);
    int64_t lt = key == KEY_SRC || !sd->tgt ? 0 : sent_len(sd->tgt, sd->tgt_eos, i);
    return ls > lt ? ls : lt;
}

/* Stable counting sort of order[0..n) by key (1..max), via tmp. */
static int sort_by(int64_t *order, int64_t *tmp, int64_t n, const struct sides *sd, int key,
                   int64_t max)
{
    int64_t *count = calloc((size_t)max + 2, sizeof *count);
    if (!count)
        return -1;
    for (int64_t j = 0; j < n; j++)
        count[key_len(sd, key, order[j]) + 1]++;
    for (int64_t l = 1; l <= max + 1; l++)
        count[l] += count[l - 1];
    for (int64_t j = 0; j < n; j++)
        tmp[count[key_len(sd, key, order[j])]++] = order[j];
    memcpy(order, tmp, (size_t)n * sizeof *order);
    free(count);
    return 0;
}

/* Rank of (ls, lt), 1 <= ls, lt, in the order (max(ls, lt), ls, lt): the (m-1)^2 pairs
 * with a longer side under m come first; then, for m, (1,m) .. (m-1,m), (m,1) .. (m,m). */
static int64_t pair_rank(int64_t ls, int64_t lt)
{
    int64_t m = ls > lt ? ls : lt, base = (m - 1) * (m - 1);
    return ls < m ? base + ls - 1 : base + m - 1 + lt - 1;
}

/* Longest side up to which sort_pairs counts the L*L keys in one array (32 MiB). */
#define PAIR_SORT_MAX 2048

/* Sort order[0..n) (ascending sentence numbers) by pair_rank with one counting sort, then
 * shuffle each run of equal keys: the same distribution as shuffling first and sorting
 * stably, but the lengths are read in sentence order, not at random. */
static int sort_pairs(int64_t *order, int64_t *tmp, int64_t n, const struct sides *sd,
                      int64_t L, uint64_t *rng)
{
    int64_t nk = L * L;
    int64_t *count = calloc((size_t)nk + 1, sizeof *count);
    if (!count)
        return -1;
    for (int64_t j = 0; j < n; j++)
        count[pair_rank(key_len(sd, KEY_SRC, order[j]), key_len(sd, KEY_TGT, order[j])) + 1]++;
    for (int64_t k = 1; k <= nk; k++)
        count[k] += count[k - 1];
    for (int64_t j = 0; j < n; j++)
        tmp[count[pair_rank(key_len(sd, KEY_SRC, order[j]), key_len(sd, KEY_TGT, order[j]))]++] =
            order[j];
    /* now count[k] is the end of key k's run */
    for (int64_t k = 0, from = 0; k < nk; k++) {
        shuffle(tmp + from, count[k] - from, rng);
        from = count[k];
    }
    memcpy(order, tmp, (size_t)n * sizeof *order);
    free(count);
    return 0;
}

int tfm_batch_plan(const struct tfm_corpus *src, int src_eos, const struct tfm_corpus *tgt,
                   int tgt_eos, const struct tfm_batch_opts *o, struct tfm_batch_plan *p,
                   struct tfm_error *err)
{
    memset(p, 0, sizeof *p);
    int64_t n = src->n;
    if (o->tokens < 1 || o->tokens > TFM_BATCH_MAX_TOKENS)
        return tfm_fail(err, "budget of %lld tokens: 1 to %d expected", (long long)o->tokens,
                        TFM_BATCH_MAX_TOKENS);
    if (o->max_len < 0)
        return tfm_fail(err, "negative max_len");
    if (tgt && tgt->n != n)
        return tfm_fail(err, "source has %lld sentences, target %lld", (long long)n,
                        (long long)tgt->n);
    src_eos = src_eos != 0;
    tgt_eos = tgt_eos != 0;
    int64_t limit = o->tokens;
    if (o->max_len > 0 && o->max_len < limit)
        limit = o->max_len;
    p->sentences = n;
    p->order = malloc((size_t)(n > 0 ? n : 1) * sizeof *p->order);
    if (!p->order)
        return tfm_fail(err, "out of memory for %lld sentences", (long long)n);

    /* keep what fits */
    for (int64_t i = 0; i < n; i++) {
        int64_t ls = sent_len(src, src_eos, i), lt = tgt ? sent_len(tgt, tgt_eos, i) : 0;
        if (ls < 1 || (tgt && lt < 1)) {
            tfm_batch_plan_free(p);
            return tfm_fail(err, "line %lld: empty %s sentence", (long long)i + 1,
                            ls < 1 ? "source" : "target");
        }
        if (ls > limit || lt > limit) {
            if (!tgt) {
                tfm_batch_plan_free(p);
                return tfm_fail(err, "line %lld: %lld tokens, more than %s %lld (a sentence "
                                "to decode cannot be dropped)", (long long)i + 1,
                                (long long)ls, limit == o->tokens ? "the budget of" : "max_len",
                                (long long)limit);
            }
            p->dropped++;
            continue;
        }
        p->order[p->kept++] = i;
        if (ls > p->max_src)
            p->max_src = ls;
        if (lt > p->max_tgt)
            p->max_tgt = lt;
    }

    /* shuffle (pairs only), then sort by the longer side, ties by source length, then
     * by target length: the longer side bounds a batch, so this wastes the fewest cells */
    uint64_t rng = o->seed;
    struct sides sd = {src, tgt, src_eos, tgt_eos};
    int64_t max = p->max_src > p->max_tgt ? p->max_src : p->max_tgt;
    int64_t *tmp = malloc((size_t)(p->kept > 0 ? p->kept : 1) * sizeof *tmp);
    if (!tmp) {
        tfm_batch_plan_free(p);
        return tfm_fail(err, "out of memory for %lld sentences", (long long)p->kept);
    }
    int rc;
    if (!tgt) {
        rc = sort_by(p->order, tmp, p->kept, &sd, KEY_SRC, p->max_src);
    } else if (max <= PAIR_SORT_MAX) {
        rc = sort_pairs(p->order, tmp, p->kept, &sd, max, &rng);
    } else {    /* too many (ls, lt) keys for one pass: shuffle, then three stable passes */
        shuffle(p->order, p->kept, &rng);
        rc = sort_by(p->order, tmp, p->kept, &sd, KEY_TGT, p->max_tgt) ||
             sort_by(p->order, tmp, p->kept, &sd, KEY_SRC, p->max_src) ||
             sort_by(p->order, tmp, p->kept, &sd, KEY_MAX, max);
    }
    if (rc) {
        free(tmp);
        tfm_batch_plan_free(p);
        return tfm_fail(err, "out of memory");
    }
    free(tmp);

    /* cut greedily: a sentence joins the batch while both padded rectangles fit */
    int64_t cap = 1024, K = 0;
    p->start = malloc((size_t)cap * sizeof *p->start);
    if (!p->start) {
        tfm_batch_plan_free(p);
        return tfm_fail(err, "out of memory");
    }
    int64_t b0 = 0, S = 0, T = 0;
    for (int64_t j = 0; j <= p->kept; j++) {
        int64_t ls = 0, lt = 0, s2 = 0, t2 = 0;
        if (j < p->kept) {
            int64_t i = p->order[j];
            ls = sent_len(src, src_eos, i);
            lt = tgt ? sent_len(tgt, tgt_eos, i) : 0;
            s2 = ls > S ? ls : S;
            t2 = lt > T ? lt : T;
        }
        int64_t B2 = j - b0 + 1;
        if (j == p->kept || B2 * s2 > o->tokens || B2 * t2 > o->tokens) {
            if (j > b0) {       /* close batch [b0, j) */
                if (K + 2 > cap) {
                    int64_t *q = realloc(p->start, (size_t)(cap *= 2) * sizeof *q);
                    if (!q) {
                        tfm_batch_plan_free(p);
                        return tfm_fail(err, "out of memory");
                    }
                    p->start = q;
                }
                p->start[K++] = b0;
                p->src_cells += (j - b0) * S;
                p->tgt_cells += (j - b0) * T;
            }
            b0 = j;
            s2 = ls;
            t2 = lt;
        }
        S = s2;
        T = t2;
        p->src_tokens += ls;
        p->tgt_tokens += lt;
    }
    p->start[K] = p->kept;
    p->nbatches = K;

    p->perm = malloc((size_t)(K > 0 ? K : 1) * sizeof *p->perm);
    if (!p->perm) {
        tfm_batch_plan_free(p);
        return tfm_fail(err, "out of memory");
    }
    for (int64_t k = 0; k < K; k++)
        p->perm[k] = k;
    if (tgt)
        shuffle(p->perm, K, &rng);
    return 0;
}

/* Grow *p to at least n bytes. */
static int grow_bytes(void **p, size_t *cap, size_t n)
{
    if (n <= *cap && *p)
        return 0;
    size_t want = n > 64 ? n : 64;
    void *q = realloc(*p, want);
    if (!q)
        return -1;
    *p = q;
    *cap = want;
    return 0;
}

/* ---- writing ----------------------------------------------------------------------- */

int tfm_batch_put(struct tfm_writer *w, const struct tfm_batch *b, struct tfm_error *err)
{
    int64_t d1[1] = {b->B}, ds[2] = {b->B, b->S}, dt[2] = {b->B, b->T};
    if (tfm_writer_put(w, "batch.index", TFM_I64, 1, d1, b->index, err) ||
        tfm_writer_put(w, "batch.src", TFM_I32, 2, ds, b->src, err) ||
        (b->tgt && tfm_writer_put(w, "batch.tgt", TFM_I32, 2, dt, b->tgt, err)))
        return -1;
    return 0;
}

/* Rows of sentences rows[0..B) of c into out (B,L): tokens, eos if asked, padding. */
static void fill_rows(int32_t *out, const int64_t *rows, int64_t B, int64_t L,
                      const struct tfm_corpus *c, int eos)
{
    memset(out, 0, (size_t)(B * L) * sizeof *out);
    for (int64_t r = 0; r < B; r++) {
        int64_t len = tfm_corpus_len(c, rows[r]);
        memcpy(out + r * L, tfm_corpus_sent(c, rows[r]), (size_t)len * sizeof *out);
        if (eos)
            out[r * L + len] = TFM_EOS_ID;
    }
}

int tfm_batch_write(const char *out, const struct tfm_header *h, const struct tfm_corpus *src,
                    int src_eos, const struct tfm_corpus *tgt, int tgt_eos,
                    const struct tfm_batch_plan *p, int flags, struct tfm_error *err)
{
    src_eos = src_eos != 0;
    tgt_eos = tgt_eos != 0;
    struct tfm_batch bt = {0};
    size_t cap_index = 0, cap_src = 0, cap_tgt = 0;
    struct tfm_writer *w = NULL;
    int rc = -1;
    if (!(w = tfm_writer_open(out, h, flags, err)))
        goto done;
    for (int64_t k = 0; k < p->nbatches; k++) {
        int64_t b = p->perm[k];
        const int64_t *rows = p->order + p->start[b];
        bt.B = p->start[b + 1] - p->start[b];
        bt.S = bt.T = 0;
        for (int64_t r = 0; r < bt.B; r++) {
            int64_t ls = sent_len(src, src_eos, rows[r]);
            if (ls > bt.S)
                bt.S = ls;
            if (tgt) {
                int64_t lt = sent_len(tgt, tgt_eos, rows[r]);
                if (lt > bt.T)
                    bt.T = lt;
            }
        }
        if (grow_bytes((void **)&bt.index, &cap_index, (size_t)bt.B * sizeof *bt.index) ||
            grow_bytes((void **)&bt.src, &cap_src, (size_t)(bt.B * bt.S) * sizeof *bt.src) ||
            (tgt && grow_bytes((void **)&bt.tgt, &cap_tgt,
                               (size_t)(bt.B * bt.T) * sizeof *bt.tgt))) {
            tfm_fail(err, "out of memory");
            goto done;
        }
        memcpy(bt.index, rows, (size_t)bt.B * sizeof *rows);
        fill_rows(bt.src, rows, bt.B, bt.S, src, src_eos);
        if (tgt)
            fill_rows(bt.tgt, rows, bt.B, bt.T, tgt, tgt_eos);
        if (tfm_batch_put(w, &bt, err))
            goto done;
    }
    rc = tfm_writer_close(w, err);
    w = NULL;
done:
    tfm_writer_abort(w);
    free(bt.index);
    free(bt.src);
    free(bt.tgt);
    return rc;
}

/* ---- tfm-batch as one call --------------------------------------------------------- */

static void note(const struct tfm_batch_opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void note(const struct tfm_batch_opts *o, const char *fmt, ...)
{
    if (!o->progress)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    o->progress(o->progress_ctx, line);
}

/* A 0/1 key of the header of stream name (eos, bos, targets): *v set to 0 or 1 when the
 * key is there, unchanged when absent; any other value is an error naming file and key,
 * never read as absent (eos=true would have a second eos appended). */
static int header_flag(const struct tfm_header *h, const char *name, const char *key, int *v,
                       struct tfm_error *err)
{
    const char *s = tfm_header_get(h, key);
    if (!s)
        return 0;
    if (strcmp(s, "0") != 0 && strcmp(s, "1") != 0)
        return tfm_fail(err, "%s: header: %s=%.40s%s: 0 or 1 expected (or no %s key)", name,
                        key, s, strlen(s) > 40 ? "..." : "", key);
    *v = s[0] == '1';
    return 0;
}

/* One input stream read whole: its header (with the vocabulary) and its sentences. */
struct input {
    struct tfm_reader *r;
    struct tfm_header h;
    int have_h;
    struct tfm_corpus c;
    int eos;        /* 1: append eos (the stream's header does not say eos=1) */
    int bos;        /* the header's bos: 0, 1, or -1 when absent */
    int64_t vocab;  /* ids < vocab, from the header's vocab.size (0: absent, unchecked) */
};

static int input_open(struct input *in, const char *path, struct tfm_error *err)
{
    if (!(in->r = tfm_reader_open(path, err)))
        return -1;
    const struct tfm_header *h = tfm_reader_header(in->r);
    if (strcmp(h->kind, TFM_KIND_TOKENS) != 0)
        return tfm_fail(err, "%s: a '%s' stream, expected tokens (made by tfm-tokenize encode)",
                        tfm_reader_name(in->r), h->kind);
    if (tfm_header_copy(&in->h, h, err))
        return -1;
    in->have_h = 1;
    int eos = 0;
    in->bos = -1;
    if (header_flag(h, tfm_reader_name(in->r), "eos", &eos, err) ||
        header_flag(h, tfm_reader_name(in->r), "bos", &in->bos, err))
        return -1;
    in->eos = !eos;
    /* a vocab.size that is not a positive count would turn the id check off */
    const char *v = tfm_header_get(h, "vocab.size");
    in->vocab = v ? tfm_header_int(h, "vocab.size") : 0;
    if (v && in->vocab <= 0)
        return tfm_fail(err, "%s: header: vocab.size=%s is not a positive count",
                        tfm_reader_name(in->r), v);
    /* the embedded model is the vocabulary: no id may reach past its pieces, whatever
     * vocab.size says (the ids are checked against the smaller), and it bounds them when
     * the key is absent.  A model that does not load is left to the tools that load it
     * (tfm-train, tfm-decode): batching needs only its bytes. */
    struct tfm_error ignored;
    int pieces = h->spm ? tfm_spm_proto_vocab_size(h->spm, h->spm_size, &ignored) : -1;
    if (pieces > 0) {
        if (v && in->vocab > pieces)
            return tfm_fail(err, "%s: header: vocab.size=%s, but the embedded model has %d "
                            "pieces", tfm_reader_name(in->r), v, pieces);
        if (!v)
            in->vocab = pieces;
    }
    return 0;
}

/* Read the sentences; check ids against the vocabulary, no pad inside a sentence, and
 * the final eos a header with eos=1 promises.  Closes the reader (unmapping the file). */
static int input_read(struct input *in, const struct tfm_batch_opts *o, struct tfm_error *err)
{
    double t0 = tfm_now();
    const char *name = tfm_reader_name(in->r);
    if (tfm_corpus_read(in->r, &in->c, in->vocab, err))
        return -1;
    const struct tfm_corpus *c = &in->c;
    for (int64_t i = 0; i < c->n; i++) {
        const int32_t *s = tfm_corpus_sent(c, i);
        int64_t len = tfm_corpus_len(c, i);
        for (int64_t j = 0; j < len; j++)
            if (s[j] == TFM_PAD_ID)
                return tfm_fail(err, "%s: line %lld: pad id %d inside a sentence", name,
                                (long long)i + 1, TFM_PAD_ID);
        if (!in->eos && (len == 0 || s[len - 1] != TFM_EOS_ID))
            return tfm_fail(err, "%s: line %lld: %s, but the header says eos=1", name,
                            (long long)i + 1, len ? "does not end in eos" : "empty");
    }
    note(o, "%s: %lld sentences, %lld tokens read (%.2f s)", name, (long long)c->n,
         (long long)(c->n ? c->offsets[c->n] : 0), tfm_now() - t0);
    tfm_reader_close(in->r);
    in->r = NULL;
    return 0;
}

static void input_free(struct input *in)
{
    tfm_reader_close(in->r);
    if (in->have_h)
        tfm_header_free(&in->h);
    tfm_corpus_free(&in->c);
}

int tfm_batch_run(const char *src_path, const char *tgt_path, const char *out,
                  const struct tfm_batch_opts *o, struct tfm_batch_plan *stats,
                  struct tfm_error *err)
{
    struct input s = {0}, t = {0};
    struct tfm_batch_plan p = {0};
    struct tfm_header h;
    int rc = -1;
    tfm_header_init(&h, TFM_KIND_BATCHES);
    tfm_corpus_init(&s.c);
    tfm_corpus_init(&t.c);
    memset(stats, 0, sizeof *stats);
    char sname[256], tname[256];

    if (input_open(&s, src_path, err))
        goto done;
    snprintf(sname, sizeof sname, "%s", tfm_reader_name(s.r));
    if (tgt_path) {
        if (input_open(&t, tgt_path, err))
            goto done;
        snprintf(tname, sizeof tname, "%s", tfm_reader_name(t.r));
        /* The model puts bos before the decoder's input itself (model.c) and beam search
         * never emits it: targets that begin with bos would teach it to predict bos
         * first, which decoding then never does. */
        if (t.bos == 1) {
            tfm_fail(err, "%s: the target sentences begin with bos (bos=1 in the header, "
                     "tfm-tokenize encode --bos): encode the targets without --bos; the model "
                     "adds bos to the decoder's input itself", tname);
            goto done;
        }
        uint32_t vs = tfm_header_vocab_id(&s.h), vt = tfm_header_vocab_id(&t.h);
        if (vs != vt) {
            tfm_fail(err, "%s and %s have different vocabularies (spm.crc32 %08x and %08x): "
                     "source and target must share one model", sname, tname, vs, vt);
            goto done;
        }
        if (s.vocab && t.vocab && s.vocab != t.vocab) {
            tfm_fail(err, "%s and %s have different vocabularies (vocab.size %lld and %lld)",
                     sname, tname, (long long)s.vocab, (long long)t.vocab);
            goto done;
        }
        /* one vocabulary: a target without vocab.size is checked against the source's,
         * which the output's header states */
        if (!t.vocab)
            t.vocab = s.vocab;
    }
    /* the source stream is read whole first: a pipe feeding it must not wait on the
     * target (both from one pipe is refused by the caller) */
    if (input_read(&s, o, err) || (tgt_path && input_read(&t, o, err)))
        goto done;
    if (tgt_path && s.c.n != t.c.n) {
        tfm_fail(err, "%s has %lld sentences but %s has %lld: not a parallel corpus", sname,
                 (long long)s.c.n, tname, (long long)t.c.n);
        goto done;
    }

    double t0 = tfm_now();
    if (tfm_batch_plan(&s.c, s.eos, tgt_path ? &t.c : NULL, t.eos, o, &p, err)) {
        tfm_error_prefix(err, "%s", sname);
        goto done;
    }
    note(o, "%lld batches planned (%.2f s)", (long long)p.nbatches, tfm_now() - t0);

    const char *bos = s.bos < 0 ? NULL : s.bos ? "1" : "0";
    if ((s.h.spm && tfm_header_set_spm(&h, s.h.spm, s.h.spm_size, err)) ||
        (o->producer && tfm_header_set(&h, "producer", o->producer, err)) ||
        (tfm_header_get(&s.h, "vocab.size") &&
         tfm_header_set(&h, "vocab.size", tfm_header_get(&s.h, "vocab.size"), err)) ||
        (bos && tfm_header_set(&h, "src.bos", bos, err)) ||
        tfm_header_set(&h, "eos", "1", err) ||
        tfm_header_set(&h, "targets", tgt_path ? "1" : "0", err) ||
        tfm_header_setf(&h, err, "tokens", "%lld", (long long)o->tokens) ||
        tfm_header_setf(&h, err, "max-len", "%lld", (long long)o->max_len) ||
        tfm_header_setf(&h, err, "seed", "%" PRIu64, o->seed) ||
        tfm_header_setf(&h, err, "sentences", "%lld", (long long)p.sentences) ||
        tfm_header_setf(&h, err, "dropped", "%lld", (long long)p.dropped) ||
        tfm_header_setf(&h, err, "batches", "%lld", (long long)p.nbatches) ||
        tfm_header_setf(&h, err, "src.tokens", "%lld", (long long)p.src_tokens) ||
        tfm_header_setf(&h, err, "pad.src", "%.4f", tfm_batch_pad_src(&p)) ||
        (tgt_path && (tfm_header_setf(&h, err, "tgt.tokens", "%lld", (long long)p.tgt_tokens) ||
                      tfm_header_setf(&h, err, "pad.tgt", "%.4f", tfm_batch_pad_tgt(&p)))))
        goto done;

    t0 = tfm_now();
    if (tfm_batch_write(out, &h, &s.c, s.eos, tgt_path ? &t.c : NULL, t.eos, &p, o->flags, err))
        goto done;
    note(o, "%lld batches written (%.2f s)", (long long)p.nbatches, tfm_now() - t0);
    *stats = p;
    stats->order = stats->start = stats->perm = NULL;
    rc = 0;
done:
    tfm_batch_plan_free(&p);
    tfm_header_free(&h);
    input_free(&s);
    input_free(&t);
    return rc;
}

/* ---- reading ----------------------------------------------------------------------- */

struct tfm_batch_reader {
    struct tfm_reader *r;
    int rank, count, nranks;    /* ranks rank .. rank+count-1 of nranks */
    int64_t total;          /* K from the header, -1: unknown */
    int64_t share;          /* floor(K/N), -1: unknown */
    int64_t vocab;          /* ids < vocab (0: unchecked) */
    int64_t budget;         /* B*S, B*T <= budget (0: unchecked) */
    int64_t sentences;      /* index < sentences (-1: unchecked) */
    int targets;            /* -1 unknown, 0, 1 */
    int64_t seen;           /* batches of the stream read */
    int64_t given;          /* batches given to this rank */
    int at_end;             /* tfm.end read */
    /* concatenated batch streams (stream.h): the stream of the batch last read; numbers of
     * its sentences are offset by base (the sentences of the streams before it); next is
     * one more than the largest number given so far */
    uint64_t member;
    int64_t base, next;
    /* the batch last read; index buffers swap with the lookahead */
    struct tfm_batch b;
    size_t cap_index, cap_src, cap_tgt;
    int64_t *look;          /* batch.index read ahead, look_B entries (look_B < 0: none) */
    int64_t look_B;
    size_t cap_look;
    uint64_t look_rec;      /* its record number and offset, for messages */
    int have_first;         /* the first batch was read at open and not yet taken */
};

/* Check rows (B,L) of ids: tokens in [1, vocab) ending in eos, then padding only. */
static int check_rows(struct tfm_batch_reader *br, const struct tfm_record *rec,
                      const int32_t *ids, int64_t B, int64_t L, int64_t *tokens,
                      struct tfm_error *err)
{
    int64_t total = 0;
    for (int64_t b = 0; b < B; b++) {
        const int32_t *row = ids + b * L;
        int64_t len = 0;
        while (len < L && row[len] != TFM_PAD_ID)
            len++;
        if (len == 0)
            return tfm_reader_fail(br->r, rec, err, "row %lld is empty", (long long)b);
        for (int64_t j = 0; j < len; j++)
            if (row[j] < 0 || (br->vocab > 0 && row[j] >= br->vocab))
                return tfm_reader_fail(br->r, rec, err, "row %lld: id %d at %lld outside the "
                                       "vocabulary (%lld)", (long long)b, row[j], (long long)j,
                                       (long long)br->vocab);
        for (int64_t j = len; j < L; j++)
            if (row[j] != TFM_PAD_ID)
                return tfm_reader_fail(br->r, rec, err, "row %lld: id %d at %lld after the "
                                       "padding", (long long)b, row[j], (long long)j);
        if (row[len - 1] != TFM_EOS_ID)
            return tfm_reader_fail(br->r, rec, err, "row %lld does not end in eos",
                                   (long long)b);
        total += len;
    }
    *tokens = total;
    return 0;
}

/* A "batch.src" or "batch.tgt" record of B rows into *dst. */
static int take_rows(struct tfm_batch_reader *br, const struct tfm_record *rec, int64_t B,
                     int32_t **dst, size_t *cap, int64_t *L, int64_t *tokens,
                     struct tfm_error *err)
{
    if (rec->dtype != TFM_I32 || rec->rank != 2)
        return tfm_reader_fail(br->r, rec, err, "must be i32 [B,L]");
    if (rec->dims[0] != B || rec->dims[1] < 1)
        return tfm_reader_fail(br->r, rec, err, "shape [%lld,%lld] for %lld sentences",
                               (long long)rec->dims[0], (long long)rec->dims[1], (long long)B);
    if (br->budget > 0 && rec->count > br->budget)
        return tfm_reader_fail(br->r, rec, err, "%lld cells, more than the budget of %lld",
                               (long long)rec->count, (long long)br->budget);
    if (check_rows(br, rec, rec->data, B, rec->dims[1], tokens, err))
        return -1;
    if (grow_bytes((void **)dst, cap, rec->nbytes))
        return tfm_reader_fail(br->r, rec, err, "out of memory");
    memcpy(*dst, rec->data, rec->nbytes);
    *L = rec->dims[1];
    return 0;
}

/* The counts of a header: -1 for each one absent; -1 with err for one that is not a count. */
static int header_counts(const struct tfm_header *h, const char *name, int64_t vals[4],
                         struct tfm_error *err)
{
    static const char *const keys[] = {"batches", "vocab.size", "tokens", "sentences"};
    for (int i = 0; i < 4; i++) {
        vals[i] = tfm_header_int(h, keys[i]);
        if (tfm_header_get(h, keys[i]) && vals[i] < 0)
            return tfm_fail(err, "%s: header: %s=%s is not a count", name, keys[i],
                            tfm_header_get(h, keys[i]));
    }
    return 0;
}

#define NOT_SHARED "a second batch stream follows the first: concatenated batch streams " \
    "cannot be shared among %d ranks (the count of batches must be known at the start; run " \
    "tfm-batch on the joined token streams instead)"

/* rec, a batch.index, is the first record of the next stream of a concatenation: its
 * batches follow the first stream's (one rank only: sharing needs the count at the start). */
static int next_stream(struct tfm_batch_reader *br, const struct tfm_record *rec,
                       struct tfm_error *err)
{
    if (br->nranks > 1)
        return tfm_reader_fail(br->r, rec, err, NOT_SHARED, br->nranks);
    int64_t vals[4];
    if (header_counts(tfm_reader_member_header(br->r), tfm_reader_name(br->r), vals, err))
        return tfm_error_prefix(err, "stream %llu", (unsigned long long)rec->member + 1);
    br->total = br->total >= 0 && vals[0] >= 0 ? br->total + vals[0] : -1;
    br->share = br->total;
    br->budget = vals[2] > 0 ? vals[2] : 0;
    /* the numbers go on after the stream before: its sentences=, or its largest number */
    if (br->sentences > INT64_MAX - br->base)
        return tfm_reader_fail(br->r, rec, err, "too many sentences");
    if (br->sentences >= 0 && br->base + br->sentences > br->next)
        br->next = br->base + br->sentences;
    br->base = br->next;
    br->sentences = vals[3];
    br->member = rec->member;
    return 0;
}

/* A "batch.index" record into *dst (B entries). */
static int take_index(struct tfm_batch_reader *br, const struct tfm_record *rec, int64_t **dst,
                      size_t *cap, int64_t *B, struct tfm_error *err)
{
    if (rec->member != br->member && next_stream(br, rec, err))
        return -1;
    if (rec->dtype != TFM_I64 || rec->rank != 1 || rec->dims[0] < 1)
        return tfm_reader_fail(br->r, rec, err, "must be i64 [B], B >= 1");
    const int64_t *ix = rec->data;
    for (int64_t i = 0; i < rec->dims[0]; i++)
        if (ix[i] < 0 || (br->sentences >= 0 && ix[i] >= br->sentences) ||
            ix[i] >= INT64_MAX - br->base)
            return tfm_reader_fail(br->r, rec, err, "sentence number %lld out of range",
                                   (long long)ix[i]);
    if (grow_bytes((void **)dst, cap, rec->nbytes))
        return tfm_reader_fail(br->r, rec, err, "out of memory");
    int64_t *out = *dst;
    for (int64_t i = 0; i < rec->dims[0]; i++) {
        out[i] = br->base + ix[i];
        if (out[i] >= br->next)
            br->next = out[i] + 1;
    }
    *B = rec->dims[0];
    return 0;
}

/* Read the next batch of the stream into br->b: 1, 0 at the end of the stream, -1. */
static int read_batch(struct tfm_batch_reader *br, struct tfm_error *err)
{
    struct tfm_record rec;
    struct tfm_batch *b = &br->b;
    int k;
    if (br->look_B >= 0) {      /* the index read ahead becomes this batch's */
        int64_t *t = b->index;
        size_t tc = br->cap_index;
        b->index = br->look;
        br->cap_index = br->cap_look;
        br->look = t;
        br->cap_look = tc;
        b->B = br->look_B;
        br->look_B = -1;
    } else {
        if (br->at_end || (k = tfm_reader_next(br->r, &rec, err)) == 0) {
            br->at_end = 1;
            return 0;
        }
        if (k < 0)
            return -1;
        if (strcmp(rec.name, "batch.index") != 0)
            return tfm_reader_fail(br->r, &rec, err, "'batch.index' expected");
        if (take_index(br, &rec, &b->index, &br->cap_index, &b->B, err))
            return -1;
    }
    if (br->total >= 0 && br->seen >= br->total)
        return tfm_fail(err, "%s: more batches than the header's batches=%lld",
                        tfm_reader_name(br->r), (long long)br->total);
    if (tfm_reader_expect(br->r, &rec, "batch.src", TFM_I32, -1, err) < 0 ||
        take_rows(br, &rec, b->B, &b->src, &br->cap_src, &b->S, &b->src_tokens, err))
        return -1;
    /* then batch.tgt, or the next batch's index, or the end */
    k = tfm_reader_next(br->r, &rec, err);
    if (k < 0)
        return -1;
    int has_tgt = k == 1 && strcmp(rec.name, "batch.tgt") == 0;
    if (has_tgt && rec.member != br->member)
        return tfm_reader_fail(br->r, &rec, err, "the stream before this one ends where "
                               "'batch.tgt' was expected");
    if (br->targets < 0)
        br->targets = has_tgt;
    if (has_tgt != br->targets) {
        if (k == 0)
            return tfm_fail(err, "%s: the stream ends where 'batch.tgt' was expected",
                            tfm_reader_name(br->r));
        return tfm_reader_fail(br->r, &rec, err, has_tgt ? "batch.tgt in a stream without "
                               "targets" : "'batch.tgt' expected");
    }
    if (has_tgt) {
        if (take_rows(br, &rec, b->B, &b->tgt, &br->cap_tgt, &b->T, &b->tgt_tokens, err))
            return -1;
    } else {
        b->T = 0;
        b->tgt_tokens = 0;
        if (k == 0) {
            br->at_end = 1;
        } else {
            if (strcmp(rec.name, "batch.index") != 0)
                return tfm_reader_fail(br->r, &rec, err, "'batch.index' expected");
            if (take_index(br, &rec, &br->look, &br->cap_look, &br->look_B, err))
                return -1;
        }
    }
    b->number = br->seen++;
    return 1;
}

static int skip_all(const char *name, void *ctx)
{
    (void)name;
    (void)ctx;
    return 1;
}

static int refuse_member(void *ctx, const struct tfm_header *h, uint64_t member,
                         uint64_t offset, struct tfm_error *err)
{
    (void)h;
    const struct tfm_batch_reader *br = ctx;
    tfm_fail(err, NOT_SHARED, br->nranks);
    return tfm_error_prefix(err, "%s: stream %llu at byte %llu", tfm_reader_name(br->r),
                            (unsigned long long)member + 1, (unsigned long long)offset);
}

/* Several ranks share a file (a stream read once is found out as it is read): a second
 * stream after the first is refused now, before training, rather than an epoch later.
 * Only the records' headers are read, not their payloads; a stop request (*stop) ends
 * the reading as it ends any wait of the reader. */
static int check_one_stream(struct tfm_batch_reader *br, const char *path,
                            volatile sig_atomic_t *stop, struct tfm_error *err)
{
    struct stat st;
    if (!path || strcmp(path, "-") == 0 || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    struct tfm_reader *r = tfm_reader_open_stop(path, stop, err);
    if (!r)
        return -1;
    tfm_reader_skip(r, skip_all, NULL);
    tfm_reader_on_member(r, refuse_member, br);
    struct tfm_record rec;
    int k;
    while ((k = tfm_reader_next(r, &rec, err)) == 1)
        ;
    tfm_reader_close(r);
    return k;
}

struct tfm_batch_reader *tfm_batch_open(const char *path, int rank, int nranks,
                                        struct tfm_error *err)
{
    return tfm_batch_open_ranks(path, rank, 1, nranks, NULL, err);
}

struct tfm_batch_reader *tfm_batch_open_ranks(const char *path, int rank, int count,
                                              int nranks, volatile sig_atomic_t *stop,
                                              struct tfm_error *err)
{
    if (nranks < 1 || rank < 0 || count < 1 || rank > nranks - count) {
        tfm_fail(err, "ranks %d to %d of %d: 0 <= rank < ranks expected", rank,
                 rank + count - 1, nranks);
        return NULL;
    }
    struct tfm_batch_reader *br = calloc(1, sizeof *br);
    if (!br) {
        tfm_fail(err, "out of memory");
        return NULL;
    }
    br->rank = rank;
    br->count = count;
    br->nranks = nranks;
    br->look_B = -1;
    br->targets = -1;
    if (!(br->r = tfm_reader_open_stop(path, stop, err)))
        goto fail;
    const struct tfm_header *h = tfm_reader_header(br->r);
    const char *name = tfm_reader_name(br->r);
    if (strcmp(h->kind, TFM_KIND_BATCHES) != 0) {
        tfm_fail(err, "%s: a '%s' stream, expected batches (made by tfm-batch)", name, h->kind);
        goto fail;
    }
    int64_t vals[4];
    if (header_counts(h, name, vals, err))
        goto fail;
    br->total = vals[0];
    br->vocab = vals[1] > 0 ? vals[1] : 0;
    br->budget = vals[2] > 0 ? vals[2] : 0;
    br->sentences = vals[3];
    if (header_flag(h, name, "targets", &br->targets, err))
        goto fail;
    if (nranks > 1) {
        if (br->total < 0) {
            tfm_fail(err, "%s: the header does not say how many batches (batches=K): cannot "
                     "share them among %d ranks", name, nranks);
            goto fail;
        }
        if (br->total < nranks) {
            tfm_fail(err, "%s: %lld batches cannot feed %d ranks", name, (long long)br->total,
                     nranks);
            goto fail;
        }
        if (check_one_stream(br, path, stop, err) < 0)
            goto fail;
    }
    br->share = br->total >= 0 ? br->total / nranks * count : -1;
    /* read the first batch now, so that an empty or wrong stream fails at open */
    int k = read_batch(br, err);
    if (k < 0)
        goto fail;
    br->have_first = k == 1;
    return br;
fail:
    tfm_batch_close(br);
    return NULL;
}

const struct tfm_header *tfm_batch_header(const struct tfm_batch_reader *r)
{
    return tfm_reader_header(r->r);
}

int64_t tfm_batch_count(const struct tfm_batch_reader *r)
{
    return r->share;
}

int tfm_batch_has_targets(const struct tfm_batch_reader *r)
{
    return r->targets == 1;
}

/* Read the rest of the stream (batches of no rank) and check the count. */
static int finish(struct tfm_batch_reader *br, struct tfm_error *err)
{
    int k;
    br->have_first = 0;
    while ((k = read_batch(br, err)) == 1)
        ;
    if (k < 0)
        return -1;
    if (br->total >= 0 && br->seen != br->total)
        return tfm_fail(err, "%s: the header says batches=%lld, the stream has %lld",
                        tfm_reader_name(br->r), (long long)br->total, (long long)br->seen);
    return 0;
}

int tfm_batch_next(struct tfm_batch_reader *br, struct tfm_batch *b, struct tfm_error *err)
{
    /* one rank takes every batch, to the end of a concatenation too; several stop at an
     * equal share */
    if (br->nranks > 1 && br->share >= 0 && br->given >= br->share)
        return finish(br, err) ? -1 : 0;
    for (;;) {
        int k = 1;
        if (br->have_first)
            br->have_first = 0;
        else
            k = read_batch(br, err);
        if (k < 0)
            return -1;
        if (k == 0)
            return finish(br, err) ? -1 : 0;
        int64_t at = br->b.number % br->nranks;
        if (at >= br->rank && at < br->rank + br->count)
            break;
    }
    br->given++;
    *b = br->b;
    if (!br->targets)
        b->tgt = NULL;
    return 1;
}

int64_t tfm_batch_skip(struct tfm_batch_reader *br, int64_t k, struct tfm_error *err)
{
    struct tfm_batch b;
    for (int64_t i = 0; i < k; i++) {
        int rc = tfm_batch_next(br, &b, err);
        if (rc <= 0)
            return rc < 0 ? -1 : i;
    }
    return k;
}

void tfm_batch_close(struct tfm_batch_reader *br)
{
    if (!br)
        return;
    tfm_reader_close(br->r);
    free(br->b.index);
    free(br->b.src);
    free(br->b.tgt);
    free(br->look);
    free(br);
}

/* ---- epochs (batch.h): the training loop's reader ------------------------------------ */


const char *tfm_epochs_name(const struct tfm_epochs *d)
{
    return d->path ? d->path : "<stdin>";
}

int tfm_epochs_open(struct tfm_epochs *d, struct tfm_error *err)
{
    d->r = tfm_batch_open_ranks(d->path ? d->path : "-", d->rank, d->count > 0 ? d->count : 1,
                                d->world, d->stop, err);
    if (!d->r)
        return -1;
    const struct tfm_header *h = tfm_batch_header(d->r);
    if (tfm_batch_count(d->r) != 0 && !tfm_batch_has_targets(d->r))
        return tfm_fail(err, "%s: a batch stream without targets: training and validation "
                        "need source and target (tfm-batch SRC.tfm TGT.tfm)", tfm_epochs_name(d));
    if (!d->have_header) {
        if (tfm_header_copy(&d->header, h, err))
            return -1;
        d->have_header = 1;
    } else if (tfm_header_vocab_id(h) != tfm_header_vocab_id(&d->header)) {
        return tfm_fail(err, "%s: the vocabulary changed between readings", tfm_epochs_name(d));
    }
    d->pos = 0;
    return 0;
}

void tfm_epochs_close(struct tfm_epochs *d)
{
    tfm_batch_close(d->r);
    d->r = NULL;
    if (d->have_header)
        tfm_header_free(&d->header);
    d->have_header = 0;
}

static int grow_ids(int32_t **p, size_t *cap, size_t n, struct tfm_error *err)
{
    if (n <= *cap)
        return 0;
    int32_t *q = realloc(*p, n * sizeof *q);
    if (!q)
        return tfm_fail(err, "out of memory");
    *p = q;
    *cap = n;
    return 0;
}

int tfm_epochs_next(struct tfm_epochs *d, struct tfm_batch_copy *b, struct tfm_error *err)
{
    struct tfm_batch tb;
    for (int tries = 0;; tries++) {
        int k = tfm_batch_next(d->r, &tb, err);
        if (k < 0)
            return -1;
        if (k == 1)
            break;
        if (!d->repeat)
            return 0;
        if (d->pos == 0 || tries > 0)
            return tfm_fail(err, "%s: no batch for rank %d of %d in the stream", tfm_epochs_name(d),
                            d->rank, d->world);
        tfm_batch_close(d->r);
        d->r = NULL;
        if (tfm_epochs_open(d, err))
            return -1;
        d->epoch++;
    }
    if (!tb.tgt)
        return tfm_fail(err, "%s: batch %lld has no targets: training needs them",
                        tfm_epochs_name(d), (long long)tb.number);
    if (tb.B > INT32_MAX || tb.S > INT32_MAX || tb.T > INT32_MAX)
        return tfm_fail(err, "%s: batch %lld: too large", tfm_epochs_name(d), (long long)tb.number);
    b->B = (int)tb.B;
    b->S = (int)tb.S;
    b->T = (int)tb.T;
    b->number = tb.number;
    if (grow_ids(&b->src, &b->cap_src, (size_t)(tb.B * tb.S), err) ||
        grow_ids(&b->tgt, &b->cap_tgt, (size_t)(tb.B * tb.T), err))
        return -1;
    memcpy(b->src, tb.src, (size_t)(tb.B * tb.S) * sizeof *b->src);
    memcpy(b->tgt, tb.tgt, (size_t)(tb.B * tb.T) * sizeof *b->tgt);
    d->pos++;
    return 1;
}

int tfm_epochs_skip(struct tfm_epochs *d, int64_t epoch, int64_t pos, struct tfm_error *err)
{
    d->epoch = epoch;
    int64_t n = pos > 0 ? tfm_batch_skip(d->r, pos, err) : 0;
    if (n < 0)
        return tfm_error_prefix(err, "skipping the %lld batches the checkpoint has read in its "
                                "epoch", (long long)pos);
    if (n < pos) {
        char share[64] = "";
        if (d->r->nranks > 1)
            snprintf(share, sizeof share, " for rank %d of %d", d->r->rank, d->r->nranks);
        return tfm_fail(err, "%s: cannot skip the %lld batches the checkpoint has read in its "
                        "epoch: it has %lld%s (not the stream it was trained on?)",
                        tfm_epochs_name(d), (long long)pos, (long long)n, share);
    }
    d->pos = pos;
    return 0;
}

void tfm_batch_copy_free(struct tfm_batch_copy *b)
{
    free(b->src);
    free(b->tgt);
    memset(b, 0, sizeof *b);
}
