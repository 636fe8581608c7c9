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
};

struct tfm_scorer;

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
