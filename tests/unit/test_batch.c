/* test_batch.c: the batching algorithm (budget, coverage, padding, seeds) and the batch
 * stream reader (round trip, sharding, resuming, validation of bad batches). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "batch.h"
#include "check.h"
#include "corpus.h"
#include "spm.h"
#include "stream.h"

static uint64_t rng_state = 12345;
static uint64_t rnd(void)    /* xorshift64*, test data only */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ULL;
}

/* A corpus of n sentences with lengths from lens (or random in [lo, hi]), ids in [4, 50). */
static void make_corpus(struct tfm_corpus *c, int64_t n, const int *lens, int lo, int hi)
{
    struct tfm_error err;
    int32_t buf[4096];
    tfm_corpus_init(c);
    for (int64_t i = 0; i < n; i++) {
        int len = lens ? lens[i] : lo + (int)(rnd() % (uint64_t)(hi - lo + 1));
        for (int j = 0; j < len; j++)
            buf[j] = 4 + (int32_t)(rnd() % 46);
        if (tfm_corpus_push(c, buf, len, &err))
            abort();
    }
}

static int64_t len_of(const struct tfm_corpus *c, int64_t i, int eos)
{
    return tfm_corpus_len(c, i) + eos;
}

/* Check a plan's invariants: budget, each kept sentence once, dropped ones too long, and
 * the token and cell counts.  Returns the number of failed checks (also CHECKed). */
static void check_plan(const struct tfm_batch_plan *p, const struct tfm_corpus *src,
                       const struct tfm_corpus *tgt, int64_t tokens, int64_t max_len)
{
    int64_t n = src->n, limit = max_len > 0 && max_len < tokens ? max_len : tokens;
    char *seen = calloc((size_t)n + 1, 1);
    int64_t st = 0, tt = 0, sc = 0, tc = 0, kept = 0, over = 0;
    CHECK_EQ_INT(p->start[0], 0);
    CHECK_EQ_INT(p->start[p->nbatches], p->kept);
    for (int64_t b = 0; b < p->nbatches; b++) {
        int64_t B = p->start[b + 1] - p->start[b], S = 0, T = 0;
        CHECK(B >= 1);
        for (int64_t r = p->start[b]; r < p->start[b + 1]; r++) {
            int64_t i = p->order[r];
            CHECK(i >= 0 && i < n);
            if (i < 0 || i >= n)
                continue;
            CHECK(!seen[i]);
            seen[i] = 1;
            kept++;
            int64_t ls = len_of(src, i, 1), lt = tgt ? len_of(tgt, i, 1) : 0;
            S = ls > S ? ls : S;
            T = lt > T ? lt : T;
            st += ls;
            tt += lt;
        }
        if (B * S > tokens || B * T > tokens)
            over++;
        sc += B * S;
        tc += B * T;
    }
    CHECK_EQ_INT(over, 0);
    CHECK_EQ_INT(kept, p->kept);
    CHECK_EQ_INT(p->kept + p->dropped, n);
    int64_t dropped_ok = 0, missing = 0;
    for (int64_t i = 0; i < n; i++) {
        int too_long = len_of(src, i, 1) > limit || (tgt && len_of(tgt, i, 1) > limit);
        if (!seen[i] && too_long)
            dropped_ok++;
        if (!seen[i] && !too_long)
            missing++;
        if (seen[i] && too_long)
            over++;
    }
    CHECK_EQ_INT(missing, 0);
    CHECK_EQ_INT(dropped_ok, p->dropped);
    CHECK_EQ_INT(over, 0);
    CHECK_EQ_INT(p->src_tokens, st);
    CHECK_EQ_INT(p->tgt_tokens, tt);
    CHECK_EQ_INT(p->src_cells, sc);
    CHECK_EQ_INT(p->tgt_cells, tc);
    /* sorted by (longer side, source, target); source only: by length, then input order */
    int64_t unsorted = 0;
    for (int64_t j = 1; j < p->kept; j++) {
        int64_t a = p->order[j - 1], b = p->order[j];
        int64_t sa = len_of(src, a, 1), sb = len_of(src, b, 1);
        if (tgt) {
            int64_t ta = len_of(tgt, a, 1), tb = len_of(tgt, b, 1);
            int64_t ma = sa > ta ? sa : ta, mb = sb > tb ? sb : tb;
            unsorted += ma > mb || (ma == mb && (sa > sb || (sa == sb && ta > tb)));
        } else {
            unsorted += sa > sb || (sa == sb && a > b);
        }
    }
    CHECK_EQ_INT(unsorted, 0);
    /* perm is a permutation of the batches */
    char *bs = calloc((size_t)p->nbatches + 1, 1);
    for (int64_t k = 0; k < p->nbatches; k++) {
        CHECK(p->perm[k] >= 0 && p->perm[k] < p->nbatches);
        if (p->perm[k] >= 0 && p->perm[k] < p->nbatches) {
            CHECK(!bs[p->perm[k]]);
            bs[p->perm[k]] = 1;
        }
    }
    free(bs);
    free(seen);
}

static void test_budget_and_coverage(void)
{
    struct tfm_error err;
    static const int64_t budgets[] = {1, 7, 64, 500, 4096, 25000};
    for (int trial = 0; trial < 12; trial++) {
        struct tfm_corpus s, t;
        int64_t n = 200 + (int64_t)(rnd() % 3000);
        make_corpus(&s, n, NULL, 0, 120);
        make_corpus(&t, n, NULL, 0, 150);
        struct tfm_batch_opts o;
        tfm_batch_defaults(&o);
        o.tokens = budgets[trial % 6];
        o.max_len = trial % 3 == 0 ? 0 : 40 + trial * 7;
        o.seed = (uint64_t)trial;
        struct tfm_batch_plan p;
        int rc = tfm_batch_plan(&s, 1, &t, 1, &o, &p, &err);
        CHECK_EQ_INT(rc, 0);
        if (rc == 0) {
            check_plan(&p, &s, &t, o.tokens, o.max_len);
            if (o.tokens >= 500)
                CHECK(p.kept > 0);
            if (o.tokens == 1)  /* only eos-only pairs fit */
                CHECK(p.kept < n);
        }
        tfm_batch_plan_free(&p);
        tfm_corpus_free(&s);
        tfm_corpus_free(&t);
    }
}

/* Sentences longer than 2048 tokens take the three-pass sort: the same invariants. */
static void test_long_sentences(void)
{
    struct tfm_error err;
    struct tfm_corpus s, t;
    make_corpus(&s, 600, NULL, 1, 3000);
    make_corpus(&t, 600, NULL, 1, 300);
    struct tfm_batch_opts o;
    tfm_batch_defaults(&o);
    o.tokens = 20000;
    o.max_len = 0;
    struct tfm_batch_plan p, q;
    CHECK_EQ_INT(tfm_batch_plan(&s, 1, &t, 1, &o, &p, &err), 0);
    CHECK(p.max_src > 2048);
    check_plan(&p, &s, &t, o.tokens, o.max_len);
    CHECK_EQ_INT(tfm_batch_plan(&s, 1, &t, 1, &o, &q, &err), 0);
    CHECK(memcmp(p.order, q.order, (size_t)p.kept * sizeof *p.order) == 0);
    tfm_batch_plan_free(&p);
    tfm_batch_plan_free(&q);
    tfm_corpus_free(&s);
    tfm_corpus_free(&t);
}

/* src lengths (eos included) 2 3 4, tgt 5 2 3: worked by hand. */
static void test_padding_known(void)
{
    struct tfm_error err;
    struct tfm_corpus s, t;
    const int ls[] = {1, 2, 3}, lt[] = {4, 1, 2};
    make_corpus(&s, 3, ls, 0, 0);
    make_corpus(&t, 3, lt, 0, 0);
    struct tfm_batch_opts o;
    tfm_batch_defaults(&o);
    struct tfm_batch_plan p;

    /* budget 15: sorted by the longer side: sentence 1 (3), 2 (4), 0 (5); all fit in one
     * batch of B=3, S=4, T=5: src 9 tokens in 12 cells, tgt 10 in 15 */
    o.tokens = 15;
    CHECK_EQ_INT(tfm_batch_plan(&s, 1, &t, 1, &o, &p, &err), 0);
    CHECK_EQ_INT(p.nbatches, 1);
    CHECK_EQ_INT(p.order[0], 1);
    CHECK_EQ_INT(p.order[1], 2);
    CHECK_EQ_INT(p.order[2], 0);
    CHECK_EQ_INT(p.src_cells, 12);
    CHECK_EQ_INT(p.tgt_cells, 15);
    CHECK_NEAR(tfm_batch_pad_src(&p), 0.25, 1e-12);
    CHECK_NEAR(tfm_batch_pad_tgt(&p), 1.0 / 3.0, 1e-12);
    tfm_batch_plan_free(&p);

    /* budget 14: 3*5 > 14, so sentence 0 is alone: cells src 2*4 + 2, tgt 2*3 + 5 */
    o.tokens = 14;
    CHECK_EQ_INT(tfm_batch_plan(&s, 1, &t, 1, &o, &p, &err), 0);
    CHECK_EQ_INT(p.nbatches, 2);
    CHECK_EQ_INT(p.src_cells, 10);
    CHECK_EQ_INT(p.tgt_cells, 11);
    CHECK_NEAR(tfm_batch_pad_src(&p), 0.1, 1e-12);
    CHECK_NEAR(tfm_batch_pad_tgt(&p), 1.0 / 11.0, 1e-12);
    tfm_batch_plan_free(&p);

    /* budget 4: pair 0 (tgt 5) no longer fits and is dropped; max_len 3 drops pair 2 too */
    o.tokens = 4;
    CHECK_EQ_INT(tfm_batch_plan(&s, 1, &t, 1, &o, &p, &err), 0);
    CHECK_EQ_INT(p.dropped, 1);
    CHECK_EQ_INT(p.kept, 2);
    tfm_batch_plan_free(&p);
    o.tokens = 100;
    o.max_len = 3;
    CHECK_EQ_INT(tfm_batch_plan(&s, 1, &t, 1, &o, &p, &err), 0);
    CHECK_EQ_INT(p.dropped, 2);
    CHECK_EQ_INT(p.kept, 1);
    CHECK_EQ_INT(p.order[0], 1);
    tfm_batch_plan_free(&p);

    /* sentences that already end in eos are not lengthened */
    o.max_len = 0;
    o.tokens = 15;
    CHECK_EQ_INT(tfm_batch_plan(&s, 0, &t, 0, &o, &p, &err), 0);
    CHECK_EQ_INT(p.src_tokens, 6);
    CHECK_EQ_INT(p.tgt_tokens, 7);
    tfm_batch_plan_free(&p);
    tfm_corpus_free(&s);
    tfm_corpus_free(&t);
}

static void test_seed(void)
{
    struct tfm_error err;
    struct tfm_corpus s, t;
    make_corpus(&s, 5000, NULL, 1, 60);
    make_corpus(&t, 5000, NULL, 1, 60);
    struct tfm_batch_opts o;
    tfm_batch_defaults(&o);
    o.tokens = 1000;
    struct tfm_batch_plan a, b, c;
    o.seed = 7;
    CHECK_EQ_INT(tfm_batch_plan(&s, 1, &t, 1, &o, &a, &err), 0);
    CHECK_EQ_INT(tfm_batch_plan(&s, 1, &t, 1, &o, &b, &err), 0);
    o.seed = 8;
    CHECK_EQ_INT(tfm_batch_plan(&s, 1, &t, 1, &o, &c, &err), 0);
    CHECK_EQ_INT(a.nbatches, b.nbatches);
    CHECK(a.nbatches > 50);
    CHECK(memcmp(a.order, b.order, (size_t)a.kept * sizeof *a.order) == 0);
    CHECK(memcmp(a.perm, b.perm, (size_t)a.nbatches * sizeof *a.perm) == 0);
    /* another seed: another batch order and other sentences together */
    CHECK(a.nbatches != c.nbatches ||
          memcmp(a.perm, c.perm, (size_t)a.nbatches * sizeof *a.perm) != 0);
    CHECK(memcmp(a.order, c.order, (size_t)a.kept * sizeof *a.order) != 0);
    /* the batch order is shuffled: not the length order */
    int64_t ascending = 0;
    for (int64_t k = 1; k < a.nbatches; k++)
        ascending += a.perm[k] > a.perm[k - 1];
    CHECK(ascending < a.nbatches * 3 / 4);
    check_plan(&c, &s, &t, o.tokens, o.max_len);
    tfm_batch_plan_free(&a);
    tfm_batch_plan_free(&b);
    tfm_batch_plan_free(&c);
    tfm_corpus_free(&s);
    tfm_corpus_free(&t);
}

static void test_source_only(void)
{
    struct tfm_error err;
    struct tfm_corpus s;
    const int ls[] = {3, 1, 3, 2, 1, 3};
    make_corpus(&s, 6, ls, 0, 0);
    struct tfm_batch_opts o;
    tfm_batch_defaults(&o);
    o.tokens = 8;
    struct tfm_batch_plan p;
    CHECK_EQ_INT(tfm_batch_plan(&s, 1, NULL, 0, &o, &p, &err), 0);
    /* by length, input order within a length, batches in length order */
    static const int64_t want[] = {1, 4, 3, 0, 2, 5};
    for (int i = 0; i < 6; i++)
        CHECK_EQ_INT(p.order[i], want[i]);
    CHECK_EQ_INT(p.nbatches, 3);    /* {1,4,3}: 3*3=9 > 8 at 3; {3,0}: 3*4 > 8; {2,5} */
    for (int64_t k = 0; k < p.nbatches; k++)
        CHECK_EQ_INT(p.perm[k], k);
    CHECK_EQ_INT(p.dropped, 0);
    check_plan(&p, &s, NULL, o.tokens, o.max_len);
    tfm_batch_plan_free(&p);
    /* a sentence to decode that does not fit is an error, not a drop */
    o.max_len = 3;
    CHECK_EQ_INT(tfm_batch_plan(&s, 1, NULL, 0, &o, &p, &err), -1);
    CHECK(strstr(err.msg, "line 1: 4 tokens") != NULL);
    tfm_corpus_free(&s);
}

static void test_errors(void)
{
    struct tfm_error err;
    struct tfm_corpus s, t;
    make_corpus(&s, 4, NULL, 1, 5);
    make_corpus(&t, 3, NULL, 1, 5);
    struct tfm_batch_opts o;
    tfm_batch_defaults(&o);
    struct tfm_batch_plan p;
    CHECK_EQ_INT(tfm_batch_plan(&s, 1, &t, 1, &o, &p, &err), -1);
    CHECK_STR(err.msg, "source has 4 sentences, target 3");
    o.tokens = 0;
    CHECK_EQ_INT(tfm_batch_plan(&s, 1, &s, 1, &o, &p, &err), -1);
    tfm_corpus_free(&t);
    /* an empty sentence that is meant to end in eos already */
    const int lt[] = {2, 0, 1, 1};
    make_corpus(&t, 4, lt, 0, 0);
    o.tokens = 100;
    CHECK_EQ_INT(tfm_batch_plan(&s, 1, &t, 0, &o, &p, &err), -1);
    CHECK_STR(err.msg, "line 2: empty target sentence");
    tfm_corpus_free(&s);
    tfm_corpus_free(&t);
}

/* ---- streams ----------------------------------------------------------------------- */

static char tmpdir[] = "/tmp/test_batch.XXXXXX";

static const char *tmp_path(const char *name)
{
    static char buf[16][256];
    static int k;
    k = (k + 1) % 16;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

/* Write a plan of random pairs to path; returns the corpora and plan through args. */
static int write_pairs(const char *path, int64_t n, int64_t tokens, uint64_t seed,
                       struct tfm_corpus *s, struct tfm_corpus *t, struct tfm_batch_plan *p)
{
    struct tfm_error err;
    make_corpus(s, n, NULL, 1, 40);
    make_corpus(t, n, NULL, 1, 40);
    struct tfm_batch_opts o;
    tfm_batch_defaults(&o);
    o.tokens = tokens;
    o.seed = seed;
    struct tfm_header h;
    tfm_header_init(&h, TFM_KIND_BATCHES);
    int rc = tfm_batch_plan(s, 1, t, 1, &o, p, &err);
    if (!rc)
        rc = tfm_header_setf(&h, &err, "batches", "%lld", (long long)p->nbatches) ||
             tfm_header_setf(&h, &err, "tokens", "%lld", (long long)tokens) ||
             tfm_header_setf(&h, &err, "sentences", "%lld", (long long)n) ||
             tfm_header_set(&h, "vocab.size", "50", &err) ||
             tfm_batch_write(path, &h, s, 1, t, 1, p, 0, &err);
    if (rc)
        printf("# %s\n", err.msg);
    tfm_header_free(&h);
    return rc;
}

static int row_is(const int32_t *row, int64_t L, const struct tfm_corpus *c, int64_t i)
{
    int64_t len = tfm_corpus_len(c, i);
    if (len + 1 > L || memcmp(row, tfm_corpus_sent(c, i), (size_t)len * 4) != 0 ||
        row[len] != TFM_EOS_ID)
        return 0;
    for (int64_t j = len + 1; j < L; j++)
        if (row[j] != TFM_PAD_ID)
            return 0;
    return 1;
}

static void test_round_trip(void)
{
    struct tfm_error err;
    struct tfm_corpus s, t;
    struct tfm_batch_plan p;
    const char *path = tmp_path("rt.tfm");
    CHECK_EQ_INT(write_pairs(path, 3000, 2000, 3, &s, &t, &p), 0);
    struct tfm_batch_reader *r = tfm_batch_open(path, 0, 1, &err);
    CHECK(r != NULL);
    if (!r) {
        printf("# %s\n", err.msg);
        return;
    }
    CHECK_EQ_INT(tfm_batch_count(r), p.nbatches);
    CHECK(tfm_batch_has_targets(r));
    char *seen = calloc(3000, 1);
    struct tfm_batch b;
    int64_t k = 0, bad = 0, rows = 0;
    int rc;
    while ((rc = tfm_batch_next(r, &b, &err)) == 1) {
        CHECK_EQ_INT(b.number, k);
        int64_t want = p.perm[k];
        CHECK_EQ_INT(b.B, p.start[want + 1] - p.start[want]);
        CHECK(b.B * b.S <= 2000 && b.B * b.T <= 2000);
        int64_t st = 0, tt = 0;
        for (int64_t i = 0; i < b.B; i++) {
            int64_t x = b.index[i];
            if (x < 0 || x >= 3000 || seen[x] || !row_is(b.src + i * b.S, b.S, &s, x) ||
                !row_is(b.tgt + i * b.T, b.T, &t, x))
                bad++;
            else
                seen[x] = 1;
            st += tfm_corpus_len(&s, x) + 1;
            tt += tfm_corpus_len(&t, x) + 1;
        }
        CHECK_EQ_INT(b.src_tokens, st);
        CHECK_EQ_INT(b.tgt_tokens, tt);
        rows += b.B;
        k++;
    }
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(k, p.nbatches);
    CHECK_EQ_INT(rows, 3000);
    CHECK_EQ_INT(tfm_batch_next(r, &b, &err), 0);   /* stays at the end */
    tfm_batch_close(r);
    free(seen);
    tfm_batch_plan_free(&p);
    tfm_corpus_free(&s);
    tfm_corpus_free(&t);
}

static void test_shards(void)
{
    struct tfm_error err;
    struct tfm_corpus s, t;
    struct tfm_batch_plan p;
    const char *path = tmp_path("shard.tfm");
    CHECK_EQ_INT(write_pairs(path, 2000, 600, 5, &s, &t, &p), 0);
    int64_t K = p.nbatches;
    CHECK(K > 20);
    for (int N = 1; N <= 5; N++) {
        char *taken = calloc((size_t)K, 1);
        int64_t sum = 0;
        for (int rank = 0; rank < N; rank++) {
            struct tfm_batch_reader *r = tfm_batch_open(path, rank, N, &err);
            CHECK(r != NULL);
            if (!r)
                break;
            CHECK_EQ_INT(tfm_batch_count(r), K / N);
            struct tfm_batch b;
            int64_t got = 0;
            int rc;
            while ((rc = tfm_batch_next(r, &b, &err)) == 1) {
                CHECK_EQ_INT(b.number % N, rank);
                CHECK(b.number < K / N * N);
                CHECK(!taken[b.number]);
                taken[b.number] = 1;
                got++;
            }
            CHECK_EQ_INT(rc, 0);
            CHECK_EQ_INT(got, K / N);     /* balanced: every rank the same count */
            sum += got;
            tfm_batch_close(r);
        }
        CHECK_EQ_INT(sum, K / N * N);
        free(taken);
    }
    /* resuming: skip 3 of rank 1's batches of 4 ranks, the next one is number 13 */
    struct tfm_batch_reader *r = tfm_batch_open(path, 1, 4, &err);
    struct tfm_batch b;
    CHECK_EQ_INT(tfm_batch_skip(r, 3, &err), 3);
    CHECK_EQ_INT(tfm_batch_next(r, &b, &err), 1);
    CHECK_EQ_INT(b.number, 13);
    CHECK_EQ_INT(b.B, p.start[p.perm[13] + 1] - p.start[p.perm[13]]);
    /* its share is K / 4 batches, 4 of them taken: the rest skipped, and it says so */
    CHECK_EQ_INT(tfm_batch_skip(r, K, &err), K / 4 - 4);
    tfm_batch_close(r);
    /* a process of ranks 2 and 3 of 6: the batches i with i % 6 in {2, 3}, in order, 2 of
     * every 6 up to floor(K/6)*6: what ranks 2 and 3 alone take, interleaved */
    r = tfm_batch_open_ranks(path, 2, 2, 6, NULL, &err);
    CHECK(r != NULL);
    if (r) {
        CHECK_EQ_INT(tfm_batch_count(r), K / 6 * 2);
        int64_t got = 0, want = 2;
        int rc;
        while ((rc = tfm_batch_next(r, &b, &err)) == 1) {
            CHECK_EQ_INT(b.number, want);
            want += want % 6 == 2 ? 1 : 5;
            got++;
        }
        CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(got, K / 6 * 2);
        tfm_batch_close(r);
    }
    /* more ranks than batches, bad rank */
    CHECK(tfm_batch_open(path, 0, (int)K + 1, &err) == NULL);
    CHECK(strstr(err.msg, "batches cannot feed") != NULL);
    CHECK(tfm_batch_open(path, 3, 3, &err) == NULL);
    CHECK(tfm_batch_open_ranks(path, 5, 2, 6, NULL, &err) == NULL);
    tfm_batch_plan_free(&p);
    tfm_corpus_free(&s);
    tfm_corpus_free(&t);
}

/* A stream of hand-made batches: header keys, then (index, src[, tgt]) triples. */
struct raw {
    int64_t B, S, T;
    const int64_t *index;
    const int32_t *src, *tgt;
};

static int write_raw(const char *path, const char *kind, const char *batches,
                     const struct raw *r, int n)
{
    struct tfm_error err;
    struct tfm_header h;
    tfm_header_init(&h, kind);
    tfm_header_set(&h, "vocab.size", "10", &err);
    tfm_header_set(&h, "tokens", "12", &err);
    if (batches)
        tfm_header_set(&h, "batches", batches, &err);
    struct tfm_writer *w = tfm_writer_open(path, &h, 0, &err);
    tfm_header_free(&h);
    if (!w)
        return -1;
    for (int i = 0; i < n; i++) {
        struct tfm_batch b = {.B = r[i].B, .S = r[i].S, .T = r[i].T,
                              .index = (int64_t *)r[i].index, .src = (int32_t *)r[i].src,
                              .tgt = (int32_t *)r[i].tgt};
        if (tfm_batch_put(w, &b, &err)) {
            tfm_writer_abort(w);
            return -1;
        }
    }
    return tfm_writer_close(w, &err);
}

/* Read path to the end as rank 0 of 1: -1 with the message in err, or the batches. */
static int read_all(const char *path, struct tfm_error *err)
{
    struct tfm_batch_reader *r = tfm_batch_open(path, 0, 1, err);
    if (!r)
        return -1;
    struct tfm_batch b;
    int n = 0, rc;
    while ((rc = tfm_batch_next(r, &b, err)) == 1)
        n++;
    tfm_batch_close(r);
    return rc < 0 ? -1 : n;
}

static void test_bad_batches(void)
{
    struct tfm_error err;
    const char *path = tmp_path("bad.tfm");
    static const int64_t ix2[] = {0, 1};
    static const int32_t good[] = {5, 3, 0, 6, 7, 3};       /* [2,3] */
    static const int32_t tgood[] = {4, 3, 8, 3};             /* [2,2] */
    struct raw ok = {2, 3, 2, ix2, good, tgood};
    CHECK_EQ_INT(write_raw(path, TFM_KIND_BATCHES, "1", &ok, 1), 0);
    CHECK_EQ_INT(read_all(path, &err), 1);

    static const struct { const int32_t src[6]; const char *why; } rows[] = {
        {{5, 0, 3, 6, 7, 3}, "row 0: id 3 at 2 after the padding"},
        {{5, 3, 0, 6, 7, 8}, "row 1 does not end in eos"},
        {{0, 0, 0, 6, 7, 3}, "row 0 is empty"},
        {{5, 3, 0, 6, 10, 3}, "row 1: id 10 at 1 outside the vocabulary (10)"},
        {{5, 3, 0, -1, 7, 3}, "row 1: id -1 at 0 outside the vocabulary (10)"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        struct raw bad = ok;
        bad.src = rows[i].src;
        CHECK_EQ_INT(write_raw(path, TFM_KIND_BATCHES, "1", &bad, 1), 0);
        CHECK_EQ_INT(read_all(path, &err), -1);
        CHECK(strstr(err.msg, rows[i].why) != NULL);
        CHECK(strstr(err.msg, "'batch.src'") != NULL);
        if (!strstr(err.msg, rows[i].why))
            printf("# got: %s\n", err.msg);
    }
    /* shapes: src rows disagree with the index */
    {
        struct tfm_header h;
        tfm_header_init(&h, TFM_KIND_BATCHES);
        struct tfm_writer *w = tfm_writer_open(path, &h, 0, &err);
        tfm_header_free(&h);
        int64_t d1 = 2, d2[2] = {1, 6};
        CHECK(w && !tfm_writer_put(w, "batch.index", TFM_I64, 1, &d1, ix2, &err) &&
              !tfm_writer_put(w, "batch.src", TFM_I32, 2, d2, good, &err) &&
              !tfm_writer_close(w, &err));
        CHECK_EQ_INT(read_all(path, &err), -1);
        CHECK(strstr(err.msg, "'batch.src': at byte") != NULL &&
              strstr(err.msg, "shape [1,6] for 2 sentences") != NULL);
    }
    /* targets= is 0, 1 or absent: another value is an error, never "no targets" */
    {
        struct tfm_header h;
        tfm_header_init(&h, TFM_KIND_BATCHES);
        CHECK(tfm_header_set(&h, "targets", "yes", &err) == 0);
        struct tfm_writer *w = tfm_writer_open(path, &h, 0, &err);
        tfm_header_free(&h);
        int64_t d1 = 2, d2[2] = {2, 3};
        CHECK(w && !tfm_writer_put(w, "batch.index", TFM_I64, 1, &d1, ix2, &err) &&
              !tfm_writer_put(w, "batch.src", TFM_I32, 2, d2, good, &err) &&
              !tfm_writer_close(w, &err));
        CHECK(tfm_batch_open(path, 0, 1, &err) == NULL);
        CHECK(strstr(err.msg, "bad.tfm: header: targets=yes: 0 or 1 expected (or no targets "
                              "key)") != NULL);
    }
    /* over the budget of 12 */
    struct raw bad = ok;
    static const int32_t wide[14] = {5, 6, 7, 8, 5, 6, 3, 5, 6, 7, 8, 5, 6, 3};
    bad = ok;
    bad.S = 7;
    bad.src = wide;
    CHECK_EQ_INT(write_raw(path, TFM_KIND_BATCHES, "1", &bad, 1), 0);
    CHECK_EQ_INT(read_all(path, &err), -1);
    CHECK(strstr(err.msg, "14 cells, more than the budget of 12") != NULL);
    /* the header's count of batches is checked at the end */
    CHECK_EQ_INT(write_raw(path, TFM_KIND_BATCHES, "2", &ok, 1), 0);
    CHECK_EQ_INT(read_all(path, &err), -1);
    CHECK(strstr(err.msg, "the header says batches=2, the stream has 1") != NULL);
    struct raw two[2] = {ok, ok};
    CHECK_EQ_INT(write_raw(path, TFM_KIND_BATCHES, "1", two, 2), 0);
    CHECK_EQ_INT(read_all(path, &err), -1);
    CHECK(strstr(err.msg, "more batches than the header's batches=1") != NULL);
    /* targets in one batch and not the next */
    struct raw three[3] = {ok, ok, ok};
    three[1].tgt = NULL;
    CHECK_EQ_INT(write_raw(path, TFM_KIND_BATCHES, "3", three, 3), 0);
    CHECK_EQ_INT(read_all(path, &err), -1);
    CHECK(strstr(err.msg, "'batch.tgt' expected") != NULL);
    /* a stream of another kind; a stream without batches= read by 2 ranks */
    CHECK_EQ_INT(write_raw(path, TFM_KIND_TOKENS, "1", &ok, 1), 0);
    CHECK(tfm_batch_open(path, 0, 1, &err) == NULL);
    CHECK(strstr(err.msg, "a 'tokens' stream, expected batches") != NULL);
    CHECK_EQ_INT(write_raw(path, TFM_KIND_BATCHES, NULL, two, 2), 0);
    CHECK(tfm_batch_open(path, 0, 2, &err) == NULL);
    CHECK(strstr(err.msg, "does not say how many batches") != NULL);
    CHECK_EQ_INT(read_all(path, &err), 2);    /* one rank needs no count */
    /* source only */
    struct raw src_only[2] = {ok, ok};
    src_only[0].tgt = src_only[1].tgt = NULL;
    CHECK_EQ_INT(write_raw(path, TFM_KIND_BATCHES, "2", src_only, 2), 0);
    struct tfm_batch_reader *r = tfm_batch_open(path, 0, 1, &err);
    CHECK(r && !tfm_batch_has_targets(r));
    struct tfm_batch b;
    CHECK_EQ_INT(tfm_batch_next(r, &b, &err), 1);
    CHECK(b.tgt == NULL && b.T == 0 && b.src_tokens == 5);
    CHECK_EQ_INT(tfm_batch_next(r, &b, &err), 1);
    CHECK_EQ_INT(tfm_batch_next(r, &b, &err), 0);
    tfm_batch_close(r);
}

/* tfm_batch_run on token streams: header keys, eos=1 inputs, mismatches. */
static int write_tokens(const char *path, const struct tfm_corpus *c, const char *eos,
                        const char *spm)
{
    struct tfm_error err;
    struct tfm_header h;
    tfm_header_init(&h, TFM_KIND_TOKENS);
    tfm_header_set(&h, "vocab.size", "50", &err);
    if (eos)
        tfm_header_set(&h, "eos", eos, &err);
    if (spm)
        tfm_header_set_spm(&h, spm, strlen(spm), &err);
    struct tfm_writer *w = tfm_writer_open(path, &h, 0, &err);
    tfm_header_free(&h);
    if (!w || tfm_corpus_write(w, c, &err)) {
        tfm_writer_abort(w);
        return -1;
    }
    return tfm_writer_close(w, &err);
}

static void test_run(void)
{
    struct tfm_error err;
    struct tfm_corpus s, t;
    make_corpus(&s, 500, NULL, 1, 30);
    make_corpus(&t, 500, NULL, 1, 30);
    const char *sp = tmp_path("s.tfm"), *tp = tmp_path("t.tfm"), *out = tmp_path("o.tfm");
    CHECK_EQ_INT(write_tokens(sp, &s, NULL, "model A"), 0);
    CHECK_EQ_INT(write_tokens(tp, &t, NULL, "model A"), 0);
    struct tfm_batch_opts o;
    tfm_batch_defaults(&o);
    o.tokens = 400;
    o.max_len = 25;
    o.producer = "test";
    struct tfm_batch_plan st;
    CHECK_EQ_INT(tfm_batch_run(sp, tp, out, &o, &st, &err), 0);
    CHECK(st.order == NULL);
    CHECK(st.dropped > 0);
    struct tfm_batch_reader *r = tfm_batch_open(out, 0, 1, &err);
    CHECK(r != NULL);
    if (r) {
        const struct tfm_header *h = tfm_batch_header(r);
        CHECK_STR(h->kind, "batches");
        CHECK_STR(tfm_header_get(h, "producer"), "test");
        CHECK_STR(tfm_header_get(h, "tokens"), "400");
        CHECK_STR(tfm_header_get(h, "max-len"), "25");
        CHECK_STR(tfm_header_get(h, "sentences"), "500");
        CHECK_STR(tfm_header_get(h, "targets"), "1");
        char buf[64];
        snprintf(buf, sizeof buf, "%lld", (long long)st.dropped);
        CHECK_STR(tfm_header_get(h, "dropped"), buf);
        snprintf(buf, sizeof buf, "%lld", (long long)st.nbatches);
        CHECK_STR(tfm_header_get(h, "batches"), buf);
        snprintf(buf, sizeof buf, "%.4f", tfm_batch_pad_tgt(&st));
        CHECK_STR(tfm_header_get(h, "pad.tgt"), buf);
        CHECK(h->spm && h->spm_size == 7 && memcmp(h->spm, "model A", 7) == 0);
        int64_t rows = 0;
        struct tfm_batch b;
        while (tfm_batch_next(r, &b, &err) == 1)
            rows += b.B;
        CHECK_EQ_INT(rows, 500 - st.dropped);
        tfm_batch_close(r);
    }
    /* same batches from inputs that already end in eos (header eos=1) */
    struct tfm_corpus s2, t2;
    tfm_corpus_init(&s2);
    tfm_corpus_init(&t2);
    for (int64_t i = 0; i < 500; i++) {
        int32_t buf[64];
        memcpy(buf, tfm_corpus_sent(&s, i), (size_t)tfm_corpus_len(&s, i) * 4);
        buf[tfm_corpus_len(&s, i)] = TFM_EOS_ID;
        tfm_corpus_push(&s2, buf, tfm_corpus_len(&s, i) + 1, &err);
        memcpy(buf, tfm_corpus_sent(&t, i), (size_t)tfm_corpus_len(&t, i) * 4);
        buf[tfm_corpus_len(&t, i)] = TFM_EOS_ID;
        tfm_corpus_push(&t2, buf, tfm_corpus_len(&t, i) + 1, &err);
    }
    const char *sp2 = tmp_path("s2.tfm"), *out2 = tmp_path("o2.tfm");
    CHECK_EQ_INT(write_tokens(sp2, &s2, "1", "model A"), 0);
    struct tfm_batch_plan st2;
    CHECK_EQ_INT(tfm_batch_run(sp2, tp, out2, &o, &st2, &err), 0);
    CHECK_EQ_INT(st2.nbatches, st.nbatches);
    CHECK_EQ_INT(st2.src_tokens, st.src_tokens);
    CHECK_EQ_INT(st2.tgt_cells, st.tgt_cells);
    FILE *f1 = fopen(out, "rb"), *f2 = fopen(out2, "rb");
    int same = f1 && f2;
    for (int c1 = 0, c2 = 0; same && c1 != EOF; ) {
        c1 = fgetc(f1);
        c2 = fgetc(f2);
        same = c1 == c2;
    }
    CHECK(same);    /* byte for byte: eos added or already there */
    if (f1)
        fclose(f1);
    if (f2)
        fclose(f2);

    /* eos=1 promised but missing */
    CHECK_EQ_INT(write_tokens(sp2, &s, "1", "model A"), 0);
    CHECK_EQ_INT(tfm_batch_run(sp2, tp, out2, &o, &st2, &err), -1);
    CHECK(strstr(err.msg, "line 1: does not end in eos, but the header says eos=1") != NULL);
    /* different vocabularies */
    CHECK_EQ_INT(write_tokens(sp2, &s, NULL, "model B"), 0);
    CHECK_EQ_INT(tfm_batch_run(sp2, tp, out2, &o, &st2, &err), -1);
    CHECK(strstr(err.msg, "have different vocabularies") != NULL);
    /* pad inside a sentence */
    struct tfm_corpus z;
    tfm_corpus_init(&z);
    const int32_t zs[] = {5, 0, 6};
    for (int i = 0; i < 500; i++)
        tfm_corpus_push(&z, zs, 3, &err);
    CHECK_EQ_INT(write_tokens(sp2, &z, NULL, "model A"), 0);
    CHECK_EQ_INT(tfm_batch_run(sp2, tp, out2, &o, &st2, &err), -1);
    CHECK(strstr(err.msg, "line 1: pad id 0 inside a sentence") != NULL);
    /* different counts */
    tfm_corpus_push(&t, zs, 1, &err);
    CHECK_EQ_INT(write_tokens(tp, &t, NULL, "model A"), 0);
    CHECK_EQ_INT(tfm_batch_run(sp, tp, out2, &o, &st2, &err), -1);
    CHECK(strstr(err.msg, "has 500 sentences but") != NULL && strstr(err.msg, "has 501") != NULL);
    tfm_corpus_free(&z);
    tfm_corpus_free(&s);
    tfm_corpus_free(&t);
    tfm_corpus_free(&s2);
    tfm_corpus_free(&t2);
}

/* dst = the files srcs[0..n) one after another. */
static void cat_files(const char *dst, const char *const *srcs, int n)
{
    FILE *out = fopen(dst, "wb");
    for (int i = 0; i < n; i++) {
        FILE *in = fopen(srcs[i], "rb");
        char buf[4096];
        size_t k;
        while ((k = fread(buf, 1, sizeof buf, in)) > 0)
            fwrite(buf, 1, k, out);
        fclose(in);
    }
    fclose(out);
}

/* Batch streams written one after another are read as one: every batch of each, numbered
 * on, sentence numbers going on after each stream's sentences=; one rank only. */
static void test_concat(void)
{
    struct tfm_error err;
    struct tfm_corpus s1, t1, s2, t2;
    struct tfm_batch_plan p1, p2;
    const char *a = tmp_path("cat-a.tfm"), *b = tmp_path("cat-b.tfm"), *ab = tmp_path("cat.tfm");
    CHECK_EQ_INT(write_pairs(a, 300, 500, 3, &s1, &t1, &p1), 0);
    CHECK_EQ_INT(write_pairs(b, 200, 700, 4, &s2, &t2, &p2), 0);
    const char *parts[] = {a, b, a};
    cat_files(ab, parts, 3);
    struct tfm_batch_reader *r = tfm_batch_open(ab, 0, 1, &err);
    CHECK(r != NULL);
    if (r) {
        CHECK_EQ_INT(tfm_batch_count(r), p1.nbatches);  /* the first stream's, known at open */
        char *seen = calloc(800, 1);
        struct tfm_batch bt;
        int64_t k = 0, bad = 0, rows = 0;
        int rc;
        while ((rc = tfm_batch_next(r, &bt, &err)) == 1) {
            CHECK_EQ_INT(bt.number, k);
            int second = k >= p1.nbatches && k < p1.nbatches + p2.nbatches;
            int64_t base = k < p1.nbatches ? 0 : second ? 300 : 500;
            const struct tfm_corpus *s = second ? &s2 : &s1, *t = second ? &t2 : &t1;
            for (int64_t i = 0; i < bt.B; i++) {
                int64_t x = bt.index[i];
                if (x < base || x >= base + s->n || seen[x] ||
                    !row_is(bt.src + i * bt.S, bt.S, s, x - base) ||
                    !row_is(bt.tgt + i * bt.T, bt.T, t, x - base))
                    bad++;
                else
                    seen[x] = 1;
            }
            rows += bt.B;
            k++;
        }
        if (rc < 0)
            printf("# %s\n", err.msg);
        CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(k, 2 * p1.nbatches + p2.nbatches);
        CHECK_EQ_INT(rows, 800);
        CHECK_EQ_INT(bad, 0);
        free(seen);
        tfm_batch_close(r);
    }
    /* shared among ranks, the count must be known at the start: refused, from a file at
     * open (before training, not an epoch later), where the second stream begins */
    r = tfm_batch_open(ab, 1, 2, &err);
    CHECK(r == NULL);
    struct stat sa;
    CHECK_EQ_INT(stat(a, &sa), 0);
    char want[512];
    snprintf(want, sizeof want, "%s: stream 2 at byte %lld: a second batch stream follows the "
             "first: concatenated batch streams cannot be shared among 2 ranks", ab,
             (long long)sa.st_size);
    CHECK(strstr(err.msg, want) == err.msg);
    if (strstr(err.msg, want) != err.msg)
        printf("# %s\n", err.msg);
    tfm_batch_close(r);
    /* read once (a pipe), as it is read: the second stream's first record */
    pid_t pid = -1;
    int pfd = t_pipe_from(ab, &pid), saved = dup(0);
    CHECK(pfd >= 0 && saved >= 0 && dup2(pfd, 0) == 0);
    close(pfd);
    r = tfm_batch_open("-", 1, 2, &err);
    CHECK(r != NULL);
    struct tfm_batch bt;
    int rc = 1;
    while (r && (rc = tfm_batch_next(r, &bt, &err)) == 1) {
    }
    CHECK_EQ_INT(rc, -1);
    CHECK(strstr(err.msg, ": stream 2, record 1 'batch.index': ") &&
          strstr(err.msg, "cannot be shared among 2 ranks"));
    tfm_batch_close(r);
    CHECK(dup2(saved, 0) == 0);
    close(saved);
    waitpid(pid, NULL, 0);

    /* a stream that ends after a batch's source: its target is not taken from the next */
    struct tfm_header h;
    tfm_header_init(&h, TFM_KIND_BATCHES);
    tfm_header_set(&h, "targets", "1", &err);
    struct tfm_writer *w = tfm_writer_open(a, &h, 0, &err);
    int64_t one = 1, dims[2] = {1, 2};
    int32_t row[2] = {5, 3};
    CHECK(tfm_writer_put(w, "batch.index", TFM_I64, 1, &one, &one, &err) == 0);
    CHECK(tfm_writer_put(w, "batch.src", TFM_I32, 2, dims, row, &err) == 0);
    CHECK(tfm_writer_close(w, &err) == 0);
    w = tfm_writer_open(b, &h, 0, &err);
    CHECK(tfm_writer_put(w, "batch.tgt", TFM_I32, 2, dims, row, &err) == 0);
    CHECK(tfm_writer_close(w, &err) == 0);
    tfm_header_free(&h);
    const char *cut[] = {a, b};
    cat_files(ab, cut, 2);
    CHECK(tfm_batch_open(ab, 0, 1, &err) == NULL);
    CHECK(strstr(err.msg, "stream 2, record 1 'batch.tgt'") &&
          strstr(err.msg, "the stream before this one ends where 'batch.tgt' was expected"));
    tfm_batch_plan_free(&p1);
    tfm_batch_plan_free(&p2);
    tfm_corpus_free(&s1);
    tfm_corpus_free(&t1);
    tfm_corpus_free(&s2);
    tfm_corpus_free(&t2);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    t_run("budget never exceeded, every kept pair once, drops counted", test_budget_and_coverage);
    t_run("sentences over 2048 tokens: the three-pass sort", test_long_sentences);
    t_run("padding fractions of a known example", test_padding_known);
    t_run("same seed same batches, another seed another order", test_seed);
    t_run("source only: length order, input order within a length", test_source_only);
    t_run("plan errors", test_errors);
    t_run("write and read back: rows, eos, padding, indices", test_round_trip);
    t_run("shards: disjoint, balanced, lock-step; skipping", test_shards);
    t_run("reader rejects bad batches", test_bad_batches);
    t_run("tfm_batch_run: header, eos=1 input, mismatches", test_run);
    t_run("concatenated batch streams: every batch, numbers go on; one rank only", test_concat);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", tmpdir);
    return t_done();
}
