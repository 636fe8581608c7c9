/* bleu.h: corpus BLEU as sacreBLEU 2.x computes it, and the text handling it rests on.
 *
 * What sacreBLEU does, and so what this does (sacrebleu/metrics/bleu.py, tokenizers/):
 *   - each line is lowercased first when asked (Python's str.lower(), full Unicode case
 *     mapping with the Final_Sigma rule), then right-stripped of Unicode whitespace, then
 *     tokenized: "13a" (mteval-v13a: "<skipped>" removed, "-\n" joined, &quot; &amp; &lt;
 *     &gt; unescaped, the line padded with spaces, ASCII punctuation split off, period and
 *     comma split unless preceded/followed by a digit, dash split after a digit), "intl"
 *     (mteval-v14 international: punctuation \p{P} split unless between digits, symbols
 *     \p{S} split) or "none"; tokens are then what Python's str.split() gives.
 *   - n-grams of order 1..4 are counted per sentence; each hypothesis n-gram count is
 *     clipped by its largest count in any one reference; counts are summed over the corpus.
 *   - the reference length of a sentence is the length of the reference closest to the
 *     hypothesis length, the shorter one on a tie; the brevity penalty is
 *     exp(1 - ref_len / hyp_len) when hyp_len < ref_len.
 *   - smoothing "exp" (the default, mteval's): the k-th order with zero matches gets
 *     precision 100 / (2^k * total); "none": a zero precision makes BLEU 0; "floor" and
 *     "add-k" as in sacreBLEU.  No match at all gives 0 whatever the smoothing.
 * TFM_TOK_TOKENIZED is the paper's protocol instead (tensor2tensor's get_ende_bleu.sh):
 * text already tokenized (Moses tokenizer.perl), optionally compound-split
 * (s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g), split on ASCII whitespace and scored as Moses
 * multi-bleu.perl does (ASCII-only lowercasing, no smoothing).
 *
 * Not here: chrF (chrf.h), reading files and streams (text.h, hypread.h), the scoring loop
 * (score.h).  Library code: errors in struct tfm_error; the scorer's report goes to the
 * stream its options name.
 */
#ifndef TFM_BLEU_H
#define TFM_BLEU_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define TFM_BLEU_ORDER 4

enum tfm_bleu_tok {
    TFM_TOK_13A = 1,
    TFM_TOK_INTL,
    TFM_TOK_NONE,
    TFM_TOK_TOKENIZED,  /* pre-tokenized, ASCII whitespace, multi-bleu.perl conventions */
};

enum tfm_bleu_smooth {
    TFM_SMOOTH_EXP = 1,
    TFM_SMOOTH_NONE,
    TFM_SMOOTH_FLOOR,   /* smooth_value (default 0.1) / total for zero-match orders */
    TFM_SMOOTH_ADDK,    /* smooth_value (default 1) added to correct and total, n > 1 */
};

struct tfm_bleu_opts {
    int tok;             /* enum tfm_bleu_tok */
    int lowercase;
    int compound_split;  /* only with TFM_TOK_TOKENIZED */
    int smooth;          /* enum tfm_bleu_smooth */
    double smooth_value; /* < 0: the method's default */
};

/* Defaults: 13a, case-sensitive, exp smoothing (sacreBLEU's defaults). */
void tfm_bleu_opts_default(struct tfm_bleu_opts *o);
/* "13a", "intl", "none", "tokenized"... -> enum, or 0. */
int tfm_bleu_tok_parse(const char *s);
int tfm_bleu_smooth_parse(const char *s);

/* A sentence as tokens: token i is buf[off[i] .. off[i+1]) (not NUL-terminated). */
struct tfm_tokens {
    char *buf;
    size_t len, cap;
    int64_t *off;       /* [n+1] */
    int64_t n, cap_n;
};
void tfm_tokens_free(struct tfm_tokens *t);

/* Preprocess and tokenize one line (UTF-8, len bytes, no newline) as BLEU does with o.
 * Fails only on invalid UTF-8 (message "invalid UTF-8 at byte N") or out of memory. */
int tfm_bleu_tokenize(const struct tfm_bleu_opts *o, const char *line, size_t len,
                      struct tfm_tokens *out, struct tfm_error *err);

/* Corpus statistics (sums over sentences). */
struct tfm_bleu_stats {
    int64_t sentences;
    int64_t hyp_len, ref_len;
    int64_t correct[TFM_BLEU_ORDER], total[TFM_BLEU_ORDER];
};

struct tfm_bleu_score {
    double score;                       /* 0..100 */
    double precisions[TFM_BLEU_ORDER];  /* percent */
    double bp, ratio;
    int64_t hyp_len, ref_len;
    int64_t correct[TFM_BLEU_ORDER], total[TFM_BLEU_ORDER];
};

struct tfm_bleu;

struct tfm_bleu *tfm_bleu_new(const struct tfm_bleu_opts *o, struct tfm_error *err);
void tfm_bleu_free(struct tfm_bleu *b);
/* Add one sentence: the hypothesis and its nrefs >= 1 references (UTF-8 lines). */
int tfm_bleu_add(struct tfm_bleu *b, const char *hyp, size_t hyp_len, int nrefs,
                 const char *const *refs, const size_t *ref_lens, struct tfm_error *err);
const struct tfm_bleu_stats *tfm_bleu_stats(const struct tfm_bleu *b);
/* The score of summed statistics, as sacreBLEU's BLEU.compute_bleu. */
void tfm_bleu_compute(const struct tfm_bleu_stats *st, const struct tfm_bleu_opts *o,
                      struct tfm_bleu_score *s);
/* The score of statistics summed in float32 ({hyp_len, ref_len, correct[4], total[4]}),
 * as sacreBLEU's compute_bleu scores its bootstrap resamples (bootstrap.h): the
 * precisions in float32. */
double tfm_bleu_score_f32(const float *st, const struct tfm_bleu_opts *o);
/* "BLEU = 22.67 54.4/28.7/16.9/10.3 (BP = 0.985 ratio = 0.985 hyp_len = 60395
 * ref_len = 61287)" without newline, as sacreBLEU's str(BLEUScore) with width 2. */
int tfm_bleu_format(const struct tfm_bleu_score *s, char *buf, size_t n);
/* The verbose part alone (what follows the score), sacreBLEU's "verbose_score". */
int tfm_bleu_format_verbose(const struct tfm_bleu_score *s, char *buf, size_t n);
/* sacreBLEU 2's signature "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:V";
 * nrefs < 0 prints "var".  The tok value for TFM_TOK_TOKENIZED is "tokenized", or
 * "tokenized+atat" with compound splitting (not sacreBLEU names: sacreBLEU has none). */
int tfm_bleu_signature(const struct tfm_bleu_opts *o, int nrefs, const char *version,
                       char *buf, size_t n);

/* BLEU with options o against nrefs references per sentence, as a scorer (score.h): a
 * failing sentence is "line N: reason"; the report is tfm_bleu_format's line and the
 * signature, or with so->json an object as sacreBLEU's --format json (name, score,
 * signature, verbose_score, the signature's fields, precisions, counts, totals, bp,
 * ratio, hyp_len, ref_len) and the number of sentences. */
struct tfm_score_opts;
struct tfm_scorer *tfm_bleu_scorer(const struct tfm_bleu_opts *o, int nrefs,
                                   const struct tfm_score_opts *so, struct tfm_error *err);

/* ---- text helpers shared with chrf.c ---------------------------------------------- */

/* Decode UTF-8 (strict: no overlongs, surrogates or values past U+10FFFF) into
 * (*cps, *cap) realloc'd; returns the number of code points, -1 on error. */
int64_t tfm_utf8_decode(const char *s, size_t len, uint32_t **cps, size_t *cap,
                        struct tfm_error *err);
/* Append the UTF-8 of code point c to buf (at most 4 bytes); returns bytes written. */
int tfm_utf8_put(char *buf, uint32_t c);
/* Python's str.lower() of cps[0..n) into (*out, *cap); returns the new length or -1. */
int64_t tfm_text_lower(const uint32_t *cps, int64_t n, uint32_t **out, size_t *cap,
                       struct tfm_error *err);
/* Python's str.rstrip(): the length without trailing Unicode whitespace. */
int64_t tfm_text_rstrip(const uint32_t *cps, int64_t n);

/* An n-gram counter: keys are up to TFM_NGRAM_MAX 32-bit values. */
#define TFM_NGRAM_MAX 6
struct tfm_ngram_entry {
    uint32_t key[TFM_NGRAM_MAX];
    int32_t n;          /* 0: empty slot */
    int64_t count;
};
struct tfm_ngrams {
    struct tfm_ngram_entry *e;
    size_t cap, used;   /* cap is 0 or a power of two */
};
void tfm_ngrams_clear(struct tfm_ngrams *t);
void tfm_ngrams_free(struct tfm_ngrams *t);
/* Add inc to key's count (mode 0) or set it to max(count, inc) (mode 1). */
int tfm_ngrams_put(struct tfm_ngrams *t, const uint32_t *key, int n, int64_t inc, int mode,
                   struct tfm_error *err);
int64_t tfm_ngrams_get(const struct tfm_ngrams *t, const uint32_t *key, int n);

/* Interning of byte strings to dense ids (per sentence). */
struct tfm_intern {
    int64_t *slot;      /* [cap] index into ids, -1 empty */
    size_t cap;
    const char **str;   /* [n] */
    size_t *len;
    int64_t n, cap_n;
};
void tfm_intern_clear(struct tfm_intern *t);
void tfm_intern_free(struct tfm_intern *t);
/* The id of s (a new one when unseen); s must stay valid until the next clear. */
int64_t tfm_intern_id(struct tfm_intern *t, const char *s, size_t len, struct tfm_error *err);

#endif
