/* test_beam: beam search, greedy search and sampling (src/beam.c) on toy step models
 * whose answers are known: brute-force enumeration of every sequence, greedy by hand,
 * crafted length-penalty cases, early stop against running to the maximum length, and
 * the empirical distribution of sampling. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "beam.h"
#include "check.h"
#include "topk.h"

/* ---- a toy model: next-token log-probs are a function of (sentence, whole prefix) ----
 * The model keeps each row's prefix itself (its "cache"), appended by step and
 * rearranged by select, so a wrong select shows up as wrong probabilities. */

#define V 7             /* 0 pad, 1 unk, 2 bos, 3 eos, 4 5 6 */
#define MAXH 24
#define ROWS 32768

typedef void (*dist_fn)(int src, const int32_t *hist, int n, float *logp /*[V]*/);

struct toy {
    dist_fn dist;
    int nrows;
    int32_t src[ROWS];
    int32_t hist[ROWS][MAXH];
    int len[ROWS];
    int steps, select_calls, bad;
    int fail_at;                /* step that fails (0: never) */
};

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t g_salt;

/* Pseudo-random distribution of the prefix, pad and bos included (never generated). */
static void dist_random(int src, const int32_t *hist, int n, float *logp)
{
    uint64_t h = mix(g_salt ^ (uint64_t)src);
    for (int i = 0; i < n; i++)
        h = mix(h ^ (uint64_t)hist[i]);
    double x[V], mx = -1e30, z = 0;
    double spread = 1.0 + (double)(h % 4);     /* some rows peaked, some flat */
    for (int v = 0; v < V; v++) {
        h = mix(h);
        x[v] = spread * ((double)(h >> 11) / 9007199254740992.0) * 2.0;
        mx = fmax(mx, x[v]);
    }
    for (int v = 0; v < V; v++)
        z += exp(x[v] - mx);
    for (int v = 0; v < V; v++)
        logp[v] = (float)(x[v] - mx - log(z));
}

static int toy_step(void *ctx, int nrows, const int32_t *last, const int32_t *src, float *logp,
                    struct tfm_error *err)
{
    struct toy *t = ctx;
    t->steps++;
    if (t->fail_at && t->steps == t->fail_at)
        return tfm_fail(err, "toy: step %d fails", t->steps);
    if (t->steps == 1) {                /* first call: one row per sentence */
        t->nrows = nrows;
        for (int r = 0; r < nrows; r++) {
            t->len[r] = 0;
            t->src[r] = r;
        }
    }
    if (nrows != t->nrows)
        t->bad++;
    for (int r = 0; r < nrows; r++) {
        if (src[r] != t->src[r])
            t->bad++;
        if (t->len[r] >= MAXH) {
            t->bad++;
            continue;
        }
        t->hist[r][t->len[r]++] = last[r];
        t->dist(src[r], t->hist[r], t->len[r], logp + (size_t)r * V);
    }
    return 0;
}

static int toy_select(void *ctx, int nrows, const int32_t *keep, struct tfm_error *err)
{
    (void)err;
    static int32_t hist[ROWS][MAXH], len[ROWS], src[ROWS];
    struct toy *t = ctx;
    t->select_calls++;
    for (int i = 0; i < nrows; i++) {
        if (keep[i] < 0 || keep[i] >= t->nrows) {
            t->bad++;
            return tfm_fail(err, "bad keep");
        }
        memcpy(hist[i], t->hist[keep[i]], sizeof hist[i]);
        len[i] = t->len[keep[i]];
        src[i] = t->src[keep[i]];
    }
    memcpy(t->hist, hist, (size_t)nrows * sizeof hist[0]);
    memcpy(t->len, len, (size_t)nrows * sizeof len[0]);
    memcpy(t->src, src, (size_t)nrows * sizeof src[0]);
    t->nrows = nrows;
    return 0;
}

static struct tfm_step_model toy_model(struct toy *t, dist_fn f)
{
    memset(t, 0, sizeof *t);
    t->dist = f;
    return (struct tfm_step_model){t, V, toy_step, toy_select, NULL};
}

/* ---- brute force: every sequence of allowed tokens of length <= L, then eos ---- */

struct seq {
    int len;
    int32_t tok[MAXH];
    double lp, score;
};

static struct seq *g_all;
static int g_nall;

static int g_min_len;             /* brute force: eos needs this many tokens (or L) */

static void enumerate(dist_fn f, int src, int32_t *hist, int n, double lp, int L, double alpha)
{
    float logp[V];
    f(src, hist, n, logp);                  /* hist = bos + n-1 tokens */
    if (n - 1 >= g_min_len || n - 1 == L) {
        struct seq *s = &g_all[g_nall++];
        s->len = n - 1;
        memcpy(s->tok, hist + 1, (size_t)(n - 1) * sizeof *hist);
        s->lp = lp + logp[3];
        s->score = s->lp / tfm_beam_lp(n, alpha);
    }
    if (n - 1 == L)
        return;
    for (int v = 0; v < V; v++) {
        if (v == 0 || v == 2 || v == 3)
            continue;
        hist[n] = v;
        enumerate(f, src, hist, n + 1, lp + logp[v], L, alpha);
    }
}

static int by_score(const void *x, const void *y)
{
    const struct seq *a = x, *b = y;
    return (a->score < b->score) - (a->score > b->score);
}

/* All sequences of sentence src with at most L tokens (and at least g_min_len, unless L
 * is smaller), best first; the sort is stable, so ties keep enumeration order. */
static int brute(dist_fn f, int src, int L, double alpha)
{
    int32_t hist[MAXH] = {2};
    g_nall = 0;
    enumerate(f, src, hist, 1, 0.0, L, alpha);
    qsort(g_all, (size_t)g_nall, sizeof *g_all, by_score);
    return g_nall;
}

static int same_ids(const struct tfm_hyps *h, int64_t i, const int32_t *tok, int len)
{
    int64_t n = h->offsets[i + 1] - h->offsets[i];
    return n == len && memcmp(h->ids + h->offsets[i], tok, (size_t)len * sizeof *tok) == 0;
}

/* First hypothesis of sentence s in h. */
static int64_t first_of(const struct tfm_hyps *h, int s)
{
    for (int64_t i = 0; i < h->n; i++)
        if (h->sent[i] == s)
            return i;
    return -1;
}

/* ---- tests ---- */

static void test_exhaustive_beam_is_exact(void)
{
    /* 4 allowed tokens, length <= 4: 341 sequences; a beam of 1024 keeps every prefix and
     * every eos ranks among the first 1024 extensions (at most 64 * 5 before the last step,
     * where eos is forced) */
    double alphas[] = {0.0, 0.6, 1.5, -0.7};
    int max_len[] = {4, 2, 0, 3, 4};
    g_all = malloc(4096 * sizeof *g_all);
    for (int a = 0; a < 4; a++)
        for (int ml = 0; ml <= 3; ml++) {
            g_salt = 11 + (uint64_t)a;
            static struct toy t;
            struct tfm_step_model m = toy_model(&t, dist_random);
            struct tfm_beam_opts o;
            tfm_beam_defaults(&o);
            o.beam = 1024;
            o.nbest = 6;
            o.alpha = alphas[a];
            o.min_len = ml;
            g_min_len = ml;
            struct tfm_hyps h;
            struct tfm_error err;
            CHECK(tfm_beam_search(&m, 5, max_len, NULL, &o, &h, &err) == 0);
            CHECK_EQ_INT(t.bad, 0);
            for (int s = 0; s < 5; s++) {
                int n = brute(dist_random, s, max_len[s], o.alpha);
                int64_t i0 = first_of(&h, s);
                int want = n < 6 ? n : 6;
                CHECK(i0 >= 0);
                for (int j = 0; j < want && i0 >= 0; j++) {
                    CHECK(i0 + j < h.n && h.sent[i0 + j] == s);
                    CHECK(same_ids(&h, i0 + j, g_all[j].tok, g_all[j].len));
                    CHECK_NEAR(h.score[i0 + j], g_all[j].score, 1e-6);
                    CHECK_NEAR(h.logp[i0 + j], g_all[j].lp, 1e-9);
                    int len = (int)(h.offsets[i0 + j + 1] - h.offsets[i0 + j]);
                    CHECK(len >= ml || len == max_len[s]);
                }
                if (max_len[s] == 0)    /* only the empty hypothesis exists */
                    CHECK(i0 >= 0 && i0 + 1 < h.n + 1 && h.offsets[i0 + 1] == h.offsets[i0]);
            }
            tfm_hyps_free(&h);
        }
    g_min_len = 0;
    free(g_all);
}

static void test_small_beam_never_beats_exact(void)
{
    g_all = malloc(4096 * sizeof *g_all);
    for (int k = 2; k <= 6; k++) {
        g_salt = 100 + (uint64_t)k;
        static struct toy t;
        struct tfm_step_model m = toy_model(&t, dist_random);
        struct tfm_beam_opts o;
        tfm_beam_defaults(&o);
        o.beam = k;
        int max_len[3] = {4, 4, 3};
        struct tfm_hyps h;
        struct tfm_error err;
        CHECK(tfm_beam_search(&m, 3, max_len, NULL, &o, &h, &err) == 0);
        CHECK_EQ_INT(h.n, 3);
        for (int s = 0; s < 3; s++) {
            brute(dist_random, s, max_len[s], o.alpha);
            CHECK(h.score[s] <= g_all[0].score + 1e-6);
            /* the score is that of the sequence it names */
            int found = 0;
            for (int j = 0; j < g_nall; j++)
                if (same_ids(&h, s, g_all[j].tok, g_all[j].len)) {
                    CHECK_NEAR(h.score[s], g_all[j].score, 1e-6);
                    found = 1;
                }
            CHECK(found);
        }
        tfm_hyps_free(&h);
    }
    free(g_all);
}

static void test_greedy_by_hand(void)
{
    for (int seed = 0; seed < 8; seed++) {
        g_salt = 500 + (uint64_t)seed;
        static struct toy t;
        struct tfm_step_model m = toy_model(&t, dist_random);
        struct tfm_beam_opts o;
        tfm_beam_defaults(&o);
        o.beam = 1;
        o.alpha = 0.6;
        int max_len[4] = {10, 3, 20, 0};
        struct tfm_hyps h;
        struct tfm_error err;
        CHECK(tfm_beam_search(&m, 4, max_len, NULL, &o, &h, &err) == 0);
        CHECK_EQ_INT(h.n, 4);
        for (int s = 0; s < 4 && h.n == 4; s++) {
            int32_t hist[MAXH] = {2};
            int n = 1;
            double lp = 0;
            for (;;) {
                float logp[V];
                dist_random(s, hist, n, logp);
                int best = -1;
                for (int v = 0; v < V; v++)     /* min_len 1: no eos first */
                    if (v != 0 && v != 2 && !(v == 3 && n == 1) &&
                        (best < 0 || logp[v] > logp[best]))
                        best = v;
                if (n - 1 == max_len[s])
                    best = 3;
                lp += logp[best];
                if (best == 3)
                    break;
                hist[n++] = best;
            }
            CHECK(same_ids(&h, s, hist + 1, n - 1));
            CHECK_NEAR(h.logp[s], lp, 1e-9);
            CHECK_NEAR(h.score[s], lp / tfm_beam_lp(n, 0.6), 1e-6);
        }
        tfm_hyps_free(&h);
    }
}

/* After bos: eos 0.40, 4: 0.35, 5: 0.25; after one token: eos 0.9, the rest spread. */
static void dist_crafted(int src, const int32_t *hist, int n, float *logp)
{
    (void)src;
    (void)hist;
    for (int v = 0; v < V; v++)
        logp[v] = -INFINITY;
    if (n == 1) {
        logp[3] = logf(0.40f);
        logp[4] = logf(0.35f);
        logp[5] = logf(0.25f);
    } else {
        logp[3] = logf(0.9f);
        logp[4] = logf(0.06f);
        logp[5] = logf(0.04f);
    }
}

static void test_length_penalty_changes_winner(void)
{
    /* [] scores ln .4 = -0.916; [4] scores (ln .35 + ln .9) / lp(2) = -1.155 / lp(2):
     * alpha 0 and 1 prefer [], alpha 2 ((7/6)^2 = 1.361: -0.849) prefers [4] */
    double alphas[] = {0, 1, 2};
    int want_len[] = {0, 0, 1};
    for (int a = 0; a < 3; a++) {
        static struct toy t;
        struct tfm_step_model m = toy_model(&t, dist_crafted);
        struct tfm_beam_opts o;
        tfm_beam_defaults(&o);
        o.beam = 4;
        o.nbest = 2;
        o.alpha = alphas[a];
        o.min_len = 0;                  /* the empty hypothesis competes */
        int max_len = 1;
        struct tfm_hyps h;
        struct tfm_error err;
        CHECK(tfm_beam_search(&m, 1, &max_len, NULL, &o, &h, &err) == 0);
        CHECK_EQ_INT(h.n, 2);
        CHECK_EQ_INT(h.offsets[1] - h.offsets[0], want_len[a]);
        if (want_len[a] == 1)
            CHECK_EQ_INT(h.ids[0], 4);
        double s_empty = log(0.40f), s_4 = ((double)logf(0.35f) + logf(0.9f)) / tfm_beam_lp(2, alphas[a]);
        CHECK_NEAR(h.score[0], fmax(s_empty, s_4), 1e-6);
        CHECK_NEAR(h.score[1], fmin(s_empty, s_4), 1e-6);
        tfm_hyps_free(&h);
    }
}

static void test_nbest_order_and_distinct(void)
{
    g_salt = 77;
    static struct toy t;
    struct tfm_step_model m = toy_model(&t, dist_random);
    struct tfm_beam_opts o;
    tfm_beam_defaults(&o);
    o.beam = 8;
    o.nbest = 8;
    int max_len[2] = {6, 5};
    struct tfm_hyps h;
    struct tfm_error err;
    CHECK(tfm_beam_search(&m, 2, max_len, NULL, &o, &h, &err) == 0);
    CHECK_EQ_INT(h.n, 16);
    for (int64_t i = 0; i < h.n; i++) {
        CHECK_EQ_INT(h.sent[i], i / 8);
        CHECK(h.offsets[i + 1] - h.offsets[i] <= max_len[i / 8]);
        for (int64_t k = h.offsets[i]; k < h.offsets[i + 1]; k++)
            CHECK(h.ids[k] != 0 && h.ids[k] != 2 && h.ids[k] != 3);
        if (i % 8)
            CHECK(h.score[i] <= h.score[i - 1]);
        for (int64_t j = i - i % 8; j < i; j++)
            CHECK(!same_ids(&h, j, h.ids + h.offsets[i], (int)(h.offsets[i + 1] - h.offsets[i])));
        CHECK_NEAR(h.score[i], h.logp[i] / tfm_beam_lp((int)(h.offsets[i + 1] - h.offsets[i]) + 1, 0.6), 1e-6);
    }
    tfm_hyps_free(&h);
}

static void test_early_stop_changes_nothing(void)
{
    double alphas[] = {0.0, 0.6, 1.0, 2.0, -0.5};
    int stopped_early = 0, cases = 0;
    for (int a = 0; a < 5; a++)
        for (int k = 2; k <= 8; k += 3)
            for (int nb = 1; nb <= k; nb += 2)
                for (int seed = 0; seed < 3; seed++) {
                    g_salt = 1000 + (uint64_t)seed * 7 + (uint64_t)k;
                    int max_len[6] = {12, 7, 15, 3, 0, 9};
                    struct tfm_beam_opts o;
                    tfm_beam_defaults(&o);
                    o.beam = k;
                    o.nbest = nb;
                    o.alpha = alphas[a];
                    static struct toy t1, t2;
                    struct tfm_step_model m1 = toy_model(&t1, dist_random);
                    struct tfm_step_model m2 = toy_model(&t2, dist_random);
                    struct tfm_hyps h1, h2;
                    struct tfm_error err;
                    CHECK(tfm_beam_search(&m1, 6, max_len, NULL, &o, &h1, &err) == 0);
                    o.early_stop = 0;
                    CHECK(tfm_beam_search(&m2, 6, max_len, NULL, &o, &h2, &err) == 0);
                    CHECK_EQ_INT(h1.n, h2.n);
                    if (h1.n == h2.n) {
                        CHECK(memcmp(h1.offsets, h2.offsets, (size_t)(h1.n + 1) * 8) == 0);
                        CHECK(memcmp(h1.ids, h2.ids, (size_t)h1.offsets[h1.n] * 4) == 0);
                        CHECK(memcmp(h1.score, h2.score, (size_t)h1.n * 4) == 0);
                    }
                    CHECK(t1.steps <= t2.steps);
                    CHECK_EQ_INT(t2.steps, 16);     /* max length 15, then forced eos */
                    stopped_early += t1.steps < t2.steps;
                    cases++;
                    CHECK_EQ_INT(t1.bad + t2.bad, 0);
                    tfm_hyps_free(&h1);
                    tfm_hyps_free(&h2);
                }
    /* the rule must actually stop most searches early, or the test proves nothing */
    CHECK(stopped_early > cases / 2);
}

/* Step model that records the number of rows of each call. */
static int g_rows[256], g_nsteps;
static int count_step(void *ctx, int nrows, const int32_t *last, const int32_t *src,
                      float *logp, struct tfm_error *err)
{
    g_rows[g_nsteps++ % 256] = nrows;
    return toy_step(ctx, nrows, last, src, logp, err);
}

static void test_finished_sentences_leave(void)
{
    /* greedy; sentence 1 has max_len 0: eos forced at the first step, then it is gone */
    g_salt = 3;
    static struct toy t;
    struct tfm_step_model m = toy_model(&t, dist_random);
    m.step = count_step;
    g_nsteps = 0;
    struct tfm_beam_opts o;
    tfm_beam_defaults(&o);
    o.beam = 1;
    int max_len[3] = {8, 0, 8};
    struct tfm_hyps h;
    struct tfm_error err;
    CHECK(tfm_beam_search(&m, 3, max_len, NULL, &o, &h, &err) == 0);
    CHECK_EQ_INT(t.bad, 0);
    CHECK_EQ_INT(h.n, 3);
    CHECK_EQ_INT(h.offsets[2] - h.offsets[1], 0);
    CHECK_EQ_INT(g_rows[0], 3);
    CHECK(g_nsteps >= 2 && g_rows[1] <= 2);
    tfm_hyps_free(&h);
}

static void test_rows_shrink(void)
{
    g_salt = 9;
    static struct toy t;
    struct tfm_step_model m = toy_model(&t, dist_random);
    m.step = count_step;
    g_nsteps = 0;
    struct tfm_beam_opts o;
    tfm_beam_defaults(&o);
    o.beam = 3;
    o.early_stop = 0;
    int max_len[3] = {1, 5, 3};
    struct tfm_hyps h;
    struct tfm_error err;
    CHECK(tfm_beam_search(&m, 3, max_len, NULL, &o, &h, &err) == 0);
    CHECK_EQ_INT(t.bad, 0);
    /* steps: 3 rows (bos), then 9 while all live, then sentence 0 is done after step 1,
     * sentence 2 after step 3, sentence 1 after step 5 */
    CHECK_EQ_INT(g_nsteps, 6);
    CHECK_EQ_INT(g_rows[0], 3);
    CHECK_EQ_INT(g_rows[1], 9);
    CHECK_EQ_INT(g_rows[2], 6);
    CHECK_EQ_INT(g_rows[3], 6);
    CHECK_EQ_INT(g_rows[4], 3);
    CHECK_EQ_INT(g_rows[5], 3);
    tfm_hyps_free(&h);
}

static void test_sampling_reproducible(void)
{
    g_salt = 21;
    struct tfm_beam_opts o;
    tfm_beam_defaults(&o);
    o.sample = 1;
    o.nbest = 5;
    o.seed = 42;
    o.topk = 3;
    o.temperature = 0.8;
    int max_len[4] = {10, 10, 10, 10};
    int64_t ids[4] = {7, 8, 9, 10};
    struct tfm_hyps h1, h2, h3, h4;
    struct tfm_error err;
    static struct toy t;
    struct tfm_step_model m = toy_model(&t, dist_random);
    CHECK(tfm_beam_search(&m, 4, max_len, ids, &o, &h1, &err) == 0);
    CHECK_EQ_INT(t.bad, 0);
    m = toy_model(&t, dist_random);
    CHECK(tfm_beam_search(&m, 4, max_len, ids, &o, &h2, &err) == 0);
    CHECK_EQ_INT(h1.n, 20);
    CHECK_EQ_INT(h2.n, 20);
    CHECK(memcmp(h1.offsets, h2.offsets, 21 * 8) == 0);
    CHECK(memcmp(h1.ids, h2.ids, (size_t)h1.offsets[20] * 4) == 0);
    for (int i = 1; i < 20; i++)
        if (h1.sent[i] == h1.sent[i - 1])
            CHECK(h1.score[i] <= h1.score[i - 1]);
    /* the samples of sentence id 9 decoded alone, as sentence 0 of a call: the toy model's
     * distribution depends on the call's sentence number, so give it the same one */
    /* (dist depends on src: run all 4 but in one call with ids permuted would change
     * the distributions, so compare a call of the same sentences with the same ids) */
    o.seed = 43;
    m = toy_model(&t, dist_random);
    CHECK(tfm_beam_search(&m, 4, max_len, ids, &o, &h3, &err) == 0);
    CHECK(h3.n != h1.n || memcmp(h1.ids, h3.ids, (size_t)h1.offsets[h1.n] * 4) != 0 ||
          memcmp(h1.offsets, h3.offsets, 21 * 8) != 0);
    /* a draw depends on the sentence id, not on the batch: sentence 0 alone with id 7 */
    o.seed = 42;
    m = toy_model(&t, dist_random);
    CHECK(tfm_beam_search(&m, 1, max_len, ids, &o, &h4, &err) == 0);
    CHECK_EQ_INT(h4.n, 5);
    CHECK(memcmp(h4.offsets, h1.offsets, 6 * 8) == 0);
    CHECK(memcmp(h4.ids, h1.ids, (size_t)h4.offsets[5] * 4) == 0);
    tfm_hyps_free(&h1);
    tfm_hyps_free(&h2);
    tfm_hyps_free(&h3);
    tfm_hyps_free(&h4);
}

/* First token: a fixed distribution; then eos for sure. */
static const double P1[V] = {0.05, 0.10, 0.05, 0.15, 0.30, 0.25, 0.10};
static void dist_first(int src, const int32_t *hist, int n, float *logp)
{
    (void)src;
    (void)hist;
    for (int v = 0; v < V; v++)
        logp[v] = n == 1 ? logf((float)P1[v]) : (v == 3 ? 0.0f : -INFINITY);
}

/* Sample N first tokens and compare their frequencies with want[] (4.5 sigma). */
static void sample_first(int topk, double topp, double temp, const double *want)
{
    enum { N = 20000, PER = 1000 };
    struct tfm_beam_opts o;
    tfm_beam_defaults(&o);
    o.sample = 1;
    o.min_len = 0;                      /* eos is one of the first tokens drawn */
    o.nbest = PER;
    o.topk = topk;
    o.topp = topp;
    o.temperature = temp;
    o.seed = 5;
    int max_len[N / PER];
    int64_t ids[N / PER];
    for (int i = 0; i < N / PER; i++) {
        max_len[i] = 3;
        ids[i] = i;
    }
    static struct toy t;
    struct tfm_step_model m = toy_model(&t, dist_first);
    struct tfm_hyps h;
    struct tfm_error err;
    CHECK(tfm_beam_search(&m, N / PER, max_len, ids, &o, &h, &err) == 0);
    CHECK_EQ_INT(h.n, N);
    double count[V] = {0};
    for (int64_t i = 0; i < h.n; i++) {
        int64_t len = h.offsets[i + 1] - h.offsets[i];
        count[len ? h.ids[h.offsets[i]] : 3]++;
        CHECK(len <= 1);
    }
    for (int v = 0; v < V; v++) {
        double p = want[v], sd = sqrt(p * (1 - p) / N);
        if (p == 0)
            CHECK(count[v] == 0);
        else
            CHECK_NEAR(count[v] / N, p, 4.5 * sd + 1e-12);
    }
    tfm_hyps_free(&h);
}

static void test_sampling_distribution(void)
{
    /* allowed tokens: 1 .10, 3 .15, 4 .30, 5 .25, 6 .10 (pad and bos never), sum .90 */
    double plain[V] = {0, .10 / .9, 0, .15 / .9, .30 / .9, .25 / .9, .10 / .9};
    sample_first(0, 1.0, 1.0, plain);
    double top2[V] = {0, 0, 0, 0, .30 / .55, .25 / .55, 0};
    sample_first(2, 1.0, 1.0, top2);
    /* top-p 0.6 of the allowed mass: 4 (.333) + 5 (.278) = .611 reaches it */
    sample_first(0, 0.6, 1.0, top2);
    /* top-p 0.7: needs 3 (.167) too; top-k 3 then top-p 0.99 keeps the same three */
    double top3[V] = {0, 0, 0, .15 / .70, .30 / .70, .25 / .70, 0};
    sample_first(0, 0.7, 1.0, top3);
    sample_first(3, 0.99, 1.0, top3);
    /* temperature 0.5: p^2 renormalized */
    double t2[V] = {0}, z = 0;
    for (int v = 0; v < V; v++)
        if (v != 0 && v != 2)
            z += P1[v] * P1[v];
    for (int v = 0; v < V; v++)
        t2[v] = v != 0 && v != 2 ? P1[v] * P1[v] / z : 0;
    sample_first(0, 1.0, 0.5, t2);
}

/* The same distribution (P1) at every position, so a sample's tokens are independent. */
static void dist_iid(int src, const int32_t *hist, int n, float *logp)
{
    dist_first(src, hist, 1, logp);
    (void)n;
}

/* Samples of one sentence are independent of each other and across steps: the pair of
 * their first two tokens has the product distribution. */
static void test_sampling_independent(void)
{
    enum { N = 4000 };
    struct tfm_beam_opts o;
    tfm_beam_defaults(&o);
    o.sample = 1;
    o.min_len = 0;
    o.nbest = N;
    o.seed = 9;
    int max_len = 2;
    static struct toy t;
    struct tfm_step_model m = toy_model(&t, dist_iid);
    struct tfm_hyps h;
    struct tfm_error err;
    CHECK(tfm_beam_search(&m, 1, &max_len, NULL, &o, &h, &err) == 0);
    CHECK_EQ_INT(h.n, N);
    /* P(first = 4, second = 5) = (.3/.9)(.25/.9); P(first = second = 4) = (.3/.9)^2 */
    double n45 = 0, n44 = 0, p45 = (.30 / .9) * (.25 / .9), p44 = (.30 / .9) * (.30 / .9);
    for (int64_t i = 0; i < h.n; i++) {
        const int32_t *y = h.ids + h.offsets[i];
        if (h.offsets[i + 1] - h.offsets[i] == 2) {
            n45 += y[0] == 4 && y[1] == 5;
            n44 += y[0] == 4 && y[1] == 4;
        }
    }
    CHECK_NEAR(n45 / N, p45, 4.5 * sqrt(p45 * (1 - p45) / N));
    CHECK_NEAR(n44 / N, p44, 4.5 * sqrt(p44 * (1 - p44) / N));
    tfm_hyps_free(&h);
}

static void test_errors(void)
{
    static struct toy t;
    struct tfm_step_model m = toy_model(&t, dist_random);
    struct tfm_beam_opts o;
    tfm_beam_defaults(&o);
    struct tfm_hyps h;
    struct tfm_error err;
    int max_len[2] = {5, 5};
    o.nbest = 5;
    CHECK(tfm_beam_search(&m, 2, max_len, NULL, &o, &h, &err) == -1);
    CHECK_STR(err.msg, "nbest 5 exceeds the beam (4)");
    tfm_beam_defaults(&o);
    o.topp = 0;
    CHECK(tfm_beam_search(&m, 2, max_len, NULL, &o, &h, &err) == -1);
    CHECK_STR(err.msg, "top-p 0 outside (0, 1]");
    tfm_beam_defaults(&o);
    max_len[1] = -1;
    CHECK(tfm_beam_search(&m, 2, max_len, NULL, &o, &h, &err) == -1);
    CHECK_STR(err.msg, "sentence 1: maximum length -1 outside [0, 1048576]");
    max_len[1] = 5;
    t.fail_at = 3;
    CHECK(tfm_beam_search(&m, 2, max_len, NULL, &o, &h, &err) == -1);
    CHECK_STR(err.msg, "toy: step 3 fails");
    CHECK(h.n == 0 && h.ids == NULL);
    /* zero sentences: an empty result, no model call */
    m = toy_model(&t, dist_random);
    CHECK(tfm_beam_search(&m, 0, max_len, NULL, &o, &h, &err) == 0);
    CHECK_EQ_INT(h.n, 0);
    CHECK_EQ_INT(t.steps, 0);
    tfm_hyps_free(&h);
}

/* A model that allows nothing but pad and bos: every sentence still gets a hypothesis. */
static void dist_dead(int src, const int32_t *hist, int n, float *logp)
{
    (void)src;
    (void)hist;
    (void)n;
    for (int v = 0; v < V; v++)
        logp[v] = v == 0 || v == 2 ? logf(0.5f) : -INFINITY;
}

static void test_dead_model(void)
{
    struct tfm_beam_opts o;
    tfm_beam_defaults(&o);
    for (int k = 1; k <= 2; k++) {
        o.beam = k;
        static struct toy t;
        struct tfm_step_model m = toy_model(&t, dist_dead);
        struct tfm_hyps h;
        struct tfm_error err;
        int max_len[2] = {5, 0};
        CHECK(tfm_beam_search(&m, 2, max_len, NULL, &o, &h, &err) == 0);
        CHECK_EQ_INT(h.n, 2);
        CHECK(h.offsets[2] == 0);
        CHECK(isinf(h.score[0]) && h.score[0] < 0);
        tfm_hyps_free(&h);
    }
}

/* ---- a reference beam search: the finishing rule written out plainly ----
 * Every extension of every live hypothesis is listed and sorted by log P (stable: ties in
 * row, then token order); of the first 2K, an eos among the first K finishes, the first K
 * non-eos stay live; eos is forced at the maximum length.  No early stop, no pruning. */

struct hyp {
    int len;
    int32_t tok[MAXH];
    double lp;
};

static int by_lp_desc(const void *x, const void *y)
{
    const struct hyp *a = x, *b = y;
    return (a->lp < b->lp) - (a->lp > b->lp);
}

/* Fills best[0..nbest) (by score, earlier finished first on ties); returns how many. */
static int ref_beam(dist_fn f, int src, int L, int K, int nbest, int min_len, double alpha,
                    struct seq *best)
{
    static struct hyp live[64], ext[64 * V], fin[4096];
    int nlive = 1, nfin = 0;
    live[0].len = 0;
    live[0].lp = 0;
    for (int t = 0; nlive > 0; t++) {
        int next = 0;
        for (int r = 0; r < nlive; r++) {
            int32_t hist[MAXH + 1] = {2};
            memcpy(hist + 1, live[r].tok, (size_t)t * sizeof *hist);
            float logp[V];
            f(src, hist, t + 1, logp);
            for (int v = 0; v < V; v++) {
                if (v == 0 || v == 2 || (t == L && v != 3) || (v == 3 && t < min_len && t < L) ||
                    !(logp[v] > -INFINITY))
                    continue;
                struct hyp *e = &ext[next++];
                *e = live[r];
                e->tok[t] = v;
                e->len = t + 1;
                e->lp = live[r].lp + logp[v];
            }
        }
        /* qsort is not stable: sort indices by (lp desc, position) instead */
        for (int i = 1; i < next; i++)          /* insertion sort, stable */
            for (int j = i; j > 0 && by_lp_desc(&ext[j - 1], &ext[j]) > 0; j--) {
                struct hyp tmp = ext[j];
                ext[j] = ext[j - 1];
                ext[j - 1] = tmp;
            }
        nlive = 0;
        for (int i = 0; i < next && i < 2 * K; i++) {
            if (ext[i].tok[t] == 3) {
                if (i < K || t == L) {
                    fin[nfin] = ext[i];
                    fin[nfin++].len = t;            /* eos is not a token of the output */
                }
            } else if (nlive < K) {
                live[nlive++] = ext[i];
            }
        }
        if (t == L)                                 /* forced: every row finished */
            for (int i = 2 * K; i < next; i++) {
                fin[nfin] = ext[i];
                fin[nfin++].len = t;
            }
    }
    int n = 0;
    for (int i = 0; i < nfin; i++) {                /* insert by score, stable */
        double sc = fin[i].lp / tfm_beam_lp(fin[i].len + 1, alpha);
        int p = n < nbest ? n : nbest;
        while (p > 0 && best[p - 1].score < sc)
            p--;
        if (p >= nbest)
            continue;
        for (int j = (n < nbest ? n : nbest - 1); j > p; j--)
            best[j] = best[j - 1];
        best[p].len = fin[i].len;
        memcpy(best[p].tok, fin[i].tok, sizeof best[p].tok);
        best[p].lp = fin[i].lp;
        best[p].score = sc;
        if (n < nbest)
            n++;
    }
    return n;
}

static void test_finishing_rule_matches_reference(void)
{
    /* beams small enough that eos often ranks between K and 2K, where it is dropped */
    double alphas[] = {0.0, 0.6, 1.0};
    int cases = 0, differs_from_2k = 0;
    for (int a = 0; a < 3; a++)
        for (int k = 2; k <= 5; k++)
            for (int ml = 0; ml <= 2; ml++)
                for (int seed = 0; seed < 4; seed++) {
                    g_salt = 4000 + (uint64_t)seed * 13 + (uint64_t)k;
                    int max_len[5] = {9, 6, 1, 0, 11};
                    struct tfm_beam_opts o;
                    tfm_beam_defaults(&o);
                    o.beam = k;
                    o.nbest = k;
                    o.alpha = alphas[a];
                    o.min_len = ml;
                    for (int es = 0; es <= 1; es++) {
                        o.early_stop = es;
                        static struct toy t;
                        struct tfm_step_model m = toy_model(&t, dist_random);
                        struct tfm_hyps h;
                        struct tfm_error err;
                        CHECK(tfm_beam_search(&m, 5, max_len, NULL, &o, &h, &err) == 0);
                        CHECK_EQ_INT(t.bad, 0);
                        for (int s = 0; s < 5; s++) {
                            struct seq want[8];
                            int n = ref_beam(dist_random, s, max_len[s], k, k, ml, o.alpha, want);
                            int64_t i0 = first_of(&h, s);
                            int got = 0;
                            for (int64_t i = i0; i >= 0 && i < h.n && h.sent[i] == s; i++)
                                got++;
                            CHECK_EQ_INT(got, n);
                            for (int j = 0; j < n && j < got; j++) {
                                CHECK(same_ids(&h, i0 + j, want[j].tok, want[j].len));
                                CHECK_NEAR(h.score[i0 + j], want[j].score, 1e-6);
                            }
                            /* the old rule (any eos among the first 2K finishes) would
                             * have kept more: count the cases where the rule matters */
                            if (es == 0 && n < k)
                                differs_from_2k++;
                        }
                        tfm_hyps_free(&h);
                    }
                    cases++;
                }
    CHECK(cases == 144);
    CHECK(differs_from_2k > 0);
}

/* eos first with 0.9, then tokens 4 (0.06) and 5 (0.04); after one token eos is 0.5. */
static void dist_eos_first(int src, const int32_t *hist, int n, float *logp)
{
    (void)src;
    (void)hist;
    for (int v = 0; v < V; v++)
        logp[v] = -INFINITY;
    logp[3] = logf(n == 1 ? 0.9f : 0.5f);
    logp[4] = logf(n == 1 ? 0.06f : 0.3f);
    logp[5] = logf(n == 1 ? 0.04f : 0.2f);
}

static void test_no_empty_output(void)
{
    /* min_len 1 (the default): never empty, in beam, greedy and sampling; min_len 0: the
     * empty hypothesis wins (log .9 beats log .06 + log .5); min_len 2: two tokens */
    int ks[] = {1, 4, 0};                   /* 0: sampling */
    for (int i = 0; i < 3; i++)
        for (int ml = 0; ml <= 2; ml++) {
            struct tfm_beam_opts o;
            tfm_beam_defaults(&o);
            o.min_len = ml;
            o.alpha = 0;
            if (ks[i])
                o.beam = ks[i];
            else
                o.sample = 1, o.nbest = 16;
            static struct toy t;
            struct tfm_step_model m = toy_model(&t, dist_eos_first);
            struct tfm_hyps h;
            struct tfm_error err;
            int max_len[2] = {6, 1};
            CHECK(tfm_beam_search(&m, 2, max_len, NULL, &o, &h, &err) == 0);
            for (int64_t j = 0; j < h.n; j++) {
                int len = (int)(h.offsets[j + 1] - h.offsets[j]);
                int lim = max_len[h.sent[j]];
                CHECK(len >= (ml < lim ? ml : lim));
                if (ml == 0 && ks[i] && h.sent[j] == 0)
                    CHECK_EQ_INT(len, 0);
                if (ml == 1 && ks[i] && h.sent[j] == 0)
                    CHECK(len == 1 && h.ids[h.offsets[j]] == 4);
            }
            tfm_hyps_free(&h);
        }
    struct tfm_beam_opts o;
    tfm_beam_defaults(&o);
    CHECK_EQ_INT(o.min_len, 1);
}

/* The toy model's step_top: its log-probs, then the best tokens as src/topk.h picks them
 * (what tfm_decoder_step_top does on a backend without log_softmax_top). */
static int g_top_calls;
static int toy_step_top(void *ctx, int nrows, const int32_t *last, const int32_t *src, int k,
                        const int32_t *ban, int nban, int32_t also, float *top_lp,
                        int32_t *top_tok, float *also_lp, struct tfm_error *err)
{
    static float logp[ROWS * V];
    g_top_calls++;
    if (toy_step(ctx, nrows, last, src, logp, err))
        return -1;
    for (int r = 0; r < nrows; r++) {
        tfm_topk_row(logp + (size_t)r * V, 0.0f, V, k, ban, nban, NULL, 0,
                     top_lp + (size_t)r * k, top_tok + (size_t)r * k);
        also_lp[r] = logp[(size_t)r * V + also];
    }
    return 0;
}

static void test_step_top_same_bits(void)
{
    /* every option that shapes the candidates: beam 1 to 5, nbest, min_len, alpha, early
     * stop; the search through step_top gives the same bits as through step */
    int cases = 0, same = 0;
    for (int k = 1; k <= 5; k++)
        for (int ml = 0; ml <= 2; ml++)
            for (int es = 0; es <= 1; es++)
                for (int seed = 0; seed < 3; seed++) {
                    g_salt = 7000 + (uint64_t)seed * 31 + (uint64_t)k;
                    int max_len[6] = {12, 7, 15, 3, 0, 9};
                    struct tfm_beam_opts o;
                    tfm_beam_defaults(&o);
                    o.beam = k;
                    o.nbest = k;
                    o.min_len = ml;
                    o.early_stop = es;
                    o.alpha = seed * 0.5;
                    static struct toy t1, t2;
                    struct tfm_step_model m1 = toy_model(&t1, dist_random);
                    struct tfm_step_model m2 = toy_model(&t2, dist_random);
                    m2.step_top = toy_step_top;
                    struct tfm_hyps h1, h2;
                    struct tfm_error err;
                    g_top_calls = 0;
                    CHECK(tfm_beam_search(&m1, 6, max_len, NULL, &o, &h1, &err) == 0);
                    CHECK_EQ_INT(g_top_calls, 0);
                    CHECK(tfm_beam_search(&m2, 6, max_len, NULL, &o, &h2, &err) == 0);
                    CHECK(g_top_calls > 0 && g_top_calls == t2.steps);
                    cases++;
                    same += h1.n == h2.n &&
                            !memcmp(h1.offsets, h2.offsets, (size_t)(h1.n + 1) * 8) &&
                            !memcmp(h1.ids, h2.ids, (size_t)h1.offsets[h1.n] * 4) &&
                            !memcmp(h1.score, h2.score, (size_t)h1.n * 4) &&
                            !memcmp(h1.logp, h2.logp, (size_t)h1.n * 8) &&
                            !memcmp(h1.sent, h2.sent, (size_t)h1.n * 4);
                    CHECK_EQ_INT(t1.bad + t2.bad, 0);
                    tfm_hyps_free(&h1);
                    tfm_hyps_free(&h2);
                }
    CHECK_EQ_INT(same, cases);
    /* sampling needs every probability: it never asks for the best tokens */
    static struct toy t;
    struct tfm_step_model m = toy_model(&t, dist_random);
    m.step_top = toy_step_top;
    struct tfm_beam_opts o;
    tfm_beam_defaults(&o);
    o.sample = 1;
    o.nbest = 3;
    int max_len = 5;
    struct tfm_hyps h;
    struct tfm_error err;
    g_top_calls = 0;
    CHECK(tfm_beam_search(&m, 1, &max_len, NULL, &o, &h, &err) == 0);
    CHECK_EQ_INT(g_top_calls, 0);
    tfm_hyps_free(&h);
}

int main(void)
{
    t_run("exhaustive beam finds the best sequences (brute force)", test_exhaustive_beam_is_exact);
    t_run("small beams never beat the exact answer", test_small_beam_never_beats_exact);
    t_run("beam 1 is greedy by hand", test_greedy_by_hand);
    t_run("length penalty changes the winner", test_length_penalty_changes_winner);
    t_run("n-best lists: ordered, distinct, scored", test_nbest_order_and_distinct);
    t_run("early stop changes no result", test_early_stop_changes_nothing);
    t_run("finished sentences leave the batch", test_finished_sentences_leave);
    t_run("rows shrink as sentences finish", test_rows_shrink);
    t_run("sampling is reproducible and batch-independent", test_sampling_reproducible);
    t_run("sampling distribution: plain, top-k, top-p, temperature", test_sampling_distribution);
    t_run("samples are independent", test_sampling_independent);
    t_run("bad options and model failures", test_errors);
    t_run("a model that allows no token", test_dead_model);
    t_run("finishing rule: eos among the first K (reference search)",
          test_finishing_rule_matches_reference);
    t_run("min_len: no empty output unless asked", test_no_empty_output);
    t_run("the best-tokens step gives the same search, bit for bit", test_step_top_same_bits);
    return t_done();
}
