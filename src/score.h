/* score.h: what every metric of tfm-score is to the tool -- a scorer -- and the one loop
 * that feeds hypotheses and references to it.
 *
 * A scorer is a small table of functions over a metric's own state: start (once the
 * input is known: its name and number of sentences), add (one hypothesis and its
 * references), report (the corpus score as text or JSON, to the stream the options
 * name).  BLEU (bleu.h), chrF (chrf.h) and EVALB's bracket F1 (evalb.h) are scorers; a
 * new metric is one more file that fills in the table, and a constructor for the tool to
 * call.
 *
 * Messages: a failure to add a sentence names it ("line 12: ..." or "FILE: line 12: ...");
 * a sentence that is scored as an error rather than failing the run (EVALB's error
 * sentences) goes to the warn callback, when there is one.
 * Not here: how files are read (text.h, hypread.h), the metrics themselves.
 */
#ifndef TFM_SCORE_H
#define TFM_SCORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"

struct tfm_json;
struct tfm_text;

struct tfm_score_opts {
    FILE *out;              /* the report (and rows a scorer prints per sentence) */
    int json;               /* the report as one JSON object */
    const char *version;    /* in signatures: "tfm-0.1.0" */
    void (*warn)(void *ctx, const char *msg);   /* NULL: no warnings */
    void *warn_ctx;
    int bootstrap;          /* resamples for a 95% confidence interval (bootstrap.h), 0: none */
    uint64_t seed;          /* their seed (sacreBLEU's is 12345) */
    int keep_rows;          /* keep each sentence's statistics: for tfm_score_paired */
};

struct tfm_scorer;

/* What a paired test needs of one system's scorer (ops->paired fills it in). */
struct tfm_score_rows {
    const float *rows;      /* each sentence's statistics, rows[sentences][width] */
    int width;
    double score;           /* the corpus score, as reported */
    /* the score of summed statistics: of float32 sums, as sacreBLEU scores a bootstrap
     * resample; of int64 sums, as it scores an approximate randomization trial */
    double (*score_f32)(const float *sum, const void *ctx);
    double (*score_i64)(const int64_t *sum, const void *ctx);
    const void *ctx;
    const char *name;       /* "BLEU" */
    char sig[256];          /* the signature ("nrefs:1|case:mixed|...") */
};

struct tfm_scorer_ops {
    /* once, before the first sentence (may be NULL): files the metric reads itself, the
     * header of a per-sentence report */
    int (*start)(struct tfm_scorer *s, struct tfm_error *err);
    /* sentence i (from 0): the hypothesis and s->nrefs references */
    int (*add)(struct tfm_scorer *s, int64_t i, const char *hyp, size_t hyp_len,
               const char *const *refs, const size_t *ref_lens, struct tfm_error *err);
    /* the corpus score, to s->o.out */
    int (*report)(struct tfm_scorer *s, struct tfm_error *err);
    void (*free)(void *metric);
    /* (may be NULL: no paired test) the statistics of the sentences added, kept when
     * o.keep_rows, and the scores of their sums */
    int (*paired)(const struct tfm_scorer *s, struct tfm_score_rows *out,
                  struct tfm_error *err);
};

struct tfm_scorer {
    const struct tfm_scorer_ops *ops;
    void *metric;                       /* the metric's own state */
    struct tfm_score_opts o;
    int nrefs;
    /* set by tfm_score_run before start: for messages and per-corpus figures */
    const char *hyp_name, *ref_name;    /* the hypotheses and the first reference */
    int64_t sentences;                  /* the number of sentences to come */
    int64_t added;                      /* sentences added so far */
};

/* For a metric's constructor: a scorer of metric (owned from now on: freed by ops->free
 * with the scorer, or at once when this fails) with a copy of o; NULL when out of
 * memory. */
struct tfm_scorer *tfm_scorer_new(const struct tfm_scorer_ops *ops, void *metric,
                                  const struct tfm_score_opts *o, int nrefs,
                                  struct tfm_error *err);
void tfm_scorer_free(struct tfm_scorer *s);

/* Score the lines of hyp against refs[0..s->nrefs): every reference must have as many
 * lines ("REF: 3003 lines, hypotheses have 3004"), then start, add each, report.  A
 * scorer scores one corpus: once per scorer. */
int tfm_score_run(struct tfm_scorer *s, const struct tfm_text *hyp,
                  const struct tfm_text *refs, struct tfm_error *err);
/* The same without the report: the sentences added, for tfm_score_paired. */
int tfm_score_collect(struct tfm_scorer *s, const struct tfm_text *hyp,
                      const struct tfm_text *refs, struct tfm_error *err);

/* Paired significance tests of systems sys[1..nsys) against the baseline sys[0], as
 * sacreBLEU's --paired-bs and --paired-ar (bootstrap.h): each scorer has collected the
 * same sentences with o.keep_rows.  samples: resamples (bs) or trials (ar).  The report,
 * to sys[0]->o.out: a line a system,
 *   "Baseline: NAME  BLEU = 26.33 (μ = 26.32 ± 0.66)"
 *   "NAME            BLEU = 16.60 (μ = 16.57 ± 0.52) (p = 0.0010)*"
 * (the mean and interval only for bs; * where p <= 0.05), then the signature with
 * "bs:N|seed:S" or "ar:N|seed:S" after nrefs.  With o.json, sacreBLEU's JSON list:
 * {"system", METRIC: {"score", "p_value", "mean", "ci", "signature"}} a system. */
enum { TFM_PAIRED_BS = 1, TFM_PAIRED_AR };
int tfm_score_paired(struct tfm_scorer *const *sys, const char *const *names, int nsys,
                     int test, int samples, uint64_t seed, struct tfm_error *err);

/* sig with "KEY:N|seed:S|" after its first field, as sacreBLEU's signature of a
 * bootstrap ("bs") or approximate randomization ("ar"). */
void tfm_score_signature_seeded(char *sig, size_t n, const char *key, int samples,
                                uint64_t seed);

/* The report of a sacreBLEU metric: "LINE\nSIGNATURE\n", or with s->o.json the start of
 * its JSON object -- name, score, signature, verbose_score (when not NULL), and the
 * fields of the signature ("nrefs:1|case:mixed|...") as "nrefs": "1", "case": "mixed"...
 * -- in j, for the metric to add its figures and close.  Returns s->o.json. */
int tfm_score_sacrebleu_report(const struct tfm_scorer *s, struct tfm_json *j,
                               const char *line, const char *name, double score,
                               const char *sig, const char *verbose);
/* The same with a bootstrap's mean and half-width (conf[0], conf[1]; conf NULL: none):
 * "confidence_mean", "confidence_var" (sacreBLEU's name for the half-width) and
 * "confidence" ("μ = 29.86 ± 1.62") after the signature, as sacreBLEU puts them. */
int tfm_score_sacrebleu_report_ci(const struct tfm_scorer *s, struct tfm_json *j,
                                  const char *line, const char *name, double score,
                                  const char *sig, const char *verbose, const double *conf);

#endif
