/* batch.h: batch streams: cutting token streams into padded batches under a token budget
 * (tfm-batch), and reading them back, sharded over data-parallel ranks (tfm-train).
 *
 * A batch stream (header kind "batches") is, per batch, in this order:
 *     "batch.index"  i64 [B]     the rows' sentence numbers in the input (0-based)
 *     "batch.src"    i32 [B,S]   source rows: tokens, eos (3), then padding (0)
 *     "batch.tgt"    i32 [B,T]   target rows, the same way (absent without targets)
 * Every row holds at least one token and ends its tokens with eos; B*S and B*T never
 * exceed the header's "tokens" budget.  Header keys are listed in man/tfm-batch.1.
 *
 * Making batches (tfm_batch_plan, tfm_batch_run): the token data is held once (both
 * corpora as read, ids + offsets), plus 8 bytes per sentence for the order and, while
 * sorting, 8 more; batches are built and written one at a time.
 * Order: sentences are shuffled (seed), stably sorted by the length of their longer side,
 * then by source length, then by target length; cut greedily into batches while both
 * padded rectangles fit the budget; and the batches are shuffled (same seed).  Without targets (decoding input) nothing is
 * shuffled: sentences keep input order within a length and batches go shortest first.
 *
 * Reading (tfm_batch_open...): rank r of N takes the batches i (0-based, in stream
 * order) with i % N == r and i < floor(K/N)*N, K = the header's "batches": every rank
 * gets floor(K/N) batches, so ranks stay in lock-step; the last K mod N batches are read
 * (and checked) but given to no rank.  Every batch record is validated.
 *
 * Not here: the record layout (stream.c), ragged token data (corpus.c), what a trainer
 * does with the batches.
 */
#ifndef TFM_BATCH_H
#define TFM_BATCH_H

#include <stdint.h>

#include "corpus.h"
#include "error.h"
#include "stream.h"

#define TFM_BATCH_TOKENS 25000          /* default budget: tokens per batch and side */
#define TFM_BATCH_MAX_LEN 256           /* default --max-len (eos included) */
#define TFM_BATCH_MAX_TOKENS 100000000  /* largest budget accepted */

/* ---- making batches ------------------------------------------------------------------ */

struct tfm_batch_opts {
    int64_t tokens;         /* budget: B*S <= tokens and B*T <= tokens, padding included */
    int64_t max_len;        /* longest sentence kept, eos included; 0: the budget only */
    uint64_t seed;          /* shuffles sentences of equal lengths and the batch order */
    int flags;              /* writer flags: TFM_DEFLATE */
    const char *producer;   /* header "producer", or NULL */
    /* called with a line about each phase (reading, sorting, writing), may be NULL */
    void (*progress)(void *ctx, const char *line);
    void *progress_ctx;
};

/* tokens TFM_BATCH_TOKENS, max_len TFM_BATCH_MAX_LEN, seed 1, the rest 0. */
void tfm_batch_defaults(struct tfm_batch_opts *o);

/* Which sentences go together, and in which order batches are written. */
struct tfm_batch_plan {
    int64_t sentences;      /* input sentences (pairs) */
    int64_t kept, dropped;  /* kept + dropped = sentences */
    int64_t nbatches;       /* K */
    int64_t *order;         /* [kept] sentence numbers: batch b is order[start[b]..start[b+1]) */
    int64_t *start;         /* [K+1] */
    int64_t *perm;          /* [K] output position -> batch b */
    int64_t src_tokens, tgt_tokens;     /* non-pad tokens written, eos included */
    int64_t src_cells, tgt_cells;       /* sum of B*S and of B*T */
    int64_t max_src, max_tgt;           /* longest kept sentences, eos included */
};

void tfm_batch_plan_free(struct tfm_batch_plan *p);
/* Padding fractions: 1 - tokens/cells (0 for an empty plan). */
double tfm_batch_pad_src(const struct tfm_batch_plan *p);
double tfm_batch_pad_tgt(const struct tfm_batch_plan *p);

/* Plan the batches of src (and tgt, or NULL: source only).  src_eos / tgt_eos: 1 when
 * eos is to be appended (the length counts it), 0 when the sentences already end in it.
 * With tgt, pairs with a side longer than o->max_len or the budget are dropped (counted);
 * without, such a sentence is an error (decoding must keep every sentence), as are
 * different sentence counts.  p is zeroed first. */
int tfm_batch_plan(const struct tfm_corpus *src, int src_eos, const struct tfm_corpus *tgt,
                   int tgt_eos, const struct tfm_batch_opts *o, struct tfm_batch_plan *p,
                   struct tfm_error *err);

/* One batch.  index (B), src (B,S), tgt (B,T) or NULL with T = 0. */
struct tfm_batch {
    int64_t B, S, T;
    int64_t number;             /* position in the whole stream, 0-based (reader) */
    int64_t *index;             /* (B) */
    int32_t *src;               /* (B,S) */
    int32_t *tgt;               /* (B,T) or NULL */
    int64_t src_tokens, tgt_tokens;     /* non-pad ids, eos included */
};

/* Write b's records (tgt when b->tgt is not NULL). */
int tfm_batch_put(struct tfm_writer *w, const struct tfm_batch *b, struct tfm_error *err);

/* Write plan p of src/tgt as a batch stream to out ("-" or NULL: stdout; a file appears
 * whole or not at all).  h is the output header (kind batches, keys set by the caller). */
int tfm_batch_write(const char *out, const struct tfm_header *h, const struct tfm_corpus *src,
                    int src_eos, const struct tfm_corpus *tgt, int tgt_eos,
                    const struct tfm_batch_plan *p, int flags, struct tfm_error *err);

/* What tfm-batch does: read src_path (and tgt_path, or NULL), check kinds, counts and
 * vocabularies, plan, write out.  stats gets the plan without its arrays.  Messages name
 * the file at fault. */
int tfm_batch_run(const char *src_path, const char *tgt_path, const char *out,
                  const struct tfm_batch_opts *o, struct tfm_batch_plan *stats,
                  struct tfm_error *err);

/* ---- reading batches ----------------------------------------------------------------- */

struct tfm_batch_reader;

/* Open a batch stream ("-" or NULL: stdin) for rank `rank` of `nranks` (0 <= rank <
 * nranks).  With nranks > 1 the header must say "batches" and K >= nranks. */
struct tfm_batch_reader *tfm_batch_open(const char *path, int rank, int nranks,
                                        struct tfm_error *err);
/* The same for ranks rank .. rank+count-1 of nranks at once (a process of several ranks):
 * the batches i with rank <= i % nranks < rank+count, in stream order, count*floor(K/N)
 * in all.  From a pipe, every wait for input (the header, the first batch read at open,
 * the batches after) gives up once *stop is set (stop NULL: waits as long as it takes),
 * failing with "Interrupted system call". */
struct tfm_batch_reader *tfm_batch_open_ranks(const char *path, int rank, int count,
                                              int nranks, volatile sig_atomic_t *stop,
                                              struct tfm_error *err);
const struct tfm_header *tfm_batch_header(const struct tfm_batch_reader *r);
/* Batches this rank gets in all (floor(K/N), times count), or -1 when the header does not
 * say K.  Of a concatenation of batch streams (stream.h; one rank only), the count of the
 * first stream: the batches of the streams after it follow, numbered on. */
int64_t tfm_batch_count(const struct tfm_batch_reader *r);
/* Does the stream have targets?  Known after open when K > 0 (from the first batch). */
int tfm_batch_has_targets(const struct tfm_batch_reader *r);
/* This rank's next batch: 1 (b's arrays stay valid until the next call or close), 0 at
 * the end of its share (the rest of the stream has been read and verified), -1. */
int tfm_batch_next(struct tfm_batch_reader *r, struct tfm_batch *b, struct tfm_error *err);
/* Skip this rank's next k batches (resuming): how many it skipped, fewer than k when its
 * share ends first, or -1. */
int64_t tfm_batch_skip(struct tfm_batch_reader *r, int64_t k, struct tfm_error *err);
void tfm_batch_close(struct tfm_batch_reader *r);

/* ---- epochs: a batch stream for training --------------------------------------------- */

/* One padded batch, host copies that outlive the reader's: src (B,S), tgt (B,T). */
struct tfm_batch_copy {
    int B, S, T;
    int32_t *src, *tgt;
    size_t cap_src, cap_tgt;    /* elements */
    int64_t number;             /* position in its epoch's stream, 0-based */
};
void tfm_batch_copy_free(struct tfm_batch_copy *b);

/* A batch stream read from its start again at its end (a file, repeat), or to its end (a
 * pipe), with targets: this process's shard, ranks rank .. rank+count-1 of world. */
struct tfm_epochs {
    const char *path;           /* NULL: stdin */
    int rank, count, world;     /* count 0 counts as 1 */
    int repeat;                 /* reopen at the end */
    struct tfm_batch_reader *r;
    struct tfm_header header;   /* of the first opening: every later one has its vocabulary */
    int have_header;
    int64_t epoch;              /* openings - 1 */
    int64_t pos;                /* batches of this shard read in this epoch */
    volatile sig_atomic_t *stop;    /* a pipe: stop waiting for batches once set (NULL: wait) */
};

/* The file's name for messages ("<stdin>" for a pipe). */
const char *tfm_epochs_name(const struct tfm_epochs *d);
/* Open (or reopen) at the start of an epoch; a stream of batches without targets is
 * refused.  0, or -1 with err. */
int tfm_epochs_open(struct tfm_epochs *d, struct tfm_error *err);
/* The next batch of the shard copied into b: 1; 0 at the end of a pipe; -1 with err (also
 * for a file that gives the shard no batch, and for a pipe whose wait d->stop ended). */
int tfm_epochs_next(struct tfm_epochs *d, struct tfm_batch_copy *b, struct tfm_error *err);
/* Position a freshly opened stream at (epoch, pos), as a checkpoint records it. */
int tfm_epochs_skip(struct tfm_epochs *d, int64_t epoch, int64_t pos, struct tfm_error *err);
void tfm_epochs_close(struct tfm_epochs *d);

#endif
