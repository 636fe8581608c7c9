/* tokenize.h: text <-> token streams, and training a SentencePiece model from text files.
 *
 * What tfm-tokenize does, as library calls: train (lines of several files -> one shared
 * model written atomically), encode (lines -> a "tokens" stream with the model embedded,
 * streamed chunk by chunk, optionally on several threads with output identical to one),
 * decode (a tokens or hypotheses stream, or text lines of ids, -> text or ids, read by
 * hypread.h).
 * Not here: SentencePiece itself (spm.h), the text input policy (lines.h), the record
 * layout (stream.h, corpus.h), telling streams from text and detokenizing (hypread.h).
 */
#ifndef TFM_TOKENIZE_H
#define TFM_TOKENIZE_H

#include <stdint.h>
#include <stdio.h>

#include "error.h"
#include "spm.h"

/* Train on files[0..nfiles) ("-": stdin) and write the model to model_path atomically
 * (a temporary file beside it, then rename).  *vocab gets the model's size. */
int tfm_tokenize_train(const char *const *files, int nfiles, const struct tfm_spm_train_opts *o,
                       const char *model_path, int *vocab, struct tfm_error *err);

struct tfm_encode_opts {
    int bos, eos;           /* add bos (2) before and eos (3) after every sentence */
    int threads;            /* encoding threads, >= 1 */
    int flags;              /* stream writer flags (TFM_DEFLATE) */
    const char *producer;   /* header "producer" value, or NULL */
    /* filled by tfm_tokenize_encode */
    int64_t sentences, tokens, unknown;
};

/* Encode the lines of in_path ("-" or NULL: stdin) into a tokens stream at out_path ("-"
 * or NULL: stdout).  The input is streamed (memory does not grow with it); on error a
 * file output is removed. */
int tfm_tokenize_encode(const struct tfm_spm *s, const char *in_path, const char *out_path,
                        struct tfm_encode_opts *o, struct tfm_error *err);

struct tfm_detok_opts {
    const struct tfm_spm *model;    /* needed for text input; a stream's own is used */
    const char *model_name;         /* its file, for messages */
    int ids;                        /* print the ids (as spm_encode --output_format=id) */
    /* filled by tfm_tokenize_decode: lines printed, their ids, unknown ids among them */
    int64_t sentences, tokens, unknown;
};

/* Decode in_path ("-" or NULL: stdin): a tokens or hypotheses stream (one output line per
 * sentence or hypothesis, in stream order), or text lines of space-separated ids.
 * Writes lines to out.  A stream that carries a vocabulary is decoded with it: o->model,
 * when given, must be that very model (byte for byte), else it is an error. */
int tfm_tokenize_decode(const char *in_path, FILE *out, struct tfm_detok_opts *o,
                        struct tfm_error *err);

#endif
