/* chrf.c: chrF / chrF++ as sacreBLEU computes them (see chrf.h).  Our own implementation;
 * n-grams are counted in the hash tables of bleu.c (character n-grams keyed by code
 * points, word n-grams by interned word ids).  At the end, chrF as a scorer (score.h).
 */
#include "chrf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bleu_unicode.h"
#include "json.h"
#include "score.h"

#define MAXO (2 * TFM_CHRF_MAX_ORDER)

struct chrf_side {              /* the n-grams of one sentence */
    struct tfm_ngrams chars, words;
    int64_t nchar[TFM_CHRF_MAX_ORDER + 1], nword[TFM_CHRF_MAX_ORDER + 1];  /* totals */
};

struct tfm_chrf {
    struct tfm_chrf_opts o;
    int64_t st[3 * MAXO];
    int64_t sentences;
    struct chrf_side hyp, ref;
    uint32_t *cps, *low;
    size_t ccap, lcap;
    uint32_t *ids;
    size_t idcap;
    char *wbuf;         /* this sentence's word strings, append-only (interned) */
    size_t wcap, wlen;
    struct tfm_intern in;
};

void tfm_chrf_opts_default(struct tfm_chrf_opts *o)
{
    o->char_order = 6;
    o->word_order = 0;
    o->beta = 2;
    o->lowercase = 0;
    o->whitespace = 0;
    o->eps_smoothing = 0;
}

struct tfm_chrf *tfm_chrf_new(const struct tfm_chrf_opts *o, struct tfm_error *err)
{
    if (o->char_order < 1 || o->char_order > TFM_CHRF_MAX_ORDER || o->word_order < 0 ||
        o->word_order > TFM_CHRF_MAX_ORDER || o->beta < 1) {
        tfm_fail(err, "chrF orders must be in 1..%d (characters) and 0..%d (words), beta >= 1",
                 TFM_CHRF_MAX_ORDER, TFM_CHRF_MAX_ORDER);
        return NULL;
    }
    struct tfm_chrf *c = calloc(1, sizeof *c);
    if (!c) {
        tfm_fail(err, "out of memory");
        return NULL;
    }
    c->o = *o;
    return c;
}

static void side_free(struct chrf_side *s)
{
    tfm_ngrams_free(&s->chars);
    tfm_ngrams_free(&s->words);
}

void tfm_chrf_free(struct tfm_chrf *c)
{
    if (!c)
        return;
    side_free(&c->hyp);
    side_free(&c->ref);
    free(c->cps);
    free(c->low);
    free(c->ids);
    free(c->wbuf);
    tfm_intern_free(&c->in);
    free(c);
}

static int is_ascii_punct(uint32_t c)
{
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
}

/* Fill side s with the n-grams of line (UTF-8).  Word strings are written to c->wbuf and
 * interned, so ids stay comparable between the hypothesis and its references. */
static int extract(struct tfm_chrf *c, struct chrf_side *s, const char *line, size_t len,
                   struct tfm_error *err)
{
    int64_t n = tfm_utf8_decode(line, len, &c->cps, &c->ccap, err);
    if (n < 0)
        return -1;
    n = tfm_text_rstrip(c->cps, n);
    uint32_t *t = c->cps;
    if (c->o.lowercase) {
        n = tfm_text_lower(c->cps, n, &c->low, &c->lcap, err);
        if (n < 0)
            return -1;
        t = c->low;
    }
    tfm_ngrams_clear(&s->chars);
    tfm_ngrams_clear(&s->words);
    memset(s->nchar, 0, sizeof s->nchar);
    memset(s->nword, 0, sizeof s->nword);

    /* word n-grams first: they need t with its whitespace */
    if (c->o.word_order > 0) {
        if (c->idcap < (size_t)n + 2) {
            uint32_t *ni = realloc(c->ids, ((size_t)n + 2) * sizeof *ni);
            if (!ni)
                return tfm_fail(err, "out of memory");
            c->ids = ni;
            c->idcap = (size_t)n + 2;
        }
        size_t wl = c->wlen;     /* room reserved by tfm_chrf_add */
        int64_t nw = 0, i = 0;
        while (i < n) {
            while (i < n && tfm_uni_is_space(t[i]))
                i++;
            if (i == n)
                break;
            int64_t b = i;
            while (i < n && !tfm_uni_is_space(t[i]))
                i++;
            int64_t e = i, cut = -1;      /* split the word at cut: [b,cut) [cut,e) */
            if (e - b > 1) {
                if (is_ascii_punct(t[e - 1]))
                    cut = e - 1;
                else if (is_ascii_punct(t[b]))
                    cut = b + 1;
            }
            int64_t parts[3] = {b, cut < 0 ? e : cut, e};
            for (int p = 0; p < (cut < 0 ? 1 : 2); p++) {
                const char *w = c->wbuf + wl;
                size_t l0 = wl;
                for (int64_t k = parts[p]; k < parts[p + 1]; k++)
                    wl += (size_t)tfm_utf8_put(c->wbuf + wl, t[k]);
                int64_t id = tfm_intern_id(&c->in, w, wl - l0, err);
                if (id < 0)
                    return -1;
                c->ids[nw++] = (uint32_t)id;
            }
        }
        c->wlen = wl;
        for (int k = 1; k <= c->o.word_order; k++)
            for (int64_t q = 0; q + k <= nw; q++) {
                if (tfm_ngrams_put(&s->words, c->ids + q, k, 1, 0, err) < 0)
                    return -1;
                s->nword[k]++;
            }
    }

    int64_t m = n;
    if (!c->o.whitespace) {
        m = 0;
        for (int64_t i = 0; i < n; i++)
            if (!tfm_uni_is_space(t[i]))
                t[m++] = t[i];
    }
    for (int k = 1; k <= c->o.char_order; k++)
        for (int64_t q = 0; q + k <= m; q++) {
            if (tfm_ngrams_put(&s->chars, t + q, k, 1, 0, err) < 0)
                return -1;
            s->nchar[k]++;
        }
    return 0;
}

/* hyp, ref, match statistics of the hypothesis n-grams against the current reference */
static void match_stats(const struct tfm_ngrams *h, const int64_t *htot,
                        const struct tfm_ngrams *r, const int64_t *rtot, int order,
                        int64_t *out)
{
    for (int k = 1; k <= order; k++) {
        out[3 * (k - 1) + 0] = rtot[k] > 0 ? htot[k] : 0;
        out[3 * (k - 1) + 1] = rtot[k];
        out[3 * (k - 1) + 2] = 0;
    }
    for (size_t i = 0; i < h->cap; i++) {
        const struct tfm_ngram_entry *e = &h->e[i];
        if (!e->n || e->n > order)
            continue;
        int64_t rc = tfm_ngrams_get(r, e->key, e->n);
        out[3 * (e->n - 1) + 2] += rc < e->count ? rc : e->count;
    }
}

double tfm_chrf_compute(const struct tfm_chrf_opts *o, const int64_t *st)
{
    const double eps = 1e-16;
    int order = o->char_order + o->word_order, eff = 0;
    double factor = (double)o->beta * o->beta, score = 0, avg_prec = 0, avg_rec = 0;
    for (int i = 0; i < order; i++) {
        int64_t nh = st[3 * i], nr = st[3 * i + 1], nm = st[3 * i + 2];
        double prec = nh > 0 ? (double)nm / (double)nh : eps;
        double rec = nr > 0 ? (double)nm / (double)nr : eps;
        double denom = factor * prec + rec;
        score += denom > 0 ? ((1 + factor) * prec * rec / denom) : eps;
        if (nh > 0 && nr > 0) {
            avg_prec += prec;
            avg_rec += rec;
            eff++;
        }
    }
    if (o->eps_smoothing)
        return 100 * score / order;
    if (eff == 0) {
        avg_prec = avg_rec = 0;
    } else {
        avg_prec /= eff;
        avg_rec /= eff;
    }
    if (avg_prec + avg_rec != 0) {
        score = (1 + factor) * avg_prec * avg_rec;
        score /= (factor * avg_prec) + avg_rec;
        return 100 * score;
    }
    return 0.0;
}

int tfm_chrf_add(struct tfm_chrf *c, const char *hyp, size_t hyp_len, int nrefs,
                 const char *const *refs, const size_t *ref_lens, struct tfm_error *err)
{
    if (nrefs < 1)
        return tfm_fail(err, "no reference");
    tfm_intern_clear(&c->in);
    if (c->o.word_order > 0) {
        /* interned words point into wbuf, so reserve the whole sentence's room now: a
         * line of L bytes re-encodes (lowercased) into at most 3 L bytes */
        size_t need = 3 * hyp_len + 16;
        for (int r = 0; r < nrefs; r++)
            need += 3 * ref_lens[r] + 16;
        if (c->wcap < need) {
            char *nb = realloc(c->wbuf, need);
            if (!nb)
                return tfm_fail(err, "out of memory (%zu bytes)", need);
            c->wbuf = nb;
            c->wcap = need;
        }
        c->wlen = 0;
    }
    if (extract(c, &c->hyp, hyp, hyp_len, err) < 0)
        return tfm_error_prefix(err, "hypothesis");
    int order = c->o.char_order + c->o.word_order;
    int64_t best[3 * MAXO], cur[3 * MAXO];
    double best_f = -1.0;
    int rc = 0;
    for (int r = 0; r < nrefs; r++) {
        if (extract(c, &c->ref, refs[r], ref_lens[r], err) < 0) {
            rc = tfm_error_prefix(err, "reference %d", r + 1);
            break;
        }
        match_stats(&c->hyp.chars, c->hyp.nchar, &c->ref.chars, c->ref.nchar,
                    c->o.char_order, cur);
        if (c->o.word_order > 0)
            match_stats(&c->hyp.words, c->hyp.nword, &c->ref.words, c->ref.nword,
                        c->o.word_order, cur + 3 * c->o.char_order);
        double f = tfm_chrf_compute(&c->o, cur);
        if (f > best_f) {
            best_f = f;
            memcpy(best, cur, sizeof(int64_t) * 3 * order);
        }
    }
    if (rc < 0)
        return rc;
    for (int i = 0; i < 3 * order; i++)
        c->st[i] += best[i];
    c->sentences++;
    return 0;
}

const int64_t *tfm_chrf_stats(const struct tfm_chrf *c, int *n)
{
    *n = 3 * (c->o.char_order + c->o.word_order);
    return c->st;
}

int tfm_chrf_name(const struct tfm_chrf_opts *o, char *buf, size_t n)
{
    char plus[TFM_CHRF_MAX_ORDER + 1];
    int k;
    for (k = 0; k < o->word_order && k < TFM_CHRF_MAX_ORDER; k++)
        plus[k] = '+';
    plus[k] = '\0';
    return snprintf(buf, n, "chrF%d%s", o->beta, plus);
}

int tfm_chrf_signature(const struct tfm_chrf_opts *o, int nrefs, const char *version,
                       char *buf, size_t n)
{
    char refs[16];
    if (nrefs < 0)
        snprintf(refs, sizeof refs, "var");
    else
        snprintf(refs, sizeof refs, "%d", nrefs);
    return snprintf(buf, n, "nrefs:%s|case:%s|eff:%s|nc:%d|nw:%d|space:%s|version:%s", refs,
                    o->lowercase ? "lc" : "mixed", o->eps_smoothing ? "no" : "yes",
                    o->char_order, o->word_order, o->whitespace ? "yes" : "no", version);
}

/* ---- the scorer (score.h) ------------------------------------------------------------ */

static int chrf_add(struct tfm_scorer *s, int64_t i, const char *hyp, size_t hyp_len,
                    const char *const *refs, const size_t *ref_lens, struct tfm_error *err)
{
    if (tfm_chrf_add(s->metric, hyp, hyp_len, s->nrefs, refs, ref_lens, err) < 0)
        return tfm_error_prefix(err, "line %lld", (long long)i + 1);
    return 0;
}

static int chrf_report(struct tfm_scorer *s, struct tfm_error *err)
{
    (void)err;
    const struct tfm_chrf *c = s->metric;
    int ns;
    const int64_t *st = tfm_chrf_stats(c, &ns);
    double score = tfm_chrf_compute(&c->o, st);
    char name[32], sig[256], line[64];
    tfm_chrf_name(&c->o, name, sizeof name);
    tfm_chrf_signature(&c->o, s->nrefs, s->o.version, sig, sizeof sig);
    snprintf(line, sizeof line, "%s = %.2f", name, score);
    struct tfm_json j;
    if (!tfm_score_sacrebleu_report(s, &j, line, name, score, sig, NULL))
        return 0;
    tfm_json_member_ints(&j, "statistics", st, ns);
    tfm_json_member_int(&j, "sentences", s->added);
    tfm_json_end(&j);
    return 0;
}

static void chrf_metric_free(void *c)
{
    tfm_chrf_free(c);
}

static const struct tfm_scorer_ops CHRF_OPS = {
    .add = chrf_add, .report = chrf_report, .free = chrf_metric_free,
};

struct tfm_scorer *tfm_chrf_scorer(const struct tfm_chrf_opts *o, int nrefs,
                                   const struct tfm_score_opts *so, struct tfm_error *err)
{
    struct tfm_chrf *c = tfm_chrf_new(o, err);
    return c ? tfm_scorer_new(&CHRF_OPS, c, so, nrefs, err) : NULL;
}
