/* test_score: the scorer interface (score.h) -- the one loop, its checks and its order
 * of calls -- and its three scorers: BLEU and chrF reports as text and JSON, EVALB's F1
 * with warnings, per-sentence rows, MAX_ERROR and restoration of linearized trees. */
#include <stdio.h>
#include <stdlib.h>

#include "bleu.h"
#include "check.h"
#include "chrf.h"
#include "evalb.h"
#include "score.h"
#include "text.h"

static void text_of(struct tfm_text *t, const char *name, const char *const *lines, int n)
{
    struct tfm_error err;
    tfm_text_init(t);
    tfm_text_set_name(t, name);
    for (int i = 0; i < n; i++)
        tfm_text_push(t, lines[i], strlen(lines[i]), &err);
}

/* ---- the loop, with a scorer that records its calls ---------------------------------- */

struct rec {
    char log[512];
    int fail_at;
};

static void say(struct rec *r, const char *s)
{
    strncat(r->log, s, sizeof r->log - strlen(r->log) - 1);
}

static int rec_start(struct tfm_scorer *s, struct tfm_error *err)
{
    (void)err;
    char b[128];
    snprintf(b, sizeof b, "start(%s,%s,%lld)", s->hyp_name, s->ref_name, (long long)s->sentences);
    say(s->metric, b);
    return 0;
}

static int rec_add(struct tfm_scorer *s, int64_t i, const char *hyp, size_t hyp_len,
                   const char *const *refs, const size_t *ref_lens, struct tfm_error *err)
{
    struct rec *r = s->metric;
    if (i == r->fail_at)
        return tfm_fail(err, "line %lld: no", (long long)i + 1);
    char b[128];
    snprintf(b, sizeof b, " %lld:%.*s/%.*s/%.*s", (long long)i, (int)hyp_len, hyp,
             (int)ref_lens[0], refs[0], (int)ref_lens[1], refs[1]);
    say(r, b);
    snprintf(b, sizeof b, "warned %lld", (long long)i);
    s->o.warn(s->o.warn_ctx, b);
    return 0;
}

static int rec_report(struct tfm_scorer *s, struct tfm_error *err)
{
    (void)err;
    char b[64];
    snprintf(b, sizeof b, " report(%lld)", (long long)s->added);
    say(s->metric, b);
    return 0;
}

static void rec_free(void *r)
{
    free(r);
}

static void warn_into(void *ctx, const char *msg)
{
    strncat(ctx, msg, 255 - strlen(ctx));
    strncat(ctx, ";", 255 - strlen(ctx));
}

static void test_loop(void)
{
    static const struct tfm_scorer_ops ops = {.start = rec_start, .add = rec_add,
                                              .report = rec_report, .free = rec_free};
    char warned[256] = "";
    struct tfm_score_opts so = {.out = stdout, .version = "v", .warn = warn_into, .warn_ctx = warned};
    struct tfm_error err;
    struct tfm_text hyp, refs[2];
    const char *h[] = {"a", "b"}, *r0[] = {"A", "B"}, *r1[] = {"x", "y"}, *r2[] = {"1"};
    text_of(&hyp, "hyp", h, 2);
    text_of(&refs[0], "ref0", r0, 2);
    text_of(&refs[1], "ref1", r1, 2);
    struct rec *r = calloc(1, sizeof *r);     /* keeps no state between runs: run thrice */
    struct tfm_scorer *s = tfm_scorer_new(&ops, r, &so, 2, &err);
    r->fail_at = -1;
    CHECK(tfm_score_run(s, &hyp, refs, &err) == 0);
    CHECK_STR(r->log, "start(hyp,ref0,2) 0:a/A/x 1:b/B/y report(2)");
    CHECK_STR(warned, "warned 0;warned 1;");
    /* a failing sentence stops the loop: no report */
    r->log[0] = '\0';
    r->fail_at = 1;
    CHECK(tfm_score_run(s, &hyp, refs, &err) == -1);
    CHECK_STR(err.msg, "line 2: no");
    CHECK_STR(r->log, "start(hyp,ref0,2) 0:a/A/x");
    /* every reference must have as many lines; nothing is called before that holds */
    tfm_text_free(&refs[1]);
    text_of(&refs[1], "ref1", r2, 1);
    r->log[0] = '\0';
    CHECK(tfm_score_run(s, &hyp, refs, &err) == -1);
    CHECK_STR(err.msg, "ref1: 1 lines, hypotheses have 2");
    CHECK_STR(r->log, "");
    tfm_scorer_free(s);
    tfm_scorer_free(NULL);
    tfm_text_free(&hyp);
    tfm_text_free(&refs[0]);
    tfm_text_free(&refs[1]);
}

/* ---- BLEU and chrF ------------------------------------------------------------------- */

static void test_bleu_chrf(void)
{
    FILE *f = tmpfile();
    struct tfm_error err;
    struct tfm_score_opts so = {.out = f, .version = "tfm-X"};
    struct tfm_text hyp, ref;
    const char *h[] = {"the cat sat the mat on"}, *r[] = {"the cat sat on the mat"};
    text_of(&hyp, "h", h, 1);
    text_of(&ref, "r", r, 1);
    struct tfm_bleu_opts bo;
    tfm_bleu_opts_default(&bo);
    struct tfm_scorer *s = tfm_bleu_scorer(&bo, 1, &so, &err);
    CHECK(s && tfm_score_run(s, &hyp, &ref, &err) == 0);
    CHECK_STR(t_contents(f), "BLEU = 39.76 100.0/60.0/25.0/16.7 (BP = 1.000 ratio = 1.000 "
                           "hyp_len = 6 ref_len = 6)\n"
                           "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:tfm-X\n");
    tfm_scorer_free(s);
    so.json = 1;
    s = tfm_bleu_scorer(&bo, 1, &so, &err);
    CHECK(s && tfm_score_run(s, &hyp, &ref, &err) == 0);
    CHECK_STR(t_contents(f),
              "{\n \"name\": \"BLEU\",\n \"score\": 39.76353643835254,\n"
              " \"signature\": \"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:tfm-X\",\n"
              " \"verbose_score\": \"100.0/60.0/25.0/16.7 (BP = 1.000 ratio = 1.000 hyp_len = 6 "
              "ref_len = 6)\",\n"
              " \"nrefs\": \"1\",\n \"case\": \"mixed\",\n \"eff\": \"no\",\n \"tok\": \"13a\",\n"
              " \"smooth\": \"exp\",\n \"version\": \"tfm-X\",\n"
              " \"precisions\": [100, 60, 25, 16.666666666666668],\n"
              " \"counts\": [6, 3, 1, 0],\n \"totals\": [6, 5, 4, 3],\n"
              " \"bp\": 1,\n \"ratio\": 1,\n \"hyp_len\": 6,\n \"ref_len\": 6,\n"
              " \"sentences\": 1\n}\n");
    tfm_scorer_free(s);
    /* chrF: text and JSON */
    struct tfm_chrf_opts co;
    tfm_chrf_opts_default(&co);
    so.json = 0;
    s = tfm_chrf_scorer(&co, 1, &so, &err);
    CHECK(s && tfm_score_run(s, &ref, &ref, &err) == 0);
    CHECK_STR(t_contents(f), "chrF2 = 100.00\nnrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|"
                           "version:tfm-X\n");
    tfm_scorer_free(s);
    so.json = 1;
    co.char_order = 1;
    s = tfm_chrf_scorer(&co, 1, &so, &err);
    CHECK(s && tfm_score_run(s, &ref, &ref, &err) == 0);
    CHECK_STR(t_contents(f),
              "{\n \"name\": \"chrF2\",\n \"score\": 100,\n"
              " \"signature\": \"nrefs:1|case:mixed|eff:yes|nc:1|nw:0|space:no|version:tfm-X\",\n"
              " \"nrefs\": \"1\",\n \"case\": \"mixed\",\n \"eff\": \"yes\",\n \"nc\": \"1\",\n"
              " \"nw\": \"0\",\n \"space\": \"no\",\n \"version\": \"tfm-X\",\n"
              " \"statistics\": [17, 17, 17],\n \"sentences\": 1\n}\n");
    tfm_scorer_free(s);
    /* a bad line is named */
    const char *bad[] = {"\xff"};
    tfm_text_free(&hyp);
    text_of(&hyp, "h", bad, 1);
    s = tfm_bleu_scorer(&bo, 1, &so, &err);
    CHECK(s && tfm_score_run(s, &hyp, &ref, &err) == -1);
    CHECK_STR(err.msg, "line 1: hypothesis: invalid UTF-8 at byte 0");
    CHECK_STR(t_contents(f), "");
    tfm_scorer_free(s);
    tfm_text_free(&hyp);
    tfm_text_free(&ref);
    fclose(f);
}

/* ---- F1 ------------------------------------------------------------------------------ */

static void test_f1(void)
{
    FILE *f = tmpfile();
    struct tfm_error err;
    char warned[256] = "";
    struct tfm_score_opts so = {.out = f, .version = "tfm-X", .warn = warn_into, .warn_ctx = warned};
    struct tfm_f1_opts fo = {NULL, NULL, 0, 0, -1, 0, NULL};
    struct tfm_text gold, test;
    const char *g[] = {"(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))", "(S (NN a) (NN b))"};
    const char *t[] = {"(S (NP (DT The) (NN cat) (VBD sat)) (. .))", "(S (NN a) (NN c))"};
    text_of(&gold, "g", g, 2);
    text_of(&test, "t", t, 2);
    struct tfm_scorer *s = tfm_evalb_scorer(&fo, &so, &err);
    CHECK(s && tfm_score_run(s, &test, &gold, &err) == 0);
    CHECK_STR(t_contents(f),
              "F1 = 40.00 P = 50.00 R = 33.33 (sentences = 2 valid = 1 errors = 1 skipped = 0 "
              "matched = 1 gold = 3 test = 2)\n"
              "len<=40: F1 = 40.00 P = 50.00 R = 33.33 (sentences = 2 valid = 1 errors = 1 "
              "skipped = 0 matched = 1 gold = 3 test = 2)\n"
              "evalb:COLLINS|labeled:yes|cutoff:40|version:tfm-X\n");
    CHECK_STR(warned, "t: line 2: word mismatch (b|c);");
    tfm_scorer_free(s);
    /* JSON with rows; MAX_ERROR 0 gives up at the first error */
    so.json = 1;
    so.warn = NULL;
    fo.per_sentence = 1;
    s = tfm_evalb_scorer(&fo, &so, &err);
    CHECK(s && tfm_score_run(s, &test, &gold, &err) == 0);
    const char *js = t_contents(f);
    CHECK(strstr(js, "\n \"per_sentence\": [\n  {\"id\": 1, \"length\": 4, \"status\": 0, "
                     "\"matched\": 1, \"gold\": 3, \"test\": 2, \"crossing\": 0, \"words\": 3, "
                     "\"correct_tags\": 3},\n  {\"id\": 2, "));
    CHECK(strstr(js, "\"reason\": \"word mismatch (b|c)\"}\n ]\n}\n"));
    CHECK(strstr(js, " \"labeled\": true,\n \"cutoff_len\": 40,\n"));
    tfm_scorer_free(s);
    so.json = 0;
    fo.max_error = 0;
    const char *ab[] = {"(S (NN a) (NN b))", "(S (NN a) (NN b))", "(S (NN a) (NN b))"};
    const char *ac[] = {"(S (NN a) (NN c))", "(S (NN a) (NN c))", "(S (NN a) (NN c))"};
    struct tfm_text g3, t3;
    text_of(&g3, "g3", ab, 3);
    text_of(&t3, "t3", ac, 3);
    s = tfm_evalb_scorer(&fo, &so, &err);
    CHECK(s && tfm_score_run(s, &t3, &g3, &err) == -1);
    CHECK_STR(err.msg, "t3: line 2: more than MAX_ERROR 0 errors, giving up");
    tfm_text_free(&g3);
    tfm_text_free(&t3);
    CHECK(strstr(t_contents(f), "Accracy\n======"));    /* the header and row 1 came out */
    tfm_scorer_free(s);
    /* a bad gold tree fails the run, naming it; a bad test tree is an error sentence */
    const char *open[] = {"(S (NN a)", "(S (NN a) (NN b)"};
    struct tfm_text bad;
    text_of(&bad, "bad", open, 2);
    fo.max_error = -1;
    fo.per_sentence = 0;
    s = tfm_evalb_scorer(&fo, &so, &err);
    CHECK(s && tfm_score_run(s, &test, &bad, &err) == -1);
    CHECK_STR(err.msg, "bad: line 1: column 10: unbalanced brackets: 1 left open at the end");
    tfm_scorer_free(s);
    s = tfm_evalb_scorer(&fo, &so, &err);
    CHECK(s && tfm_score_run(s, &bad, &gold, &err) == 0);
    CHECK(strstr(t_contents(f), "(sentences = 2 valid = 0 errors = 2 skipped = 0"));
    tfm_scorer_free(s);
    /* linearized output restored with the gold's words, tags and wrapper */
    const char *wg[] = {"( (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)) )"};
    const char *lin[] = {"(S (NP XX XX )NP (VP XX )VP XX )S"};
    struct tfm_text g1, l1;
    text_of(&g1, "g1", wg, 1);
    text_of(&l1, "l1", lin, 1);
    fo.linearized = 1;
    s = tfm_evalb_scorer(&fo, &so, &err);
    CHECK(s && tfm_score_run(s, &l1, &g1, &err) == 0);
    CHECK(strncmp(t_contents(f), "F1 = 100.00 P = 100.00 R = 100.00 (sentences = 1 valid = 1", 58)
          == 0);
    tfm_scorer_free(s);
    /* missing files are named */
    fo.linearized = 0;
    fo.source = "/nonexistent/src";
    s = tfm_evalb_scorer(&fo, &so, &err);
    CHECK(s && tfm_score_run(s, &l1, &g1, &err) == -1);
    CHECK_STR(err.msg, "/nonexistent/src: No such file or directory");
    tfm_scorer_free(s);
    tfm_text_free(&g1);
    tfm_text_free(&l1);
    tfm_text_free(&bad);
    tfm_text_free(&gold);
    tfm_text_free(&test);
    fclose(f);
}

int main(void)
{
    t_run("the loop: counts checked, start, add, report, warnings", test_loop);
    t_run("BLEU and chrF scorers: text and JSON reports", test_bleu_chrf);
    t_run("F1 scorer: warnings, rows, MAX_ERROR, linearized trees", test_f1);
    return t_done();
}
