/* corpus.c: ragged sentences in memory and as chunk records (see corpus.h). */
#include "corpus.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void tfm_corpus_init(struct tfm_corpus *c)
{
    memset(c, 0, sizeof *c);
}

void tfm_corpus_free(struct tfm_corpus *c)
{
    free(c->offsets);
    free(c->ids);
    free(c->index);
    free(c->score);
    tfm_corpus_init(c);
}

/* Grow *p (elements of size sz) to hold at least need elements. */
static int grow(void **p, int64_t *cap, int64_t need, size_t sz)
{
    if (need <= *cap)
        return 0;
    int64_t n = *cap ? *cap : 1024;
    while (n < need)
        n += n / 2 + 1;
    void *q = realloc(*p, (size_t)n * sz);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* Make room for n sentences and m ids in total; keeps offsets[0] = 0. */
static int reserve(struct tfm_corpus *c, int64_t n, int64_t m, int with_hyp, struct tfm_error *err)
{
    int64_t cap_n = c->cap_n;
    if (grow((void **)&c->offsets, &cap_n, n + 1, sizeof *c->offsets))
        return tfm_fail(err, "out of memory for %lld sentences", (long long)n);
    if (with_hyp) {
        int64_t a = c->cap_n, b = c->cap_n;
        if (grow((void **)&c->index, &a, cap_n, sizeof *c->index) ||
            grow((void **)&c->score, &b, cap_n, sizeof *c->score))
            return tfm_fail(err, "out of memory for %lld sentences", (long long)n);
    }
    c->cap_n = cap_n;
    if (grow((void **)&c->ids, &c->cap_ids, m > 0 ? m : 1, sizeof *c->ids))
        return tfm_fail(err, "out of memory for %lld token ids", (long long)m);
    if (c->n == 0)
        c->offsets[0] = 0;
    return 0;
}

int tfm_corpus_push(struct tfm_corpus *c, const int32_t *ids, int64_t len, struct tfm_error *err)
{
    int64_t m = c->n ? c->offsets[c->n] : 0;
    if (len < 0)
        return tfm_fail(err, "negative sentence length");
    if (reserve(c, c->n + 1, m + len, c->index != NULL, err))
        return -1;
    if (len)
        memcpy(c->ids + m, ids, (size_t)len * sizeof *ids);
    c->offsets[++c->n] = m + len;
    return 0;
}

/* Read one chunk (its records from "tokens.offsets" on) and append it to c.
 * Returns 1, 0 at the end of the stream, -1 on error. */
static int read_chunk(struct tfm_reader *r, struct tfm_corpus *c, int64_t vocab_size, int hyp,
                      struct tfm_error *err)
{
    struct tfm_record rec;
    int k = tfm_reader_next(r, &rec, err);
    if (k <= 0)
        return k;
    if (rec.member != c->member) {      /* the next stream of a concatenation */
        c->member = rec.member;
        c->index_base = c->index_next;
    }
    if (strcmp(rec.name, "tokens.offsets") != 0)
        return tfm_reader_fail(r, &rec, err, "'tokens.offsets' expected");
    if (rec.dtype != TFM_I64 || rec.rank != 1 || rec.dims[0] < 1)
        return tfm_reader_fail(r, &rec, err, "offsets must be i64 [n+1]");
    int64_t n = rec.dims[0] - 1, base = c->n ? c->offsets[c->n] : 0;
    const int64_t *off = rec.data;
    if (off[0] != 0)
        return tfm_reader_fail(r, &rec, err, "offsets do not start at 0");
    for (int64_t i = 0; i < n; i++)
        if (off[i + 1] < off[i])
            return tfm_reader_fail(r, &rec, err, "offsets decrease at sentence %lld",
                                   (long long)i);
    int64_t m = off[n];
    if (m > INT64_MAX - base)
        return tfm_reader_fail(r, &rec, err, "offsets too large");
    /* room for the ids once their record has shown that they exist */
    if (reserve(c, c->n + n, base, hyp, err))
        return -1;
    for (int64_t i = 0; i < n; i++)
        c->offsets[c->n + 1 + i] = base + off[i + 1];

    if (tfm_reader_expect(r, &rec, "tokens.ids", TFM_I32, 1, err) < 0)
        return -1;
    if (rec.dims[0] != m)
        return tfm_reader_fail(r, &rec, err, "%lld ids, offsets say %lld",
                               (long long)rec.dims[0], (long long)m);
    if (reserve(c, c->n + n, base + m, hyp, err))
        return -1;
    const int32_t *ids = rec.data;
    /* a bad id named by its sentence (counted from 1 over the stream: its line in the
     * text encoded, or hypothesis) and token within it (from 1), found once one is bad.
     * The offsets as copied to c (the record's own data is gone with the next record). */
    const int64_t *co = c->offsets + c->n;     /* [n+1], from base */
    for (int64_t j = 0; j < m; j++) {
        if (ids[j] >= 0 && (vocab_size <= 0 || ids[j] < vocab_size))
            continue;
        int64_t i = 0;
        while (co[i + 1] - base <= j)
            i++;
        const char *what = hyp ? "hypothesis" : "line";
        long long line = (long long)(c->nread + i + 1);
        long long at = (long long)(j - (co[i] - base) + 1);
        if (vocab_size <= 0)
            return tfm_reader_fail(r, &rec, err, "%s %lld: negative id %d at token %lld", what,
                                   line, ids[j], at);
        return tfm_reader_fail(r, &rec, err, "%s %lld: id %d at token %lld outside the "
                               "vocabulary (%lld)", what, line, ids[j], at,
                               (long long)vocab_size);
    }
    if (m)
        memcpy(c->ids + base, ids, (size_t)m * sizeof *ids);

    if (hyp) {
        if (tfm_reader_expect(r, &rec, "hyp.index", TFM_I64, 1, err) < 0)
            return -1;
        if (rec.dims[0] != n)
            return tfm_reader_fail(r, &rec, err, "%lld entries, chunk has %lld sentences",
                                   (long long)rec.dims[0], (long long)n);
        const int64_t *index = rec.data;
        for (int64_t i = 0; i < n; i++) {
            if (index[i] < 0)
                return tfm_reader_fail(r, &rec, err, "negative sentence index");
            if (index[i] >= INT64_MAX - c->index_base)
                return tfm_reader_fail(r, &rec, err, "sentence index %lld too large",
                                       (long long)index[i]);
            c->index[c->n + i] = c->index_base + index[i];
            if (c->index[c->n + i] >= c->index_next)
                c->index_next = c->index[c->n + i] + 1;
        }
        if (tfm_reader_expect(r, &rec, "hyp.score", TFM_F32, 1, err) < 0)
            return -1;
        if (rec.dims[0] != n)
            return tfm_reader_fail(r, &rec, err, "%lld entries, chunk has %lld sentences",
                                   (long long)rec.dims[0], (long long)n);
        memcpy(c->score + c->n, rec.data, (size_t)n * sizeof(float));
    }
    c->n += n;
    c->nread += n;
    return 1;
}

static int check_kind(struct tfm_reader *r, int *hyp, struct tfm_error *err)
{
    const char *kind = tfm_reader_header(r)->kind;
    if (strcmp(kind, TFM_KIND_TOKENS) != 0 && strcmp(kind, TFM_KIND_HYPOTHESES) != 0)
        return tfm_fail(err, "%s: a '%s' stream, expected tokens or hypotheses",
                        tfm_reader_name(r), kind);
    *hyp = strcmp(kind, TFM_KIND_HYPOTHESES) == 0;
    return 0;
}

int tfm_corpus_read(struct tfm_reader *r, struct tfm_corpus *c, int64_t vocab_size,
                    struct tfm_error *err)
{
    int hyp, k;
    if (check_kind(r, &hyp, err))
        return -1;
    while ((k = read_chunk(r, c, vocab_size, hyp, err)) == 1) {
    }
    if (k < 0)
        return -1;
    return reserve(c, c->n, c->n ? c->offsets[c->n] : 0, hyp, err);   /* offsets[0] on empty */
}

int tfm_corpus_read_chunk(struct tfm_reader *r, struct tfm_corpus *c, int64_t vocab_size,
                          struct tfm_error *err)
{
    int hyp;
    if (check_kind(r, &hyp, err))
        return -1;
    c->n = 0;
    int k = read_chunk(r, c, vocab_size, hyp, err);
    if (k == 0 && reserve(c, 0, 0, hyp, err))
        return -1;
    return k;
}

int tfm_corpus_write_chunk(struct tfm_writer *w, const struct tfm_corpus *c, int64_t from,
                           int64_t to, struct tfm_error *err)
{
    int64_t n = to - from, base = c->offsets[from], m = c->offsets[to] - base;
    int64_t *off = malloc((size_t)(n + 1) * sizeof *off);
    if (!off)
        return tfm_fail(err, "out of memory");
    for (int64_t i = 0; i <= n; i++)
        off[i] = c->offsets[from + i] - base;
    int64_t dim = n + 1;
    int rc = tfm_writer_put(w, "tokens.offsets", TFM_I64, 1, &dim, off, err);
    free(off);
    if (rc || tfm_writer_put(w, "tokens.ids", TFM_I32, 1, &m, c->ids + base, err))
        return -1;
    if (c->index && (tfm_writer_put(w, "hyp.index", TFM_I64, 1, &n, c->index + from, err) ||
                     tfm_writer_put(w, "hyp.score", TFM_F32, 1, &n, c->score + from, err)))
        return -1;
    return 0;
}

int tfm_corpus_write(struct tfm_writer *w, const struct tfm_corpus *c, struct tfm_error *err)
{
    int64_t from = 0;
    while (from < c->n) {
        int64_t to = from;
        while (to < c->n && to - from < TFM_CHUNK_SENTS &&
               (to == from || c->offsets[to + 1] - c->offsets[from] <= TFM_CHUNK_IDS))
            to++;
        if (tfm_corpus_write_chunk(w, c, from, to, err))
            return -1;
        from = to;
    }
    return 0;
}
