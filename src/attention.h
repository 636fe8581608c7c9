/* attention.h: the attention stream (kind "attention", man/tfm.5): for each translated
 * sentence, the attention weights of the model under its chosen output, per layer and
 * head, with the source and target ids and pieces to label them.
 *
 * A sentence is one group of records, in this order:
 *     "attn.index"   i64 [1]        input sentence number (0-based, as hyp.index)
 *     "attn.src"     i32 [S]        the source as the model read it, eos included
 *     "attn.tgt"     i32 [T]        the hypothesis and its eos
 *     "attn.pieces"  u8  [n]        the S source then the T target pieces, each followed
 *                                   by a newline (control bytes in a piece become '?')
 *     "attn.cross"   f32 [N,H,T,S]  encoder-decoder attention: layer, head, target
 *                                   position (the query that predicts tgt[t]), source key
 *     "attn.enc"     f32 [N,H,S,S]  encoder self-attention       (all = 1 only)
 *     "attn.dec"     f32 [N,H,T,T]  decoder self-attention, causal (all = 1 only)
 * One group a sentence, not chunks as token streams have: a sentence's weights are a
 * tensor of its own shape, whose size dwarfs a record's header.  The weights come from
 * tfm_model_attention (model.h): a second, teacher-forced pass over the chosen output.
 *
 * Not here: the search (decode.c, beam.c), drawing (pipelines/plot-attention).
 */
#ifndef TFM_ATTENTION_H
#define TFM_ATTENTION_H

#include <stdint.h>

#include "error.h"
#include "stream.h"

struct tfm_model;
struct tfm_attn_writer;

/* Write the attention of model m (its vocabulary: the SentencePiece model spm of spm_size
 * bytes) to out, an output already open (output.h), which the writer takes over (NULL:
 * stdout); all: self-attention too.  The header gets producer (when not NULL), model
 * (model_path), layers, heads and attention=cross|all.  NULL with err (out given up). */
struct tfm_output;
struct tfm_attn_writer *tfm_attn_open(struct tfm_output *out, struct tfm_model *m,
                                      const void *spm, size_t spm_size, int all,
                                      const char *producer, const char *model_path,
                                      struct tfm_error *err);
/* Compute and write the group of sentence index: src (S) and tgt (T) ids, no padding,
 * tgt ending in eos.  0, or -1 with err. */
int tfm_attn_put(struct tfm_attn_writer *w, int64_t index, const int32_t *src, int S,
                 const int32_t *tgt, int T, struct tfm_error *err);
/* Finish the stream (it appears whole); frees w. */
int tfm_attn_close(struct tfm_attn_writer *w, struct tfm_error *err);
/* Give up: nothing appears; frees w.  Safe on NULL. */
void tfm_attn_abort(struct tfm_attn_writer *w);

#endif
