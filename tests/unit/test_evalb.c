/* test_evalb.c: EVALB scoring (src/evalb.c) against EVALB's own output files in
 * data/evalb-fixtures: sample.rsl (sample.prm) and bug.rsl-new (new.prm), every
 * per-sentence row and every summary figure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "evalb.h"
#include "tree.h"

#define FIX "data/evalb-fixtures/"

struct lines {
    char *l[200];
    int n;
};

static int read_lines(const char *path, struct lines *L)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char buf[8192];
    L->n = 0;
    while (L->n < 200 && fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\n")] = '\0';
        L->l[L->n++] = strdup(buf);
    }
    fclose(f);
    return 0;
}

static void free_lines(struct lines *L)
{
    for (int i = 0; i < L->n; i++)
        free(L->l[i]);
}

/* collapse runs of spaces and trim: compares figures, not column widths */
static void squeeze(const char *s, char *d, size_t n)
{
    size_t m = 0;
    int sp = 1;
    for (; *s && m + 1 < n; s++) {
        if (*s == ' ') {
            if (!sp)
                d[m++] = ' ';
            sp = 1;
        } else {
            d[m++] = *s;
            sp = 0;
        }
    }
    if (m && d[m - 1] == ' ')
        m--;
    d[m] = '\0';
}

/* Score gold vs test with prm; the report into *rep. */
static int score(const char *prm, const char *gold, const char *test, struct lines *rep,
                 struct tfm_evalb *e)
{
    struct tfm_evalb_params p;
    struct tfm_error err;
    struct lines G, T;
    tfm_evalb_params_init(&p);
    if (tfm_evalb_params_load(&p, prm, &err) < 0 || read_lines(gold, &G) < 0 ||
        read_lines(test, &T) < 0) {
        CHECK(!"fixtures missing (run from the repository root)");
        return -1;
    }
    CHECK(tfm_evalb_init(e, &p, &err) == 0);
    tfm_evalb_params_free(&p);
    FILE *f = tmpfile();
    tfm_evalb_print_header(f);
    struct tfm_tree g, t;
    tfm_tree_init(&g);
    tfm_tree_init(&t);
    for (int i = 0; i < G.n; i++) {
        size_t pos = 0;
        CHECK(tfm_tree_parse(&g, G.l[i], strlen(G.l[i]), &pos, 0, &err) == 0);
        pos = 0;
        int bad = tfm_tree_parse(&t, T.l[i], strlen(T.l[i]), &pos, 0, &err) < 0;
        struct tfm_evalb_sent s;
        CHECK(tfm_evalb_add(e, i + 1, &g, bad ? NULL : &t, err.msg, &s, &err) == 0);
        tfm_evalb_print_row(f, &s);
    }
    tfm_evalb_print_summary(f, e);
    rewind(f);
    char buf[512];
    rep->n = 0;
    while (rep->n < 200 && fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\n")] = '\0';
        rep->l[rep->n++] = strdup(buf);
    }
    fclose(f);
    tfm_tree_free(&g);
    tfm_tree_free(&t);
    free_lines(&G);
    free_lines(&T);
    return 0;
}

/* Compare our report with an .rsl: rows byte for byte (after leading spaces when
 * strip), the totals row and summary lines figure by figure; FMeasure lines that the
 * .rsl lacks are skipped. */
static void compare(const struct lines *ours, const char *rsl_path, int strip)
{
    struct lines R;
    if (read_lines(rsl_path, &R) < 0) {
        CHECK(!"rsl missing");
        return;
    }
    int i = 0, j = 0, rows = 0, sums = 0;
    for (; i < ours->n && j < R.n; i++, j++) {
        const char *a = ours->l[i], *b = R.l[j];
        if (strncmp(a, "Bracketing FMeasure", 19) == 0 && strncmp(b, "Bracketing FMeasure", 19)) {
            j--;
            continue;
        }
        if (strip)
            a += strspn(a, " ");
        int is_row = b[0] && strspn(b, " 0123456789.") == strlen(b) && strlen(b) > 40;
        if (is_row && strstr(R.l[j - 1], "=====") && j > 3) {   /* the totals row */
            char x[512], y[512];
            squeeze(a, x, sizeof x);
            squeeze(b, y, sizeof y);
            CHECK_STR(x, y);
            sums++;
        } else {
            CHECK_STR(a, b);
            rows += is_row;
        }
    }
    CHECK_EQ_INT(i, ours->n);
    CHECK_EQ_INT(j, R.n);
    CHECK(rows > 0 && sums == 1);
    free_lines(&R);
}

static void test_sample(void)
{
    struct lines rep;
    struct tfm_evalb e;
    if (score(FIX "sample/sample.prm", FIX "sample/sample.gld", FIX "sample/sample.tst", &rep,
              &e) < 0)
        return;
    compare(&rep, FIX "sample/sample.rsl", 0);
    double r, p, f;
    tfm_evalb_prf(&e.all, &r, &p, &f);
    CHECK_NEAR(r, 100.0 * 86 / 98, 1e-12);
    CHECK_NEAR(p, 100.0 * 86 / 95, 1e-12);
    CHECK_EQ_INT(e.all.errors, 5);
    CHECK_EQ_INT(e.all.skipped, 2);
    CHECK_EQ_INT(e.cut.sentences, 23);
    CHECK(!tfm_evalb_too_many_errors(&e));
    free_lines(&rep);
    tfm_evalb_free(&e);
}

static void test_bug(void)
{
    struct lines rep;
    struct tfm_evalb e;
    if (score(FIX "new.prm", FIX "bug/bug.gld", FIX "bug/bug.tst", &rep, &e) < 0)
        return;
    compare(&rep, FIX "bug/bug.rsl-new", 1);   /* that file lost its leading spaces */
    double r, p, f;
    tfm_evalb_prf(&e.all, &r, &p, &f);
    char fs[16];
    snprintf(fs, sizeof fs, "%.2f", f);
    CHECK_STR(fs, "60.17");
    free_lines(&rep);
    tfm_evalb_free(&e);
}

static void test_collins(void)
{
    /* without the QUOTE_LABELs of new.prm the quote fix cannot apply: 5 length errors */
    struct tfm_evalb_params p;
    struct tfm_error err;
    CHECK(tfm_evalb_params_collins(&p, &err) == 0);
    CHECK_EQ_INT(p.ndelete, 7);
    CHECK_EQ_INT(p.neq_label, 1);
    CHECK_STR(p.name, "COLLINS");
    struct tfm_evalb e;
    CHECK(tfm_evalb_init(&e, &p, &err) == 0);
    struct tfm_tree g, t;
    tfm_tree_init(&g);
    tfm_tree_init(&t);
    const char *gs = "(TOP (S (NP-SBJ (DT The) (NN man)) (VP (VBD ran) (PRT (RP off))) (. .)))";
    const char *ts = "(S (NP (DT The) (NN man)) (VP (VBD ran) (ADVP (RB off))) (. .))";
    size_t pos = 0;
    tfm_tree_parse(&g, gs, strlen(gs), &pos, 0, &err);
    pos = 0;
    tfm_tree_parse(&t, ts, strlen(ts), &pos, 0, &err);
    struct tfm_evalb_sent s;
    CHECK(tfm_evalb_add(&e, 1, &g, &t, NULL, &s, &err) == 0);
    CHECK_EQ_INT(s.status, 0);
    CHECK_EQ_INT(s.gold, 4);          /* S NP VP PRT; TOP deleted */
    CHECK_EQ_INT(s.matched, 4);       /* ADVP = PRT */
    CHECK_EQ_INT(s.words, 4);         /* "." deleted */
    CHECK_EQ_INT(s.len, 5);           /* only -NONE- is left out of the length */
    CHECK_EQ_INT(s.correct_tags, 3);
    CHECK(tfm_evalb_add(&e, 2, &g, NULL, "malformed", &s, &err) == 0);
    CHECK_EQ_INT(s.status, 1);
    CHECK_STR(s.reason, "malformed");
    for (int i = 0; i < 10; i++)
        tfm_evalb_add(&e, 3 + i, &g, NULL, "x", &s, &err);
    CHECK(!tfm_evalb_too_many_errors(&e));  /* 11 errors: evalb goes on */
    tfm_evalb_add(&e, 13, &g, NULL, "x", &s, &err);
    CHECK(tfm_evalb_too_many_errors(&e));   /* the 12th finds 11 > MAX_ERROR 10 before it */
    tfm_tree_free(&g);
    tfm_tree_free(&t);
    tfm_evalb_free(&e);
    tfm_evalb_params_free(&p);
}

static void test_prm_errors(void)
{
    char path[] = "/tmp/tfm-test-prm-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    fputs("# comment\nLABELED 0\nEQ_LABEL A\n", f);
    fclose(f);
    struct tfm_evalb_params p;
    struct tfm_error err;
    tfm_evalb_params_init(&p);
    CHECK(tfm_evalb_params_load(&p, path, &err) < 0);
    CHECK(strstr(err.msg, "line 3") && strstr(err.msg, "EQ_LABEL requires two values"));
    tfm_evalb_params_free(&p);
    f = fopen(path, "w");
    fputs("BOGUS 1\n", f);
    fclose(f);
    CHECK(tfm_evalb_params_load(&p, path, &err) < 0);
    CHECK(strstr(err.msg, "unknown keyword 'BOGUS'") != NULL);
    tfm_evalb_params_free(&p);
    remove(path);
    CHECK(tfm_evalb_params_load(&p, "/nonexistent.prm", &err) < 0);
    tfm_evalb_params_free(&p);
    /* bytes of a binary file are escaped in messages; a NUL is refused */
    static const char bin[] = "\x7f" "ELF\x02\x01\x1b[31m 1\nX";
    CHECK(tfm_evalb_params_parse(&p, bin, sizeof bin - 1, "b.prm", &err) < 0);
    CHECK_STR(err.msg, "b.prm: line 1: unknown keyword '\\x7fELF\\x02\\x01\\x1b[31m'");
    static const char nul[] = "LABELED 1\nDELETE_LABEL a\0b\n";
    CHECK(tfm_evalb_params_parse(&p, nul, sizeof nul - 1, "n.prm", &err) < 0);
    CHECK_STR(err.msg, "n.prm: line 2: a NUL byte (not a parameter file)");
    tfm_evalb_params_free(&p);
    static const char ok[] = "LABELED 0\r\nCUTOFF_LEN 7\nDELETE_LABEL TOP";   /* no last \n */
    CHECK(tfm_evalb_params_parse(&p, ok, sizeof ok - 1, "ok.prm", &err) == 0);
    CHECK_EQ_INT(p.labeled, 0);
    CHECK_EQ_INT(p.cutoff_len, 7);
    CHECK(p.ndelete == 1 && strcmp(p.delete_label[0], "TOP") == 0);
    tfm_evalb_params_free(&p);
}

/* ---- matching and crossing on random trees, against their definitions -------------- */

struct rbr {
    int label, start, end;
};

struct rtree {
    char *text;
    size_t len, cap;
    struct rbr *br;
    int n, capbr;
};

static void rput(struct rtree *t, const char *s)
{
    size_t k = strlen(s);
    if (t->len + k + 1 > t->cap) {
        t->cap = (t->len + k + 1) * 2;
        t->text = realloc(t->text, t->cap);
    }
    memcpy(t->text + t->len, s, k + 1);
    t->len += k;
}

static uint64_t rstate;
static int rnd(int n)
{
    rstate = rstate * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int)((rstate >> 33) % (uint64_t)n);
}

/* A phrase over words [a, b): a label of three, now and then a unary chain above it, and
 * children that split the span at random points (single words are preterminals). */
static void rphrase(struct rtree *t, int a, int b)
{
    static const char *labels[] = {"A", "B", "C"};
    int chain = rnd(4) == 0 ? 2 : 1;
    for (int c = 0; c < chain; c++) {
        int l = rnd(3);
        rput(t, "(");
        rput(t, labels[l]);
        rput(t, " ");
        if (t->n == t->capbr) {
            t->capbr = t->capbr ? 2 * t->capbr : 64;
            t->br = realloc(t->br, (size_t)t->capbr * sizeof *t->br);
        }
        t->br[t->n++] = (struct rbr){l, a, b};
    }
    int x = a;
    while (x < b) {
        int y = x + 1 + rnd(b - x < 6 ? b - x : (b - x) / 2 + 1);
        if (y > b || (x == a && y == b && b - a > 1))
            y = x + 1 + rnd(b - x - 1);
        if (y - x == 1)
            rput(t, "(T w) ");
        else
            rphrase(t, x, y);
        x = y;
    }
    for (int c = 0; c < chain; c++)
        rput(t, ") ");
}

static void test_random_trees(void)
{
    struct tfm_evalb_params p;
    tfm_evalb_params_init(&p);
    struct tfm_error err;
    struct tfm_evalb e;
    CHECK(tfm_evalb_init(&e, &p, &err) == 0);
    rstate = 12345;
    int cases = 0;
    for (int round = 0; round < 300; round++) {
        int words = round < 290 ? 2 + rnd(40) : 2000 + rnd(3000);
        struct rtree g = {0}, t = {0};
        rphrase(&g, 0, words);
        rphrase(&t, 0, words);
        /* matched: per span and label, as many pairs as the smaller side has brackets */
        int matched = 0, crossing = 0;
        char *used = calloc((size_t)t.n, 1);
        for (int i = 0; i < g.n; i++)
            for (int j = 0; j < t.n; j++)
                if (!used[j] && g.br[i].label == t.br[j].label &&
                    g.br[i].start == t.br[j].start && g.br[i].end == t.br[j].end) {
                    used[j] = 1;
                    matched++;
                    break;
                }
        for (int j = 0; j < t.n; j++)
            for (int i = 0; i < g.n; i++) {
                const struct rbr *a = &g.br[i], *b = &t.br[j];
                if ((a->start < b->start && a->end > b->start && a->end < b->end) ||
                    (a->start > b->start && a->start < b->end && a->end > b->end)) {
                    crossing++;
                    break;
                }
            }
        free(used);
        struct tfm_tree gt, tt;
        tfm_tree_init(&gt);
        tfm_tree_init(&tt);
        size_t pos = 0;
        CHECK(tfm_tree_parse(&gt, g.text, g.len, &pos, 0, &err) == 0);
        pos = 0;
        CHECK(tfm_tree_parse(&tt, t.text, t.len, &pos, 0, &err) == 0);
        struct tfm_evalb_sent s;
        CHECK(tfm_evalb_add(&e, round, &gt, &tt, NULL, &s, &err) == 0);
        CHECK_EQ_INT(s.status, 0);
        CHECK_EQ_INT(s.gold, g.n);
        CHECK_EQ_INT(s.test, t.n);
        CHECK_EQ_INT(s.matched, matched);
        CHECK_EQ_INT(s.crossing, crossing);
        cases += s.crossing > 0 && s.matched > 0 && s.matched < s.gold;
        tfm_tree_free(&gt);
        tfm_tree_free(&tt);
        free(g.text);
        free(t.text);
        free(g.br);
        free(t.br);
    }
    CHECK(cases > 200);     /* the trees cross and match in part, not all or nothing */
    tfm_evalb_free(&e);
    tfm_evalb_params_free(&p);
}

int main(void)
{
    t_run("sample.prm: sample.rsl reproduced", test_sample);
    t_run("new.prm: bug.rsl-new reproduced (quote fix)", test_bug);
    t_run("COLLINS built in: deletion, EQ_LABEL, errors", test_collins);
    t_run(".prm errors name the line", test_prm_errors);
    t_run("matched and crossing brackets of random trees, to 5000 words", test_random_trees);
    return t_done();
}
