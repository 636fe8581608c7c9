/* hypread.h: sentences as text, wherever they come from -- the one reader of hypotheses.
 *
 * tfm-score, tfm-tokenize decode and tfm-decode --text all turn token ids into text; this
 * is where they do it.  An input is either
 *   - a tfm stream (told by its magic bytes) of kind "tokens" or "hypotheses" (corpus.h),
 *     detokenized with its embedded SentencePiece model, or with a given model that must
 *     be that very model (byte for byte): data is never decoded with another vocabulary;
 *   - or text: lines that are the sentences themselves, or (TFM_HYP_TEXT_IDS) lines of
 *     space-separated token ids as spm_encode --output_format=id writes them.
 * Each sentence is handed to a callback, in stream (or line) order; with TFM_HYP_BEST only
 * the first hypothesis of each input sentence (n-best lists repeat a hyp.index, best
 * first), in input order, and every input sentence must have one.
 * Not here: the record layout (corpus.h), SentencePiece (spm.h), the text input policy
 * (lines.h), what the caller does with the lines.
 */
#ifndef TFM_HYPREAD_H
#define TFM_HYPREAD_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct tfm_corpus;
struct tfm_spm;
struct tfm_text;

/* One sentence as read. */
struct tfm_hyp {
    int64_t n;              /* its place in the input, from 0 (stream entry or line) */
    int64_t index;          /* hyp.index: the input sentence it translates (else n) */
    float score;            /* hyp.score (else 0) */
    const int32_t *ids;     /* the tokens (NULL for a line of text) */
    int64_t nids;
    const char *text;       /* the text, NUL-terminated; NULL with TFM_HYP_IDS, unless the
                             * input is lines of text, which come as they are.  Decoded
                             * text is one line (tfm_hyp_decode_line) */
    size_t len;
};

/* Called for every sentence; a failure (-1 with err) stops the reading, and err is
 * passed on as it is. */
typedef int (*tfm_hyp_fn)(void *ctx, const struct tfm_hyp *h, struct tfm_error *err);

enum {
    TFM_HYP_BEST = 1,       /* the first hypothesis of each hyp.index only, in its order */
    TFM_HYP_IDS = 2,        /* ids only, no text: no model is needed for a stream */
    TFM_HYP_TEXT_IDS = 4,   /* text input is lines of token ids (needs a model) */
};

struct tfm_hyp_opts {
    int flags;                      /* TFM_HYP_* */
    const struct tfm_spm *model;    /* NULL: the stream's own */
    const char *model_name;         /* its file, for messages */
    const char *model_option;       /* how a user gives a model ("-m MODEL"), for
                                     * messages; NULL: there is no way */
};

/* Read path ("-" or NULL: stdin, "<stdin>" in messages) and call fn for each sentence.
 * Errors name the input: "FILE: line 3: ...", "FILE: record 2 ...". */
int tfm_hypread(const char *path, const struct tfm_hyp_opts *o, tfm_hyp_fn fn, void *ctx,
                struct tfm_error *err);

/* The same for the sentences of a corpus in memory, detokenized with s (may be NULL with
 * TFM_HYP_IDS); TFM_HYP_TEXT_IDS means nothing here.  name, when not NULL, is put in
 * front of a failure to detokenize: "NAME: hypothesis 12: ...". */
int tfm_hypread_corpus(const struct tfm_corpus *c, const struct tfm_spm *s, int flags,
                       const char *name, tfm_hyp_fn fn, void *ctx, struct tfm_error *err);

/* ids[0..n) as text on one line: SentencePiece's decoding, with every control character
 * (C0 but tab, DEL, C1) and the separators U+2028 and U+2029 replaced by U+FFFD.  A
 * byte-fallback piece decodes to any byte it names, and a newline, a carriage return or a
 * NUL would split or cut the line that must hold the sentence.  (*text, *cap) as
 * tfm_spm_decode; the length, or -1 with err. */
int64_t tfm_hyp_decode_line(const struct tfm_spm *s, const int32_t *ids, int64_t n, char **text,
                            size_t *cap, struct tfm_error *err);

/* Hypotheses to score: the best of each input sentence from a stream, or text lines,
 * appended to t, which is named after the input. */
int tfm_hypread_text(const char *path, struct tfm_text *t, struct tfm_error *err);

#endif
