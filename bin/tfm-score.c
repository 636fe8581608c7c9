/* tfm-score: BLEU and chrF as sacreBLEU, the paper's tokenized BLEU, and EVALB bracket F1
 * (man/tfm-score.1).  A thin main: options, reading files and streams, printing; the
 * metrics are src/bleu.c, src/chrf.c, src/evalb.c, src/tree.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bleu.h"
#include "chrf.h"
#include "cli.h"
#include "corpus.h"
#include "evalb.h"
#include "lines.h"
#include "spm.h"
#include "stream.h"
#include "tree.h"

#define PROG "tfm-score"
#define SIG_VERSION "tfm-" TFM_VERSION

static const char USAGE[] =
    "usage: tfm-score -r REF [-r REF]... [--metric bleu|chrf|f1] [--tok 13a|intl|none]\n"
    "                 [--lowercase] [--tokenized [--compound-split]] [--json]\n"
    "                 [--param FILE.prm] [--source FILE | --linearized] [--keep-tags]\n"
    "                 [--root LABEL] [--per-sentence] [FILE]\n"
    "       tfm-score --linearize [--keep-tags] [--keep-function-tags] [FILE]\n"
    "       tfm-score --restore --source FILE [--root LABEL] [FILE]\n";

static const char HELP[] =
    "Score hypotheses (a tfm hypotheses/tokens stream, detokenized with its embedded\n"
    "SentencePiece model, or text lines) against references.\n"
    "  -r, --ref FILE          reference (repeat for several); gold trees for f1\n"
    "  -m, --metric M          bleu (default), chrf or f1\n"
    "  -t, --tok T             BLEU tokenization: 13a (default), intl, none\n"
    "  -l, --lowercase         case-insensitive BLEU or chrF\n"
    "      --smooth M          BLEU smoothing: exp (default), none, floor, add-k\n"
    "      --smooth-value V    for floor (0.1) and add-k (1)\n"
    "      --tokenized         text is tokenized already: split on whitespace, score as\n"
    "                          multi-bleu.perl (no smoothing)\n"
    "      --compound-split    with --tokenized: split hyphens as ##AT##-##AT## (paper)\n"
    "      --chrf-char-order N character n-gram order (6)\n"
    "      --chrf-word-order N word n-gram order (0; 2 is chrF++)\n"
    "      --chrf-beta N       beta (2)\n"
    "      --chrf-whitespace   keep whitespace in character n-grams\n"
    "      --chrf-eps-smoothing  chrF++.py's smoothing\n"
    "  -p, --param FILE.prm    EVALB parameter file (default: COLLINS.prm, built in)\n"
    "  -s, --source FILE       f1: test lines are linearized trees; restore them with\n"
    "                          the words of FILE (one sentence a line)\n"
    "      --linearized        f1: test lines are linearized; words from the gold trees\n"
    "  -v, --per-sentence      f1: print EVALB's whole report (also --verbose)\n"
    "      --max-error N       f1: override MAX_ERROR\n"
    "  -j, --json              print the result as JSON\n"
    "      --linearize         print \"WORDS<TAB>LINEARIZED\" for each tree of FILE\n"
    "      --keep-tags         --linearize: write POS tags instead of XX; f1 with\n"
    "                          --source or --linearized: the model writes POS tags, give\n"
    "                          only XX preterminals the gold tags (default: all)\n"
    "      --root LABEL        label of the root that restoration opens when the output\n"
    "                          does not open one first (" TFM_TREE_ROOT ")\n"
    "      --keep-function-tags  --linearize: keep NP-SBJ and the like\n"
    "      --restore           print the trees restored from linearized lines + --source\n"
    "  -q, --quiet             no warnings on stderr\n"
    "  -h, --help              this help\n"
    "      --version           print the version\n";

enum { MODE_SCORE, MODE_LINEARIZE, MODE_RESTORE };
enum { MET_BLEU, MET_CHRF, MET_F1 };

enum {
    OPT_SMOOTH = 256, OPT_SMOOTH_VALUE, OPT_TOKENIZED, OPT_COMPOUND, OPT_CHAR_ORDER,
    OPT_WORD_ORDER, OPT_BETA, OPT_WS, OPT_EPS, OPT_LINEARIZED, OPT_MAX_ERROR, OPT_LINEARIZE,
    OPT_KEEP_TAGS, OPT_KEEP_FTAGS, OPT_RESTORE, OPT_ROOT, OPT_VERSION,
};

static int quiet;

/* ---- reading ------------------------------------------------------------------------- */

struct text {
    char **line;
    size_t *len;
    int64_t n, cap;
    const char *name;
};

static void text_free(struct text *t)
{
    for (int64_t i = 0; i < t->n; i++)
        free(t->line[i]);
    free(t->line);
    free(t->len);
    memset(t, 0, sizeof *t);
}

static int text_push(struct text *t, const char *s, size_t len, struct tfm_error *err)
{
    if (t->n == t->cap) {
        int64_t c = t->cap ? t->cap * 2 : 1024;
        char **nl = realloc(t->line, (size_t)c * sizeof *nl);
        if (!nl)
            return tfm_fail(err, "out of memory");
        t->line = nl;
        size_t *nn = realloc(t->len, (size_t)c * sizeof *nn);
        if (!nn)
            return tfm_fail(err, "out of memory");
        t->len = nn;
        t->cap = c;
    }
    char *c = malloc(len + 1);
    if (!c)
        return tfm_fail(err, "out of memory");
    memcpy(c, s, len);
    c[len] = '\0';
    t->line[t->n] = c;
    t->len[t->n] = len;
    t->n++;
    return 0;
}

static int read_lines_fd(struct tfm_lines *l, struct text *t, struct tfm_error *err)
{
    const char *s;
    size_t len;
    int k;
    while ((k = tfm_lines_next(l, &s, &len, err)) == 1)
        if (text_push(t, s, len, err) < 0)
            return -1;
    return k;
}

static int read_text_file(const char *path, struct text *t, struct tfm_error *err)
{
    t->name = path;
    struct tfm_lines *l = tfm_lines_open(path, err);
    if (!l)
        return -1;
    int rc = read_lines_fd(l, t, err);
    tfm_lines_close(l);
    return rc;
}

/* Hypotheses: a stream (decoded with its model, first entry per hyp.index) or text. */
static int read_hyps(const char *path, struct text *t, struct tfm_error *err)
{
    const char *name = (!path || strcmp(path, "-") == 0) ? "<stdin>" : path;
    t->name = name;
    int fd = 0, rc = -1;
    if (strcmp(name, "<stdin>") != 0 && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return tfm_fail(err, "%s: %s", path, strerror(errno));
    unsigned char peek[8];
    size_t np = 0;
    while (np < sizeof peek) {
        ssize_t k = read(fd, peek + np, sizeof peek - np);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            tfm_fail(err, "%s: %s", name, strerror(errno));
            goto fail;
        }
        if (k == 0)
            break;
        np += (size_t)k;
    }
    if (!tfm_is_stream_magic(peek, np)) {
        struct tfm_lines *l = tfm_lines_open_fd(fd, name, peek, np, err);
        if (!l)
            goto fail;
        rc = read_lines_fd(l, t, err);
        tfm_lines_close(l);
        if (fd > 0)
            close(fd);
        return rc;
    }
    struct tfm_reader *r = tfm_reader_open_peeked(fd, name, peek, np, err);
    if (!r)
        goto fail;
    struct tfm_spm *spm = NULL;
    struct tfm_corpus c;
    tfm_corpus_init(&c);
    char *out = NULL;
    size_t ocap = 0;
    int64_t *pick = NULL;
    const struct tfm_header *h = tfm_reader_header(r);
    if (strcmp(h->kind, TFM_KIND_HYPOTHESES) != 0 && strcmp(h->kind, TFM_KIND_TOKENS) != 0) {
        tfm_fail(err, "%s: a '%s' stream, expected hypotheses or tokens", name, h->kind);
        goto sfail;
    }
    if (!h->spm) {
        tfm_fail(err, "%s: the stream has no embedded SentencePiece model to detokenize with",
                 name);
        goto sfail;
    }
    if (!(spm = tfm_spm_load(h->spm, h->spm_size, err))) {
        tfm_error_prefix(err, "%s: embedded model", name);
        goto sfail;
    }
    if (tfm_corpus_read(r, &c, tfm_spm_vocab_size(spm), err) < 0)
        goto sfail;
    /* n-best lists repeat an index, best first: keep the first entry of each index */
    int64_t n = c.n;
    if (c.index) {
        n = 0;
        for (int64_t i = 0; i < c.n; i++) {
            if (c.index[i] < 0 || c.index[i] >= c.n) {
                tfm_fail(err, "%s: hypothesis %lld: hyp.index %lld out of range [0, %lld)",
                         name, (long long)i, (long long)c.index[i], (long long)c.n);
                goto sfail;
            }
            if (c.index[i] + 1 > n)
                n = c.index[i] + 1;
        }
        pick = malloc((size_t)(n ? n : 1) * sizeof *pick);
        if (!pick) {
            tfm_fail(err, "out of memory");
            goto sfail;
        }
        for (int64_t i = 0; i < n; i++)
            pick[i] = -1;
        for (int64_t i = 0; i < c.n; i++)
            if (pick[c.index[i]] < 0)
                pick[c.index[i]] = i;
        for (int64_t i = 0; i < n; i++)
            if (pick[i] < 0) {
                tfm_fail(err, "%s: no hypothesis for sentence %lld (hyp.index)", name,
                         (long long)i);
                goto sfail;
            }
    }
    for (int64_t k = 0; k < n; k++) {
        int64_t i = pick ? pick[k] : k;
        int64_t len = tfm_spm_decode(spm, tfm_corpus_sent(&c, i), tfm_corpus_len(&c, i), &out,
                                     &ocap, err);
        if (len < 0) {
            tfm_error_prefix(err, "%s: hypothesis %lld", name, (long long)i);
            goto sfail;
        }
        if (text_push(t, out, (size_t)len, err) < 0)
            goto sfail;
    }
    rc = 0;
sfail:
    free(pick);
    free(out);
    tfm_corpus_free(&c);
    tfm_spm_free(spm);
    tfm_reader_close(r);
fail:
    if (fd > 0)
        close(fd);
    return rc;
}

/* ---- JSON ---------------------------------------------------------------------------- */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, double x)
{
    if (isfinite(x))
        fprintf(f, "%.10g", x);
    else
        fputs("null", f);
}

/* "key":"value" pairs of a signature */
static void json_signature_fields(FILE *f, const char *sig)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", sig);
    for (char *tok = strtok(buf, "|"); tok; tok = strtok(NULL, "|")) {
        char *colon = strchr(tok, ':');
        if (!colon)
            continue;
        *colon = '\0';
        fputs(",\n \"", stdout);
        fputs(tok, f);
        fputs("\": ", f);
        json_str(f, colon + 1);
    }
}

/* ---- metrics ------------------------------------------------------------------------- */

static int check_counts(const struct text *hyp, const struct text *refs, int nrefs)
{
    for (int r = 0; r < nrefs; r++)
        if (refs[r].n != hyp->n) {
            fprintf(stderr, PROG ": %s: %lld lines, hypotheses have %lld\n", refs[r].name,
                    (long long)refs[r].n, (long long)hyp->n);
            return 1;
        }
    return 0;
}

static int run_bleu(const struct tfm_bleu_opts *o, const struct text *hyp,
                    const struct text *refs, int nrefs, int json)
{
    struct tfm_error err;
    struct tfm_bleu *b = tfm_bleu_new(o, &err);
    const char **rl = malloc((size_t)nrefs * sizeof *rl);
    size_t *rn = malloc((size_t)nrefs * sizeof *rn);
    if (!b || !rl || !rn) {
        fprintf(stderr, PROG ": out of memory\n");
        tfm_bleu_free(b);
        free(rl);
        free(rn);
        return 1;
    }
    int rc = 0;
    for (int64_t i = 0; i < hyp->n && rc == 0; i++) {
        for (int r = 0; r < nrefs; r++) {
            rl[r] = refs[r].line[i];
            rn[r] = refs[r].len[i];
        }
        if (tfm_bleu_add(b, hyp->line[i], hyp->len[i], nrefs, rl, rn, &err) < 0) {
            fprintf(stderr, PROG ": line %lld: %s\n", (long long)i + 1, err.msg);
            rc = 1;
        }
    }
    if (rc == 0) {
        struct tfm_bleu_score s;
        tfm_bleu_compute(tfm_bleu_stats(b), o, &s);
        char line[512], sig[256], verbose[256];
        tfm_bleu_format(&s, line, sizeof line);
        tfm_bleu_format_verbose(&s, verbose, sizeof verbose);
        tfm_bleu_signature(o, nrefs, SIG_VERSION, sig, sizeof sig);
        if (json) {
            printf("{\n \"name\": \"BLEU\",\n \"score\": ");
            json_num(stdout, s.score);
            printf(",\n \"signature\": ");
            json_str(stdout, sig);
            printf(",\n \"verbose_score\": ");
            json_str(stdout, verbose);
            json_signature_fields(stdout, sig);
            printf(",\n \"precisions\": [");
            for (int n = 0; n < TFM_BLEU_ORDER; n++) {
                printf(n ? ", " : "");
                json_num(stdout, s.precisions[n]);
            }
            printf("],\n \"counts\": [%lld, %lld, %lld, %lld]", (long long)s.correct[0],
                   (long long)s.correct[1], (long long)s.correct[2], (long long)s.correct[3]);
            printf(",\n \"totals\": [%lld, %lld, %lld, %lld]", (long long)s.total[0],
                   (long long)s.total[1], (long long)s.total[2], (long long)s.total[3]);
            printf(",\n \"bp\": ");
            json_num(stdout, s.bp);
            printf(",\n \"ratio\": ");
            json_num(stdout, s.ratio);
            printf(",\n \"hyp_len\": %lld,\n \"ref_len\": %lld,\n \"sentences\": %lld\n}\n",
                   (long long)s.hyp_len, (long long)s.ref_len, (long long)hyp->n);
        } else {
            printf("%s\n%s\n", line, sig);
        }
    }
    tfm_bleu_free(b);
    free(rl);
    free(rn);
    return rc;
}

static int run_chrf(const struct tfm_chrf_opts *o, const struct text *hyp,
                    const struct text *refs, int nrefs, int json)
{
    struct tfm_error err;
    struct tfm_chrf *c = tfm_chrf_new(o, &err);
    if (!c) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        return 2;
    }
    const char **rl = malloc((size_t)nrefs * sizeof *rl);
    size_t *rn = malloc((size_t)nrefs * sizeof *rn);
    int rc = 0;
    if (!rl || !rn) {
        fprintf(stderr, PROG ": out of memory\n");
        rc = 1;
    }
    for (int64_t i = 0; i < hyp->n && rc == 0; i++) {
        for (int r = 0; r < nrefs; r++) {
            rl[r] = refs[r].line[i];
            rn[r] = refs[r].len[i];
        }
        if (tfm_chrf_add(c, hyp->line[i], hyp->len[i], nrefs, rl, rn, &err) < 0) {
            fprintf(stderr, PROG ": line %lld: %s\n", (long long)i + 1, err.msg);
            rc = 1;
        }
    }
    if (rc == 0) {
        int ns;
        const int64_t *st = tfm_chrf_stats(c, &ns);
        double score = tfm_chrf_compute(o, st);
        char name[32], sig[256];
        tfm_chrf_name(o, name, sizeof name);
        tfm_chrf_signature(o, nrefs, SIG_VERSION, sig, sizeof sig);
        if (json) {
            printf("{\n \"name\": ");
            json_str(stdout, name);
            printf(",\n \"score\": ");
            json_num(stdout, score);
            printf(",\n \"signature\": ");
            json_str(stdout, sig);
            json_signature_fields(stdout, sig);
            printf(",\n \"statistics\": [");
            for (int i = 0; i < ns; i++)
                printf("%s%lld", i ? ", " : "", (long long)st[i]);
            printf("],\n \"sentences\": %lld\n}\n", (long long)hyp->n);
        } else {
            printf("%s = %.2f\n%s\n", name, score, sig);
        }
    }
    tfm_chrf_free(c);
    free(rl);
    free(rn);
    return rc;
}

static void json_totals(FILE *f, const char *key, const struct tfm_evalb_totals *t)
{
    double r, p, fm;
    tfm_evalb_prf(t, &r, &p, &fm);
    fprintf(f, ",\n \"%s\": {\"f1\": ", key);
    json_num(f, isnan(fm) ? 0.0 : fm);
    fprintf(f, ", \"precision\": ");
    json_num(f, p);
    fprintf(f, ", \"recall\": ");
    json_num(f, r);
    int64_t valid = t->sentences - t->errors - t->skipped;
    fprintf(f,
            ", \"matched\": %lld, \"gold\": %lld, \"test\": %lld, \"sentences\": %lld, "
            "\"valid\": %lld, \"errors\": %lld, \"skipped\": %lld, \"complete_match\": ",
            (long long)t->matched, (long long)t->gold, (long long)t->test,
            (long long)t->sentences, (long long)valid, (long long)t->errors,
            (long long)t->skipped);
    json_num(f, valid > 0 ? 100.0 * (double)t->complete / (double)valid : 0.0);
    fprintf(f, ", \"average_crossing\": ");
    json_num(f, valid > 0 ? (double)t->crossing / (double)valid : 0.0);
    fprintf(f, ", \"tagging_accuracy\": ");
    json_num(f, t->words > 0 ? 100.0 * (double)t->correct_tags / (double)t->words : 0.0);
    fputc('}', f);
}

static void print_f1_line(const char *prefix, const struct tfm_evalb_totals *t)
{
    double r, p, f;
    tfm_evalb_prf(t, &r, &p, &f);
    printf("%sF1 = %.2f P = %.2f R = %.2f (sentences = %lld valid = %lld errors = %lld "
           "skipped = %lld matched = %lld gold = %lld test = %lld)\n",
           prefix, isnan(f) ? 0.0 : f, p, r, (long long)t->sentences,
           (long long)(t->sentences - t->errors - t->skipped), (long long)t->errors,
           (long long)t->skipped, (long long)t->matched, (long long)t->gold,
           (long long)t->test);
}

struct f1_opts {
    const char *param;
    const char *source;
    int linearized;
    int per_sentence;
    int max_error;      /* < 0: the .prm's */
    int keep_tags;      /* restored trees: only XX preterminals get the gold tags */
    const char *root;   /* restored trees: the label of a root restoration opens */
};

static int run_f1(const struct f1_opts *fo, const struct text *test, const struct text *gold,
                  int json)
{
    struct tfm_error err;
    struct tfm_evalb_params prm;
    struct tfm_evalb e;
    struct text src = {0};
    int rc = 1, have_e = 0;
    tfm_evalb_params_init(&prm);
    if (fo->param ? tfm_evalb_params_load(&prm, fo->param, &err)
                  : tfm_evalb_params_collins(&prm, &err)) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        tfm_evalb_params_free(&prm);
        return 1;
    }
    if (fo->max_error >= 0)
        prm.max_error = fo->max_error;
    if (fo->source) {
        if (read_text_file(fo->source, &src, &err) < 0) {
            fprintf(stderr, PROG ": %s\n", err.msg);
            goto out;
        }
        if (src.n != test->n) {
            fprintf(stderr, PROG ": %s: %lld lines, hypotheses have %lld\n", fo->source,
                    (long long)src.n, (long long)test->n);
            goto out;
        }
    }
    if (tfm_evalb_init(&e, &prm, &err) < 0) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        goto out;
    }
    have_e = 1;
    struct tfm_tree g, t;
    tfm_tree_init(&g);
    tfm_tree_init(&t);
    char *words = NULL, *lin = NULL;
    size_t wcap = 0, lcap = 0;
    if (fo->per_sentence && !json)
        tfm_evalb_print_header(stdout);
    struct tfm_evalb_sent *rows = NULL;
    if (json && fo->per_sentence && !(rows = calloc((size_t)(test->n ? test->n : 1), sizeof *rows))) {
        fprintf(stderr, PROG ": out of memory\n");
        goto trees;
    }
    int64_t i;
    for (i = 0; i < test->n; i++) {
        size_t pos = 0;
        if (tfm_tree_parse(&g, gold->line[i], gold->len[i], &pos, 0, &err) < 0) {
            fprintf(stderr, PROG ": %s: line %lld: %s\n", gold->name, (long long)i + 1, err.msg);
            goto trees;
        }
        const struct tfm_tree *tp = &t;
        char reason[300] = "";
        if (fo->source || fo->linearized) {
            const char *w;
            size_t wl;
            if (fo->source) {
                w = src.line[i];
                wl = src.len[i];
            } else {
                struct tfm_linearize_opts lo = {0, 0};
                if (tfm_tree_linearize(&g, &lo, &words, &wcap, &lin, &lcap, &err) < 0) {
                    fprintf(stderr, PROG ": %s: line %lld: %s\n", gold->name, (long long)i + 1,
                            err.msg);
                    goto trees;
                }
                w = words;
                wl = strlen(words);
            }
            /* every preterminal takes the gold tag, so that EVALB deletes the same
             * punctuation on both sides: a model without tags writes XX, or, when
             * imperfect, a word or a stray label in its place */
            const char *wrap = NULL;
            if (tfm_tree_restore(&t, test->line[i], test->len[i], w, wl, fo->root, NULL,
                                 &err) < 0 ||
                tfm_tree_retag(&t, &g, fo->keep_tags ? "XX" : NULL, &err) < 0 ||
                (tfm_tree_wrapper(&g, &wrap) >= 0 && t.first >= 0 &&
                 tfm_tree_wrap(&t, wrap, &err) < 0)) {
                fprintf(stderr, PROG ": %s\n", err.msg);
                goto trees;
            }
        } else {
            pos = 0;
            if (tfm_tree_parse(&t, test->line[i], test->len[i], &pos, 0, &err) < 0) {
                snprintf(reason, sizeof reason, "malformed tree: %.250s", err.msg);
                tp = NULL;
            }
        }
        struct tfm_evalb_sent s;
        if (tfm_evalb_add(&e, i + 1, &g, tp, reason, &s, &err) < 0) {
            fprintf(stderr, PROG ": %s\n", err.msg);
            goto trees;
        }
        if (s.status == TFM_EVALB_ERROR && !quiet)
            fprintf(stderr, PROG ": %s: line %lld: %s\n", test->name, (long long)i + 1,
                    s.reason);
        if (rows)
            rows[i] = s;
        else if (fo->per_sentence && !json)
            tfm_evalb_print_row(stdout, &s);
        if (tfm_evalb_too_many_errors(&e)) {
            fflush(stdout);
            fprintf(stderr, PROG ": %s: line %lld: more than MAX_ERROR %d errors, giving up\n",
                    test->name, (long long)i + 1, e.p.max_error);
            goto trees;
        }
    }
    if (json) {
        double r, p, f;
        tfm_evalb_prf(&e.all, &r, &p, &f);
        printf("{\n \"name\": \"F1\",\n \"score\": ");
        json_num(stdout, isnan(f) ? 0.0 : f);
        printf(",\n \"param\": ");
        json_str(stdout, e.p.name);
        printf(",\n \"labeled\": %s,\n \"cutoff_len\": %d,\n \"version\": ",
               e.p.labeled ? "true" : "false", e.p.cutoff_len);
        json_str(stdout, SIG_VERSION);
        json_totals(stdout, "all", &e.all);
        char key[32];
        snprintf(key, sizeof key, "len<=%d", e.p.cutoff_len);
        json_totals(stdout, key, &e.cut);
        if (rows) {
            printf(",\n \"per_sentence\": [");
            for (int64_t k = 0; k < test->n; k++) {
                const struct tfm_evalb_sent *s = &rows[k];
                printf("%s\n  {\"id\": %lld, \"length\": %d, \"status\": %d, \"matched\": %d, "
                       "\"gold\": %d, \"test\": %d, \"crossing\": %d, \"words\": %d, "
                       "\"correct_tags\": %d",
                       k ? "," : "", (long long)s->id, s->len, s->status, s->matched, s->gold,
                       s->test, s->crossing, s->words, s->correct_tags);
                if (s->status == TFM_EVALB_ERROR) {
                    printf(", \"reason\": ");
                    json_str(stdout, s->reason);
                }
                putchar('}');
            }
            printf("\n ]");
        }
        printf("\n}\n");
    } else if (fo->per_sentence) {
        tfm_evalb_print_summary(stdout, &e);
    } else {
        print_f1_line("", &e.all);
        char prefix[32];
        snprintf(prefix, sizeof prefix, "len<=%d: ", e.p.cutoff_len);
        print_f1_line(prefix, &e.cut);
        printf("evalb:%s|labeled:%s|cutoff:%d|version:%s\n", e.p.name,
               e.p.labeled ? "yes" : "no", e.p.cutoff_len, SIG_VERSION);
    }
    rc = 0;
trees:
    free(rows);
    free(words);
    free(lin);
    tfm_tree_free(&g);
    tfm_tree_free(&t);
out:
    if (have_e)
        tfm_evalb_free(&e);
    tfm_evalb_params_free(&prm);
    text_free(&src);
    return rc;
}

/* ---- tree modes ---------------------------------------------------------------------- */

static int run_linearize(const char *path, const struct tfm_linearize_opts *lo)
{
    struct tfm_error err;
    struct text in = {0};
    if (read_text_file(path ? path : "-", &in, &err) < 0) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        text_free(&in);
        return 1;
    }
    /* trees may span lines (.mrg): parse the whole text tree after tree */
    size_t total = 0;
    for (int64_t i = 0; i < in.n; i++)
        total += in.len[i] + 1;
    char *all = malloc(total + 1);
    int64_t *line_at = malloc((size_t)(in.n + 1) * sizeof *line_at);
    if (!all || !line_at) {
        fprintf(stderr, PROG ": out of memory\n");
        free(all);
        free(line_at);
        text_free(&in);
        return 1;
    }
    size_t off = 0;
    for (int64_t i = 0; i < in.n; i++) {
        line_at[i] = (int64_t)off;
        memcpy(all + off, in.line[i], in.len[i]);
        off += in.len[i];
        all[off++] = '\n';
    }
    all[off] = '\0';
    struct tfm_tree t;
    tfm_tree_init(&t);
    char *words = NULL, *lin = NULL;
    size_t wcap = 0, lcap = 0, pos = 0;
    int rc = 0;
    for (;;) {
        size_t at = pos;
        int k = tfm_tree_parse(&t, all, off, &pos, 1, &err);
        if (k <= 0) {
            if (k < 0) {    /* pos: the problem, its column in err; name both lines */
                while (at < off && (all[at] == ' ' || all[at] == '\n' || all[at] == '\t'))
                    at++;
                int64_t ln = 0, bad = 0;
                while (ln + 1 < in.n && (size_t)line_at[ln + 1] <= at)
                    ln++;
                while (bad + 1 < in.n && (size_t)line_at[bad + 1] <= pos)
                    bad++;
                if (bad == ln)
                    fprintf(stderr, PROG ": %s: tree starting on line %lld: %s\n", in.name,
                            (long long)ln + 1, err.msg);
                else
                    fprintf(stderr, PROG ": %s: tree starting on line %lld: line %lld, %s\n",
                            in.name, (long long)ln + 1, (long long)bad + 1, err.msg);
                rc = 1;
            }
            break;
        }
        if (tfm_tree_linearize(&t, lo, &words, &wcap, &lin, &lcap, &err) < 0) {
            fprintf(stderr, PROG ": %s\n", err.msg);
            rc = 1;
            break;
        }
        printf("%s\t%s\n", words, lin);
    }
    tfm_tree_free(&t);
    free(words);
    free(lin);
    free(all);
    free(line_at);
    text_free(&in);
    return rc;
}

static int run_restore(const char *path, const char *source, const char *root)
{
    struct tfm_error err;
    struct text in = {0}, src = {0};
    int rc = 1;
    if (read_hyps(path, &in, &err) < 0 || read_text_file(source, &src, &err) < 0) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        goto out;
    }
    if (src.n != in.n) {
        fprintf(stderr, PROG ": %s: %lld lines, hypotheses have %lld\n", source,
                (long long)src.n, (long long)in.n);
        goto out;
    }
    struct tfm_tree t;
    tfm_tree_init(&t);
    char *out = NULL;
    size_t ocap = 0;
    rc = 0;
    for (int64_t i = 0; i < in.n && rc == 0; i++) {
        struct tfm_restore_stats st = {0};
        if (tfm_tree_restore(&t, in.line[i], in.len[i], src.line[i], src.len[i], root, &st,
                             &err) < 0 ||
            tfm_tree_format(&t, &out, &ocap, &err) < 0) {
            fprintf(stderr, PROG ": line %lld: %s\n", (long long)i + 1, err.msg);
            rc = 1;
            break;
        }
        printf("%s\n", out);
    }
    tfm_tree_free(&t);
    free(out);
out:
    text_free(&in);
    text_free(&src);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"ref", required_argument, NULL, 'r'},
        {"metric", required_argument, NULL, 'm'},
        {"tok", required_argument, NULL, 't'},
        {"lowercase", no_argument, NULL, 'l'},
        {"smooth", required_argument, NULL, OPT_SMOOTH},
        {"smooth-value", required_argument, NULL, OPT_SMOOTH_VALUE},
        {"tokenized", no_argument, NULL, OPT_TOKENIZED},
        {"compound-split", no_argument, NULL, OPT_COMPOUND},
        {"chrf-char-order", required_argument, NULL, OPT_CHAR_ORDER},
        {"chrf-word-order", required_argument, NULL, OPT_WORD_ORDER},
        {"chrf-beta", required_argument, NULL, OPT_BETA},
        {"chrf-whitespace", no_argument, NULL, OPT_WS},
        {"chrf-eps-smoothing", no_argument, NULL, OPT_EPS},
        {"param", required_argument, NULL, 'p'},
        {"source", required_argument, NULL, 's'},
        {"linearized", no_argument, NULL, OPT_LINEARIZED},
        {"per-sentence", no_argument, NULL, 'v'},
        {"verbose", no_argument, NULL, 'v'},
        {"max-error", required_argument, NULL, OPT_MAX_ERROR},
        {"json", no_argument, NULL, 'j'},
        {"linearize", no_argument, NULL, OPT_LINEARIZE},
        {"keep-tags", no_argument, NULL, OPT_KEEP_TAGS},
        {"keep-function-tags", no_argument, NULL, OPT_KEEP_FTAGS},
        {"restore", no_argument, NULL, OPT_RESTORE},
        {"root", required_argument, NULL, OPT_ROOT},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    const char **refs = calloc((size_t)argc + 1, sizeof *refs);
    if (!refs) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    int nrefs = 0, metric = MET_BLEU, json = 0, mode = MODE_SCORE, c;
    long long v;
    int tok_set = 0, smooth_set = 0, chrf_set = 0;
    struct tfm_bleu_opts bo;
    struct tfm_chrf_opts co;
    struct f1_opts fo = {NULL, NULL, 0, 0, -1, 0, NULL};
    struct tfm_linearize_opts lo = {0, 0};
    tfm_bleu_opts_default(&bo);
    tfm_chrf_opts_default(&co);
    int st = 0;
    tfm_cli_init(PROG, USAGE);
    while ((c = getopt_long(argc, argv, "r:m:t:lp:s:vjqh", opts, NULL)) != -1) {
        switch (c) {
        case 'r': refs[nrefs++] = optarg; break;
        case 'm':
            if (strcmp(optarg, "bleu") == 0)
                metric = MET_BLEU;
            else if (strcmp(optarg, "chrf") == 0)
                metric = MET_CHRF;
            else if (strcmp(optarg, "f1") == 0)
                metric = MET_F1;
            else
                st = tfm_cli_usage_error("--metric: '%s': expected bleu, chrf or f1", optarg);
            break;
        case 't':
            bo.tok = tfm_bleu_tok_parse(optarg);
            if (!bo.tok || bo.tok == TFM_TOK_TOKENIZED)
                st = tfm_cli_usage_error("--tok: '%s': expected 13a, intl or none", optarg);
            tok_set = 1;
            break;
        case 'l': bo.lowercase = co.lowercase = 1; break;
        case OPT_SMOOTH:
            if (!(bo.smooth = tfm_bleu_smooth_parse(optarg)))
                st = tfm_cli_usage_error("--smooth: '%s': expected exp, none, floor or add-k",
                                         optarg);
            smooth_set = 1;
            break;
        case OPT_SMOOTH_VALUE:
            st = tfm_cli_double("--smooth-value", optarg, 0, 1e6, 0, &bo.smooth_value);
            break;
        case OPT_TOKENIZED: bo.tok = TFM_TOK_TOKENIZED; break;
        case OPT_COMPOUND: bo.compound_split = 1; break;
        case OPT_CHAR_ORDER:
            if (!(st = tfm_cli_int("--chrf-char-order", optarg, 1, TFM_CHRF_MAX_ORDER, &v)))
                co.char_order = (int)v;
            chrf_set = 1;
            break;
        case OPT_WORD_ORDER:
            if (!(st = tfm_cli_int("--chrf-word-order", optarg, 0, TFM_CHRF_MAX_ORDER, &v)))
                co.word_order = (int)v;
            chrf_set = 1;
            break;
        case OPT_BETA:
            if (!(st = tfm_cli_int("--chrf-beta", optarg, 1, 100, &v)))
                co.beta = (int)v;
            chrf_set = 1;
            break;
        case OPT_WS: co.whitespace = 1, chrf_set = 1; break;
        case OPT_EPS: co.eps_smoothing = 1, chrf_set = 1; break;
        case 'p': fo.param = optarg; break;
        case 's': fo.source = optarg; break;
        case OPT_LINEARIZED: fo.linearized = 1; break;
        case 'v': fo.per_sentence = 1; break;
        case OPT_MAX_ERROR:
            if (!(st = tfm_cli_int("--max-error", optarg, 0, 1000000000, &v)))
                fo.max_error = (int)v;
            break;
        case 'j': json = 1; break;
        case OPT_LINEARIZE: mode = MODE_LINEARIZE; break;
        case OPT_KEEP_TAGS: lo.keep_tags = fo.keep_tags = 1; break;
        case OPT_KEEP_FTAGS: lo.keep_function_tags = 1; break;
        case OPT_RESTORE: mode = MODE_RESTORE; break;
        case OPT_ROOT:
            if (!*optarg || strpbrk(optarg, " \t\n\r\f\v()"))
                st = tfm_cli_usage_error("--root: '%s': expected a label (no space or "
                                         "bracket)", optarg);
            fo.root = optarg;
            break;
        case 'q': quiet = 1; break;
        case 'h':
            free(refs);
            return tfm_cli_help(HELP);
        case OPT_VERSION:
            free(refs);
            return tfm_cli_version(TFM_VERSION);
        default: st = tfm_cli_usage(); break;
        }
        if (st) {
            free(refs);
            return st;
        }
    }
    if (argc - optind > 1) {
        free(refs);
        return tfm_cli_usage_error("one input FILE at most ('%s' is extra)", argv[optind + 1]);
    }
    const char *in = optind < argc ? argv[optind] : "-";
    const char *bad = NULL;
    if (mode == MODE_SCORE) {
        if (nrefs == 0)
            bad = "no reference: give -r REF";
        else if (bo.compound_split && bo.tok != TFM_TOK_TOKENIZED)
            bad = "--compound-split needs --tokenized";
        else if (bo.tok == TFM_TOK_TOKENIZED && tok_set)
            bad = "--tokenized and --tok exclude each other";
        else if (metric != MET_BLEU && (tok_set || smooth_set || bo.tok == TFM_TOK_TOKENIZED))
            bad = "--tok, --smooth and --tokenized are for --metric bleu";
        else if (metric != MET_CHRF && chrf_set)
            bad = "--chrf-* options are for --metric chrf";
        else if (metric != MET_F1 && (fo.param || fo.source || fo.linearized ||
                                      fo.per_sentence || fo.max_error >= 0))
            bad = "--param, --source, --linearized, --per-sentence and --max-error are for "
                  "--metric f1";
        else if (metric == MET_F1 && (nrefs > 1 || bo.lowercase))
            bad = "--metric f1 takes one -r (the gold trees) and no --lowercase";
        else if (fo.source && fo.linearized)
            bad = "--source and --linearized exclude each other";
        else if ((fo.keep_tags || fo.root) && !fo.source && !fo.linearized)
            bad = "--keep-tags and --root are for --linearize, --restore or --metric f1 with "
                  "--source or --linearized";
        else if (lo.keep_function_tags)
            bad = "--keep-function-tags is for --linearize";
    } else if (nrefs || metric != MET_BLEU || json) {
        bad = "--linearize and --restore take no -r, --metric or --json";
    } else if (mode == MODE_RESTORE && !fo.source) {
        bad = "--restore needs --source FILE";
    } else if (mode == MODE_RESTORE && (lo.keep_tags || lo.keep_function_tags)) {
        bad = "--restore takes no --keep-tags or --keep-function-tags";
    } else if (mode == MODE_LINEARIZE && (fo.source || fo.root)) {
        bad = "--linearize takes no --source or --root";
    }
    if (bad) {
        free(refs);
        return tfm_cli_usage_error("%s", bad);
    }
    if (bo.tok == TFM_TOK_TOKENIZED && !smooth_set)
        bo.smooth = TFM_SMOOTH_NONE;    /* multi-bleu.perl */

    int rc;
    if (mode == MODE_LINEARIZE) {
        rc = run_linearize(in, &lo);
    } else if (mode == MODE_RESTORE) {
        rc = run_restore(in, fo.source, fo.root);
    } else {
        struct tfm_error err;
        struct text hyp = {0};
        struct text *rt = calloc((size_t)nrefs, sizeof *rt);
        rc = 0;
        if (!rt) {
            fprintf(stderr, PROG ": out of memory\n");
            rc = 1;
        }
        for (int r = 0; r < nrefs && rc == 0; r++)
            if (read_text_file(refs[r], &rt[r], &err) < 0) {
                fprintf(stderr, PROG ": %s\n", err.msg);
                rc = 1;
            }
        if (rc == 0 && read_hyps(in, &hyp, &err) < 0) {
            fprintf(stderr, PROG ": %s\n", err.msg);
            rc = 1;
        }
        if (rc == 0)
            rc = check_counts(&hyp, rt, nrefs);
        if (rc == 0) {
            if (metric == MET_BLEU)
                rc = run_bleu(&bo, &hyp, rt, nrefs, json);
            else if (metric == MET_CHRF)
                rc = run_chrf(&co, &hyp, rt, nrefs, json);
            else
                rc = run_f1(&fo, &hyp, &rt[0], json);
        }
        for (int r = 0; rt && r < nrefs; r++)
            text_free(&rt[r]);
        free(rt);
        text_free(&hyp);
    }
    free(refs);
    return tfm_cli_close_stdout(0) ? 1 : rc;
}
