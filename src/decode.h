/* decode.h: translating a token (or batch) stream with one model or an ensemble.
 *
 * What tfm-decode does, as library calls: load the checkpoints (config, vocabulary,
 * parameters), read the source sentences, sort them by length and cut them into batches
 * under a budget, encode each batch once, run the search (beam.h) against the models'
 * incremental decoders (model.h; an ensemble averages the log-probabilities of its
 * members at each step), and write the hypotheses in input order, as a hypothesis stream
 * (corpus.h) or as detokenized text.
 *
 * Not here: the search itself (beam.c), the Transformer (model.c), the record layout
 * (stream.c, corpus.c), option parsing (bin/tfm-decode.c).
 */
#ifndef TFM_DECODE_H
#define TFM_DECODE_H

#include <stdint.h>

#include "beam.h"
#include "error.h"

#define TFM_DECODE_MAX_MODELS 64
#define TFM_DECODE_TOKENS 16384     /* default batch budget */

struct tfm_decode_stats {
    int64_t sentences;      /* input sentences */
    int64_t done;           /* sentences decoded so far */
    int64_t hyps;           /* hypotheses written */
    int64_t tokens;         /* output tokens (best hypotheses, eos excluded) */
    int64_t truncated;      /* sources cut to the model's max_len */
    int64_t batches;
    double seconds;         /* since the models were loaded */
    char device[2048];      /* which device decodes, and why (for the log) */
    int fallback;           /* device says a GPU is not used as asked: always logged */
};

struct tfm_decode_opts {
    struct tfm_beam_opts search;    /* beam, alpha, nbest, sampling... */
    int beam_given;                 /* 0: search.beam from the (first) model's config */
    int alpha_given;                /* 0: search.alpha from the config */
    int min_len_given;              /* 0: search.min_len from the config */
    int max_len_b;                  /* output <= source length + max_len_b; < 0: config */
    int text;                       /* write text lines instead of a hypothesis stream */
    int64_t tokens;                 /* batch budget (see tfm_decode_plan); 0: default */
    int threads;                    /* CPU backend threads; 0: online CPUs */
    const char *device;             /* "auto", "cpu", "cuda"; NULL: auto */
    const char *producer;           /* header "producer" of the output, or NULL */
    const char *attention;          /* also write the attention stream (attention.h) of
                                     * each sentence's best hypothesis under the first
                                     * model here ("-": stdout), or NULL */
    int attention_all;              /* with it the self-attention too */
    int tree;                       /* enum tfm_tree_mode (treecon.h): search only for
                                     * linearized trees over the source's words */
    /* called after each batch and once at the end (may be NULL) */
    void (*progress)(void *ctx, const struct tfm_decode_stats *st, int final);
    void *progress_ctx;
    struct tfm_decode_stats stats;  /* filled */
    int usage_error;                /* set when tfm_decode_run failed for the options'
                                     * sake (--nbest above the config's beam) */
};

/* Defaults: tfm_beam_defaults, values from the config, budget TFM_DECODE_TOKENS, auto. */
void tfm_decode_defaults(struct tfm_decode_opts *o);

/* Decode in_path ("-" or NULL: stdin) with the models paths[0..n) and write out_path
 * ("-" or NULL: stdout; a file appears whole or not at all).  0, or -1 with err naming
 * the file at fault. */
int tfm_decode_run(const char *const *paths, int n, const char *in_path, const char *out_path,
                   struct tfm_decode_opts *o, struct tfm_error *err);

struct tfm_model;

/* Translate B sources src (B,S) host, padded with 0, with model m as it is now (a
 * training model too: validation BLEU), one hypothesis each, in order: out gets the best
 * hypothesis of sentence b as its b-th (tfm_hyps_free).  Outputs have at most the source
 * length (without eos) + max_len_b tokens, and fewer than m's max_len.  o's nbest must
 * be 1; sampling is allowed.  0, or -1 with err. */
int tfm_decode_sources(struct tfm_model *m, int B, int S, const int32_t *src,
                       const struct tfm_beam_opts *o, int max_len_b, struct tfm_hyps *out,
                       struct tfm_error *err);

/* Batching, a pure function (exposed for tests).  Sentences of len[i] source tokens (eos
 * included) with out[i] decoder steps at most each are ordered longest first (ties in
 * input order) into order[0..n); batch b is order[first[b] .. first[b+1]).  A batch of k
 * sentences led by (len, steps) costs k * max(len, width * steps) token positions and
 * stays within budget, except that a batch always holds at least one sentence.
 * first has room for n + 1 entries; returns the number of batches, -1 on bad input. */
int64_t tfm_decode_plan(int64_t n, const int32_t *len, const int32_t *steps, int width,
                        int64_t budget, int64_t *order, int64_t *first);

#endif
