/* evalb.h: bracket scoring as EVALB (Sekine & Collins 1997, with Ellis' 2006 quote fix).
 *
 * Our own implementation of EVALB's documented rules (its README, [6] and [7]), checked
 * against EVALB's own output files (data/evalb-fixtures):
 *   - gold and test are read as EVALB reads a line: a "(TAG word)" is a terminal, every
 *     other bracket a constituent spanning the terminals it covers; terminals whose tag is
 *     a DELETE_LABEL are removed (the word with them); the sentence length counts every
 *     terminal whose tag is not a DELETE_LABEL_FOR_LENGTH (gold side);
 *   - a test sentence without terminals is skipped (status 2); when the terminal counts
 *     differ, terminals tagged QUOTE_LABEL (with word ' " or /) that one side deleted and
 *     the other kept at the same place are put back (the 2006 fix); if the counts still
 *     differ, or any word differs (EQ_WORD pairs are equal), the sentence is an error
 *     (status 1) and counts for nothing but the error count;
 *   - constituents covering no terminal, and those whose label (function tags cut at the
 *     first '-' or '=') is a DELETE_LABEL, are not counted; each gold constituent matches
 *     at most one unmatched test constituent of the same span and (LABELED 1) label,
 *     EQ_LABEL pairs being equal;
 *   - crossing: test constituents that cross some gold constituent; tagging: terminals
 *     whose tags are equal;
 *   - totals are micro-averaged over valid sentences; a second set for sentences of
 *     length <= CUTOFF_LEN; F = 2PR/(P+R).
 * The report is EVALB's (the per-sentence table and the === Summary === block, with the
 * FMeasure lines of the 2006 version).  Two columns follow the EVALB builds that wrote
 * the reference files sample.rsl and bug.rsl-new, where the 2021 evalb.c source differs:
 * an error or skip row shows the gold word count in "Words" (the source prints 0), and
 * the totals row shows the number of sentences without crossing in "Cross Bracket" (the
 * source prints the sum of crossings; "Average crossing" is the same in both).
 *
 * Not here: reading trees (tree.h), the scoring loop (score.h).
 */
#ifndef TFM_EVALB_H
#define TFM_EVALB_H

#include <stdint.h>
#include <stdio.h>

#include "error.h"
#include "tree.h"

struct tfm_evalb_params {
    int labeled;            /* LABELED (default 1) */
    int cutoff_len;         /* CUTOFF_LEN (default 40) */
    int max_error;          /* MAX_ERROR (default 10) */
    int ndelete, ndelete_len, nquote, neq_label, neq_word;
    char **delete_label;            /* DELETE_LABEL */
    char **delete_len;              /* DELETE_LABEL_FOR_LENGTH */
    char **quote_label;             /* QUOTE_LABEL */
    char **eq_label;                /* EQ_LABEL pairs: [2k], [2k+1] */
    char **eq_word;                 /* EQ_WORD pairs */
    char name[128];                 /* "COLLINS" or the file's base name without .prm, quoted
                                     * (tfm_quote: cut with "..." past 124 bytes) */
};

/* EVALB's defaults without a parameter file (nothing deleted, LABELED 1, 40, 10). */
void tfm_evalb_params_init(struct tfm_evalb_params *p);
/* COLLINS.prm, built in (what tfm-score uses without --param). */
int tfm_evalb_params_collins(struct tfm_evalb_params *p, struct tfm_error *err);
/* Read a .prm file on top of p (initialized: tfm_evalb_params_init for EVALB's defaults): "KEY value" lines, '#' comments, lines shorter
 * than 3 characters ignored, as EVALB.  DEBUG is accepted and ignored.  An unknown key or
 * a malformed value is an error naming the line. */
int tfm_evalb_params_load(struct tfm_evalb_params *p, const char *path, struct tfm_error *err);
/* The same for the text of a parameter file (len bytes) named name in messages.  Bytes of
 * the input quoted in a message are escaped (tfm_quote, lines.h). */
int tfm_evalb_params_parse(struct tfm_evalb_params *p, const char *text, size_t len,
                           const char *name, struct tfm_error *err);
void tfm_evalb_params_free(struct tfm_evalb_params *p);

enum { TFM_EVALB_OK = 0, TFM_EVALB_ERROR = 1, TFM_EVALB_SKIP = 2 };

struct tfm_evalb_sent {
    int64_t id;             /* 1-based line number */
    int len;                /* gold length (DELETE_LABEL_FOR_LENGTH) */
    int status;
    int matched, gold, test, crossing, words, correct_tags;
    char reason[256];       /* for status 1: "length mismatch (33|35)" ... */
};

struct tfm_evalb_totals {
    int64_t sentences, errors, skipped;
    int64_t matched, gold, test, words, correct_tags;
    int64_t crossing, no_crossing, two_or_less, complete;
};

struct tfm_evalb {
    struct tfm_evalb_params p;      /* owned copy */
    struct tfm_evalb_totals all, cut;
};

/* Start scoring with a copy of p (the copy is freed by tfm_evalb_free). */
int tfm_evalb_init(struct tfm_evalb *e, const struct tfm_evalb_params *p,
                   struct tfm_error *err);
void tfm_evalb_free(struct tfm_evalb *e);

/* Score one sentence (test == NULL: the test line could not be read, an error sentence
 * with reason given) and add it to the totals.  -1 only when out of memory. */
int tfm_evalb_add(struct tfm_evalb *e, int64_t id, const struct tfm_tree *gold,
                  const struct tfm_tree *test, const char *reason, struct tfm_evalb_sent *s,
                  struct tfm_error *err);

/* Has the error count gone past MAX_ERROR as EVALB counts (it gives up on the error that
 * finds more than MAX_ERROR before it)? */
int tfm_evalb_too_many_errors(const struct tfm_evalb *e);

/* Recall, precision and F (percent) of totals; F is NaN when P + R is 0 (as EVALB). */
void tfm_evalb_prf(const struct tfm_evalb_totals *t, double *r, double *p, double *f);

/* EVALB's report: the header, one row per sentence (rows[0..n)), the totals row and the
 * summary. */
void tfm_evalb_print_header(FILE *f);
void tfm_evalb_print_row(FILE *f, const struct tfm_evalb_sent *s);
void tfm_evalb_print_summary(FILE *f, const struct tfm_evalb *e);

/* ---- the scorer (score.h): tfm-score --metric f1 ------------------------------------ */

struct tfm_f1_opts {
    const char *param;      /* EVALB parameter file; NULL: COLLINS.prm, built in */
    const char *source;     /* test lines are linearized trees (tree.h): restore them with
                             * the words of this file, one sentence a line */
    int linearized;         /* test lines are linearized: the words from the gold trees */
    int per_sentence;       /* EVALB's whole report; in JSON, a per_sentence array */
    int max_error;          /* < 0: the parameter file's MAX_ERROR */
    int keep_tags;          /* restored trees: only XX preterminals take the gold tags */
    const char *root;       /* restored trees: the label of a root restoration opens */
};

/* EVALB bracket scoring of test trees (the hypotheses) against gold trees (the one
 * reference), restored first with tfm_tree_restore_like when fo says they are
 * linearized.  A malformed gold tree fails the run ("GOLD: line N: ..."); a malformed or
 * mismatched test tree is an error sentence, warned about ("TEST: line N: reason"), and
 * more than MAX_ERROR of them fail the run.  The report: "F1 = ... P = ... R = ..." for
 * all sentences and for those up to CUTOFF_LEN, and a signature line; with per_sentence,
 * EVALB's report; with so->json, one object. */
struct tfm_score_opts;
struct tfm_scorer *tfm_evalb_scorer(const struct tfm_f1_opts *fo, const struct tfm_score_opts *so,
                                    struct tfm_error *err);

#endif
