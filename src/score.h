/* score.h: what every metric of tfm-score is to the tool -- a scorer -- and the one loop
 * that feeds hypotheses and references to it.
 *
 * A scorer is a small table of functions behind an opaque state: start (once the input is
 * known: its name and number of sentences), add (one hypothesis and its references),
 * report (the corpus score as text or JSON, to the stream the options name).  BLEU
 * (bleu.h), chrF (chrf.h) and EVALB's bracket F1 (evalb.h) are scorers; a new metric is
 * one more file that fills in the table, and a constructor for the tool to call.
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
    void (*free)(struct tfm_scorer *s);
};

/* The part every scorer shares; a scorer's own state follows it in a larger struct. */
struct tfm_scorer {
    const struct tfm_scorer_ops *ops;
    struct tfm_score_opts o;
    int nrefs;
    /* set by tfm_score_run before start: for messages and per-corpus figures */
    const char *hyp_name, *ref_name;    /* the hypotheses and the first reference */
    int64_t sentences;                  /* the number of sentences to come */
    int64_t added;                      /* sentences added so far */
};

/* Score the lines of hyp against refs[0..s->nrefs): every reference must have as many
 * lines ("REF: 3003 lines, hypotheses have 3004"), then start, add each, report. */
int tfm_score_run(struct tfm_scorer *s, const struct tfm_text *hyp,
                  const struct tfm_text *refs, struct tfm_error *err);

void tfm_scorer_free(struct tfm_scorer *s);

/* For a scorer's constructor: the shared part, allocated size bytes (zeroed) with ops, a
 * copy of o and nrefs filled in; NULL when out of memory. */
struct tfm_scorer *tfm_scorer_alloc(size_t size, const struct tfm_scorer_ops *ops,
                                    const struct tfm_score_opts *o, int nrefs,
                                    struct tfm_error *err);

/* A warning through s->o.warn (printf-style); nothing when there is no callback. */
void tfm_scorer_warn(const struct tfm_scorer *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The fields of a sacreBLEU signature ("nrefs:1|case:mixed|...") as members
 * "nrefs": "1", "case": "mixed"... of the open JSON object. */
void tfm_score_json_signature(struct tfm_json *j, const char *sig);

#endif
