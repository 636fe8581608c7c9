/* beam.c: beam search, greedy search and sampling over an abstract step model (beam.h).
 *
 * State lives in rows: row r is one live hypothesis (its sentence, its tokens so far, its
 * log P).  The rows of one sentence are contiguous and sentences keep their order, so the
 * rows passed to the model are always "sentence 0's hypotheses, sentence 1's, ...".  Each
 * step: the model scores all rows; every active sentence picks its extensions; the new
 * rows are written to a second set of arrays (tokens copied from the parent), the two
 * sets are swapped, and the model is told which old row each new row continues.
 */
#include "beam.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"     /* tfm_rng_mix */

#define MAX_WIDTH 4096          /* beam or number of samples */
#define MAX_LEN (1 << 20)       /* tokens of one hypothesis */

void tfm_beam_defaults(struct tfm_beam_opts *o)
{
    memset(o, 0, sizeof *o);
    o->beam = 4;
    o->alpha = 0.6;
    o->nbest = 1;
    o->min_len = 1;
    o->early_stop = 1;
    o->topk = 0;
    o->topp = 1.0;
    o->temperature = 1.0;
    o->seed = 1;
    o->pad = 0;
    o->bos = 2;
    o->eos = 3;
}

int tfm_beam_check(const struct tfm_beam_opts *o, int vocab, struct tfm_error *err)
{
    if (o->beam < 1 || o->beam > MAX_WIDTH)
        return tfm_fail(err, "beam %d outside [1, %d]", o->beam, MAX_WIDTH);
    if (o->nbest < 1 || o->nbest > MAX_WIDTH)
        return tfm_fail(err, "nbest %d outside [1, %d]", o->nbest, MAX_WIDTH);
    if (!o->sample && o->nbest > o->beam)
        return tfm_fail(err, "nbest %d exceeds the beam (%d)", o->nbest, o->beam);
    if (o->min_len < 0 || o->min_len > MAX_LEN)
        return tfm_fail(err, "min_len %d outside [0, %d]", o->min_len, MAX_LEN);
    if (!isfinite(o->alpha) || fabs(o->alpha) > 100)
        return tfm_fail(err, "alpha %g outside [-100, 100]", o->alpha);
    if (o->topk < 0)
        return tfm_fail(err, "top-k %d is negative", o->topk);
    if (!(o->topp > 0 && o->topp <= 1))
        return tfm_fail(err, "top-p %g outside (0, 1]", o->topp);
    if (!(o->temperature > 0) || !isfinite(o->temperature))
        return tfm_fail(err, "temperature %g is not positive", o->temperature);
    if (vocab < 1)
        return tfm_fail(err, "vocabulary of %d tokens", vocab);
    if (o->eos < 0 || o->eos >= vocab || o->bos < 0 || o->bos >= vocab || o->pad < 0 ||
        o->pad >= vocab)
        return tfm_fail(err, "special ids pad %d, bos %d, eos %d outside the vocabulary (%d)",
                        o->pad, o->bos, o->eos, vocab);
    return 0;
}

double tfm_beam_lp(int n, double alpha)
{
    return pow((5.0 + n) / 6.0, alpha);
}

void tfm_hyps_free(struct tfm_hyps *h)
{
    free(h->offsets);
    free(h->ids);
    free(h->sent);
    free(h->score);
    free(h->logp);
    memset(h, 0, sizeof *h);
}

/* ---- random numbers: counter-based, so a draw depends only on its coordinates ---- */

/* Uniform in [0, 1) for (seed, sentence, sample, step). */
static double uniform(uint64_t seed, int64_t sent, int sample, int step)
{
    uint64_t h = tfm_rng_mix(seed);
    h = tfm_rng_mix(h ^ (uint64_t)sent);
    h = tfm_rng_mix(h ^ (uint64_t)(uint32_t)sample);
    h = tfm_rng_mix(h ^ (uint64_t)(uint32_t)step);
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- the search ---- */

struct rows {                   /* one set of live rows */
    int n;
    int32_t *tok;               /* [cap] last token (the next step's input) */
    int32_t *src;               /* [cap] sentence */
    int32_t *keep;              /* [cap] parent row in the previous set */
    int32_t *sample;            /* [cap] sample number (sampling) */
    double *lp;                 /* [cap] log P so far */
    int32_t *hist;              /* [cap, maxT] tokens so far */
};

struct sent {                   /* one sentence */
    int active;
    int row0, nrows;            /* its rows in the current set */
    int nfin;                   /* finished hypotheses kept (<= nbest), best first */
};

struct cand {
    double lp;
    int row;
    int32_t tok;
};

struct search {
    const struct tfm_step_model *m;
    const struct tfm_beam_opts *o;
    int nsent, vocab, maxT, width, nbest;
    const int *max_len;
    const int64_t *sent_id;
    struct sent *s;
    struct rows a, b;           /* current and next rows */
    float *logp;                /* [rows, vocab], or NULL with step_top: */
    int topk;                   /* with step_top: candidates per row */
    float *top_lp, *also_lp;    /* [rows, topk], [rows] (eos) */
    int32_t *top_tok;           /* [rows, topk] */
    double *lpen;               /* [maxT + 2] lp(n) */
    /* finished: [nsent, nbest] entries; tokens [nsent, nbest, maxT] */
    double *fin_score, *fin_lp;
    int32_t *fin_len, *fin_tok;
    struct cand *cand;          /* [2 * beam] */
    struct cand *sorted;        /* [vocab] for sampling */
};

static int rows_alloc(struct rows *r, size_t cap, size_t maxT)
{
    r->n = 0;
    r->tok = malloc(cap * sizeof *r->tok);
    r->src = malloc(cap * sizeof *r->src);
    r->keep = malloc(cap * sizeof *r->keep);
    r->sample = malloc(cap * sizeof *r->sample);
    r->lp = malloc(cap * sizeof *r->lp);
    r->hist = malloc(cap * maxT * sizeof *r->hist);
    return r->tok && r->src && r->keep && r->sample && r->lp && r->hist ? 0 : -1;
}

static void rows_free(struct rows *r)
{
    free(r->tok);
    free(r->src);
    free(r->keep);
    free(r->sample);
    free(r->lp);
    free(r->hist);
}

/* Offer a finished hypothesis of sentence si: the tokens of row `row` of the current set
 * (t of them; row < 0: none) plus nothing (eos is implicit), with log P lp.  Kept if it
 * is among the nbest best by score; ties keep the earlier one first. */
static void finish(struct search *S, int si, int row, int t, double lp)
{
    struct sent *s = &S->s[si];
    double score = lp / S->lpen[t + 1];
    int nb = S->nbest, p = s->nfin;
    double *sc = S->fin_score + (size_t)si * nb;
    while (p > 0 && sc[p - 1] < score)
        p--;
    if (p >= nb)
        return;
    double *fl = S->fin_lp + (size_t)si * nb;
    int32_t *len = S->fin_len + (size_t)si * nb;
    int32_t *tok = S->fin_tok + (size_t)si * nb * S->maxT;
    int last = s->nfin < nb ? s->nfin : nb - 1;     /* the slot that receives the shift */
    for (int j = last; j > p; j--) {
        sc[j] = sc[j - 1];
        fl[j] = fl[j - 1];
        len[j] = len[j - 1];
        memcpy(tok + (size_t)j * S->maxT, tok + (size_t)(j - 1) * S->maxT,
               (size_t)len[j] * sizeof *tok);
    }
    sc[p] = score;
    fl[p] = lp;
    len[p] = t;
    if (t > 0)
        memcpy(tok + (size_t)p * S->maxT, S->a.hist + (size_t)row * S->maxT,
               (size_t)t * sizeof *tok);
    if (s->nfin < nb)
        s->nfin++;
}

/* Append a new row continuing row `row` of the current set with token tok. */
static void extend(struct search *S, int si, int row, int t, int32_t tok, double lp, int sample)
{
    struct rows *b = &S->b;
    int i = b->n++;
    b->tok[i] = tok;
    b->src[i] = si;
    b->keep[i] = row;
    b->sample[i] = sample;
    b->lp[i] = lp;
    int32_t *h = b->hist + (size_t)i * S->maxT;
    if (t > 0)
        memcpy(h, S->a.hist + (size_t)row * S->maxT, (size_t)t * sizeof *h);
    h[t] = tok;
    S->s[si].nrows++;
}

/* Tokens that may not follow a prefix of t tokens (the forced eos at max_len aside). */
static int banned(const struct search *S, int v, int t)
{
    return v == S->o->pad || v == S->o->bos || (v == S->o->eos && t < S->o->min_len);
}

/* Vocabulary entries scanned as a block: one vectorized maximum decides whether the block
 * can hold a candidate at all (after the first few blocks it almost never does). */
#define SCAN_BLOCK 32

/* Insert candidate (x, row, tok) into c[0..*nc) (at most C, best first); equal values keep
 * the earlier candidate first.  Callers have checked that it beats c[C-1] when full. */
static void cand_insert(struct cand *c, int *nc, int C, double x, int row, int32_t tok)
{
    int p = *nc < C ? (*nc)++ : C - 1;
    while (p > 0 && c[p - 1].lp < x) {
        c[p] = c[p - 1];
        p--;
    }
    c[p] = (struct cand){x, row, tok};
}

/* Beam search step for sentence si (K >= 2). */
static void step_beam(struct search *S, int si, int t)
{
    struct sent *s = &S->s[si];
    int K = S->o->beam, C = 2 * K, nc = 0, V = S->vocab;
    int row0 = s->row0, n = s->nrows;
    s->row0 = S->b.n;
    s->nrows = 0;
    if (t == S->max_len[si]) {                      /* forced eos */
        for (int r = row0; r < row0 + n; r++)
            finish(S, si, r, t, S->a.lp[r] + (S->logp ? S->logp[(size_t)r * V + S->o->eos]
                                                      : S->also_lp[r]));
        s->active = 0;
        return;
    }
    struct cand *c = S->cand;
    for (int r = row0; r < row0 + n && !S->logp; r++) {
        /* the row's best tokens, best first: the first that does not fit ends the row */
        const float *lp = S->top_lp + (size_t)r * S->topk;
        const int32_t *tok = S->top_tok + (size_t)r * S->topk;
        for (int j = 0; j < S->topk && tok[j] >= 0; j++) {
            double x = S->a.lp[r] + lp[j];
            if (nc == C && !(x > c[C - 1].lp))
                break;
            cand_insert(c, &nc, C, x, r, tok[j]);
        }
    }
    for (int r = row0; r < row0 + n && S->logp; r++) {
        const float *lp = S->logp + (size_t)r * V;
        double base = S->a.lp[r];
        for (int v0 = 0; v0 < V; v0 += SCAN_BLOCK) {
            int v1 = V - v0 < SCAN_BLOCK ? V : v0 + SCAN_BLOCK;
            if (nc == C) {
                /* base + lp is monotone in lp: when the block's largest value does not
                 * beat the last candidate, no value of the block does */
                float bm = -INFINITY;
#pragma omp simd reduction(max : bm)
                for (int v = v0; v < v1; v++)
                    bm = lp[v] > bm ? lp[v] : bm;
                if (!(base + bm > c[C - 1].lp))
                    continue;
            }
            for (int v = v0; v < v1; v++) {
                double x = base + lp[v];
                if (!(x > -INFINITY) || banned(S, v, t))
                    continue;
                if (nc == C && !(x > c[C - 1].lp))
                    continue;
                cand_insert(c, &nc, C, x, r, v);
            }
        }
    }
    double best_live = 0;
    for (int i = 0; i < nc; i++) {
        if (c[i].tok == S->o->eos) {
            if (i < K)                              /* an eos ranked below K is dropped */
                finish(S, si, c[i].row, t, c[i].lp);
        } else if (s->nrows < K) {
            if (s->nrows == 0)
                best_live = c[i].lp;
            extend(S, si, c[i].row, t, c[i].tok, c[i].lp, 0);
        }
    }
    if (s->nrows == 0) {
        s->active = 0;
        return;
    }
    if (S->o->early_stop && s->nfin >= S->nbest) {
        /* live prefixes have t+1 tokens: they finish with |Y| in [t+2, max_len+1] */
        double l1 = S->lpen[t + 2], l2 = S->lpen[S->max_len[si] + 1];
        double bound = best_live / (best_live <= 0 ? fmax(l1, l2) : fmin(l1, l2));
        if (S->fin_score[(size_t)si * S->nbest + S->nbest - 1] >= bound) {
            S->b.n -= s->nrows;                     /* drop its live rows */
            s->nrows = 0;
            s->active = 0;
        }
    }
}

/* The first allowed token of largest log-probability (> -inf) after a prefix of t tokens,
 * or -1.  One vectorized pass finds the largest value and a second its first position;
 * only when that position is a banned token (rare) does the scalar scan decide. */
static int argmax_allowed(const struct search *S, const float *lp, int t)
{
    int V = S->vocab;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int v = 0; v < V; v++)
        mx = lp[v] > mx ? lp[v] : mx;
    if (!(mx > -INFINITY))
        return -1;
    int v = 0;
    while (lp[v] != mx)
        v++;
    if (!banned(S, v, t))                   /* tokens before v are all below mx */
        return v;
    int best = -1;
    for (v = 0; v < V; v++)
        if (!banned(S, v, t) && lp[v] > -INFINITY && (best < 0 || lp[v] > lp[best]))
            best = v;
    return best;
}

/* Greedy step for sentence si: its one row takes the best token, eos included. */
static void step_greedy(struct search *S, int si, int t)
{
    struct sent *s = &S->s[si];
    int r = s->row0, V = S->vocab;
    s->row0 = S->b.n;
    s->nrows = 0;
    int best;
    double x;
    if (!S->logp) {                                 /* the row's best token is given */
        best = t == S->max_len[si] ? S->o->eos : S->top_tok[r];
        x = best == S->o->eos && t == S->max_len[si] ? S->also_lp[r] : S->top_lp[r];
    } else {
        const float *lp = S->logp + (size_t)r * V;
        best = t == S->max_len[si] ? S->o->eos : argmax_allowed(S, lp, t);
        x = best >= 0 ? lp[best] : 0;
    }
    x += S->a.lp[r];
    if (best < 0) {
        s->active = 0;
    } else if (best == S->o->eos) {
        finish(S, si, r, t, x);
        s->active = 0;
    } else {
        extend(S, si, r, t, best, x, 0);
    }
}

static int cmp_cand_desc(const void *x, const void *y)
{
    const struct cand *a = x, *b = y;
    if (a->lp != b->lp)
        return a->lp < b->lp ? 1 : -1;
    return (a->tok > b->tok) - (a->tok < b->tok);
}

/* Draw a token to follow a prefix of t tokens from row lp (vocab entries) under temperature, top-k and top-p; -1 if
 * no token is allowed. */
static int draw(struct search *S, const float *lp, int t, double u)
{
    const struct tfm_beam_opts *o = S->o;
    struct cand *c = S->sorted;
    int n = 0;
    for (int v = 0; v < S->vocab; v++)
        if (!banned(S, v, t) && lp[v] > -INFINITY)
            c[n++] = (struct cand){lp[v] / o->temperature, 0, v};
    if (n == 0)
        return -1;
    int cut = o->topk > 0 && o->topk < n;
    if (cut || o->topp < 1) {
        qsort(c, (size_t)n, sizeof *c, cmp_cand_desc);
        if (cut)
            n = o->topk;
    }
    double mx = -INFINITY, total = 0;
    for (int i = 0; i < n; i++)
        mx = fmax(mx, c[i].lp);
    for (int i = 0; i < n; i++) {
        c[i].lp = exp(c[i].lp - mx);
        total += c[i].lp;
    }
    if (o->topp < 1) {                              /* smallest prefix reaching topp */
        double acc = 0, need = o->topp * total;
        int k = 0;
        while (k < n && acc < need)
            acc += c[k++].lp;
        n = k > 0 ? k : 1;
        total = acc > 0 ? acc : c[0].lp;
    }
    double x = u * total, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += c[i].lp;
        if (x < acc)
            return c[i].tok;
    }
    return c[n - 1].tok;                            /* rounding at the top end */
}

/* Sampling step for sentence si: each live sample draws its next token. */
static void step_sample(struct search *S, int si, int t)
{
    struct sent *s = &S->s[si];
    int row0 = s->row0, n = s->nrows, V = S->vocab;
    int64_t id = S->sent_id ? S->sent_id[si] : si;
    s->row0 = S->b.n;
    s->nrows = 0;
    int nsamp = t == 0 ? S->nbest : n;              /* at t = 0 all samples share a row */
    for (int j = 0; j < nsamp; j++) {
        int r = t == 0 ? row0 : row0 + j;
        int sample = t == 0 ? j : S->a.sample[r];
        const float *lp = S->logp + (size_t)r * V;
        int tok = t == S->max_len[si] ? S->o->eos : draw(S, lp, t, uniform(S->o->seed, id, sample, t));
        if (tok < 0)
            continue;
        double x = S->a.lp[r] + lp[tok];
        if (tok == S->o->eos)
            finish(S, si, r, t, x);
        else
            extend(S, si, r, t, tok, x, sample);
    }
    if (s->nrows == 0)
        s->active = 0;
}

static int overflow(size_t a, size_t b, size_t lim)
{
    return b != 0 && a > lim / b;
}

static int collect(struct search *S, struct tfm_hyps *out, struct tfm_error *err)
{
    int64_t n = 0, m = 0;
    for (int si = 0; si < S->nsent; si++) {
        int k = S->s[si].nfin ? S->s[si].nfin : 1;
        n += k;
        for (int j = 0; j < S->s[si].nfin; j++)
            m += S->fin_len[(size_t)si * S->nbest + j];
    }
    out->n = n;
    out->offsets = malloc((size_t)(n + 1) * sizeof *out->offsets);
    out->ids = malloc((size_t)(m ? m : 1) * sizeof *out->ids);
    out->sent = malloc((size_t)(n ? n : 1) * sizeof *out->sent);
    out->score = malloc((size_t)(n ? n : 1) * sizeof *out->score);
    out->logp = malloc((size_t)(n ? n : 1) * sizeof *out->logp);
    if (!out->offsets || !out->ids || !out->sent || !out->score || !out->logp)
        return tfm_fail(err, "out of memory for %lld hypotheses", (long long)n);
    int64_t h = 0, off = 0;
    out->offsets[0] = 0;
    for (int si = 0; si < S->nsent; si++) {
        const struct sent *s = &S->s[si];
        if (s->nfin == 0) {
            out->sent[h] = si;
            out->score[h] = -INFINITY;
            out->logp[h] = -INFINITY;
            out->offsets[++h] = off;
            continue;
        }
        for (int j = 0; j < s->nfin; j++) {
            size_t f = (size_t)si * S->nbest + j;
            int len = S->fin_len[f];
            memcpy(out->ids + off, S->fin_tok + f * S->maxT, (size_t)len * sizeof *out->ids);
            off += len;
            out->sent[h] = si;
            out->score[h] = (float)S->fin_score[f];
            out->logp[h] = S->fin_lp[f];
            out->offsets[++h] = off;
        }
    }
    return 0;
}

static int search_run(struct search *S, struct tfm_hyps *out, struct tfm_error *err)
{
    const struct tfm_beam_opts *o = S->o;
    struct rows *a = &S->a;
    /* one row per sentence, bos as the first input */
    a->n = S->nsent;
    for (int si = 0; si < S->nsent; si++) {
        a->tok[si] = o->bos;
        a->src[si] = si;
        a->keep[si] = si;
        a->sample[si] = 0;
        a->lp[si] = 0;
        S->s[si] = (struct sent){1, si, 1, 0};
    }
    for (int t = 0; a->n > 0; t++) {
        if (S->logp) {
            if (S->m->step(S->m->ctx, a->n, a->tok, a->src, S->logp, err))
                return -1;
        } else {
            int32_t ban[3] = {o->pad, o->bos, o->eos};
            int nban = t < o->min_len ? 3 : 2;
            if (S->m->step_top(S->m->ctx, a->n, a->tok, a->src, S->topk, ban, nban, o->eos,
                               S->top_lp, S->top_tok, S->also_lp, err))
                return -1;
        }
        S->b.n = 0;
        for (int si = 0; si < S->nsent; si++) {
            if (!S->s[si].active)
                continue;
            if (o->sample)
                step_sample(S, si, t);
            else if (o->beam == 1)
                step_greedy(S, si, t);
            else
                step_beam(S, si, t);
        }
        struct rows tmp = S->a;
        S->a = S->b;
        S->b = tmp;
        if (a->n > 0 && S->m->select(S->m->ctx, a->n, a->keep, err))
            return -1;
    }
    return collect(S, out, err);
}

int tfm_beam_search(const struct tfm_step_model *m, int nsent, const int *max_len,
                    const int64_t *sent_id, const struct tfm_beam_opts *o,
                    struct tfm_hyps *out, struct tfm_error *err)
{
    memset(out, 0, sizeof *out);
    if (tfm_beam_check(o, m->vocab, err))
        return -1;
    if (nsent < 0)
        return tfm_fail(err, "negative number of sentences");
    int maxL = 0;
    for (int si = 0; si < nsent; si++) {
        if (max_len[si] < 0 || max_len[si] > MAX_LEN)
            return tfm_fail(err, "sentence %d: maximum length %d outside [0, %d]", si,
                            max_len[si], MAX_LEN);
        if (max_len[si] > maxL)
            maxL = max_len[si];
    }
    struct search S = {.m = m, .o = o, .nsent = nsent, .vocab = m->vocab, .max_len = max_len,
                       .sent_id = sent_id, .nbest = o->nbest};
    S.maxT = maxL + 1;
    S.width = o->sample ? o->nbest : o->beam;
    if (nsent > 0 && S.width > INT_MAX / nsent)
        return tfm_fail(err, "%d sentences of %d rows each: too many rows", nsent, S.width);
    size_t cap = (size_t)(nsent > 0 ? nsent : 1) * (size_t)S.width;
    size_t big = (size_t)1 << 40;
    if (overflow(cap, (size_t)S.vocab, big / sizeof(float)) ||
        overflow(cap, (size_t)S.maxT, big / sizeof(int32_t)) ||
        overflow((size_t)(nsent > 0 ? nsent : 1) * (size_t)o->nbest, (size_t)S.maxT,
                 big / sizeof(int32_t)))
        return tfm_fail(err, "search of %d sentences, %d rows each, length %d, vocabulary %d "
                        "too large", nsent, S.width, S.maxT, S.vocab);
    size_t nfin = (size_t)(nsent > 0 ? nsent : 1) * (size_t)o->nbest;
    int rc = -1;
    S.s = calloc((size_t)(nsent > 0 ? nsent : 1), sizeof *S.s);
    if (m->step_top && !o->sample) {
        /* K + 1 tokens of each row are enough: a row gives at most K live hypotheses and
         * one eos, and an eos that K + 1 tokens of its row beat ranks below K */
        S.topk = o->beam == 1 ? 1 : o->beam + 1 < S.vocab ? o->beam + 1 : S.vocab;
        S.top_lp = malloc(cap * (size_t)S.topk * sizeof *S.top_lp);
        S.top_tok = malloc(cap * (size_t)S.topk * sizeof *S.top_tok);
        S.also_lp = malloc(cap * sizeof *S.also_lp);
    } else {
        S.logp = malloc(cap * (size_t)S.vocab * sizeof *S.logp);
    }
    S.lpen = malloc(((size_t)S.maxT + 2) * sizeof *S.lpen);
    S.fin_score = malloc(nfin * sizeof *S.fin_score);
    S.fin_lp = malloc(nfin * sizeof *S.fin_lp);
    S.fin_len = malloc(nfin * sizeof *S.fin_len);
    S.fin_tok = malloc(nfin * (size_t)S.maxT * sizeof *S.fin_tok);
    S.cand = malloc(2 * (size_t)o->beam * sizeof *S.cand);
    S.sorted = o->sample ? malloc((size_t)S.vocab * sizeof *S.sorted) : NULL;
    int ok = rows_alloc(&S.a, cap, (size_t)S.maxT) == 0;
    ok = rows_alloc(&S.b, cap, (size_t)S.maxT) == 0 && ok;
    if (!ok || !S.s || !(S.logp || (S.top_lp && S.top_tok && S.also_lp)) || !S.lpen || !S.fin_score || !S.fin_lp || !S.fin_len ||
        !S.fin_tok || !S.cand || (o->sample && !S.sorted)) {
        tfm_fail(err, "out of memory for the search (%d sentences, %d rows each, length %d)",
                 nsent, S.width, S.maxT);
        goto done;
    }
    for (int n = 0; n <= S.maxT + 1; n++)
        S.lpen[n] = tfm_beam_lp(n, o->alpha);
    rc = search_run(&S, out, err);
done:
    if (rc)
        tfm_hyps_free(out);
    rows_free(&S.a);
    rows_free(&S.b);
    free(S.s);
    free(S.logp);
    free(S.top_lp);
    free(S.top_tok);
    free(S.also_lp);
    free(S.lpen);
    free(S.fin_score);
    free(S.fin_lp);
    free(S.fin_len);
    free(S.fin_tok);
    free(S.cand);
    free(S.sorted);
    return rc;
}
