/* train.h: the training loop of tfm-train, as one library call.
 *
 * A run reads a batch stream (batch.h), builds the model of a config (model.h) on the CPU
 * backend or on GPUs, and repeats: each of R in-process ranks (threads, each with its own
 * replica of the model) runs update_freq batches forward and backward, the gradients are
 * summed over ranks in rank order (dist.h), and every replica takes the same Adam step
 * (optim.h).  Several processes (W, R ranks each) make N = R*W ranks in all, rank q of
 * process p being rank p*R + q.  Reports go to progress.h; checkpoints (checkpoint.h) are
 * written by rank 0.
 *
 * Data order and randomness, which make N ranks equal 1 rank with N-fold accumulation and
 * a resumed run equal an uninterrupted one:
 *   - update s (1-based) uses the next K*N batches of the stream (K = update_freq, N
 *     ranks); forward pass j of rank r takes the (j*N + r)-th of them (a process reads its
 *     ranks' batches: batch.h gives ranks pR .. pR+R-1 of N the batches with i % N there);
 *   - its dropout key is rng_step = counter + j*N + r, where counter (saved in the
 *     checkpoint's state as its rng word) grows by K*N per update;
 *   - the stream is read again from its start when it ends (epoch + 1), unless it is a pipe,
 *     where its end ends training (a partial update is dropped);
 *   - the state saves (epoch, batches read in this epoch); --resume reopens the stream and
 *     skips that many batches.
 * Not here: option parsing and signals (bin/tfm-train.c), the model and the optimizer.
 */
#ifndef TFM_TRAIN_H
#define TFM_TRAIN_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "checkpoint.h"
#include "config.h"
#include "error.h"
#include "model.h"

struct tfm_train_opts {
    const char *prog;           /* "tfm-train", for progress lines */
    const char *train_path;     /* batch stream; "-" or NULL: stdin */
    const char *valid_path;     /* batch stream with targets, or NULL */
    const char *out_dir;        /* checkpoints: DIR/step-NNNNNN.tfm, DIR/last.tfm */
    double max_time;            /* seconds of this run; 0: no limit */
    double save_every_sec;      /* checkpoint period in seconds; 0: none */
    /* the limit in updates, the period in updates and the checkpoints kept are the
     * config's max_steps, save_every and keep */
    int update_freq;            /* K >= 1 */
    int ranks;                  /* R >= 1 in-process ranks */
    int world, world_rank;      /* processes of the run (1: this one alone) and this one's
                                 * place; each runs `ranks` ranks (dist.h) */
    int threads;                /* CPU threads in all (0: online CPUs), split over ranks */
    int resume;                 /* continue from the newest checkpoint of out_dir if any */
    int64_t report_every;       /* updates between progress reports (>= 1) */
    int64_t valid_every;        /* updates between validations; 0: at the end only */
    int valid_bleu;             /* also greedy BLEU of the validation set (tfm_decode_sources) */
    int early_stop;             /* stop after this many validations without a better BLEU
                                 * (valid_bleu) or perplexity; 0: never */
    FILE *progress;             /* progress lines (stderr) or NULL */
    FILE *notes;                /* one-off notes (device, resume, saves) or NULL */
    const char *log_path;       /* --log, or NULL */
    volatile sig_atomic_t *stop;    /* non-zero: finish the update, save, return */
    struct tfm_ckpt_lock *lock; /* process 0: out_dir's lock, taken by the caller (which
                                 * releases it), or NULL: the run takes it for its life */
    double memory_limit;        /* bytes the run may use (0: physical memory) */
    struct tfm_backend **backends;  /* ranks GPU backends (the caller's), or NULL: CPU
                                     * backends, threads split over the ranks */
};

void tfm_train_defaults(struct tfm_train_opts *o);

enum tfm_train_end {
    TFM_TRAIN_MAX_STEPS = 1,    /* reached max_steps */
    TFM_TRAIN_MAX_TIME = 2,     /* reached max_time */
    TFM_TRAIN_DATA_END = 3,     /* the (piped) stream ended */
    TFM_TRAIN_STOPPED = 4,      /* *stop was set (or the --log could not be written) */
    TFM_TRAIN_EARLY_STOP = 5,   /* early_stop validations without improvement */
    TFM_TRAIN_ENDS              /* how many (0 is "not ended") */
};

/* Why a run ended, for people: "max steps reached", ... ("" for 0). */
const char *tfm_train_end_name(enum tfm_train_end end);

struct tfm_train_result {
    enum tfm_train_end end;
    int64_t step;               /* updates done, in all */
    int64_t start_step;         /* those done before this run (resumed from); step equal to
                                 * it: this run made no update, and wrote no checkpoint */
    char last_checkpoint[4096]; /* path of the checkpoint written last ("" if none) */
    double loss;                /* mean loss per token over the last report interval */
    double valid_loss, valid_ppl;   /* last validation (-1: none) */
    double valid_bleu;              /* last validation BLEU (-1: none) */
};

/* Train with cfg (effective config; cfg->vocab 0: from the stream's vocabulary).  With
 * o->resume and a checkpoint in out_dir, cfg must equal the checkpoint's config except
 * for the run keys (tfm_checkpoint_run_keys), and the checkpoint must hold exactly that model and
 * its Adam moments (tfm_checkpoint_check).  Process 0 (o->world_rank) holds the lock of
 * out_dir for the run (tfm_checkpoint_lock, or o->lock): a second run there is refused.
 * A stream that ends before the first update (a pipe) is an error: nothing is trained or
 * written; a run that stops before its first update otherwise (a signal, max_time) ends
 * cleanly, and writes no checkpoint either.
 * Returns 0 (see res->end), or -1 with err (a NaN or Inf loss or gradient names its
 * update; no checkpoint is written after it); a failed run removes out_dir if it made it
 * and it is still empty. */
int tfm_train_run(struct tfm_config *cfg, const struct tfm_train_opts *o,
                  struct tfm_train_result *res, struct tfm_error *err);

#endif
