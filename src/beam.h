/* beam.h: search for output sequences given a next-token model: beam search with the GNMT
 * length penalty, greedy search, n-best lists, and sampling (top-k, top-p, temperature).
 *
 * The search is written against an abstract step model (struct tfm_step_model) and knows
 * nothing of Transformers, tensors or streams: decode.c adapts the model's incremental
 * API to it, and the unit tests drive it with toy Markov chains whose best sequences are
 * found by brute force.  Many sentences are searched at once: every step asks the model
 * for the next-token log-probabilities of the live rows of all sentences in one call, and
 * rows of finished hypotheses and sentences leave the batch.
 *
 * Rules (the paper leaves them open; tfm-decode(1)):
 *  - The decoder's first input is bos; hypotheses Y are the tokens generated after it,
 *    ending in eos.  |Y| counts that eos.  A hypothesis scores
 *        log P(Y|X) / lp(|Y|),   lp(n) = ((5 + n) / 6)^alpha      (GNMT, Wu et al. 2016)
 *  - A sentence with maximum length L (tokens before eos; decode.c uses source length +
 *    max_len_b) gets eos forced after L tokens, so |Y| <= L + 1.
 *  - pad and bos are never generated; eos is not generated before min_len tokens (default
 *    1: no empty output), unless the maximum length forces it first.
 *  - Beam search (beam K >= 2, the rule of fairseq and CTranslate2): at each step, the 2K
 *    best extensions of the live hypotheses by log P are ranked; an extension ending in
 *    eos becomes finished only if it ranks among the first K (the nbest best finished by
 *    score are kept; an eos ranked below K is dropped), and the best K extensions not
 *    ending in eos stay live.  So short hypotheses finish only when they compete with the
 *    live ones, and do not crowd out longer, better ones.
 *  - Early termination: log-probs are <= 0, so a live hypothesis with log P = Lp and
 *    t tokens can at best finish with score Lp / max(lp(t+1), lp(L+1)) (for alpha >= 0
 *    that is Lp / lp(L+1)).  A sentence stops as soon as it has nbest finished hypotheses
 *    and the nbest-th best score is >= that bound for its best live hypothesis.  This
 *    never changes the result compared to running to the maximum length (tested).
 *  - Greedy (beam 1): the single best extension each step, eos included; stops at eos.
 *  - Sampling: nbest independent samples per sentence; each step draws from the model's
 *    distribution divided by the temperature, cut to the top-k tokens, then to the
 *    smallest set of top tokens whose probability reaches top-p.  The draw of sample j of
 *    sentence id s at step t depends only on (seed, s, j, t): results do not depend on
 *    batching.  Scores are the model's (untempered) log P normalized as above.
 *
 * Not here: the model, batching of sentences by length, output order (decode.c).
 */
#ifndef TFM_BEAM_H
#define TFM_BEAM_H

#include <stdint.h>

#include "error.h"

/* A model that, for a set of rows (partial hypotheses, each belonging to one source
 * sentence), gives the log-probabilities of the next token.  The search starts with one
 * row per sentence (row i = sentence i of the call) and an empty prefix. */
struct tfm_step_model {
    void *ctx;
    int vocab;
    /* Append last_tok[r] to row r's prefix (bos on the first call) and fill
     * logp (nrows, vocab) with log P(next token | source, prefix).  row_src[r] is the
     * sentence of row r (0-based in the call).  0, or -1 with err. */
    int (*step)(void *ctx, int nrows, const int32_t *last_tok, const int32_t *row_src,
                float *logp, struct tfm_error *err);
    /* Rearrange rows: new row i continues old row keep[i] (nrows new rows; an old row may
     * be kept several times or dropped).  0, or -1 with err. */
    int (*select)(void *ctx, int nrows, const int32_t *keep, struct tfm_error *err);
    /* Optional, used by beam and greedy search (not sampling) when set: the same step,
     * but instead of every log-probability, each row's k most probable tokens excluding
     * the ids in ban[0..nban) and -inf, best first, ties by smaller id (src/topk.h), into
     * top_lp/top_tok (nrows, k) (-inf and -1 where fewer qualify), and the
     * log-probability of token `also` into also_lp (nrows).  The search's results are
     * the same bits as with step. */
    int (*step_top)(void *ctx, int nrows, const int32_t *last_tok, const int32_t *row_src,
                    int k, const int32_t *ban, int nban, int32_t also, float *top_lp,
                    int32_t *top_tok, float *also_lp, struct tfm_error *err);
};

struct tfm_beam_opts {
    int beam;               /* K >= 1; 1 is greedy */
    double alpha;           /* length penalty exponent (0: plain log P) */
    int nbest;              /* hypotheses per sentence: 1..beam, or samples when sampling */
    int min_len;            /* tokens before eos at least (unless max_len is smaller) */
    int early_stop;         /* 1: stop a sentence as soon as its result is decided */
    int sample;             /* 1: sample instead of searching */
    int topk;               /* sampling: keep the k most probable tokens (0: all) */
    double topp;            /* sampling: nucleus mass in (0, 1] (1: all) */
    double temperature;     /* sampling: > 0 */
    uint64_t seed;          /* sampling */
    int32_t pad, bos, eos;  /* token ids (0, 2, 3) */
};

/* beam 4, alpha 0.6, nbest 1, min_len 1, early stop, no sampling, topk 0, topp 1, temperature 1,
 * seed 1, ids 0/2/3. */
void tfm_beam_defaults(struct tfm_beam_opts *o);
/* Check the options against the vocabulary size (message names the option). */
int tfm_beam_check(const struct tfm_beam_opts *o, int vocab, struct tfm_error *err);
/* GNMT length penalty ((5 + n) / 6)^alpha. */
double tfm_beam_lp(int n, double alpha);

/* The result: hypotheses of sentence 0 first, then sentence 1, ...; best first. */
struct tfm_hyps {
    int64_t n;              /* hypotheses */
    int64_t *offsets;       /* [n+1] */
    int32_t *ids;           /* [offsets[n]]: generated tokens, without bos and final eos */
    int32_t *sent;          /* [n] sentence of the call */
    float *score;           /* [n] log P / lp(|Y|) */
    double *logp;           /* [n] log P(Y|X), eos included */
};

void tfm_hyps_free(struct tfm_hyps *h);

/* Search nsent sentences; max_len[s] tokens at most before eos for sentence s;
 * sent_id[s] names sentence s for the sampler's random draws (NULL: s).
 * Fills out (freed with tfm_hyps_free, also after failure).  Every sentence gets at
 * least one hypothesis (an empty one scored -inf if the model allows no token at all).
 * 0, or -1 with err. */
int tfm_beam_search(const struct tfm_step_model *m, int nsent, const int *max_len,
                    const int64_t *sent_id, const struct tfm_beam_opts *o,
                    struct tfm_hyps *out, struct tfm_error *err);

#endif
