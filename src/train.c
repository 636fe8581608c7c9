/* train.c: the training loop (see train.h for the data order and what makes runs
 * reproducible).  Every rank runs rank_main on its own thread and model replica (a CPU
 * backend, or a GPU's); rank 0 also reads the batches of each update, reports, validates
 * and writes checkpoints, while the others wait at the barrier that starts the next
 * update.  With several processes every process reads its own ranks' batches, the
 * barrier becomes an agreement on whether to go on (dist.h stacks the processes on the
 * ranks of each), and only process 0 reports, validates and saves.
 */
#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "batch.h"
#include "beam.h"
#include "bleu.h"
#include "decode.h"
#include "dist.h"
#include "dist_nccl.h"
#include "hypread.h"
#include "optim.h"
#include "progress.h"
#include "spm.h"
#include "stream.h"
#include "util.h"

const char *tfm_train_end_name(enum tfm_train_end end)
{
    static const char *const names[TFM_TRAIN_ENDS] = {
        [TFM_TRAIN_MAX_STEPS] = "max steps reached",
        [TFM_TRAIN_MAX_TIME] = "max time reached",
        [TFM_TRAIN_DATA_END] = "end of the batch stream",
        [TFM_TRAIN_STOPPED] = "stopped by a signal",
        [TFM_TRAIN_EARLY_STOP] = "no better validation in --early-stop validations",
    };
    return end > 0 && end < TFM_TRAIN_ENDS && names[end] ? names[end] : "";
}

void tfm_train_defaults(struct tfm_train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->prog = "tfm-train";
    o->save_every_sec = 600;
    o->update_freq = 1;
    o->ranks = 1;
    o->world = 1;
    o->report_every = 100;
    o->valid_every = 1000;
}


/* ---- the run -------------------------------------------------------------------------- */

/* One update's totals over a rank's batches, then over every rank (summed as doubles). */
struct update_sums {
    double loss, nll;           /* summed over target tokens */
    double tokens, src_tokens;
    double failed;              /* ranks whose batch failed */
};
_Static_assert(sizeof(struct update_sums) == 5 * sizeof(double), "no padding");

struct run;

struct replica {
    struct run *run;
    int rank;
    struct tfm_backend *be;
    struct tfm_model *m;
    float *stage;               /* host copy of the gradients for the all-reduce (sim) */
    struct tfm_gpu_comm *nccl;  /* GPU ranks: NCCL on the devices */
    /* the gradient sum of the update in progress, in buckets from the end of the arena:
     * [hi, end) is summed (or queued); armed for the last micro-batch of an update */
    int armed;
    size_t hi;
    int sum_failed;
    struct tfm_error sum_err;
    struct tfm_error err;
};

struct run {
    const struct tfm_train_opts *o;
    int log_failed;                 /* the --log could not be written: stop and say so */
    int have_best, worse, early;    /* early stopping: a best validation; how many since */
    double best;                    /* BLEU, or -perplexity */
    struct tfm_error log_err;
    struct tfm_config *cfg;
    struct tfm_train_result *res;
    int R, K;
    int W, g;                       /* processes, and this one's place (0 reports, saves) */
    size_t bucket;                  /* floats per gradient sum (TFM_BUCKET_MB) */
    double timeout;                 /* seconds a GPU sum may take (TFM_COLLECTIVE_TIMEOUT) */
    struct tfm_comm *comm;          /* the ranks of this process, stacked on procs */
    struct tfm_comm *procs;         /* the processes (W > 1), or NULL */
    struct replica *rep;            /* [R] */
    struct tfm_batch_copy *slots;            /* [K*R] the batches of the update in progress */
    struct tfm_epochs train;
    struct tfm_header ck_header;    /* vocabulary and keys of every checkpoint */
    struct tfm_ckpt_lock *lock;     /* process 0: the checkpoint directory, for the run */
    int created_dir;                /* this process made the checkpoint directory */
    int64_t start_step, start_pos;  /* where this run started: step, batches of the epoch */
    /* the stream position after the last update done (what a checkpoint records: batches
     * read for an update that is not done are read again on resume) */
    int64_t done_epoch, done_pos;
    char *config_text;
    float *host;                    /* [count] staging for a checkpoint's tensors */
    struct tfm_progress prog;
    /* decided by rank 0 before each update */
    int end;                        /* enum tfm_train_end, 0: go on */
    int failed;                     /* an error in err */
    int unagreed;                   /* rank 0 failed in the agreement before an update:
                                     * the model is that of update step, done by all */
    struct tfm_error err;
    /* counters */
    int64_t step, counter, tokens;
    double t0, elapsed0;            /* this run's start; training time before it */
    double last_save;               /* time of the last checkpoint */
    int64_t saved_step;             /* step of the last checkpoint (-1: none) */
    int64_t valid_step;             /* step of the last validation (-1: none) */
    /* report interval sums */
    double iv_loss, iv_nll, iv_time;
    int64_t iv_tokens;
    uint32_t vocab_id;
};

static double elapsed(const struct run *run)
{
    return run->elapsed0 + (tfm_now() - run->t0);
}

/* ---- summing the gradients over the ranks ---------------------------------------------
 *
 * In buckets (run->bucket floats), from the end of the gradient arena down, each summed as
 * soon as the backward pass of the update's last micro-batch has finished writing it
 * (backend.h, grads_ready), so that on GPUs the sums of the top layers overlap the
 * backward of the lower ones.  GPU ranks sum with NCCL on the devices (dist_nccl.h); CPU
 * ranks through host memory, element by element in rank order, so the buckets give the
 * same bits as one sum of everything, and training on R ranks still equals --update-freq R
 * bit for bit; that equality also proves that no bucket is summed before its last write.
 * sim ranks go through a host buffer. */

static int sum_bucket(struct replica *p, size_t lo, size_t n, struct tfm_error *err)
{
    float *g = tfm_model_block(p->m, TFM_GRADS) + lo;
    if (p->nccl)
        return tfm_gpu_comm_sum(p->nccl, g, n, err);
    if (p->be->host_memory)
        return tfm_comm_sum_f32(p->run->comm, p->rank, g, n, err);
    p->be->download(p->be, p->stage + lo, g, n * sizeof *g);
    if (tfm_comm_sum_f32(p->run->comm, p->rank, p->stage + lo, n, err))
        return -1;
    p->be->upload(p->be, g, p->stage + lo, n * sizeof *g);
    return 0;
}

/* The model's hook: gradients from offset lo on are final; sum the whole buckets there. */
static void grads_ready(void *ctx, size_t lo)
{
    struct replica *p = ctx;
    if (!p->armed || p->sum_failed)
        return;
    size_t b = p->run->bucket;
    while (p->hi > 0) {
        size_t b0 = p->hi > b ? p->hi - b : 0;
        if (b0 < lo)
            break;
        if (sum_bucket(p, b0, p->hi - b0, &p->sum_err)) {
            p->sum_failed = 1;
            return;
        }
        p->hi = b0;
    }
}

static int comm_stopped(void *comm) { return tfm_comm_aborted(comm); }

/* The optimizer's all-reduce (backend.h): the buckets not summed yet, then the wait. */
static int all_reduce(void *ctx, float *buf, size_t n, struct tfm_error *err)
{
    struct replica *p = ctx;
    (void)buf;
    if (!p->armed) {            /* no backward announced its gradients: all of them now */
        p->armed = 1;
        p->hi = n;
    }
    grads_ready(p, 0);
    p->armed = 0;
    if (p->sum_failed) {
        p->sum_failed = 0;
        *err = p->sum_err;
        return -1;
    }
    if (p->nccl)
        return tfm_gpu_comm_wait(p->nccl, p->run->timeout, comm_stopped, p->run->comm, err);
    return 0;
}

/* TFM_BUCKET_MB: megabytes of gradients a sum (default 25), a positive number. */
static int bucket_floats(size_t *floats, struct tfm_error *err)
{
    double mb;
    if (tfm_dist_env_bucket_mb(&mb, err))
        return -1;
    *floats = (size_t)(mb * 1048576 / sizeof(float));
    if (*floats < 16)
        *floats = 16;
    return 0;
}

static int save_checkpoint(struct run *run, struct tfm_error *err)
{
    char path[4096];
    if (tfm_checkpoint_path(path, sizeof path, run->o->out_dir, run->step))
        return tfm_fail(err, "%s: path too long", run->o->out_dir);
    /* a process reads R of every R*W batches of the stream: its count times W is the run's */
    struct tfm_ckpt_state st = {
        .step = run->step, .epoch = run->done_epoch, .batch_pos = run->done_pos * run->W,
        .tokens = run->tokens, .elapsed_ms = (int64_t)(elapsed(run) * 1000), .seed = run->cfg->seed,
        .nrng = 1, .rng = {(uint64_t)run->counter},
    };
    struct tfm_model *m = run->rep[0].m;
    struct tfm_writer *w = tfm_checkpoint_begin(path, &run->ck_header, run->config_text, &st, err);
    if (!w)
        return -1;
    static const struct { const char *prefix; enum tfm_block block; } parts[] = {
        {TFM_CKPT_PARAM, TFM_PARAMS}, {TFM_CKPT_ADAM_M, TFM_ADAM_M}, {TFM_CKPT_ADAM_V, TFM_ADAM_V},
    };
    for (int k = 0; k < 3; k++) {
        tfm_model_download(m, parts[k].block, run->host);
        for (int i = 0; i < tfm_model_nparams(m); i++) {
            const struct tfm_param *p = tfm_model_param(m, i);
            if (tfm_checkpoint_put(w, parts[k].prefix, p->name, p->rank, p->dims,
                                   run->host + p->offset, err)) {
                tfm_writer_abort(w);    /* err names the file */
                return -1;
            }
        }
    }
    if (tfm_writer_close(w, err) || tfm_checkpoint_link_last(run->o->out_dir, run->step, err) ||
        tfm_checkpoint_prune(run->o->out_dir, run->cfg->keep, err))
        return -1;
    snprintf(run->res->last_checkpoint, sizeof run->res->last_checkpoint, "%s", path);
    run->saved_step = run->step;
    run->last_save = tfm_now();
    if (run->o->notes)
        fprintf(run->o->notes, "%s: saved %s\n", run->o->prog, path);
    return 0;
}

/* A failure between updates that leaves the model sound (bad input met while reading the
 * next update's batches, a validation that cannot run, another process's failure): process
 * 0 saves the updates done since the last checkpoint, so that none is lost, and err says
 * so.  Returns -1. */
static int keep_updates(struct run *run, struct tfm_error *err)
{
    if (run->g != 0 || run->step == run->start_step || run->saved_step == run->step)
        return -1;
    char msg[sizeof err->msg];
    memcpy(msg, err->msg, sizeof msg);
    struct tfm_error e;
    if (save_checkpoint(run, &e))
        return tfm_fail(err, "%.700s; and update %lld could not be saved: %.300s", msg,
                        (long long)run->step, e.msg);
    return tfm_fail(err, "%.900s; stopped at update %lld, its checkpoint saved", msg,
                    (long long)run->step);
}

static int check_batch(const struct run *run, const struct tfm_epochs *d, const struct tfm_batch_copy *b,
                       struct tfm_error *err)
{
    int64_t budget = run->cfg->tokens;
    int64_t ns = (int64_t)b->B * b->S, nt = (int64_t)b->B * b->T;
    if (ns > budget || nt > budget)
        return tfm_fail(err, "%s: batch %lld: %d x %d = %lld padded %s tokens exceed the batch "
                        "budget tokens=%lld: re-batch with tfm-batch --tokens %lld or less, or "
                        "raise --set tokens=N (memory grows with it)",
                        tfm_epochs_name(d), (long long)b->number, b->B, ns > budget ? b->S : b->T,
                        (long long)(ns > budget ? ns : nt), ns > budget ? "source" : "target",
                        (long long)budget, (long long)budget);
    if (b->S > run->cfg->max_len || b->T > run->cfg->max_len)
        return tfm_fail(err, "%s: batch %lld: sentences of %d tokens, longer than max_len=%d: "
                        "re-batch with tfm-batch --max-len %d or raise --set max_len",
                        tfm_epochs_name(d), (long long)b->number, b->S > b->T ? b->S : b->T,
                        run->cfg->max_len, run->cfg->max_len);
    return 0;
}

/* A report; a --log that cannot be written (a full disk) does not fail the update: the
 * run stops at the next one, saving its checkpoint first, and then reports the error. */
static int log_report(struct run *run, const struct tfm_progress_row *row)
{
    struct tfm_error e;
    if (tfm_progress_report(&run->prog, row, &e) && !run->log_failed) {
        run->log_failed = 1;
        run->log_err = e;
    }
    return 0;
}

/* Greedy translations of batch b scored against its targets into bleu: what tfm-decode
 * --beam 1 and tfm-score would say of the validation set. */
static int bleu_batch(struct run *run, const struct tfm_batch_copy *b, const struct tfm_spm *spm,
                      struct tfm_bleu *bleu, struct tfm_error *err)
{
    struct tfm_beam_opts o;
    tfm_beam_defaults(&o);
    o.beam = 1;
    o.min_len = run->cfg->min_len;
    struct tfm_hyps h;
    char *hyp = NULL, *ref = NULL;
    size_t hcap = 0, rcap = 0;
    int rc = tfm_decode_sources(run->rep[0].m, b->B, b->S, b->src, &o, run->cfg->max_len_b, &h,
                                err);
    for (int i = 0; rc == 0 && i < b->B; i++) {
        int64_t nh = tfm_hyp_decode_line(spm, h.ids + h.offsets[i],
                                         h.offsets[i + 1] - h.offsets[i], &hyp, &hcap, err);
        int64_t nr = nh < 0 ? -1 : tfm_hyp_decode_line(spm, b->tgt + (size_t)i * b->T, b->T,
                                                       &ref, &rcap, err); /* pad, eos ignored */
        const char *refs[1] = {ref};
        size_t lens[1] = {(size_t)nr};
        if (nr < 0 || tfm_bleu_add(bleu, hyp, (size_t)nh, 1, refs, lens, err))
            rc = -1;
    }
    tfm_hyps_free(&h);
    free(hyp);
    free(ref);
    return rc;
}

/* After a validation: is it the best so far (higher BLEU with --valid-bleu, else lower
 * perplexity)?  early_stop validations in a row that are not stop the run. */
static void early_stop(struct run *run, const struct tfm_progress_row *row)
{
    double score = run->o->valid_bleu ? row->bleu : -row->ppl;
    if (!run->have_best || score > run->best) {
        run->have_best = 1;
        run->best = score;
        run->worse = 0;
    } else if (++run->worse >= run->o->early_stop && run->o->early_stop > 0) {
        run->early = 1;
    }
}

static int validate(struct run *run, struct tfm_error *err)
{
    struct tfm_epochs d = {.path = run->o->valid_path, .rank = 0, .world = 1};
    struct tfm_batch_copy b = {0};
    struct tfm_loss sum = {0};
    struct tfm_spm *spm = NULL;
    struct tfm_bleu *bleu = NULL;
    int rc = -1, k;
    if (tfm_epochs_open(&d, err))
        goto out;
    if (run->o->valid_bleu) {
        struct tfm_bleu_opts bo;
        tfm_bleu_opts_default(&bo);
        if (!d.header.spm) {
            tfm_fail(err, "%s: no vocabulary in the stream: --valid-bleu needs it to "
                     "detokenize", tfm_epochs_name(&d));
            goto out;
        }
        if (!(spm = tfm_spm_load(d.header.spm, d.header.spm_size, err)) ||
            !(bleu = tfm_bleu_new(&bo, err)))
            goto out;
    }
    while ((k = tfm_epochs_next(&d, &b, err)) == 1) {
        struct tfm_loss l;
        if (check_batch(run, &d, &b, err))
            goto out;
        if (tfm_model_eval_batch(run->rep[0].m, b.B, b.S, b.T, b.src, b.tgt, &l, err) ||
            (bleu && bleu_batch(run, &b, spm, bleu, err))) {
            tfm_error_prefix(err, "%s: batch %lld", tfm_epochs_name(&d), (long long)b.number);
            goto out;
        }
        sum.loss += l.loss;
        sum.nll += l.nll;
        sum.tokens += l.tokens;
    }
    if (k < 0)
        goto out;
    if (sum.tokens == 0) {
        tfm_fail(err, "%s: no target tokens to validate on", tfm_epochs_name(&d));
        goto out;
    }
    struct tfm_progress_row row = {
        .valid = 1, .step = run->step, .loss = sum.loss / (double)sum.tokens,
        .ppl = exp(sum.nll / (double)sum.tokens), .elapsed = elapsed(run), .tokens = sum.tokens,
    };
    if (bleu) {
        struct tfm_bleu_opts bo;
        struct tfm_bleu_score sc;
        tfm_bleu_opts_default(&bo);
        tfm_bleu_compute(tfm_bleu_stats(bleu), &bo, &sc);
        row.has_bleu = 1;
        row.bleu = sc.score;
        run->res->valid_bleu = row.bleu;
    }
    run->res->valid_loss = row.loss;
    run->res->valid_ppl = row.ppl;
    run->valid_step = run->step;
    early_stop(run, &row);
    rc = log_report(run, &row);
out:
    tfm_epochs_close(&d);
    tfm_bleu_free(bleu);
    tfm_spm_free(spm);
    free(b.src);
    free(b.tgt);
    return rc;
}

static int report(struct run *run)
{
    if (run->iv_tokens == 0)
        return 0;
    double t = tfm_now();
    struct tfm_progress_row row = {
        .step = run->step, .loss = run->iv_loss / (double)run->iv_tokens,
        .ppl = exp(run->iv_nll / (double)run->iv_tokens), .lr = tfm_optim_lr(run->cfg, run->step),
        .tokens_per_s = t > run->iv_time ? (double)run->iv_tokens / (t - run->iv_time) : 0,
        .elapsed = elapsed(run), .tokens = run->tokens,
    };
    run->res->loss = row.loss;
    run->iv_loss = run->iv_nll = 0;
    run->iv_tokens = 0;
    run->iv_time = t;
    return log_report(run, &row);
}

/* Rank 0, before update step+1: stop, or read its K*R batches into the slots. */
static void plan_update(struct run *run)
{
    const struct tfm_train_opts *o = run->o;
    if ((o->stop && *o->stop) || run->log_failed) {
        run->end = TFM_TRAIN_STOPPED;
        return;
    }
    if (run->early) {
        run->end = TFM_TRAIN_EARLY_STOP;
        return;
    }
    if (run->cfg->max_steps > 0 && run->step >= run->cfg->max_steps) {
        run->end = TFM_TRAIN_MAX_STEPS;
        return;
    }
    if (o->max_time > 0 && tfm_now() - run->t0 >= o->max_time) {
        run->end = TFM_TRAIN_MAX_TIME;
        return;
    }
    const int n = run->K * run->R;
    int64_t epoch = run->train.epoch;
    int restarted = 0;
    for (int i = 0; i < n; i++) {
        int k = tfm_epochs_next(&run->train, &run->slots[i], &run->err);
        if (k == 0 && run->step == run->start_step) {
            /* a piped stream that ends before the first update: nothing to train on (a
             * file without batches is refused when it is read again, tfm_epochs_next) */
            int64_t read = run->train.pos - run->start_pos;
            if (read == 0 && run->start_pos == 0)
                tfm_fail(&run->err, "%s: no batch in the stream: nothing to train on",
                         tfm_epochs_name(&run->train));
            else if (read == 0)
                tfm_fail(&run->err, "%s: no batch after the %lld already trained on: nothing to "
                         "train on", tfm_epochs_name(&run->train), (long long)run->start_pos);
            else
                tfm_fail(&run->err, "%s: the stream ended after %lld batch%s, before the first "
                         "update (%d batches each): nothing trained", tfm_epochs_name(&run->train),
                         (long long)read, read > 1 ? "es" : "", run->K * run->R);
            run->failed = 1;
            return;
        }
        if (k == 0) {
            run->end = TFM_TRAIN_DATA_END;
            return;
        }
        if (k < 0 && o->stop && *o->stop) {   /* the signal came while a pipe was silent */
            run->end = TFM_TRAIN_STOPPED;
            return;
        }
        if (k < 0 || check_batch(run, &run->train, &run->slots[i], &run->err)) {
            run->failed = 1;
            return;
        }
        if (run->train.epoch != epoch) {  /* the file began again with slot i's batch */
            epoch = run->train.epoch;
            if (i == 0)
                continue;
            /* An epoch holds whole updates: the batches read for this one before the file
             * ended go to none, and the update starts again with the new epoch's first.
             * Each process's share of an epoch is the same count, so all of them do this
             * at the same update, and one process of N ranks drops what N processes drop:
             * the batches after the epoch's last whole update of K*N. */
            if (restarted) {
                tfm_fail(&run->err, "%s: an epoch of the stream gives fewer batches than the "
                         "%d of one update (update_freq %d x %d rank%s): re-batch with a "
                         "smaller --tokens, or lower --update-freq", tfm_epochs_name(&run->train),
                         n, run->K, run->R, run->R > 1 ? "s" : "");
                run->failed = 1;
                return;
            }
            restarted = 1;
            struct tfm_batch_copy first = run->slots[i];
            run->slots[i] = run->slots[0];
            run->slots[0] = first;
            i = 0;
        }
    }
}

/* Rank 0, after update step: counters, reports, validation, checkpoint. */
static int after_update(struct run *run, const struct update_sums *sums, struct tfm_error *err)
{
    const struct tfm_train_opts *o = run->o;
    run->tokens += (int64_t)sums->tokens;
    run->iv_loss += sums->loss;
    run->iv_nll += sums->nll;
    run->iv_tokens += (int64_t)sums->tokens;
    if (run->step % o->report_every == 0 && report(run))
        return -1;
    if (run->g != 0)              /* process 0 validates and saves for the run */
        return 0;
    double t = tfm_now();
    if (o->valid_path && o->valid_every > 0 && run->step % o->valid_every == 0 && validate(run, err))
        return keep_updates(run, err);
    if (((run->cfg->save_every > 0 && run->step % run->cfg->save_every == 0) ||
         (o->save_every_sec > 0 && tfm_now() - run->last_save >= o->save_every_sec)) &&
        save_checkpoint(run, err))
        return tfm_error_prefix(err, "update %lld", (long long)run->step);
    /* tok/s is the rate of training: the interval of the next report leaves out the time
     * spent validating and saving */
    run->iv_time += tfm_now() - t;
    return 0;
}

/* FNV-1a of n bytes on top of h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

/* Processes, once they have met and before any model or GPU communicator exists: every
 * one must run the same version of tfm-train with the same config, batch stream (its
 * header: vocabulary, budget, counts), layout of ranks and accumulation, gradient buckets
 * and resume point (ck, or none), or their sums would mix different models or different
 * parameters, take overlapping batches, or (GPUs) open communicators of different sizes
 * that never start.  The part that differs first, in that order, is named. */
static int same_start(struct run *run, const struct tfm_checkpoint *ck, struct tfm_error *err)
{
    enum { VERSION, CONFIG, STREAM, LAYOUT, BUCKETS, RESUME, NPARTS };
    static const char *const what[NPARTS] = {
        "tfm-train version", "config",
        "batch stream (its header)", "layout (--ranks, --update-freq, GPUs or CPU)",
        "gradient bucket size (TFM_BUCKET_MB)",
        "resume point (the newest checkpoint of -o DIR)"};
    const uint64_t basis = 1469598103934665603ull;
    uint64_t h[NPARTS];
    h[VERSION] = fnv(basis, TFM_VERSION, sizeof TFM_VERSION);
    h[CONFIG] = fnv(basis, run->config_text, strlen(run->config_text));
    const struct tfm_header *hd = &run->train.header;
    h[STREAM] = fnv(basis, hd->kind, strlen(hd->kind));
    for (int i = 0; i < hd->nmeta; i++) {
        h[STREAM] = fnv(h[STREAM], hd->keys[i], strlen(hd->keys[i]) + 1);
        h[STREAM] = fnv(h[STREAM], hd->values[i], strlen(hd->values[i]) + 1);
    }
    /* GPU ranks sum with NCCL, whose communicators all processes open together; CPU and
     * sim ranks through host memory: a process whose GPU failed its check under auto,
     * computing on the CPU, cannot sum with GPU processes */
    const struct tfm_train_opts *o = run->o;
    int64_t layout[] = {run->R, run->K,
                        o->backends && o->backends[0]->kind == TFM_BACKEND_CUDA};
    h[LAYOUT] = fnv(basis, layout, sizeof layout);
    /* the sums over the processes go bucket by bucket, as bytes along the chain: buckets of
     * other sizes would add one process's gradients to another's of other parameters */
    uint64_t bucket = run->bucket;
    h[BUCKETS] = fnv(basis, &bucket, sizeof bucket);
    const struct tfm_ckpt_state *st = ck ? &ck->state : &(struct tfm_ckpt_state){0};
    int64_t at[] = {st->step, st->epoch, st->batch_pos, st->shard_pos, st->tokens,
                    st->nrng > 0 ? (int64_t)st->rng[0] : 0};     /* no checkpoint: all 0 */
    h[RESUME] = fnv(basis, at, sizeof at);
    double *all = calloc((size_t)run->W * NPARTS, sizeof *all);
    if (!all)
        return tfm_fail(err, "out of memory");
    for (int i = 0; i < NPARTS; i++)
        all[(size_t)run->g * NPARTS + i] = (double)(h[i] >> 12);   /* 52 bits: exact */
    int rc = tfm_comm_sum_f64(run->procs, 0, all, (size_t)run->W * NPARTS, err);
    for (int w = 1; rc == 0 && w < run->W; w++)
        for (int i = 0; i < NPARTS && rc == 0; i++)
            if (all[(size_t)w * NPARTS + i] != all[i])
                rc = tfm_fail(err, "process %d does not start where process 0 does: its %s "
                              "differs: give every process the same tfm-train, options and "
                              "files, and a checkpoint directory they all see%s", w, what[i],
                              tfm_comm_met_by_file(run->procs) ? " (or, if it is a process of "
                              "another run, that run a TFM_RENDEZVOUS file of its own)" : "");
    free(all);
    return rc;
}

/* Processes, after each one's plan_update (every local rank calls it; rank r of this
 * process): stop together, for the first reason any of them has (a signal, the time limit,
 * the data's end), or because one failed.  *stop: this update is not to be done. */
/* What each process says before an update, summed over the processes as doubles. */
struct vote {
    double ends[TFM_TRAIN_ENDS];    /* processes with each reason to end (0 unused) */
    double failed;                  /* processes that failed */
};
_Static_assert(sizeof(struct vote) == (TFM_TRAIN_ENDS + 1) * sizeof(double), "no padding");

static int agree(struct run *run, int r, int *stop, struct tfm_error *err)
{
    struct vote v = {{0}, 0};
    if (r == 0) {
        if (run->end > 0 && run->end < TFM_TRAIN_ENDS)
            v.ends[run->end] = 1;
        v.failed = run->failed;
    }
    if (tfm_comm_sum_f64(run->comm, r, (double *)&v, sizeof v / sizeof(double), err))
        return -1;
    enum tfm_train_end end = 0;
    for (int k = 1; k < TFM_TRAIN_ENDS && !end; k++)
        if (v.ends[k] > 0)
            end = k;
    *stop = end || v.failed > 0;
    if (r == 0) {
        if (v.failed > 0 && !run->failed) {
            run->failed = 1;
            tfm_fail(&run->err, "another process of the run failed (see its messages)");
        }
        if (!run->end)
            run->end = end;
    }
    return 0;
}

static int rank_main(int r, void *arg)
{
    struct replica *p = arg;
    struct run *run = p->run;
    const int N = run->R * run->W, gr = run->g * run->R + r;      /* ranks in all, this one's */
    if (p->be->bind)
        p->be->bind(p->be);
    for (;;) {
        if (r == 0)
            plan_update(run);
        int stop;
        if (run->W > 1) {
            if (agree(run, r, &stop, &p->err)) {
                run->unagreed |= r == 0;
                return -1;
            }
        } else {
            if (tfm_comm_barrier(run->comm, r, &p->err))
                return -1;
            stop = run->end || run->failed;
        }
        if (stop)
            return 0;
        struct update_sums sums = {0, 0, 0, 0, 0};
        for (int j = 0; j < run->K && !sums.failed; j++) {
            const struct tfm_batch_copy *b = &run->slots[j * run->R + r];
            struct tfm_loss l;
            uint64_t rng_step = (uint64_t)(run->counter + j * N + gr);
            if (N > 1 && j == run->K - 1) {       /* its backward sums the finished buckets */
                p->armed = 1;
                p->hi = (size_t)tfm_model_count(p->m);
            }
            /* its loss stays on the device, in the step's statistics (model.h) */
            if (tfm_model_train_batch_dev(p->m, b->B, b->S, b->T, b->src, b->tgt, rng_step, &l,
                                          &p->err)) {
                tfm_error_prefix(&p->err, "%s: batch %lld", tfm_epochs_name(&run->train),
                                 (long long)b->number);
                if (N > 1) {    /* the others may be summing buckets already: stop them */
                    tfm_comm_abort(run->comm, p->err.msg);
                    return -1;
                }
                sums.failed = 1;
                break;
            }
            sums.tokens += (double)l.tokens;
            sums.src_tokens += (double)l.src_tokens;
        }
        /* read before the last collective of the update: past it, rank 0 moves run->step on
         * (after its optimizer step) while the others may not have reached this line */
        int64_t step = run->step + 1;
        if (p->sum_failed) {    /* a bucket's sum failed during the backward pass */
            p->err = p->sum_err;
            p->sum_failed = p->armed = 0;
            tfm_error_prefix(&p->err, "update %lld: summing the gradients", (long long)step);
            tfm_comm_abort(run->comm, p->err.msg);
            return -1;
        }
        /* the token counts (the host's) and failures; the losses are summed below */
        if (tfm_comm_sum_f64(run->comm, r, (double *)&sums, sizeof sums / sizeof(double),
                             &p->err))
            return -1;
        if (sums.failed > 0)
            return p->err.msg[0] ? -1 : 1;     /* the failing ranks carry the message */
        /* The update and the step's one read of the device: its statistics (optim.h) */
        struct tfm_optim_stats st;
        int rc = tfm_optim_step(p->m, step, (int64_t)sums.tokens, &st, &p->err);
        if (st.read) {
            /* the loss of the update: every rank's, summed over the ranks in rank order as
             * the token counts are; a loss that is not finite is named before the gradient
             * norm that it makes not finite too */
            double ln[2] = {st.loss, st.nll};
            if (N > 1 && tfm_comm_sum_f64(run->comm, r, ln, 2, &p->err))
                return -1;
            sums.loss = ln[0];
            sums.nll = ln[1];
            if (!isfinite(sums.loss) || !isfinite(sums.nll)) {
                tfm_fail(&p->err, "update %lld: the loss is %s: stopping without a checkpoint "
                         "(lower lr_scale, raise warmup, or set clip_norm)", (long long)step,
                         isnan(sums.loss) || isnan(sums.nll) ? "NaN" : "Inf");
                return -1;
            }
        }
        if (rc) {
            char msg[sizeof p->err.msg];
            memcpy(msg, p->err.msg, sizeof msg);
            tfm_fail(&p->err, "update %lld: %.900s; stopping without a checkpoint",
                     (long long)step, msg);
            return -1;
        }
        if (r == 0) {
            run->step = step;
            run->counter += (int64_t)run->K * N;       /* micro-batches of all processes */
            /* nothing is read between plan_update and here: the update's reads end there */
            run->done_epoch = run->train.epoch;
            run->done_pos = run->train.pos;
            if (after_update(run, &sums, &p->err)) {
                tfm_comm_abort(run->comm, p->err.msg);
                return -1;
            }
        }
    }
}

/* ---- setting up ------------------------------------------------------------------------ */

static double physical_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? (double)pages * (double)size : 0;
}

/* Can path be read again from its start: a regular file (also through a link, such as
 * /dev/stdin redirected from a file), not a pipe, a FIFO or a terminal?  Not one: 0, and
 * opening it says why when it cannot be read. */
static int regular_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The batches of this process's shard that the checkpoint's position in its epoch stands
 * for.  The ranks of the run take the stream's batches in turns of N = R*W, R to a process,
 * so a position of whole turns is one of every layout with N ranks in all: W processes of
 * R ranks resume what one process of R*W ranks wrote, and the reverse.  One process reads
 * the stream without turns, so it resumes any position; several need whole turns.  A
 * checkpoint of state layout 1 counted one process's shard: it resumes in its own layout. */
static int shard_position(const struct run *run, const struct tfm_ckpt_state *st,
                          const char *path, int64_t *pos, struct tfm_error *err)
{
    const int64_t N = (int64_t)run->R * run->W;
    *pos = st->batch_pos;
    if (st->shard_pos || run->W == 1)
        return 0;
    if (st->batch_pos % N != 0)
        return tfm_fail(err, "%s: the run has trained on %lld batches of epoch %lld, which "
                        "%d processes of %d rank%s cannot take up: they read the stream in "
                        "turns of %lld; resume with one process (--ranks %lld), or as many "
                        "ranks in all as the run that wrote it", path,
                        (long long)st->batch_pos, (long long)st->epoch, run->W, run->R,
                        run->R > 1 ? "s" : "", (long long)N, (long long)N);
    *pos = st->batch_pos / run->W;
    return 0;
}

/* The batches of a stream whose header says they fit a larger budget than the config's
 * are refused before training, not at the first one too large. */
static int fits_budget(const struct tfm_header *h, const char *name,
                       const struct tfm_config *cfg, struct tfm_error *err)
{
    int64_t budget = tfm_header_int(h, "tokens");
    if (budget > cfg->tokens)
        return tfm_fail(err, "%s: batches of up to %lld tokens, more than the batch budget "
                        "tokens=%d: re-batch with tfm-batch --tokens %d or less, or raise "
                        "--set tokens=N (memory grows with it)", name, (long long)budget,
                        cfg->tokens, cfg->tokens);
    return 0;
}

static int setup(struct run *run, struct tfm_checkpoint **ck, struct tfm_error *err)
{
    const struct tfm_train_opts *o = run->o;
    struct tfm_config *cfg = run->cfg;
    char resume_path[4096] = "";
    if (tfm_checkpoint_dir_ready(o->out_dir, &run->created_dir, err))
        return -1;
    /* one run at a time in the directory; process 0 writes the checkpoints, and holds it
     * (or its caller does, o->lock, having read the config of its newest checkpoint) */
    if (run->g == 0 && !o->lock && !(run->lock = tfm_checkpoint_lock(o->out_dir, err)))
        return -1;
    int removed = run->g == 0 ? tfm_checkpoint_clean(o->out_dir, err) : 0;
    if (removed < 0)
        return -1;
    if (removed > 0 && o->notes)
        fprintf(o->notes, "%s: %s: removed %d unfinished file%s of a killed run\n", o->prog,
                o->out_dir, removed, removed > 1 ? "s" : "");
    int found = tfm_checkpoint_find_last(o->out_dir, resume_path, sizeof resume_path, err);
    if (found < 0)
        return -1;
    if (found && !o->resume)
        return tfm_fail(err, "%s: holds checkpoints (newest %s): use --resume to continue, or "
                        "another directory", o->out_dir, resume_path);
    if (found) {
        if (!(*ck = tfm_checkpoint_load(resume_path, 0, err)))
            return tfm_error_prefix(err, "cannot resume");
        /* the newest checkpoint, until this run saves one */
        snprintf(run->res->last_checkpoint, sizeof run->res->last_checkpoint, "%s", resume_path);
    }

    /* the training stream and its vocabulary */
    run->train.path = o->train_path && strcmp(o->train_path, "-") != 0 ? o->train_path : NULL;
    run->train.repeat = run->train.path && regular_file(run->train.path);
    run->train.stop = o->stop;
    if (run->W > 1) {             /* this process's ranks' batches (batch.h) */
        run->train.world = run->R * run->W;
        run->train.rank = run->g * run->R;
        run->train.count = run->R;
    } else {                    /* every batch: the slots give them to the ranks */
        run->train.world = 1;
        run->train.count = 1;
    }
    if (run->W > 1 && !run->train.path)
        return tfm_fail(err, "%d processes: each reads its own shard of the batch stream, so "
                        "it must be a file, not standard input", run->W);
    if (tfm_epochs_open(&run->train, err)) {
        if (o->stop && *o->stop)    /* a pipe that had not yet said what it holds */
            return tfm_fail(err, "%s: stopped by a signal while waiting for the batch "
                            "stream: nothing trained", tfm_epochs_name(&run->train));
        return -1;
    }
    const struct tfm_header *h = &run->train.header;
    /* the pieces of the stream's embedded vocabulary (0 when it has none) */
    int vocab = h->spm ? tfm_spm_proto_vocab_size(h->spm, h->spm_size, err) : 0;
    if (vocab < 0)
        return tfm_error_prefix(err, "%s: vocabulary", tfm_epochs_name(&run->train));
    if (cfg->vocab == 0 && *ck) {
        struct tfm_config ckc;
        if (tfm_checkpoint_config(*ck, &ckc, err))
            return tfm_error_prefix(err, "cannot resume");
        cfg->vocab = ckc.vocab;
    }
    if (cfg->vocab == 0)
        cfg->vocab = vocab;
    if (cfg->vocab == 0)
        return tfm_fail(err, "%s: the stream carries no vocabulary: give --set vocab=N",
                        tfm_epochs_name(&run->train));
    if (vocab && vocab != cfg->vocab)
        return tfm_fail(err, "%s: vocabulary of %d pieces, config says vocab=%d",
                        tfm_epochs_name(&run->train), vocab, cfg->vocab);
    run->vocab_id = tfm_header_vocab_id(h);
    if (fits_budget(h, tfm_epochs_name(&run->train), cfg, err))
        return -1;
    if (tfm_config_check(cfg, 1, err))
        return tfm_error_prefix(err, "config");
    if (*ck) {
        struct tfm_config ckc;
        if (tfm_checkpoint_config(*ck, &ckc, err))
            return tfm_error_prefix(err, "cannot resume");
        if (tfm_checkpoint_same_config(cfg, &ckc, resume_path, err))
            return -1;
        /* the parameters and Adam moments of exactly that model, before any memory */
        if (tfm_checkpoint_check(*ck, &ckc, 1, err))
            return tfm_error_prefix(err, "cannot resume");
        uint32_t cv = tfm_header_vocab_id(&(*ck)->header);
        if (cv != run->vocab_id)
            return tfm_fail(err, "%s: vocabulary mismatch: the batches have vocabulary crc "
                            "%08x, checkpoint %s has %08x", tfm_epochs_name(&run->train), run->vocab_id,
                            resume_path, cv);
    }
    /* one that is not there, or cannot be read, is named by opening it below */
    struct stat vst;
    if (o->valid_path && stat(o->valid_path, &vst) == 0 && !S_ISREG(vst.st_mode))
        return tfm_fail(err, "--valid %s: %s, not a regular file: the validation batches are "
                        "read again at every validation", o->valid_path,
                        S_ISDIR(vst.st_mode) ? "a directory" :
                        S_ISFIFO(vst.st_mode) ? "a pipe, read once" : "a device or socket");
    if (o->valid_path) {
        /* what would fail the first validation, hours into training, fails now */
        struct tfm_epochs v = {.path = o->valid_path, .world = 1};
        int rc = tfm_epochs_open(&v, err);
        if (rc == 0 && tfm_header_vocab_id(&v.header) != run->vocab_id)
            rc = tfm_fail(err, "%s: vocabulary mismatch with the training batches %s",
                          o->valid_path, tfm_epochs_name(&run->train));
        if (rc == 0)
            rc = fits_budget(&v.header, o->valid_path, cfg, err);
        if (rc == 0 && tfm_batch_count(v.r) == 0)
            rc = tfm_fail(err, "%s: no batch in the stream: nothing to validate on",
                          o->valid_path);
        tfm_epochs_close(&v);
        if (rc)
            return -1;
    }

    /* the checkpoint header: the stream's vocabulary, the producer, the layout */
    tfm_header_init(&run->ck_header, TFM_KIND_CHECKPOINT);
    if ((h->spm && tfm_header_set_spm(&run->ck_header, h->spm, h->spm_size, err)) ||
        tfm_header_set(&run->ck_header, "producer", "tfm-train " TFM_VERSION, err) ||
        tfm_header_setf(&run->ck_header, err, "ranks", "%d", run->R * run->W) ||
        tfm_header_setf(&run->ck_header, err, "update_freq", "%d", run->K))
        return -1;
    if (!(run->config_text = tfm_config_format(cfg)))
        return tfm_fail(err, "out of memory");

    /* host memory: R replicas (on a GPU: in its memory) and the checkpoint staging
     * buffer.  The model's part (parameters, gradients, Adam moments, the weights'
     * compute copy, the staging buffer) is the same at every batch budget; only the
     * activations' shrinks with it, so the advice follows the part that is over. */
    double limit = o->memory_limit > 0 ? o->memory_limit : physical_memory();
    double acts = o->backends ? 0 : (double)tfm_model_activation_memory(cfg, cfg->tokens) * run->R;
    double model = (o->backends ? 0 : (double)tfm_model_memory(cfg, cfg->tokens) * run->R - acts) +
                   (double)tfm_model_param_memory(cfg) / 4;
    const double GiB = 1073741824.0;
    if (limit > 0 && model > limit)
        return tfm_fail(err, "the model needs %.2f GiB for its parameters, gradients and Adam "
                        "moments alone (%d rank%s), more than the %.2f GiB available, at any "
                        "batch budget: train a smaller model (d_model, d_ff, layers, vocab)%s "
                        "or %s", model / GiB, run->R, run->R > 1 ? "s" : "", limit / GiB,
                        run->R > 1 && !o->backends ? ", on fewer --ranks," : "",
                        o->memory_limit > 0 ? "raise --max-memory" :
                                              "on a machine with more memory");
    if (limit > 0 && model + acts > limit)
        return tfm_fail(err, "the model with a batch budget of tokens=%d needs %.2f GiB "
                        "(%d rank%s: %.2f GiB the model, %.2f GiB the activations), more than "
                        "the %.2f GiB available: lower the budget (--set tokens=N and tfm-batch "
                        "--tokens N) or --ranks", cfg->tokens, (model + acts) / GiB, run->R,
                        run->R > 1 ? "s" : "", model / GiB, acts / GiB, limit / GiB);

    /* ranks: a backend and a model replica each */
    int threads = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    int per = threads / run->R > 0 ? threads / run->R : 1;
    if (per > TFM_CPU_MAX_THREADS)      /* the most one CPU backend runs */
        per = TFM_CPU_MAX_THREADS;
    if (!(run->comm = tfm_comm_threads(run->R, err)) ||
        (run->W > 1 && !(run->procs = tfm_comm_procs(run->g, run->W, &(struct tfm_dist_watch){
                                                      o->stop, o->notes, o->prog}, err))))
        return -1;
    if (run->procs && same_start(run, *ck, err))
        return -1;
    if (run->procs)
        tfm_comm_stack(run->comm, run->procs);
    if (!(run->rep = calloc((size_t)run->R, sizeof *run->rep)) ||
        !(run->slots = calloc((size_t)run->R * (size_t)run->K, sizeof *run->slots)))
        return tfm_fail(err, "out of memory");
    for (int r = 0; r < run->R; r++) {
        struct replica *p = &run->rep[r];
        p->run = run;
        p->rank = r;
        if (o->backends) {
            p->be = o->backends[r];
            if (p->be->bind)
                p->be->bind(p->be);
        } else if (!(p->be = tfm_backend_cpu(per, err))) {
            return -1;
        }
        if (run->R * run->W > 1) {
            p->be->all_reduce = all_reduce;
            p->be->grads_ready = grads_ready;
            p->be->all_reduce_ctx = p;
        }
        if (!(p->m = tfm_model_create(cfg, p->be, cfg->tokens, err))) {
            if (o->backends)
                return tfm_error_prefix(err, "the model with a batch budget of tokens=%d on "
                                        "%s %d (lower it with --set tokens=N and tfm-batch "
                                        "--tokens N)", cfg->tokens, p->be->name, r);
            return -1;
        }
        if (*ck && tfm_checkpoint_to_model(*ck, p->m, 1, err))
            return tfm_error_prefix(err, "cannot resume");
        if (run->R * run->W > 1 && p->be->kind == TFM_BACKEND_SIM &&
            !(p->stage = malloc((size_t)tfm_model_count(p->m) * sizeof *p->stage)))
            return tfm_fail(err, "out of memory");
    }
    /* GPU ranks: NCCL communicators, process 0's id passed over the processes' links */
    if (run->R * run->W > 1 && o->backends && o->backends[0]->kind == TFM_BACKEND_CUDA) {
        unsigned char id[TFM_GPU_COMM_ID_BYTES];
        struct tfm_gpu_comm *c[TFM_DIST_MAX_LOCAL];
        if (tfm_gpu_comm_id(run->procs, run->g == 0, id, err) ||
            tfm_gpu_comm_open(o->backends, run->R, id, run->R * run->W, run->g * run->R, run->timeout, c,
                              err))
            return tfm_error_prefix(err, "the GPUs' communicators (NCCL)");
        for (int r = 0; r < run->R; r++)
            run->rep[r].nccl = c[r];
    }
    /* the parameters' copy that checkpoints are written from */
    size_t host_bytes = (size_t)tfm_model_count(run->rep[0].m) * sizeof *run->host;
    struct tfm_backend *be0 = run->rep[0].be;
    if (be0->host_room && be0->host_room(be0, host_bytes, err))
        return tfm_error_prefix(err, "the checkpoint buffer");
    if (!(run->host = malloc(host_bytes)))
        return tfm_fail(err, "out of memory");

    /* where the data and the counters stand */
    if (*ck) {
        const struct tfm_ckpt_state *st = &(*ck)->state;
        if (st->nrng != 1)
            return tfm_fail(err, "%s: state has %d rng words, tfm-train writes 1", resume_path,
                            st->nrng);
        run->step = st->step;
        run->counter = (int64_t)st->rng[0];
        run->tokens = st->tokens;
        run->elapsed0 = (double)st->elapsed_ms / 1000;
        run->saved_step = run->step;
        if (!run->train.repeat && (st->epoch > 0))     /* a pipe cannot go back to epoch 0 */
            return tfm_fail(err, "%s: the checkpoint is in epoch %lld of its stream, and a "
                            "pipe is read once: resume from a regular file",
                            tfm_epochs_name(&run->train), (long long)st->epoch);
        int64_t pos;
        if (shard_position(run, st, resume_path, &pos, err) ||
            tfm_epochs_skip(&run->train, st->epoch, pos, err))
            return -1;
        if (o->notes)
            fprintf(o->notes, "%s: resuming from %s: update %lld, epoch %lld, batch %lld\n",
                    o->prog, resume_path, (long long)st->step, (long long)st->epoch,
                    (long long)(st->shard_pos ? st->batch_pos * run->W : st->batch_pos));
    }
    run->start_step = run->step;
    run->start_pos = run->train.pos;
    run->done_epoch = run->train.epoch;
    run->done_pos = run->train.pos;
    return 0;
}

int tfm_train_run(struct tfm_config *cfg, const struct tfm_train_opts *o,
                  struct tfm_train_result *res, struct tfm_error *err)
{
    memset(res, 0, sizeof *res);
    res->valid_loss = res->valid_ppl = res->valid_bleu = -1;
    if (o->update_freq < 1 || o->ranks < 1 || o->ranks > TFM_DIST_MAX_LOCAL || o->report_every < 1)
        return tfm_fail(err, "bad update_freq %d, ranks %d or report interval", o->update_freq,
                        o->ranks);
    struct run run = {.o = o, .cfg = cfg, .res = res, .R = o->ranks, .K = o->update_freq,
                    .W = o->world > 1 ? o->world : 1, .g = o->world_rank,
                    .saved_step = -1, .valid_step = -1};
    if (run.g < 0 || run.g >= run.W)
        return tfm_fail(err, "process %d of %d", run.g, run.W);
    if (bucket_floats(&run.bucket, err) || tfm_gpu_comm_timeout(&run.timeout, err))
        return -1;
    struct tfm_checkpoint *ck = NULL;
    int rc = setup(&run, &ck, err);
    tfm_checkpoint_free(ck);
    if (rc == 0)
        rc = tfm_progress_open(&run.prog, o->prog, o->progress, o->log_path, err);
    if (rc == 0) {
        run.t0 = run.last_save = run.iv_time = tfm_now();
        run.prog.valid_out = o->notes;
        run.prog.max_steps = cfg->max_steps;
        run.prog.max_time = o->max_time > 0 ? run.elapsed0 + o->max_time : 0;
        run.prog.start_step = run.step;
        run.prog.start_elapsed = run.elapsed0;
        void *args[TFM_DIST_MAX_LOCAL];
        for (int r = 0; r < run.R; r++)
            args[r] = &run.rep[r];
        int bad = tfm_dist_run(run.R, rank_main, args, run.comm, err);
        if (bad < 0) {
            rc = -1;
        } else if (run.failed) {
            *err = run.err;
            rc = keep_updates(&run, err);
        } else if (bad > 0) {
            /* the first rank with a message of its own (not "ranks stopped") */
            int pick = -1;
            for (int r = 0; r < run.R && pick < 0; r++)
                if (run.rep[r].err.msg[0] && strncmp(run.rep[r].err.msg, "ranks stopped", 13) != 0)
                    pick = r;
            for (int r = 0; r < run.R && pick < 0; r++)
                if (run.rep[r].err.msg[0])
                    pick = r;
            tfm_fail(err, "%s", pick >= 0 ? run.rep[pick].err.msg : "a rank failed");
            /* a neighbour gone between updates (killed, or silent after a signal, as
             * while it waits for its batches): every process did the updates so far */
            rc = run.unagreed ? keep_updates(&run, err) : -1;
        } else {
            /* a clean end: last report, validation and checkpoint of the final state */
            res->end = run.end;
            if (run.step % o->report_every != 0)
                rc = report(&run);
            if (rc == 0 && run.g == 0 && o->valid_path && run.valid_step != run.step)
                rc = validate(&run, err);
            /* a run that made no update has nothing to save: a fresh one writes no
             * checkpoint of its untrained model, a resumed one leaves its newest */
            if (rc == 0 && run.g == 0 && run.saved_step != run.step &&
                run.step != run.start_step)
                rc = save_checkpoint(&run, err);
            if (rc == 0 && run.log_failed) {
                tfm_fail(err, "%s; stopped at update %lld, its checkpoint saved",
                         run.log_err.msg, (long long)run.step);
                rc = -1;
            }
        }
        res->step = run.step;
        res->start_step = run.start_step;
        if (tfm_progress_close(&run.prog, rc ? NULL : err))
            rc = -1;
    }
    for (int r = 0; run.rep && r < run.R; r++) {
        if (run.rep[r].be && run.rep[r].be->bind)
            run.rep[r].be->bind(run.rep[r].be);
        tfm_gpu_comm_free(run.rep[r].nccl);
        tfm_model_free(run.rep[r].m);
        free(run.rep[r].stage);
        if (run.rep[r].be && !o->backends)
            run.rep[r].be->destroy(run.rep[r].be);
    }
    for (int i = 0; run.slots && i < run.R * run.K; i++) {
        free(run.slots[i].src);
        free(run.slots[i].tgt);
    }
    free(run.slots);
    free(run.rep);
    free(run.host);
    free(run.config_text);
    tfm_comm_free(run.comm);
    tfm_comm_free(run.procs);
    tfm_epochs_close(&run.train);
    if (run.ck_header.kind[0])
        tfm_header_free(&run.ck_header);
    tfm_checkpoint_unlock(run.lock);
    /* a failed run, or one that made no update, leaves no empty directory of its own
     * behind (rmdir removes only an empty one; a directory that was there before is
     * never this run's) */
    if ((rc || run.step == run.start_step) && run.created_dir)
        rmdir(o->out_dir);
    return rc;
}
