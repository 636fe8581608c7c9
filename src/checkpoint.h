/* checkpoint.h: training checkpoints, as tfm streams of kind "checkpoint".
 *
 * A checkpoint is one stream (man/tfm.5 has the bytes, man/tfm-train.1 the meaning):
 *   header            kind=checkpoint, step=N, the vocabulary embedded (tfm.spm), and any
 *                     keys the caller adds (producer, ranks, update-freq, averaged...)
 *   "config"          u8  [n]    the effective config, "key = value" lines
 *   "state"           i64 [k]    run state: step, epoch, data position, tokens, rng (below)
 *   "param.<name>"    f32 [...]  parameters, with their shapes
 *   "adam.m.<name>"   f32 [...]  Adam first moments   (absent when dropped: tfm-avg)
 *   "adam.v.<name>"   f32 [...]  Adam second moments
 * Writing and loading are generic: they know the record layout above and nothing of the
 * model.  The tensors a caller writes are named by it (prefix + name); a loaded checkpoint
 * is a list of named f32 tensors, copied out of the (memory-mapped) stream.  What a model
 * takes from a checkpoint goes through one gate, tfm_checkpoint_check: the tensors must be
 * exactly those of the model the checkpoint's own config describes (model.h's layout),
 * with its shapes and finite values; decoding, resuming and averaging all use it.
 *
 * Files in a checkpoint directory: DIR/step-NNNNNN.tfm (six digits or more) and
 * DIR/last.tfm, a relative symbolic link to the newest, replaced atomically.
 * Not here: what the tensors mean (model.c), the training loop (train.c).
 */
#ifndef TFM_CHECKPOINT_H
#define TFM_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "error.h"
#include "stream.h"

struct tfm_model;

#define TFM_CKPT_PARAM "param."
#define TFM_CKPT_ADAM_M "adam.m."
#define TFM_CKPT_ADAM_V "adam.v."
#define TFM_CKPT_MAX_RNG 16
#define TFM_CKPT_MAX_TENSORS 65536

/* The run state, record "state" (i64 [8 + nrng]):
 *   [0] 2 (layout version)  [1] step  [2] epoch  [3] batches of the stream consumed in
 *   this epoch, by all processes of the run  [4] target tokens trained on  [5] training
 *   time so far, ms  [6] seed  [7] nrng  [8 ...] rng words (bit patterns)
 * Layout 1, of earlier versions, differs in [3] only: the batches of one process's shard,
 * which mean the same only to a run of as many processes.  It is read, and written only
 * for a state read from it (tfm-avg copies one). */
struct tfm_ckpt_state {
    int64_t step;           /* optimizer steps done */
    int64_t epoch;          /* passes over the batch stream started, 0-based */
    int64_t batch_pos;      /* batches of the stream consumed in this epoch (all processes) */
    int shard_pos;          /* read from layout 1: batch_pos counts one process's shard */
    int64_t tokens;         /* target tokens trained on */
    int64_t elapsed_ms;     /* training wall time so far */
    int64_t seed;
    int nrng;
    uint64_t rng[TFM_CKPT_MAX_RNG];
};

struct tfm_ckpt_tensor {
    char *name;             /* full record name, "param.enc.0.attn.wq" */
    int rank;
    int64_t dims[TFM_MAX_RANK];
    int64_t count;          /* elements */
    float *data;            /* [count]: owned, or (TFM_CKPT_MAPPED) read-only in the map */
    int owned;
    /* read-only (not owned) and found finite (and not negative, where asked) by
     * tfm_checkpoint_check: values that cannot change, not tested again */
    int values_ok;
};

struct tfm_checkpoint {
    char *path;                 /* as given to tfm_checkpoint_load, for messages */
    struct tfm_header header;   /* kind "checkpoint", with the vocabulary */
    char *config;               /* NUL-terminated config text */
    struct tfm_ckpt_state state;
    int ntensors;
    struct tfm_ckpt_tensor *tensors;    /* in file order */
    struct tfm_reader *map;     /* TFM_CKPT_MAPPED: the open reader the tensors point into */
};

/* ---- writing ---------------------------------------------------------------------- */

/* Start a checkpoint at path (written as a temporary file, renamed on tfm_writer_close).
 * base supplies the vocabulary and extra header keys (may be NULL); "step" is set from
 * st.  Then tfm_checkpoint_put each tensor and tfm_writer_close (or tfm_writer_abort). */
struct tfm_writer *tfm_checkpoint_begin(const char *path, const struct tfm_header *base,
                                        const char *config, const struct tfm_ckpt_state *st,
                                        struct tfm_error *err);
/* Write record prefix+name.  Refuses (-1, nothing written) a value that is NaN or Inf,
 * so a poisoned checkpoint is never complete.  Every message starts with the output's
 * name, as the writer's own do. */
int tfm_checkpoint_put(struct tfm_writer *w, const char *prefix, const char *name, int rank,
                       const int64_t *dims, const float *data, struct tfm_error *err);

/* ---- reading ---------------------------------------------------------------------- */

#define TFM_CKPT_NO_OPTIMIZER 1     /* drop the adam.* records: read and checked (their
                                     * CRC too), not kept (averaging) */
#define TFM_CKPT_MAPPED 2           /* tensors of a regular file point into its memory map
                                     * instead of copies: read-only (decoding, averaging) */
#define TFM_CKPT_SKIP_OPTIMIZER 4   /* pass over the adam.* records unread: their payloads
                                     * and CRCs go unchecked, and cost nothing from a file
                                     * (decoding); implies TFM_CKPT_NO_OPTIMIZER */

/* Load a checkpoint (a regular file is memory-mapped by the reader).  Checks the kind,
 * the config and state records, f32 dtype of every tensor, duplicate names.  NULL with
 * "PATH: reason" on failure. */
struct tfm_checkpoint *tfm_checkpoint_load(const char *path, int flags, struct tfm_error *err);
void tfm_checkpoint_free(struct tfm_checkpoint *c);
/* The tensor named (full name), or NULL. */
struct tfm_ckpt_tensor *tfm_checkpoint_find(const struct tfm_checkpoint *c, const char *name);
/* Config keys that describe a run, not a model: they may differ between checkpoints of
 * one model (a resumed run with a new --max-steps).  NULL-terminated. */
extern const char *const tfm_checkpoint_run_keys[];
/* Is c usable where ref is (the same config values but for the run keys, same vocabulary,
 * tensor names and shapes)?  0, or -1 with a message naming the first difference. */
int tfm_checkpoint_compatible(const struct tfm_checkpoint *c, const struct tfm_checkpoint *ref,
                              struct tfm_error *err);

/* ---- checkpoints of a model ------------------------------------------------------- */

/* The config of c: its record "config" on top of the defaults, checked as a model's
 * (tfm_config_check with a vocabulary).  0, or -1 with "PATH: config: ...". */
int tfm_checkpoint_config(const struct tfm_checkpoint *c, struct tfm_config *cfg,
                          struct tfm_error *err);
/* Does c hold the model that cfg describes, and nothing else?  Every tensor of c must be
 * param.NAME, adam.m.NAME or adam.v.NAME of a parameter NAME of a model of cfg
 * (tfm_model_layout), with that parameter's shape, and every value finite (a second
 * moment, adam.v, also not negative); every parameter must be there; the Adam moments
 * must be there for every parameter with optimizer, and otherwise for all or for none
 * (those dropped by TFM_CKPT_NO_OPTIMIZER are not looked at).  0, or -1 with the
 * first problem: "PATH: tensor param.enc.1.ffn.w1: shape 64x256, config wants 64x128". */
int tfm_checkpoint_check(const struct tfm_checkpoint *c, const struct tfm_config *cfg,
                         int optimizer, struct tfm_error *err);
/* The one way from a checkpoint to a model: tfm_checkpoint_check against the config of m,
 * then every parameter (and with optimizer the Adam moments: m must be a training model)
 * copied into m.  Nothing is copied when the check fails. */
int tfm_checkpoint_to_model(const struct tfm_checkpoint *c, struct tfm_model *m, int optimizer,
                            struct tfm_error *err);
/* The same for an inference model (the parameters alone), which reads them in place where
 * it can (tfm_model_share: on the CPU at fp32) instead of a copy: loaded with
 * TFM_CKPT_MAPPED, the pages of the file's mapping, which the page cache already holds and
 * processes decoding with the same file share.  c must then outlive m: free the model
 * first.  The parameters shared (0 when every one was copied), or -1 with err. */
int tfm_checkpoint_share_model(const struct tfm_checkpoint *c, struct tfm_model *m,
                               struct tfm_error *err);

/* Average the checkpoints paths[0..n) element-wise (summed in double in the order given,
 * divided by n, rounded to fp32 once: the correctly rounded mean where the sum is exact,
 * see checkpoint.c) and write the result to out ("-": stdout).  The checkpoints must be
 * compatible (tfm_checkpoint_compatible) and each must pass tfm_checkpoint_check against
 * its own config (the Adam moments only with keep_optimizer); header, config and state
 * come from the last one, with keys "averaged" (n) and "averaged.steps" added.  The Adam
 * moments are averaged too with keep_optimizer, dropped otherwise.  Memory: the sums, 8
 * bytes a value averaged, and one tensor's mean; the checkpoints are read in their memory
 * maps, two at a time (a copy of one read from a pipe). */
int tfm_checkpoint_average(const char *const *paths, int n, int keep_optimizer, const char *out,
                           struct tfm_error *err);
/* The same, telling progress (when not NULL) a line for people as each checkpoint has been
 * read and summed (its number, path and step, the bytes read so far, the rate, the time
 * left) and once the mean is written. */
int tfm_checkpoint_average_progress(const char *const *paths, int n, int keep_optimizer,
                                    const char *out,
                                    void (*progress)(void *ctx, const char *line), void *ctx,
                                    struct tfm_error *err);

/* ---- directories ------------------------------------------------------------------ */

/* "DIR/step-NNNNNN.tfm" into buf; -1 when it does not fit. */
int tfm_checkpoint_path(char *buf, size_t n, const char *dir, int64_t step);
/* The checkpoints of dir (files step-N.tfm), ascending by step: *paths (each malloc'd,
 * free with tfm_checkpoint_list_free) and *steps.  *n may be 0. */
int tfm_checkpoint_list(const char *dir, char ***paths, int64_t **steps, int *n,
                        struct tfm_error *err);
void tfm_checkpoint_list_free(char **paths, int64_t *steps, int n);
/* Point DIR/last.tfm at step-N.tfm (symlink to a temporary name, then rename). */
int tfm_checkpoint_link_last(const char *dir, int64_t step, struct tfm_error *err);
/* Remove all but the newest keep checkpoints of dir (keep <= 0: remove none). */
int tfm_checkpoint_prune(const char *dir, int keep, struct tfm_error *err);
/* Remove what a killed writer left in dir: "step-N.tfm.tmp.PID" and ".last.tfm.PID" of
 * processes that no longer exist, and of this one's PID (called before this process writes
 * any).  Returns the number removed, or -1. */
int tfm_checkpoint_clean(const char *dir, struct tfm_error *err);
/* Can a file be created in dir?  Creates dir when missing (*created, when not NULL, says
 * whether this call did); -1 with the reason. */
int tfm_checkpoint_dir_ready(const char *dir, int *created, struct tfm_error *err);

/* One run at a time in a checkpoint directory: an exclusive flock(2) on DIR/.tfm-train.lock,
 * held until tfm_checkpoint_unlock or the end of the process (a killed holder releases it
 * with its life).  The file then says who holds it: "pid N on host H".  NULL with
 * "DIR: in use by another run (pid N on host H; lock DIR/.tfm-train.lock): ..." while
 * another process holds it. */
struct tfm_ckpt_lock;
struct tfm_ckpt_lock *tfm_checkpoint_lock(const char *dir, struct tfm_error *err);
/* Remove the lock file and release the lock (NULL: nothing). */
void tfm_checkpoint_unlock(struct tfm_ckpt_lock *l);

/* ---- resuming ---------------------------------------------------------------------- */

/* The newest checkpoint of dir into path (n bytes): 1 found, 0 none (also no dir), -1. */
int tfm_checkpoint_find_last(const char *dir, char *path, size_t n, struct tfm_error *err);
/* Config keys that may differ between a checkpoint and the run resuming it
 * (tfm_checkpoint_run_keys). */
int tfm_checkpoint_key_may_change(const char *key);
/* cfg against a checkpoint's config ck (of file path): 0 when only the keys that may
 * change differ, else -1 with err naming the key and both values. */
int tfm_checkpoint_same_config(const struct tfm_config *cfg, const struct tfm_config *ck,
                               const char *path, struct tfm_error *err);

#endif
