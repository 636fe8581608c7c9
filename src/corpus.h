/* corpus.h: ragged sentences of token ids, as held in memory and as chunked in streams.
 *
 * In memory a corpus is one id array and one offset array (sentence i is
 * ids[offsets[i] .. offsets[i+1])), never one allocation per sentence.  In a stream
 * (kind "tokens" or "hypotheses") it is a sequence of chunks, each
 *     "tokens.offsets"  i64 [n+1]   starting at 0, non-decreasing
 *     "tokens.ids"      i32 [m]     m = offsets[n]
 * followed, in a hypothesis stream, by per-sentence arrays of the same n:
 *     "hyp.index"       i64 [n]     input sentence number (0-based)
 *     "hyp.score"       f32 [n]     length-normalized log-probability
 * (n-best lists repeat an index, best first).  Chunks hold at most TFM_CHUNK_SENTS
 * sentences and about TFM_CHUNK_IDS ids.
 * Of concatenated hypothesis streams (stream.h), each stream's hyp.index is read offset by
 * one more than the largest index before it, so that its sentences follow the first's.
 */
#ifndef TFM_CORPUS_H
#define TFM_CORPUS_H

#include <stdint.h>

#include "error.h"
#include "stream.h"

#define TFM_CHUNK_SENTS 65536
#define TFM_CHUNK_IDS (1 << 20)

struct tfm_corpus {
    int64_t n;          /* sentences */
    int64_t *offsets;   /* [n+1] */
    int32_t *ids;       /* [offsets[n]] */
    int64_t *index;     /* [n] or NULL: hyp.index */
    float *score;       /* [n] or NULL: hyp.score */
    int64_t cap_n, cap_ids;
    /* reading concatenated hypothesis streams: the stream of the last chunk read, the
     * offset of its hyp.index, one more than the largest index read so far */
    uint64_t member;
    int64_t index_base, index_next;
    int64_t nread;      /* sentences read from the stream so far (lines in messages) */
};

void tfm_corpus_init(struct tfm_corpus *c);
void tfm_corpus_free(struct tfm_corpus *c);
static inline int64_t tfm_corpus_len(const struct tfm_corpus *c, int64_t i)
{
    return c->offsets[i + 1] - c->offsets[i];
}
static inline const int32_t *tfm_corpus_sent(const struct tfm_corpus *c, int64_t i)
{
    return c->ids + c->offsets[i];
}
/* Append one sentence. */
int tfm_corpus_push(struct tfm_corpus *c, const int32_t *ids, int64_t len,
                    struct tfm_error *err);
/* Read every chunk of a tokens or hypotheses stream up to its end, checking offsets and
 * that every id is in [0, vocab_size) (when vocab_size > 0; else that none is negative).
 * A bad id is named by its sentence, counted from 1 over all that c has read
 * ("line 12: id 9000 at token 3 outside the vocabulary (8000)"). */
int tfm_corpus_read(struct tfm_reader *r, struct tfm_corpus *c, int64_t vocab_size,
                    struct tfm_error *err);
/* Replace c's contents with the next chunk of the stream, so a large stream is processed
 * a chunk at a time in bounded memory.  1: a chunk was read; 0: end of stream (c empty);
 * -1: error.  Sentence numbers restart at 0 in every chunk. */
int tfm_corpus_read_chunk(struct tfm_reader *r, struct tfm_corpus *c, int64_t vocab_size,
                          struct tfm_error *err);
/* Write c as chunks (with hyp.index/hyp.score when c has them). */
int tfm_corpus_write(struct tfm_writer *w, const struct tfm_corpus *c, struct tfm_error *err);
/* Write sentences [from, to) of c as one chunk. */
int tfm_corpus_write_chunk(struct tfm_writer *w, const struct tfm_corpus *c, int64_t from,
                           int64_t to, struct tfm_error *err);

#endif
