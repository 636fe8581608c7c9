/* test_treecon: the tree constraint on a search (treecon.h).  Every sequence it lets a
 * search finish is checked against an independent tree checker, and the set of those
 * sequences is compared with a brute-force enumeration of every sequence up to the
 * maximum length: exactly the well-formed trees get through, and no partial hypothesis
 * the constraint allows is a dead end.  Then beam and greedy searches over a random
 * model, with the constraint, write only trees. */
#include <stdlib.h>

#include "beam.h"
#include "check.h"
#include "treecon.h"

/* A vocabulary: brackets S and NP, an opening X without its closing (never allowed), a
 * closing Y without an opening, leaves, a continuation piece. */
enum { T_S = 4, T_ES, T_NP, T_ENP, T_THE, T_CAT, T_S_CONT, T_XX, T_X, T_EY, V };
static const char *const PIECES[V] = {
    "<pad>", "<unk>", "<s>", "</s>", "\u2581(S", "\u2581)S", "\u2581(NP", "\u2581)NP",
    "\u2581the", "\u2581cat", "s", "\u2581XX", "\u2581(X", "\u2581)Y"};

/* the source "the cats": pieces the, cat, s; two words */
static const int32_t SRC[] = {T_THE, T_CAT, T_S_CONT, 3};
#define NSRC 3
#define NWORDS 2

/* Is seq[0..n) (eos excluded) a tree the constraint must allow?  One root holding
 * everything, closings matching their openings, every constituent with a leaf, leaves
 * inside constituents, a continuation piece only right after a leaf piece; COPY: the
 * leaves are the source pieces in order; COUNT: any leaves, as many words (leaf starts,
 * not the continuation piece) as the source has. */
static int is_tree(const int32_t *seq, int n, enum tfm_tree_mode mode)
{
    int32_t stack[64];
    int leaf[64];
    int depth = 0, done = 0, pieces = 0, words = 0, prev_leaf = 0;
    for (int i = 0; i < n; i++) {
        int32_t x = seq[i];
        if (done)
            return 0;
        if (x == T_S || x == T_NP) {
            stack[depth] = x;
            leaf[depth++] = 0;
            prev_leaf = 0;
        } else if (x == T_ES || x == T_ENP) {
            if (!depth || stack[depth - 1] != x - 1 || !leaf[depth - 1])
                return 0;
            depth--;
            if (depth)
                leaf[depth - 1] = 1;
            else
                done = 1;
            prev_leaf = 0;
        } else if (x == T_THE || x == T_CAT || x == T_S_CONT || x == T_XX) {
            if (!depth || (x == T_S_CONT && !prev_leaf))
                return 0;
            if (mode == TFM_TREE_COPY) {
                if (x == T_XX || pieces >= NSRC || SRC[pieces] != x)
                    return 0;
                pieces++;
            } else {
                words += x != T_S_CONT;
            }
            leaf[depth - 1] = 1;
            prev_leaf = 1;
        } else {
            return 0;
        }
    }
    return done && (mode == TFM_TREE_COPY ? pieces == NSRC : words == NWORDS);
}

/* the inner model: every token equally likely */
static int flat_step(void *ctx, int nrows, const int32_t *last, const int32_t *row_src,
                     float *logp, struct tfm_error *err)
{
    (void)ctx, (void)last, (void)row_src, (void)err;
    for (int i = 0; i < nrows * V; i++)
        logp[i] = -2.0f;
    return 0;
}

static int no_select(void *ctx, int nrows, const int32_t *keep, struct tfm_error *err)
{
    (void)ctx, (void)nrows, (void)keep, (void)err;
    return 0;
}

#define MAXP 200000

/* Every sequence the constraint lets finish within max_len tokens (breadth first through
 * the wrapped model's step and select); checks each and that no allowed prefix is stuck.
 * Returns the number of finished sequences. */
static long walk(enum tfm_tree_mode mode, int max_len, int least)
{
    struct tfm_error err = {0};
    struct tfm_treecon *tc = tfm_treecon_create(PIECES, V, mode, &err);
    CHECK(tc != NULL);
    if (!tc)
        return -1;
    struct tfm_step_model inner = {NULL, V, flat_step, no_select, NULL}, m;
    CHECK(tfm_treecon_begin(tc, &inner, 1, 4, SRC, &max_len, &m, &err) == 0);
    int32_t *pre = malloc(sizeof(int32_t) * MAXP * 16), *next = malloc(sizeof(int32_t) * MAXP * 16);
    int32_t *last = malloc(sizeof(int32_t) * MAXP), *keep = malloc(sizeof(int32_t) * MAXP);
    int32_t *src = calloc(MAXP, sizeof(int32_t));
    float *logp = malloc(sizeof(float) * MAXP * V);
    long finished = 0;
    int rows = 1, bad = 0, stuck = 0;
    last[0] = 2;
    for (int t = 0; rows > 0 && t <= max_len; t++) {
        CHECK(m.step(m.ctx, rows, last, src, logp, &err) == 0);
        int nn = 0;
        for (int r = 0; r < rows; r++) {
            int any = 0;
            for (int v = 0; v < V; v++) {
                if (!(logp[(size_t)r * V + v] > -INFINITY))
                    continue;
                any = 1;
                if (v == 3) {
                    finished++;
                    bad += !is_tree(pre + (size_t)r * 16, t, mode);
                } else if (t < max_len && nn < MAXP) {
                    memcpy(next + (size_t)nn * 16, pre + (size_t)r * 16, sizeof(int32_t) * 16);
                    next[(size_t)nn * 16 + t] = v;
                    keep[nn] = r;
                    last[nn++] = v;
                } else if (t == max_len) {
                    bad++;                      /* past the maximum length: not eos */
                }
            }
            stuck += !any;
        }
        CHECK(nn < MAXP);
        if (nn)
            CHECK(m.select(m.ctx, nn, keep, &err) == 0);
        int32_t *tmp = pre;
        pre = next;
        next = tmp;
        rows = nn;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(stuck, max_len < least);      /* no tree fits: the first step is stuck */
    free(pre), free(next), free(last), free(keep), free(src), free(logp);
    tfm_treecon_free(tc);
    return finished;
}

/* The trees of at most max_len tokens over the alphabet, by enumerating every sequence. */
static long brute(enum tfm_tree_mode mode, int max_len)
{
    static const int32_t copy_ab[] = {T_S, T_ES, T_NP, T_ENP, T_THE, T_CAT, T_S_CONT, T_XX, T_X};
    static const int32_t count_ab[] = {T_S, T_ES, T_NP, T_ENP, T_XX, T_S_CONT, T_THE, T_CAT, T_EY};
    const int32_t *ab = mode == TFM_TREE_COPY ? copy_ab : count_ab;
    int na = 9;
    long trees = 0;
    int32_t seq[16];
    int digit[16];
    for (int n = 1; n <= max_len; n++) {
        memset(digit, 0, sizeof digit);
        for (;;) {
            for (int i = 0; i < n; i++)
                seq[i] = ab[digit[i]];
            trees += is_tree(seq, n, mode);
            int i = 0;
            while (i < n && ++digit[i] == na)
                digit[i++] = 0;
            if (i == n)
                break;
        }
    }
    return trees;
}

static void test_copy_exact(void)
{
    /* the least trees are (S the cat s )S and (NP the cat s )NP: 5 tokens */
    CHECK_EQ_INT(walk(TFM_TREE_COPY, 4, 5), 0);
    CHECK_EQ_INT(walk(TFM_TREE_COPY, 5, 5), 2);
    long w = walk(TFM_TREE_COPY, 7, 5), b = brute(TFM_TREE_COPY, 7);
    /* 2 least trees, and 12 with one more constituent: over the, cat s or all three, with
     * 2 labels, under 2 roots */
    CHECK_EQ_INT(b, 14);
    CHECK_EQ_INT(w, b);
}

static void test_count_exact(void)
{
    /* (S a b )S and (NP a b )NP, a and b each the, cat or XX */
    CHECK_EQ_INT(walk(TFM_TREE_COUNT, 3, 4), 0);
    CHECK_EQ_INT(walk(TFM_TREE_COUNT, 4, 4), 18);
    long w = walk(TFM_TREE_COUNT, 7, 4), b = brute(TFM_TREE_COUNT, 7);
    /* by tokens: 4: 18; 5: 36 (one "s" after either leaf); 6: 54 (two) + 108 (a
     * constituent over a, b or both); 7: 72 (three) + 216 (a constituent and one "s") */
    CHECK_EQ_INT(b, 504);
    CHECK_EQ_INT(w, b);
}

/* A model with random log-probabilities: with the constraint, every search result is a
 * tree, and with max_len at the least a tree needs too. */
static uint32_t rnd_state = 12345;
static float rnd(void)
{
    rnd_state = rnd_state * 1664525u + 1013904223u;
    return (float)(rnd_state >> 8) / 16777216.0f;
}

static int rand_step(void *ctx, int nrows, const int32_t *last, const int32_t *row_src,
                     float *logp, struct tfm_error *err)
{
    (void)ctx, (void)last, (void)row_src, (void)err;
    for (int r = 0; r < nrows; r++) {
        double z = 0;
        for (int v = 0; v < V; v++)
            z += exp(logp[(size_t)r * V + v] = 4.0f * rnd());
        for (int v = 0; v < V; v++)
            logp[(size_t)r * V + v] -= (float)log(z);
    }
    return 0;
}

static void test_search(void)
{
    struct tfm_error err = {0};
    for (int mode = TFM_TREE_COPY; mode <= TFM_TREE_COUNT; mode++)
        for (int beam = 1; beam <= 8; beam *= 2)
            for (int ml = 5; ml <= 40; ml += 35) {
                struct tfm_treecon *tc = tfm_treecon_create(PIECES, V, mode, &err);
                struct tfm_step_model inner = {NULL, V, rand_step, no_select, NULL}, m;
                int32_t src[8] = {T_THE, T_CAT, T_S_CONT, 3, T_THE, T_CAT, T_S_CONT, 3};
                int max_len[2] = {ml, ml};
                CHECK(tfm_treecon_begin(tc, &inner, 2, 4, src, max_len, &m, &err) == 0);
                struct tfm_beam_opts o;
                tfm_beam_defaults(&o);
                o.beam = beam;
                o.nbest = beam;
                struct tfm_hyps h = {0};
                CHECK(tfm_beam_search(&m, 2, max_len, NULL, &o, &h, &err) == 0);
                CHECK(h.n >= 2);
                for (int64_t i = 0; i < h.n; i++) {
                    CHECK(h.score[i] > -INFINITY);
                    CHECK(is_tree(h.ids + h.offsets[i], (int)(h.offsets[i + 1] - h.offsets[i]),
                                  mode));
                }
                tfm_hyps_free(&h);
                tfm_treecon_free(tc);
            }
}

/* COPY: the leaf's log-probability is the mass of every word start (the word is given;
 * the model chooses a leaf, an opening or a closing), the rest of a word is certain, and
 * the other tokens keep theirs. */
static void test_copy_probabilities(void)
{
    struct tfm_error err = {0};
    struct tfm_treecon *tc = tfm_treecon_create(PIECES, V, TFM_TREE_COPY, &err);
    struct tfm_step_model inner = {NULL, V, flat_step, no_select, NULL}, m;
    int max_len = 20;
    CHECK(tfm_treecon_begin(tc, &inner, 1, 4, SRC, &max_len, &m, &err) == 0);
    float lp[V];
    int32_t last = 2, src = 0, keep = 0;
    CHECK(m.step(m.ctx, 1, &last, &src, lp, &err) == 0);     /* only openings */
    CHECK(lp[T_S] == -2.0f && lp[T_NP] == -2.0f && lp[T_THE] == -INFINITY);
    last = T_S;
    CHECK(m.select(m.ctx, 1, &keep, &err) == 0);
    CHECK(m.step(m.ctx, 1, &last, &src, lp, &err) == 0);     /* "the": 3 word starts */
    CHECK_NEAR(lp[T_THE], -2.0 + log(3.0), 1e-6);
    CHECK(lp[T_S] == -2.0f && lp[T_CAT] == -INFINITY && lp[T_XX] == -INFINITY);
    CHECK(lp[T_ES] == -INFINITY);                             /* (S holds no leaf yet */
    static const int32_t path[] = {T_THE, T_CAT};
    for (int i = 0; i < 2; i++) {
        last = path[i];
        CHECK(m.select(m.ctx, 1, &keep, &err) == 0);
        CHECK(m.step(m.ctx, 1, &last, &src, lp, &err) == 0);
    }
    /* after "cat": its "s" is certain, nothing else */
    CHECK(lp[T_S_CONT] == 0.0f);
    int others = 0;
    for (int v = 0; v < V; v++)
        others += v != T_S_CONT && lp[v] > -INFINITY;
    CHECK_EQ_INT(others, 0);
    tfm_treecon_free(tc);
}

/* A model certain that no word comes: the leaf's mass is -inf (never NaN, which a search
 * could not rank), and the brackets keep theirs. */
static int no_words_step(void *ctx, int nrows, const int32_t *last, const int32_t *row_src,
                         float *logp, struct tfm_error *err)
{
    (void)ctx, (void)last, (void)row_src, (void)err;
    for (int i = 0; i < nrows * V; i++)
        logp[i] = i % V == T_S || i % V == T_NP ? -1.0f : -INFINITY;
    return 0;
}

static void test_copy_no_words(void)
{
    struct tfm_error err = {0};
    struct tfm_treecon *tc = tfm_treecon_create(PIECES, V, TFM_TREE_COPY, &err);
    struct tfm_step_model inner = {NULL, V, no_words_step, no_select, NULL}, m;
    int max_len = 20;
    CHECK(tfm_treecon_begin(tc, &inner, 1, 4, SRC, &max_len, &m, &err) == 0);
    float lp[V];
    int32_t last = 2, src = 0, keep = 0;
    CHECK(m.step(m.ctx, 1, &last, &src, lp, &err) == 0);
    last = T_S;
    CHECK(m.select(m.ctx, 1, &keep, &err) == 0);
    CHECK(m.step(m.ctx, 1, &last, &src, lp, &err) == 0);
    CHECK(lp[T_THE] == -INFINITY);
    CHECK(lp[T_NP] == -1.0f);
    tfm_treecon_free(tc);
}

/* COUNT over a vocabulary whose leaf pieces may not make tokens that restoration
 * (tfm-score --restore) reads as preterminals: "▁(" and "▁)" would read as brackets, "▁"
 * alone is no token unless a continuation follows, and "(" after it would make one that
 * reads as a bracket.  Every tree the constraint lets finish, written as text (a piece's
 * "▁" a space), is checked token by token, as restoration reads it.  The source's unknown
 * piece continues its word: 2 words, "▁XX" and "▁" + unk. */
enum { U_S = 4, U_ES, U_XX, U_OPEN, U_CLOSE, U_BARE, U_PAREN, U_X, UV };
static const char *const U_PIECES[UV] = {
    "<pad>", "<unk>", "<s>", "</s>", "\u2581(S", "\u2581)S", "\u2581XX", "\u2581(",
    "\u2581)", "\u2581", "(", "x"};

static int u_step(void *ctx, int nrows, const int32_t *last, const int32_t *row_src,
                  float *logp, struct tfm_error *err)
{
    (void)ctx, (void)last, (void)row_src, (void)err;
    for (int i = 0; i < nrows * UV; i++)
        logp[i] = -2.0f;
    return 0;
}

/* Is the text of seq[0..n) one tree "(S" ... ")S" with `words` preterminal tokens? */
static int u_text_tree(const int32_t *seq, int n, int words)
{
    char text[256] = "";
    for (int i = 0; i < n; i++) {
        const char *p = U_PIECES[seq[i]];
        if (!strncmp(p, "\u2581", 3)) {
            strcat(text, " ");
            p += 3;
        }
        strcat(text, p);
    }
    int depth = 0, roots = 0, leaves = 0;
    for (char *tok = strtok(text, " "); tok; tok = strtok(NULL, " ")) {
        if (tok[0] == '(' && tok[1]) {
            roots += depth++ == 0;
        } else if (tok[0] == ')') {
            if (depth-- == 0)
                return 0;
        } else if (tok[0] == '(' || depth == 0) {
            return 0;
        } else {
            leaves++;
        }
    }
    return depth == 0 && roots == 1 && leaves == words;
}

static void test_count_text(void)
{
    struct tfm_error err = {0};
    struct tfm_treecon *tc = tfm_treecon_create(U_PIECES, UV, TFM_TREE_COUNT, &err);
    CHECK(tc != NULL);
    if (!tc)
        return;
    static const int32_t src[] = {U_XX, U_BARE, 1, 3};
    int max_len = 6;
    struct tfm_step_model inner = {NULL, UV, u_step, no_select, NULL}, m;
    CHECK(tfm_treecon_begin(tc, &inner, 1, 4, src, &max_len, &m, &err) == 0);
    enum { N = 20000 };
    static int32_t pre[N][8], next[N][8], last[N], keep[N], rsrc[N];
    static float logp[N * UV];
    int rows = 1, bad = 0, finished = 0;
    last[0] = 2;
    for (int t = 0; rows > 0 && t <= max_len; t++) {
        CHECK(m.step(m.ctx, rows, last, rsrc, logp, &err) == 0);
        int nn = 0;
        for (int r = 0; r < rows; r++)
            for (int v = 0; v < UV; v++) {
                if (!(logp[(size_t)r * UV + v] > -INFINITY))
                    continue;
                if (v == 3) {
                    finished++;
                    bad += !u_text_tree(pre[r], t, 2);
                } else if (t < max_len && nn < N) {
                    memcpy(next[nn], pre[r], sizeof pre[r]);
                    next[nn][t] = v;
                    keep[nn] = r;
                    last[nn++] = v;
                }
            }
        CHECK(nn < N);
        if (nn)
            CHECK(m.select(m.ctx, nn, keep, &err) == 0);
        memcpy(pre, next, sizeof(pre[0]) * (size_t)nn);
        rows = nn;
    }
    CHECK_EQ_INT(bad, 0);
    /* within 6 tokens: (S a b )S with leaves a and b of 1 to 3 tokens in all 4 (a leaf
     * of L tokens: XX then L - 1 of x or "(", 2^(L-1) ways, or "▁" x then L - 2 of them,
     * 2^(L-2); so 1, 3 and 6 leaves of 1, 2 and 3 tokens: 1 + 3 + 3 + 6 + 6 + 9 = 28),
     * and 3 trees with a second S over XX, XX or both */
    CHECK_EQ_INT(finished, 31);
    tfm_treecon_free(tc);
}

/* COPY with source pieces that are bracket pieces ("(NP" and ")S" as words): each is
 * copied as a leaf, even by a model that prefers them as brackets.  They were taken for
 * brackets: the opening one was written again and again, deeper than the constraint's
 * stack, and the closing one ended the root before the words. */
static int bracket_step(void *ctx, int nrows, const int32_t *last, const int32_t *row_src,
                        float *logp, struct tfm_error *err)
{
    (void)ctx, (void)last, (void)row_src, (void)err;
    for (int i = 0; i < nrows * V; i++)
        logp[i] = i % V == T_NP || i % V == T_ES ? -0.1f : -5.0f;
    return 0;
}

static void test_copy_bracket_source(void)
{
    struct tfm_error err = {0};
    static const int32_t src[] = {T_NP, T_ES, T_THE, 3};
    for (int beam = 1; beam <= 4; beam *= 4) {
        struct tfm_treecon *tc = tfm_treecon_create(PIECES, V, TFM_TREE_COPY, &err);
        struct tfm_step_model inner = {NULL, V, bracket_step, no_select, NULL}, m;
        int max_len = 100;
        CHECK(tfm_treecon_begin(tc, &inner, 1, 4, src, &max_len, &m, &err) == 0);
        struct tfm_beam_opts o;
        tfm_beam_defaults(&o);
        o.beam = beam;
        o.nbest = beam;
        struct tfm_hyps h = {0};
        CHECK(tfm_beam_search(&m, 1, &max_len, NULL, &o, &h, &err) == 0);
        CHECK(h.n >= 1);
        for (int64_t i = 0; i < h.n; i++) {
            const int32_t *y = h.ids + h.offsets[i];
            int n = (int)(h.offsets[i + 1] - h.offsets[i]), depth = 0, j = 0, ok = 1;
            int32_t stack[TFM_TREE_MAX_DEPTH];
            CHECK(h.score[i] > -INFINITY);
            for (int k = 0; k < n && ok; k++) {
                if (depth > 0 && j < 3 && y[k] == src[j])
                    j++;                                /* the next source piece: a leaf */
                else if (y[k] == T_S || y[k] == T_NP)
                    ok = depth < TFM_TREE_MAX_DEPTH && (stack[depth++] = y[k], 1);
                else if (y[k] == T_ES || y[k] == T_ENP)
                    ok = depth > 0 && stack[--depth] == y[k] - 1 && (depth > 0 || k == n - 1);
                else
                    ok = 0;
            }
            CHECK(ok && depth == 0 && j == 3);
        }
        tfm_hyps_free(&h);
        tfm_treecon_free(tc);
    }
}

static void test_errors(void)
{
    struct tfm_error err = {0};
    static const char *const plain[] = {"<pad>", "<unk>", "<s>", "</s>", "\u2581a", "b"};
    CHECK(tfm_treecon_create(plain, 6, TFM_TREE_COPY, &err) == NULL);
    CHECK(strstr(err.msg, "no bracket pieces") != NULL);
    CHECK_EQ_INT(tfm_tree_mode_parse("copy"), TFM_TREE_COPY);
    CHECK_EQ_INT(tfm_tree_mode_parse("count"), TFM_TREE_COUNT);
    CHECK_EQ_INT(tfm_tree_mode_parse("xx"), -1);
}

int main(void)
{
    t_run("copy: exactly the trees over the source pieces, none stuck", test_copy_exact);
    t_run("count: exactly the trees with as many leaves as words", test_count_exact);
    t_run("beam and greedy search write only trees", test_search);
    t_run("copy: a leaf has the mass of every word start", test_copy_probabilities);
    t_run("copy: no word start possible gives -inf, not NaN", test_copy_no_words);
    t_run("count: leaves are tokens that restoration reads as leaves", test_count_text);
    t_run("copy: source pieces that are brackets are copied as leaves", test_copy_bracket_source);
    t_run("a vocabulary without brackets; mode names", test_errors);
    return t_done();
}
