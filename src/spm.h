/* spm.h: the C API over SentencePiece (Debian's libsentencepiece, C++), the only door to it.
 *
 * A struct tfm_spm is a loaded SentencePiece model plus the serialized ModelProto bytes
 * it was loaded from (what streams embed).  Every model tfm loads must have the fixed tfm
 * ids pad=0, unk=1, bos=2, eos=3 (TFM_PAD_ID ...): the model code assumes them, so a model
 * with other ids is refused at load time with a message naming its ids.  Training returns
 * the serialized model; writing it to a file is the caller's business.
 *
 * Not here: reading text files, stream records, threads (see tokenize.h).  Encoding and
 * decoding are const and may be called from several threads on one model.
 * Implementation in spm.cc (C++17); nothing C++ leaks out.
 */
#ifndef TFM_SPM_H
#define TFM_SPM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {   /* error.h has no guard of its own */
#endif

#include "error.h"

/* The least character coverage SentencePiece's trainer accepts (its trainer spec check:
 * [0.98, 1]); below it, training fails with nothing but the check's text. */
#define TFM_SPM_COVERAGE_MIN 0.98

/* The token ids of every SentencePiece model tfm uses. */
#define TFM_PAD_ID 0
#define TFM_UNK_ID 1
#define TFM_BOS_ID 2
#define TFM_EOS_ID 3

struct tfm_spm;

/* Load a serialized ModelProto (the bytes of a .model file). */
struct tfm_spm *tfm_spm_load(const void *proto, size_t n, struct tfm_error *err);
/* A .model file, or a tfm stream with an embedded model (tokens, checkpoint...); read
 * once from the front, so a pipe or a FIFO works as well; path "-" is standard input. */
struct tfm_spm *tfm_spm_load_file(const char *path, struct tfm_error *err);
void tfm_spm_free(struct tfm_spm *s);
int tfm_spm_vocab_size(const struct tfm_spm *s);
/* The pieces of a serialized ModelProto (a stream header's embedded one), loaded only to
 * count them; -1 with err when it does not load. */
int tfm_spm_proto_vocab_size(const void *proto, size_t n, struct tfm_error *err);
/* The serialized model (what tfm_header_set_spm embeds); valid while s lives. */
const void *tfm_spm_proto(const struct tfm_spm *s, size_t *n);
/* The piece of an id ("<pad>", "▁the"...), or NULL when id is outside the vocabulary. */
const char *tfm_spm_piece(const struct tfm_spm *s, int id);

/* encode: the ids of text (UTF-8, len bytes) into (*ids)[0..n), the buffer (*ids, *cap
 * elements) grown with realloc as needed; returns n, -1 on error.  No bos/eos added. */
int64_t tfm_spm_encode(const struct tfm_spm *s, const char *text, size_t len,
                       int32_t **ids, int64_t *cap, struct tfm_error *err);
/* decode: UTF-8 text (NUL-terminated) into (*out, *cap) realloc'd; pad/bos/eos ignored;
 * an unknown id gives " ⁇ " as in spm_decode; an id outside the vocabulary is an error.
 * Returns length, -1 on error. */
int64_t tfm_spm_decode(const struct tfm_spm *s, const int32_t *ids, int64_t n,
                       char **out, size_t *cap, struct tfm_error *err);

/* Training.  Sentences come from a callback: it returns 1 with a line in (*line, *len)
 * (valid until the next call), 0 at the end, -1 with err filled (the trainer stops and
 * tfm_spm_train returns that message).  With max_sentences, every line is read first and
 * a sample of them, drawn with tfm_rng_below (util.h), held in memory for the trainer:
 * SentencePiece's own sampler does not follow a seed. */
typedef int (*tfm_spm_next_fn)(void *ctx, const char **line, size_t *len,
                               struct tfm_error *err);

struct tfm_spm_train_opts {
    const char *type;           /* "bpe" or "unigram" */
    int vocab_size;             /* pieces, the four special ones included */
    double coverage;            /* character_coverage, [TFM_SPM_COVERAGE_MIN, 1] */
    int64_t max_sentences;      /* train on a uniform sample of this many lines; 0: all */
    unsigned seed;              /* of that sample: the same lines and seed, the same one */
    int threads;                /* trainer threads, >= 1 */
    int verbose;                /* let the trainer log on stderr */
    int noptions;               /* extra trainer options, "key=value" as spm_train's flags */
    const char *const *options;
};

/* Defaults: bpe, 8000, 0.9995, all sentences, seed 1, 1 thread, quiet. */
void tfm_spm_train_defaults(struct tfm_spm_train_opts *o);
/* The longest line the trainer takes (max_sentence_length, 4192 bytes unless an option
 * says otherwise); longer lines, and empty ones, are left out of training. */
size_t tfm_spm_train_max_line(const struct tfm_spm_train_opts *o);
/* Is "key=value" acceptable as an extra trainer option?  Refuses keys tfm fixes (the ids,
 * input, model_prefix...) and those with their own flag, and what the trainer itself
 * refuses, tried on an empty input: a key it does not know, a value it cannot parse or
 * out of its range.  0, or -1 with a message. */
int tfm_spm_train_option_check(const char *kv, struct tfm_error *err);
/* Train; on success *proto (malloc'd, free() it) holds the serialized model. */
int tfm_spm_train(const struct tfm_spm_train_opts *o, tfm_spm_next_fn next, void *ctx,
                  void **proto, size_t *n, struct tfm_error *err);

#ifdef __cplusplus
}
#endif

#endif
