/* chrf.h: corpus chrF and chrF++ as sacreBLEU 2.x computes them (sacrebleu/metrics/chrf.py).
 *
 *   - each line is right-stripped (as sacreBLEU's command line reads it), lowercased when
 *     asked (Python's str.lower()); character n-grams (orders 1..char_order, default 6) are
 *     taken over code points after removing all whitespace (unless whitespace is set);
 *     word n-grams (orders 1..word_order, default 0; 2 gives chrF++) over the words of
 *     str.split(), one ASCII punctuation character split off the end, or else the start,
 *     of every word longer than one character.
 *   - per sentence and order: hypothesis n-grams (0 when the reference has none of that
 *     order), reference n-grams, and matches (counts clipped by the reference); with
 *     several references, the statistics of the reference with the best sentence score
 *     (the first on a tie).  Statistics are summed over the corpus.
 *   - score: the F-beta (beta 2) of the precision and recall averaged over the orders
 *     that have both hypothesis and reference n-grams (sacreBLEU's default, "eff:yes"),
 *     or with eps_smoothing the mean of the per-order F-beta (chrF++.py's, "eff:no").
 * Not here: BLEU (bleu.h, which also holds the shared text helpers).
 */
#ifndef TFM_CHRF_H
#define TFM_CHRF_H

#include <stddef.h>
#include <stdint.h>

#include "bleu.h"
#include "error.h"

#define TFM_CHRF_MAX_ORDER TFM_NGRAM_MAX

struct tfm_chrf_opts {
    int char_order;     /* 1..6, default 6 */
    int word_order;     /* 0..6, default 0; 2 is chrF++ */
    int beta;           /* default 2 */
    int lowercase;
    int whitespace;     /* keep whitespace inside character n-grams */
    int eps_smoothing;
};

void tfm_chrf_opts_default(struct tfm_chrf_opts *o);

struct tfm_chrf;

struct tfm_chrf *tfm_chrf_new(const struct tfm_chrf_opts *o, struct tfm_error *err);
void tfm_chrf_free(struct tfm_chrf *c);
int tfm_chrf_add(struct tfm_chrf *c, const char *hyp, size_t hyp_len, int nrefs,
                 const char *const *refs, const size_t *ref_lens, struct tfm_error *err);
/* Summed statistics: 3 per order (hyp, ref, match), char orders first, then word orders.
 * *n receives 3 * (char_order + word_order). */
const int64_t *tfm_chrf_stats(const struct tfm_chrf *c, int *n);
/* The score (0..100) of summed statistics st (3 * (char_order + word_order) values). */
double tfm_chrf_compute(const struct tfm_chrf_opts *o, const int64_t *st);
/* "chrF2", "chrF2++" (one '+' per word order), as sacreBLEU names it. */
int tfm_chrf_name(const struct tfm_chrf_opts *o, char *buf, size_t n);
/* "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:V" (nrefs < 0: "var"). */
int tfm_chrf_signature(const struct tfm_chrf_opts *o, int nrefs, const char *version,
                       char *buf, size_t n);

/* chrF with options o against nrefs references per sentence, as a scorer (score.h): a
 * failing sentence is "line N: reason"; the report is "chrF2 = 54.72" and the signature,
 * or with so->json an object (name, score, signature, its fields, the summed statistics,
 * the number of sentences). */
struct tfm_score_opts;
struct tfm_scorer *tfm_chrf_scorer(const struct tfm_chrf_opts *o, int nrefs,
                                   const struct tfm_score_opts *so, struct tfm_error *err);

#endif
