/* test_tree.c: PTB tree parsing, printing, linearization and restoration (src/tree.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tree.h"

static struct tfm_tree T;
static char *out, *words, *lin;
static size_t ocap, wcap, lcap;
static struct tfm_error err;

/* parse a line as a forest and print it back, or "ERROR reason" */
static const char *roundtrip(const char *s)
{
    size_t pos = 0;
    if (tfm_tree_parse(&T, s, strlen(s), &pos, 0, &err) < 0)
        return err.msg;
    if (tfm_tree_format(&T, &out, &ocap, &err) < 0)
        return "format failed";
    return out;
}

static void test_parse(void)
{
    CHECK_STR(roundtrip("(S (NP (DT The) (NN cat)) (VP (VBD sat)))"),
              "(S (NP (DT The) (NN cat)) (VP (VBD sat)))");
    CHECK_STR(roundtrip("( (S\n   (NP (NN x) )\n  ))"), "( (S (NP (NN x))))");
    CHECK_STR(roundtrip("(P this) (Q is)"), "(P this) (Q is)");
    CHECK_STR(roundtrip(""), "");
    CHECK_STR(roundtrip("(S (X) (NN a))"), "(S (X) (NN a))");
    CHECK_STR(roundtrip("(S (NN a)"), "column 10: unbalanced brackets: 1 left open at the end");
    CHECK_STR(roundtrip("(S (NN a)))"), "column 11: unbalanced brackets: ')' with no '(' open");
    CHECK_STR(roundtrip("(NN a b)"), "column 7: more than one word in a bracket");
    CHECK_STR(roundtrip("(S (NN a) b)"), "column 11: a word beside brackets");
    CHECK_STR(roundtrip("word (S (NN a))"), "column 1: a word outside brackets");
    CHECK_STR(roundtrip("(NN a (X b))"), "column 7: a bracket after the word of a preterminal");
    /* one tree at a time from a multi-line text */
    const char *mrg = "( (S (NN a)))\n\n( (S (NN b)\n))\n";
    size_t pos = 0;
    int k1 = tfm_tree_parse(&T, mrg, strlen(mrg), &pos, 1, &err);
    CHECK_EQ_INT(k1, 1);
    tfm_tree_format(&T, &out, &ocap, &err);
    CHECK_STR(out, "( (S (NN a)))");
    CHECK_EQ_INT(tfm_tree_parse(&T, mrg, strlen(mrg), &pos, 1, &err), 1);
    tfm_tree_format(&T, &out, &ocap, &err);
    CHECK_STR(out, "( (S (NN b)))");
    CHECK_EQ_INT(tfm_tree_parse(&T, mrg, strlen(mrg), &pos, 1, &err), 0);
    /* errors in a text of many lines: the column on the problem's own line, *pos at it */
    const char *bad = "(S (NN a))\n(S\n  (NP (DT The) (NN cat)) x)\n";
    pos = 0;
    CHECK_EQ_INT(tfm_tree_parse(&T, bad, strlen(bad), &pos, 1, &err), 1);
    CHECK_EQ_INT(tfm_tree_parse(&T, bad, strlen(bad), &pos, 1, &err), -1);
    CHECK_STR(err.msg, "column 26: a word beside brackets");
    CHECK_EQ_INT(pos, 11 + 3 + 25);
    const char *after = "(S (NP x)) y";     /* a second tree's error, on the first's line */
    pos = 0;
    CHECK_EQ_INT(tfm_tree_parse(&T, after, strlen(after), &pos, 1, &err), 1);
    CHECK_EQ_INT(tfm_tree_parse(&T, after, strlen(after), &pos, 1, &err), -1);
    CHECK_STR(err.msg, "column 12: a word outside brackets");
    const char *open = "(S\n  (NN a)\n\n";    /* left open: at the end of its last token */
    pos = 0;
    CHECK_EQ_INT(tfm_tree_parse(&T, open, strlen(open), &pos, 1, &err), -1);
    CHECK_STR(err.msg, "column 9: unbalanced brackets: 1 left open at the end");
    CHECK_EQ_INT(pos, 11);
    /* a NUL byte would end a word early (found by fuzz_tree): refused where it is */
    static const char nul[] = "(S (NN a\0b))";
    pos = 0;
    CHECK_EQ_INT(tfm_tree_parse(&T, nul, sizeof nul - 1, &pos, 0, &err), -1);
    CHECK_STR(err.msg, "column 9: a NUL byte");
}

static const char *linearize(const char *s, int keep_tags)
{
    size_t pos = 0;
    if (tfm_tree_parse(&T, s, strlen(s), &pos, 0, &err) < 0)
        return err.msg;
    struct tfm_linearize_opts o = {keep_tags, 0, 0};
    if (tfm_tree_linearize(&T, &o, &words, &wcap, &lin, &lcap, &err) < 0)
        return err.msg;
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s | %s", words, lin);
    return buf;
}

static void test_linearize(void)
{
    CHECK_STR(linearize("(S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat)) (. .))", 0),
              "The cat sat . | (S (NP XX XX )NP (VP XX )VP XX )S");
    CHECK_STR(linearize("( (S (NP-SBJ-1 (NNP A)) (VP (VBD was) (VP (VBN merged) (NP (-NONE- *-1))"
                        " (SBAR (-NONE- 0) (S (-NONE- *T*-2))))) (. .)))", 0),
              "A was merged . | (S (NP XX )NP (VP XX (VP XX )VP )VP XX )S");
    CHECK_STR(linearize("(TOP (S (NP=2 (PRP it)) (ADVP-TMP (RB now))))", 1),
              "it now | (S (NP PRP )NP (ADVP RB )ADVP )S");
    CHECK_STR(linearize("(S (-LRB- -LRB-) (NP (NN x)))", 0), "-LRB- x | (S XX (NP XX )NP )S");
}

static const char *restore_root(const char *lin_, const char *words_, const char *root_,
                                struct tfm_restore_stats *st)
{
    memset(st, 0, sizeof *st);
    if (tfm_tree_restore(&T, lin_, strlen(lin_), words_, strlen(words_), root_, st, &err) < 0)
        return err.msg;
    tfm_tree_format(&T, &out, &ocap, &err);
    return out;
}

static const char *restore(const char *lin_, const char *words_, struct tfm_restore_stats *st)
{
    return restore_root(lin_, words_, NULL, st);
}

static int64_t repairs(const struct tfm_restore_stats *st)
{
    return st->dropped_close + st->dropped_tags + st->dropped_open + st->added_words +
           st->closed_at_end + st->removed_empty + st->deferred_close + st->opened_root;
}

static void test_restore(void)
{
    struct tfm_restore_stats st;
    CHECK_STR(restore("(S (NP XX XX )NP (VP XX )VP XX )S", "The cat sat .", &st),
              "(S (NP (XX The) (XX cat)) (VP (XX sat)) (XX .))");
    CHECK_EQ_INT(repairs(&st), 0);
    /* the closing label is not checked: the opening token decides */
    CHECK_STR(restore("(S (NP XX )VP )S", "a", &st), "(S (NP (XX a)))");
    /* missing XX: words go to the innermost open constituent; open ones are closed */
    CHECK_STR(restore("(S (NP XX XX", "a b c d", &st), "(S (NP (XX a) (XX b) (XX c) (XX d)))");
    CHECK_EQ_INT(st.added_words, 2);
    CHECK_EQ_INT(st.closed_at_end, 2);
    /* all closed: words go to the end of the top-level constituent */
    CHECK_STR(restore("(S (NP XX )NP )S", "a b", &st), "(S (NP (XX a)) (XX b))");
    CHECK_EQ_INT(st.added_words, 1);
    CHECK_EQ_INT(repairs(&st), 1);
    /* extra XX and extra ')' are dropped; empty constituents removed; bare '(' dropped;
     * the ")S" before the last is applied: only closes follow it */
    CHECK_STR(restore(")S ( (S (NP XX XX XX )NP (VP )VP )S )S", "a b", &st),
              "(S (NP (XX a) (XX b)))");
    CHECK_EQ_INT(st.dropped_tags, 1);
    CHECK_EQ_INT(st.dropped_close, 2);
    CHECK_EQ_INT(st.dropped_open, 1);
    CHECK_EQ_INT(st.removed_empty, 1);
    CHECK_EQ_INT(st.deferred_close, 0);
    CHECK_EQ_INT(repairs(&st), 5);
    /* no words, nothing left: an empty forest */
    CHECK_STR(restore("(S )S", "", &st), "");
    CHECK_STR(restore("", "", &st), "");
    CHECK_EQ_INT(repairs(&st), 0);
    /* tags other than XX are kept */
    CHECK_STR(restore("(S NN VBZ )S", "it is", &st), "(S (NN it) (VBZ is))");
}

/* The output closes its outermost constituent early and goes on, or starts with
 * preterminals, or opens nothing: always one tree. */
static void test_restore_one_tree(void)
{
    struct tfm_restore_stats st;
    /* early close: ")S" is deferred, VP goes into S; S is closed at the end */
    CHECK_STR(restore("(S (NP XX )NP )S (VP XX )VP", "a b", &st),
              "(S (NP (XX a)) (VP (XX b)))");
    CHECK_EQ_INT(st.deferred_close, 1);
    CHECK_EQ_INT(st.closed_at_end, 1);
    CHECK_EQ_INT(repairs(&st), 2);
    /* deferred twice, the last ")S" closes it; a trailing preterminal goes in too */
    CHECK_STR(restore("(S (NP XX XX )NP )S (VP XX (NP XX )NP )VP )S XX )S", "The cat sat it .",
                      &st),
              "(S (NP (XX The) (XX cat)) (VP (XX sat) (NP (XX it))) (XX .))");
    CHECK_EQ_INT(st.deferred_close, 2);
    CHECK_EQ_INT(st.closed_at_end, 0);
    CHECK_EQ_INT(st.dropped_close, 0);
    CHECK_EQ_INT(repairs(&st), 2);
    /* a close of an inner constituent is applied as before; only the outermost waits */
    CHECK_STR(restore("(S (NP XX )NP (VP XX )VP )S (S XX )S", "a b c", &st),
              "(S (NP (XX a)) (VP (XX b)) (S (XX c)))");
    CHECK_EQ_INT(st.deferred_close, 1);
    CHECK_EQ_INT(st.closed_at_end, 1);  /* the last ")S" closed the inner S */
    CHECK_EQ_INT(repairs(&st), 2);
    /* the first constituent opened is the root, whatever its label */
    CHECK_STR(restore("(NP XX )NP (VP XX )VP", "a b", &st), "(NP (XX a) (VP (XX b)))");
    CHECK_EQ_INT(st.deferred_close, 1);
    CHECK_EQ_INT(st.closed_at_end, 1);
    /* preterminals before the first opening token: the root is opened first */
    CHECK_STR(restore("XX (NP XX )NP", "a b", &st), "(S (XX a) (NP (XX b)))");
    CHECK_EQ_INT(st.opened_root, 1);
    CHECK_EQ_INT(st.closed_at_end, 1);
    CHECK_EQ_INT(repairs(&st), 2);
    /* ... with the label given, and a closing token for it at the end */
    CHECK_STR(restore_root("XX XX (VP XX )VP )X", "a b c", "FRAG", &st),
              "(FRAG (XX a) (XX b) (VP (XX c)))");
    CHECK_EQ_INT(st.opened_root, 1);
    CHECK_EQ_INT(st.closed_at_end, 0);
    CHECK_EQ_INT(repairs(&st), 1);
    /* a close inside the opened root before more output is deferred */
    CHECK_STR(restore("NN )NP (VP XX )VP", "a b", &st), "(S (NN a) (VP (XX b)))");
    CHECK_EQ_INT(st.opened_root, 1);
    CHECK_EQ_INT(st.deferred_close, 1);
    /* leading closes and bare '(' are dropped before the root is opened */
    CHECK_STR(restore(")S ( XX", "a", &st), "(S (XX a))");
    CHECK_EQ_INT(st.dropped_close, 1);
    CHECK_EQ_INT(st.dropped_open, 1);
    CHECK_EQ_INT(st.opened_root, 1);
    /* no opening token at all: a root holding every word as (XX w) (was: a forest of
     * top-level preterminals) */
    CHECK_STR(restore("", "a b", &st), "(S (XX a) (XX b))");
    CHECK_EQ_INT(st.opened_root, 1);
    CHECK_EQ_INT(st.added_words, 2);
    CHECK_EQ_INT(st.closed_at_end, 0);
    CHECK_EQ_INT(repairs(&st), 3);
    CHECK_STR(restore_root(")S ( )NP", "a b", "X", &st), "(X (XX a) (XX b))");
    CHECK_EQ_INT(st.opened_root, 1);
    CHECK_EQ_INT(st.dropped_close, 2);
    CHECK_STR(restore("XX XX XX", "a b", &st), "(S (XX a) (XX b))");
    CHECK_EQ_INT(st.opened_root, 1);
    CHECK_EQ_INT(st.dropped_tags, 1);
    CHECK_EQ_INT(st.closed_at_end, 1);
    /* preterminals beyond the words still defer a close (they are output), then drop */
    CHECK_STR(restore("(S XX )S XX", "a", &st), "(S (XX a))");
    CHECK_EQ_INT(st.deferred_close, 1);
    CHECK_EQ_INT(st.dropped_tags, 1);
    /* NULL stats */
    CHECK(tfm_tree_restore(&T, "XX )S (NP XX", 12, "a b", 3, "S", NULL, &err) == 0);
    tfm_tree_format(&T, &out, &ocap, &err);
    CHECK_STR(out, "(S (XX a) (NP (XX b)))");
}

static void test_retag_wrap(void)
{
    struct tfm_tree g;
    tfm_tree_init(&g);
    const char *gs = "( (S (NP (-NONE- *)) (NN a) (, ,) (VB b)))";
    size_t pos = 0;
    CHECK(tfm_tree_parse(&g, gs, strlen(gs), &pos, 0, &err) == 0);
    const char *wl = NULL;
    CHECK(tfm_tree_wrapper(&g, &wl) >= 0);
    CHECK_STR(wl, "");
    struct tfm_restore_stats st;
    restore("(S XX XX NN )S", "a , b", &st);
    CHECK_EQ_INT(tfm_tree_retag(&T, &g, "XX", &err), 1);
    CHECK(tfm_tree_wrap(&T, wl, &err) == 0);
    tfm_tree_format(&T, &out, &ocap, &err);
    CHECK_STR(out, "( (S (NN a) (, ,) (NN b)))");
    restore("(S XX )S", "a", &st);
    CHECK_EQ_INT(tfm_tree_retag(&T, &g, "XX", &err), 0);   /* counts differ: unchanged */
    /* only_tag NULL: every preterminal, a word or a label written where XX goes too */
    restore("(S (NP a )NP NP VP )S", "a , b", &st);
    CHECK_EQ_INT(tfm_tree_retag(&T, &g, NULL, &err), 1);
    tfm_tree_format(&T, &out, &ocap, &err);
    CHECK_STR(out, "(S (NP (NN a)) (, ,) (VB b))");
    restore("(S (NP a )NP NP VP )S", "a , b", &st);
    CHECK_EQ_INT(tfm_tree_retag(&T, &g, "XX", &err), 1);
    tfm_tree_format(&T, &out, &ocap, &err);
    CHECK_STR(out, "(S (NP (a a)) (NP ,) (VP b))");
    /* restore_like: restore, the gold's tags, the gold's wrapper */
    pos = 0;
    const char *gold = "( (S (NP (DT The) (NN cat)) (. .)) )";
    CHECK(tfm_tree_parse(&g, gold, strlen(gold), &pos, 0, &err) == 0);
    const char *l = "(S (NP XX cat )NP XX )S";
    CHECK(tfm_tree_restore_like(&T, l, strlen(l), "The cat .", 9, NULL, &g, NULL, &err) == 0);
    tfm_tree_format(&T, &out, &ocap, &err);
    CHECK_STR(out, "( (S (NP (DT The) (NN cat)) (. .)))");
    CHECK(tfm_tree_restore_like(&T, l, strlen(l), "The cat .", 9, "FRAG", &g, "XX", &err) == 0);
    tfm_tree_format(&T, &out, &ocap, &err);
    CHECK_STR(out, "( (S (NP (DT The) (cat cat)) (. .)))");
    CHECK(tfm_tree_restore_like(&T, "", 0, "", 0, NULL, &g, NULL, &err) == 0);
    CHECK_EQ_INT(T.first, -1);      /* an empty forest is not wrapped */
    tfm_tree_free(&g);
}

/* trees over lines: each error names the line its tree starts on, and the line of the
 * problem when that is a later one */
static const char *next_of(const char *text, size_t *pos)
{
    int k = tfm_tree_parse_next(&T, text, strlen(text), pos, &err);
    if (k < 0)
        return err.msg;
    if (k == 0)
        return "END";
    tfm_tree_format(&T, &out, &ocap, &err);
    return out;
}

static void test_parse_next(void)
{
    const char *ok = "(S (NP (DT The)\n  (NN cat)))\n\n( (X y) )\n";
    size_t pos = 0;
    CHECK_STR(next_of(ok, &pos), "(S (NP (DT The) (NN cat)))");
    CHECK_STR(next_of(ok, &pos), "( (X y))");
    CHECK_STR(next_of(ok, &pos), "END");
    const char *two = "(S (NP (DT The) (NN cat)) (VP (VBD sat)))\n"
                      "(S\n  (NP (DT The) (NN cat)) x)\n";
    pos = 0;
    CHECK_STR(next_of(two, &pos), "(S (NP (DT The) (NN cat)) (VP (VBD sat)))");
    CHECK_STR(next_of(two, &pos),
              "tree starting on line 2: line 3, column 26: a word beside brackets");
    const char *forest = "(S (NN a)) (X y) z\n";
    pos = 0;
    CHECK_STR(next_of(forest, &pos), "(S (NN a))");
    CHECK_STR(next_of(forest, &pos), "(X y)");
    CHECK_STR(next_of(forest, &pos),
              "tree starting on line 1: column 18: a word outside brackets");
    /* left open at the end: the end of a text that ends in a newline is its last line */
    pos = 0;
    CHECK_STR(next_of("(S (NN a)\n\n\n", &pos),
              "tree starting on line 1: column 10: unbalanced brackets: 1 left open at the end");
    pos = 0;
    CHECK_STR(next_of("\n\n  (S (NN a)\n (NN b)", &pos),
              "tree starting on line 3: line 4, column 8: unbalanced brackets: 1 left open at "
              "the end");
    pos = 0;
    CHECK_STR(next_of("", &pos), "END");
}

/* every tree of the PTB sample: .mrg and one-line forms agree; linearize -> restore ->
 * linearize is the identity */
static void test_ptb_sample(void)
{
    FILE *f = fopen("data/ptb-nltk-sample/wsj_0150-0169.dev.mrg", "r");
    FILE *g = fopen("data/ptb-nltk-sample/wsj_0150-0169.dev.oneline.txt", "r");
    if (!f || !g) {
        CHECK(!"data/ptb-nltk-sample missing (run from the repository root)");
        if (f) fclose(f);
        if (g) fclose(g);
        return;
    }
    static char mrg[1 << 20];
    size_t n = fread(mrg, 1, sizeof mrg - 1, f);
    fclose(f);
    struct tfm_tree one, back;
    tfm_tree_init(&one);
    tfm_tree_init(&back);
    char *line = NULL, *l1 = NULL, *w1 = NULL, *o1 = NULL;
    size_t cap = 0, l1c = 0, w1c = 0, o1c = 0, pos = 0;
    int trees = 0, ok = 1;
    ssize_t k;
    while ((k = getline(&line, &cap, g)) > 0) {
        if (tfm_tree_parse(&T, mrg, n, &pos, 1, &err) != 1) {
            ok = 0;
            break;
        }
        size_t p2 = 0;
        if (tfm_tree_parse(&one, line, (size_t)k, &p2, 0, &err) < 0) {
            ok = 0;
            break;
        }
        tfm_tree_format(&T, &out, &ocap, &err);
        tfm_tree_format(&one, &o1, &o1c, &err);
        if (strcmp(out, o1) != 0)
            ok = 0;
        struct tfm_linearize_opts lo = {0, 0, 0};
        tfm_tree_linearize(&T, &lo, &words, &wcap, &lin, &lcap, &err);
        tfm_tree_restore(&back, lin, strlen(lin), words, strlen(words), NULL, NULL, &err);
        tfm_tree_linearize(&back, &lo, &w1, &w1c, &l1, &l1c, &err);
        if (strcmp(w1, words) != 0 || strcmp(l1, lin) != 0)
            ok = 0;
        trees++;
    }
    CHECK(ok);
    CHECK_EQ_INT(trees, 248);
    CHECK_EQ_INT(tfm_tree_parse(&T, mrg, n, &pos, 1, &err), 0);
    fclose(g);
    free(line);
    free(l1);
    free(w1);
    free(o1);
    tfm_tree_free(&one);
    tfm_tree_free(&back);
}

int main(void)
{
    tfm_tree_init(&T);
    t_run("parse and print, errors with columns", test_parse);
    t_run("linearize", test_linearize);
    t_run("restore with repairs", test_restore);
    t_run("restore: one tree (deferred close, opened root)", test_restore_one_tree);
    t_run("retag and wrap, restore_like", test_retag_wrap);
    t_run("parse_next: trees over lines, errors naming them", test_parse_next);
    t_run("PTB sample: mrg = one-line, restore(linearize) = identity", test_ptb_sample);
    tfm_tree_free(&T);
    free(out);
    free(words);
    free(lin);
    return t_done();
}
