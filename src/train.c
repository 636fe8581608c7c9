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
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "batch.h"
#include "dist.h"
#include "dist_nccl.h"
#include "optim.h"
#include "progress.h"
#include "spm.h"
#include "stream.h"

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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- batches ------------------------------------------------------------------------ */

/* One padded batch, host copies.  src (B,S), tgt (B,T). */
struct batch {
    int B, S, T;
    int32_t *src, *tgt;
    size_t cap_src, cap_tgt;    /* elements */
    int64_t number;             /* position in its epoch's stream, 0-based */
};

/* A batch stream (batch.h) read from the start again at its end (a file), or to its end
 * (a pipe).  The reader gives this process its shard (rank of world). */
struct data {
    const char *path;           /* NULL: stdin */
    int rank, count, world;     /* ranks rank .. rank+count-1 of world (batch.h) */
    int repeat;                 /* reopen at the end */
    struct tfm_batch_reader *r;
    struct tfm_header header;   /* of the first opening */
    int have_header;
    int64_t epoch;              /* openings - 1 */
    int64_t pos;                /* batches of this shard read in this epoch */
};

static const char *data_name(const struct data *d)
{
    return d->path ? d->path : "<stdin>";
}

static int data_open(struct data *d, struct tfm_error *err)
{
    d->r = tfm_batch_open_ranks(d->path ? d->path : "-", d->rank, d->count > 0 ? d->count : 1,
                                d->world, err);
    if (!d->r)
        return -1;
    const struct tfm_header *h = tfm_batch_header(d->r);
    if (tfm_batch_count(d->r) != 0 && !tfm_batch_has_targets(d->r))
        return tfm_fail(err, "%s: a batch stream without targets: training needs source and "
                        "target (tfm-batch SRC.tfm TGT.tfm)", data_name(d));
    if (!d->have_header) {
        if (tfm_header_copy(&d->header, h, err))
            return -1;
        d->have_header = 1;
    } else if (tfm_header_vocab_id(h) != tfm_header_vocab_id(&d->header)) {
        return tfm_fail(err, "%s: the vocabulary changed between readings", data_name(d));
    }
    d->pos = 0;
    return 0;
}

static void data_close(struct data *d)
{
    tfm_batch_close(d->r);
    d->r = NULL;
    if (d->have_header)
        tfm_header_free(&d->header);
    d->have_header = 0;
}

static int grow(int32_t **p, size_t *cap, size_t n, struct tfm_error *err)
{
    if (n <= *cap)
        return 0;
    int32_t *q = realloc(*p, n * sizeof *q);
    if (!q)
        return tfm_fail(err, "out of memory");
    *p = q;
    *cap = n;
    return 0;
}

/* The next batch of this process's shard, copied into b: 1, 0 at the end of a pipe, -1. */
static int data_next(struct data *d, struct batch *b, struct tfm_error *err)
{
    struct tfm_batch tb;
    for (int tries = 0;; tries++) {
        int k = tfm_batch_next(d->r, &tb, err);
        if (k < 0)
            return -1;
        if (k == 1)
            break;
        if (!d->repeat)
            return 0;
        if (d->pos == 0 || tries > 0)
            return tfm_fail(err, "%s: no batch for rank %d of %d in the stream", data_name(d),
                            d->rank, d->world);
        tfm_batch_close(d->r);
        d->r = NULL;
        if (data_open(d, err))
            return -1;
        d->epoch++;
    }
    if (!tb.tgt)
        return tfm_fail(err, "%s: batch %lld has no targets: training needs them",
                        data_name(d), (long long)tb.number);
    if (tb.B > INT32_MAX || tb.S > INT32_MAX || tb.T > INT32_MAX)
        return tfm_fail(err, "%s: batch %lld: too large", data_name(d), (long long)tb.number);
    b->B = (int)tb.B;
    b->S = (int)tb.S;
    b->T = (int)tb.T;
    b->number = tb.number;
    if (grow(&b->src, &b->cap_src, (size_t)(tb.B * tb.S), err) ||
        grow(&b->tgt, &b->cap_tgt, (size_t)(tb.B * tb.T), err))
        return -1;
    memcpy(b->src, tb.src, (size_t)(tb.B * tb.S) * sizeof *b->src);
    memcpy(b->tgt, tb.tgt, (size_t)(tb.B * tb.T) * sizeof *b->tgt);
    d->pos++;
    return 1;
}

/* Position a freshly opened data at (epoch, pos). */
static int data_skip(struct data *d, int64_t epoch, int64_t pos, struct tfm_error *err)
{
    d->epoch = epoch;
    if (pos > 0 && tfm_batch_skip(d->r, pos, err))
        return tfm_error_prefix(err, "%s: cannot skip the %lld batches the checkpoint has read "
                                "in its epoch (not the stream it was trained on?)",
                                data_name(d), (long long)pos);
    d->pos = pos;
    return 0;
}

/* ---- checkpoints and configs -------------------------------------------------------------- */

int tfm_train_key_may_change(const char *key)
{
    for (int i = 0; tfm_checkpoint_run_keys[i]; i++)
        if (strcmp(key, tfm_checkpoint_run_keys[i]) == 0)
            return 1;
    return 0;
}

int tfm_train_find_resume(const char *dir, char *path, size_t n, struct tfm_error *err)
{
    char **paths;
    int64_t *steps;
    int count;
    if (access(dir, F_OK) != 0)
        return 0;
    if (tfm_checkpoint_list(dir, &paths, &steps, &count, err))
        return -1;
    int found = count > 0;
    if (found && snprintf(path, n, "%s", paths[count - 1]) >= (int)n)
        found = tfm_fail(err, "%s: path too long", paths[count - 1]);
    tfm_checkpoint_list_free(paths, steps, count);
    return found;
}

/* cfg against the checkpoint's config: only MAY_CHANGE keys may differ. */
static int same_config(const struct tfm_config *cfg, const struct tfm_config *ck, const char *path,
                       struct tfm_error *err)
{
    int n;
    const struct tfm_config_key *keys = tfm_config_keys(&n);
    for (int i = 0; i < n; i++) {
        char a[256], b[256];
        if (tfm_train_key_may_change(keys[i].name))
            continue;
        tfm_config_get(cfg, keys[i].name, a, sizeof a);
        tfm_config_get(ck, keys[i].name, b, sizeof b);
        if (strcmp(a, b) != 0)
            return tfm_fail(err, "%s: config key '%s' is %s in the checkpoint and %s now: "
                            "resume with the checkpoint's config (only max_steps, save_every "
                            "and keep may change)", path, keys[i].name, b, a);
    }
    return 0;
}

/* ---- the run -------------------------------------------------------------------------- */

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
    struct batch *slots;            /* [K*R] the batches of the update in progress */
    struct data train;
    struct tfm_header ck_header;    /* vocabulary and keys of every checkpoint */
    struct tfm_ckpt_lock *lock;     /* process 0: the checkpoint directory, for the run */
    int created_dir;                /* this process made the checkpoint directory */
    int64_t start_step, start_pos;  /* where this run started: step, batches of the epoch */
    char *config_text;
    float *host;                    /* [count] staging for a checkpoint's tensors */
    struct tfm_progress prog;
    /* decided by rank 0 before each update */
    int end;                        /* enum tfm_train_end, 0: go on */
    int failed;                     /* an error in err */
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

static double elapsed(const struct run *u)
{
    return u->elapsed0 + (now_s() - u->t0);
}

/* ---- summing the gradients over the ranks ---------------------------------------------
 *
 * In buckets (u->bucket floats), from the end of the gradient arena down, each summed as
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
    const char *v = getenv("TFM_BUCKET_MB");
    double mb = 25;
    if (v && *v) {
        char *end;
        mb = strtod(v, &end);
        if (*end || !(mb > 0) || mb > 65536)
            return tfm_fail(err, "TFM_BUCKET_MB=%s: not a size in megabytes in (0, 65536]", v);
    }
    *floats = (size_t)(mb * 1048576 / sizeof(float));
    if (*floats < 16)
        *floats = 16;
    return 0;
}

static int save_checkpoint(struct run *u, struct tfm_error *err)
{
    char path[4096];
    if (tfm_checkpoint_path(path, sizeof path, u->o->out_dir, u->step))
        return tfm_fail(err, "%s: path too long", u->o->out_dir);
    struct tfm_ckpt_state st = {
        .step = u->step, .epoch = u->train.epoch, .batch_pos = u->train.pos,
        .tokens = u->tokens, .elapsed_ms = (int64_t)(elapsed(u) * 1000), .seed = u->cfg->seed,
        .nrng = 1, .rng = {(uint64_t)u->counter},
    };
    struct tfm_model *m = u->rep[0].m;
    struct tfm_writer *w = tfm_checkpoint_begin(path, &u->ck_header, u->config_text, &st, err);
    if (!w)
        return -1;
    static const struct { const char *prefix; enum tfm_block block; } parts[] = {
        {TFM_CKPT_PARAM, TFM_PARAMS}, {TFM_CKPT_ADAM_M, TFM_ADAM_M}, {TFM_CKPT_ADAM_V, TFM_ADAM_V},
    };
    for (int k = 0; k < 3; k++) {
        tfm_model_download(m, parts[k].block, u->host);
        for (int i = 0; i < tfm_model_nparams(m); i++) {
            const struct tfm_param *p = tfm_model_param(m, i);
            if (tfm_checkpoint_put(w, parts[k].prefix, p->name, p->rank, p->dims,
                                   u->host + p->offset, err)) {
                tfm_writer_abort(w);
                return tfm_error_prefix(err, "%s", path);
            }
        }
    }
    if (tfm_writer_close(w, err) || tfm_checkpoint_link_last(u->o->out_dir, u->step, err) ||
        tfm_checkpoint_prune(u->o->out_dir, u->o->keep, err))
        return -1;
    snprintf(u->res->last_checkpoint, sizeof u->res->last_checkpoint, "%s", path);
    u->saved_step = u->step;
    u->last_save = now_s();
    if (u->o->notes)
        fprintf(u->o->notes, "%s: saved %s\n", u->o->prog, path);
    return 0;
}

static int check_batch(const struct run *u, const struct data *d, const struct batch *b,
                       struct tfm_error *err)
{
    int64_t budget = u->cfg->tokens;
    int64_t ns = (int64_t)b->B * b->S, nt = (int64_t)b->B * b->T;
    if (ns > budget || nt > budget)
        return tfm_fail(err, "%s: batch %lld: %d x %d = %lld padded %s tokens exceed the batch "
                        "budget tokens=%lld: re-batch with tfm-batch --tokens %lld or less, or "
                        "raise --set tokens=N (memory grows with it)",
                        data_name(d), (long long)b->number, b->B, ns > budget ? b->S : b->T,
                        (long long)(ns > budget ? ns : nt), ns > budget ? "source" : "target",
                        (long long)budget, (long long)budget);
    if (b->S > u->cfg->max_len || b->T > u->cfg->max_len)
        return tfm_fail(err, "%s: batch %lld: sentences of %d tokens, longer than max_len=%d: "
                        "re-batch with tfm-batch --max-len %d or raise --set max_len",
                        data_name(d), (long long)b->number, b->S > b->T ? b->S : b->T,
                        u->cfg->max_len, u->cfg->max_len);
    return 0;
}

/* A report; a --log that cannot be written (a full disk) does not fail the update: the
 * run stops at the next one, saving its checkpoint first, and then reports the error. */
static int log_report(struct run *u, const struct tfm_progress_row *row)
{
    struct tfm_error e;
    if (tfm_progress_report(&u->prog, row, &e) && !u->log_failed) {
        u->log_failed = 1;
        u->log_err = e;
    }
    return 0;
}

static int validate(struct run *u, struct tfm_error *err)
{
    struct data d = {.path = u->o->valid_path, .rank = 0, .world = 1};
    struct batch b = {0};
    struct tfm_loss sum = {0};
    int rc = -1, k;
    if (data_open(&d, err))
        goto out;
    while ((k = data_next(&d, &b, err)) == 1) {
        struct tfm_loss l;
        if (check_batch(u, &d, &b, err))
            goto out;
        if (tfm_model_eval_batch(u->rep[0].m, b.B, b.S, b.T, b.src, b.tgt, &l, err)) {
            tfm_error_prefix(err, "%s: batch %lld", data_name(&d), (long long)b.number);
            goto out;
        }
        sum.loss += l.loss;
        sum.nll += l.nll;
        sum.tokens += l.tokens;
    }
    if (k < 0)
        goto out;
    if (sum.tokens == 0) {
        tfm_fail(err, "%s: no target tokens to validate on", data_name(&d));
        goto out;
    }
    struct tfm_progress_row row = {
        .valid = 1, .step = u->step, .loss = sum.loss / (double)sum.tokens,
        .ppl = exp(sum.nll / (double)sum.tokens), .elapsed = elapsed(u), .tokens = sum.tokens,
    };
    u->res->valid_loss = row.loss;
    u->res->valid_ppl = row.ppl;
    u->valid_step = u->step;
    rc = log_report(u, &row);
out:
    data_close(&d);
    free(b.src);
    free(b.tgt);
    return rc;
}

static int report(struct run *u)
{
    if (u->iv_tokens == 0)
        return 0;
    double t = now_s();
    struct tfm_progress_row row = {
        .step = u->step, .loss = u->iv_loss / (double)u->iv_tokens,
        .ppl = exp(u->iv_nll / (double)u->iv_tokens), .lr = tfm_optim_lr(u->cfg, u->step),
        .tokens_per_s = t > u->iv_time ? (double)u->iv_tokens / (t - u->iv_time) : 0,
        .elapsed = elapsed(u), .tokens = u->tokens,
    };
    u->res->loss = row.loss;
    u->iv_loss = u->iv_nll = 0;
    u->iv_tokens = 0;
    u->iv_time = t;
    return log_report(u, &row);
}

/* Rank 0, before update step+1: stop, or read its K*R batches into the slots. */
static void plan_update(struct run *u)
{
    const struct tfm_train_opts *o = u->o;
    if ((o->stop && *o->stop) || u->log_failed) {
        u->end = TFM_TRAIN_STOPPED;
        return;
    }
    if (o->max_steps > 0 && u->step >= o->max_steps) {
        u->end = TFM_TRAIN_MAX_STEPS;
        return;
    }
    if (o->max_time > 0 && now_s() - u->t0 >= o->max_time) {
        u->end = TFM_TRAIN_MAX_TIME;
        return;
    }
    for (int i = 0; i < u->K * u->R; i++) {
        int k = data_next(&u->train, &u->slots[i], &u->err);
        if (k == 0 && u->step == u->start_step) {
            /* a piped stream that ends before the first update: nothing to train on (a
             * file without batches is refused when it is read again, data_next) */
            int64_t read = u->train.pos - u->start_pos;
            if (read == 0 && u->start_pos == 0)
                tfm_fail(&u->err, "%s: no batch in the stream: nothing to train on",
                         data_name(&u->train));
            else if (read == 0)
                tfm_fail(&u->err, "%s: no batch after the %lld already trained on: nothing to "
                         "train on", data_name(&u->train), (long long)u->start_pos);
            else
                tfm_fail(&u->err, "%s: the stream ended after %lld batch%s, before the first "
                         "update (%d batches each): nothing trained", data_name(&u->train),
                         (long long)read, read > 1 ? "es" : "", u->K * u->R);
            u->failed = 1;
            return;
        }
        if (k == 0) {
            u->end = TFM_TRAIN_DATA_END;
            return;
        }
        if (k < 0 || check_batch(u, &u->train, &u->slots[i], &u->err)) {
            u->failed = 1;
            return;
        }
    }
}

/* Rank 0, after update step: counters, reports, validation, checkpoint. */
static int after_update(struct run *u, const double *sums, struct tfm_error *err)
{
    const struct tfm_train_opts *o = u->o;
    u->tokens += (int64_t)sums[2];
    u->iv_loss += sums[0];
    u->iv_nll += sums[1];
    u->iv_tokens += (int64_t)sums[2];
    if (u->step % o->report_every == 0 && report(u))
        return -1;
    if (u->g != 0)              /* process 0 validates and saves for the run */
        return 0;
    if (o->valid_path && o->valid_every > 0 && u->step % o->valid_every == 0 && validate(u, err))
        return -1;
    if (((o->save_every_steps > 0 && u->step % o->save_every_steps == 0) ||
         (o->save_every_sec > 0 && now_s() - u->last_save >= o->save_every_sec)) &&
        save_checkpoint(u, err))
        return tfm_error_prefix(err, "update %lld", (long long)u->step);
    return 0;
}

/* Processes, before the first update: every one must have the same config, stream and
 * place in it (the same resume point), or their sums would mix different models. */
static int same_start(struct run *u, struct tfm_error *err)
{
    uint64_t h = 1469598103934665603ull;             /* FNV-1a */
    const char *t = u->config_text;
    for (; *t; t++)
        h = (h ^ (unsigned char)*t) * 1099511628211ull;
    int64_t v[] = {u->step, u->counter, u->tokens, u->train.epoch, u->train.pos, u->K,
                   (int64_t)tfm_header_vocab_id(&u->train.header)};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        for (int b = 0; b < 64; b += 8)
            h = (h ^ (uint64_t)((v[i] >> b) & 0xff)) * 1099511628211ull;
    double *all = calloc((size_t)u->W, sizeof *all);
    if (!all)
        return tfm_fail(err, "out of memory");
    all[u->g] = (double)(h >> 12);                    /* 52 bits: exact in a double */
    int rc = tfm_comm_sum_f64(u->procs, 0, all, (size_t)u->W, err);
    for (int w = 0; rc == 0 && w < u->W; w++)
        if (all[w] != all[0])
            rc = tfm_fail(err, "process %d does not start where process 0 does (config, batch "
                          "stream or resume point differ): give every process the same options "
                          "and files, and a checkpoint directory they all see", w);
    free(all);
    return rc;
}

/* Processes, after each one's plan_update (every local rank calls it; rank r of this
 * process): stop together, for the first reason any of them has (a signal, the time limit,
 * the data's end), or because one failed.  *stop: this update is not to be done. */
static int agree(struct run *u, int r, int *stop, struct tfm_error *err)
{
    double v[6] = {0};          /* [reason] = 1, [5] = failed */
    if (r == 0) {
        if (u->end > 0 && u->end < 5)
            v[u->end] = 1;
        v[5] = u->failed;
    }
    if (tfm_comm_sum_f64(u->comm, r, v, 6, err))
        return -1;
    int end = 0;
    for (int k = 1; k < 5 && !end; k++)
        if (v[k] > 0)
            end = k;
    *stop = end || v[5] > 0;
    if (r == 0) {
        if (v[5] > 0 && !u->failed) {
            u->failed = 1;
            tfm_fail(&u->err, "another process of the run failed (see its messages)");
        }
        if (!u->end)
            u->end = end;
    }
    return 0;
}

static int rank_main(int r, void *arg)
{
    struct replica *p = arg;
    struct run *u = p->run;
    const int N = u->R * u->W, gr = u->g * u->R + r;      /* ranks in all, this one's */
    if (p->be->bind)
        p->be->bind(p->be);
    for (;;) {
        if (r == 0)
            plan_update(u);
        int stop;
        if (u->W > 1) {
            if (agree(u, r, &stop, &p->err))
                return -1;
        } else {
            if (tfm_comm_barrier(u->comm, r, &p->err))
                return -1;
            stop = u->end || u->failed;
        }
        if (stop)
            return 0;
        /* sums over this rank's batches: loss, nll, tokens, src tokens, failures */
        double sums[5] = {0};
        for (int j = 0; j < u->K && !sums[4]; j++) {
            const struct batch *b = &u->slots[j * u->R + r];
            struct tfm_loss l;
            uint64_t rng_step = (uint64_t)(u->counter + j * N + gr);
            if (N > 1 && j == u->K - 1) {       /* its backward sums the finished buckets */
                p->armed = 1;
                p->hi = (size_t)tfm_model_count(p->m);
            }
            if (tfm_model_train_batch(p->m, b->B, b->S, b->T, b->src, b->tgt, rng_step, &l,
                                      &p->err)) {
                tfm_error_prefix(&p->err, "%s: batch %lld", data_name(&u->train),
                                 (long long)b->number);
                if (N > 1) {    /* the others may be summing buckets already: stop them */
                    tfm_comm_abort(u->comm, p->err.msg);
                    return -1;
                }
                sums[4] = 1;
                break;
            }
            sums[0] += l.loss;
            sums[1] += l.nll;
            sums[2] += (double)l.tokens;
            sums[3] += (double)l.src_tokens;
        }
        /* read before the last collective of the update: past it, rank 0 moves u->step on
         * (after its optimizer step) while the others may not have reached this line */
        int64_t step = u->step + 1;
        if (p->sum_failed) {    /* a bucket's sum failed during the backward pass */
            p->err = p->sum_err;
            p->sum_failed = p->armed = 0;
            tfm_error_prefix(&p->err, "update %lld: summing the gradients", (long long)step);
            tfm_comm_abort(u->comm, p->err.msg);
            return -1;
        }
        if (tfm_comm_sum_f64(u->comm, r, sums, 5, &p->err))
            return -1;
        if (sums[4] > 0)
            return p->err.msg[0] ? -1 : 1;     /* the failing ranks carry the message */
        if (!isfinite(sums[0]) || !isfinite(sums[1])) {
            tfm_fail(&p->err, "update %lld: the loss is %s: stopping without a checkpoint "
                     "(lower lr_scale, raise warmup, or set clip_norm)", (long long)step,
                     isnan(sums[0]) || isnan(sums[1]) ? "NaN" : "Inf");
            return -1;
        }
        struct tfm_optim_stats st;
        if (tfm_optim_step(p->m, step, (int64_t)sums[2], &st, &p->err)) {
            char msg[sizeof p->err.msg];
            memcpy(msg, p->err.msg, sizeof msg);
            tfm_fail(&p->err, "update %lld: %.900s; stopping without a checkpoint",
                     (long long)step, msg);
            return -1;
        }
        if (r == 0) {
            u->step = step;
            u->counter += (int64_t)u->K * N;       /* micro-batches of all processes */
            if (after_update(u, sums, &p->err)) {
                tfm_comm_abort(u->comm, p->err.msg);
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

/* The vocabulary size of the stream's embedded model (0 when there is none). */
static int stream_vocab(const struct tfm_header *h, const char *name, int *vocab,
                        struct tfm_error *err)
{
    *vocab = 0;
    if (!h->spm)
        return 0;
    struct tfm_spm *s = tfm_spm_load(h->spm, h->spm_size, err);
    if (!s)
        return tfm_error_prefix(err, "%s: vocabulary", name);
    *vocab = tfm_spm_vocab_size(s);
    tfm_spm_free(s);
    return 0;
}

static int setup(struct run *u, struct tfm_checkpoint **ck, struct tfm_error *err)
{
    const struct tfm_train_opts *o = u->o;
    struct tfm_config *cfg = u->cfg;
    char resume_path[4096] = "";
    if (tfm_checkpoint_dir_ready(o->out_dir, &u->created_dir, err))
        return -1;
    /* one run at a time in the directory; process 0 writes the checkpoints, and holds it */
    if (u->g == 0 && !(u->lock = tfm_checkpoint_lock(o->out_dir, err)))
        return -1;
    int removed = u->g == 0 ? tfm_checkpoint_clean(o->out_dir, err) : 0;
    if (removed < 0)
        return -1;
    if (removed > 0 && o->notes)
        fprintf(o->notes, "%s: %s: removed %d unfinished file%s of a killed run\n", o->prog,
                o->out_dir, removed, removed > 1 ? "s" : "");
    int found = tfm_train_find_resume(o->out_dir, resume_path, sizeof resume_path, err);
    if (found < 0)
        return -1;
    if (found && !o->resume)
        return tfm_fail(err, "%s: holds checkpoints (newest %s): use --resume to continue, or "
                        "another directory", o->out_dir, resume_path);
    if (found) {
        if (!(*ck = tfm_checkpoint_load(resume_path, 0, err)))
            return tfm_error_prefix(err, "cannot resume");
    }

    /* the training stream and its vocabulary */
    u->train.path = o->train_path && strcmp(o->train_path, "-") != 0 ? o->train_path : NULL;
    u->train.repeat = u->train.path != NULL;
    if (u->W > 1) {             /* this process's ranks' batches (batch.h) */
        u->train.world = u->R * u->W;
        u->train.rank = u->g * u->R;
        u->train.count = u->R;
    } else {                    /* every batch: the slots give them to the ranks */
        u->train.world = 1;
        u->train.count = 1;
    }
    if (u->W > 1 && !u->train.path)
        return tfm_fail(err, "%d processes: each reads its own shard of the batch stream, so "
                        "it must be a file, not standard input", u->W);
    if (data_open(&u->train, err))
        return -1;
    const struct tfm_header *h = &u->train.header;
    int vocab;
    if (stream_vocab(h, data_name(&u->train), &vocab, err))
        return -1;
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
                        data_name(&u->train));
    if (vocab && vocab != cfg->vocab)
        return tfm_fail(err, "%s: vocabulary of %d pieces, config says vocab=%d",
                        data_name(&u->train), vocab, cfg->vocab);
    u->vocab_id = tfm_header_vocab_id(h);
    const char *budget = tfm_header_get(h, "tokens");
    if (budget && atoll(budget) > cfg->tokens)
        return tfm_fail(err, "%s: batches of up to %s tokens, more than the batch budget "
                        "tokens=%d: re-batch with tfm-batch --tokens %d or less, or raise "
                        "--set tokens=N (memory grows with it)", data_name(&u->train), budget,
                        cfg->tokens, cfg->tokens);
    if (tfm_config_check(cfg, 1, err))
        return tfm_error_prefix(err, "config");
    if (*ck) {
        struct tfm_config ckc;
        if (tfm_checkpoint_config(*ck, &ckc, err))
            return tfm_error_prefix(err, "cannot resume");
        if (same_config(cfg, &ckc, resume_path, err))
            return -1;
        /* the parameters and Adam moments of exactly that model, before any memory */
        if (tfm_checkpoint_check(*ck, &ckc, 1, err))
            return tfm_error_prefix(err, "cannot resume");
        uint32_t cv = tfm_header_vocab_id(&(*ck)->header);
        if (cv != u->vocab_id)
            return tfm_fail(err, "%s: vocabulary mismatch: the batches have vocabulary crc "
                            "%08x, checkpoint %s has %08x", data_name(&u->train), u->vocab_id,
                            resume_path, cv);
    }
    if (o->valid_path) {
        struct data v = {.path = o->valid_path, .world = 1};
        int rc = data_open(&v, err);
        if (rc == 0 && tfm_header_vocab_id(&v.header) != u->vocab_id)
            rc = tfm_fail(err, "%s: vocabulary mismatch with the training batches %s",
                          o->valid_path, data_name(&u->train));
        data_close(&v);
        if (rc)
            return -1;
    }

    /* the checkpoint header: the stream's vocabulary, the producer, the layout */
    tfm_header_init(&u->ck_header, TFM_KIND_CHECKPOINT);
    if ((h->spm && tfm_header_set_spm(&u->ck_header, h->spm, h->spm_size, err)) ||
        tfm_header_set(&u->ck_header, "producer", "tfm-train " TFM_VERSION, err) ||
        tfm_header_setf(&u->ck_header, err, "ranks", "%d", u->R * u->W) ||
        tfm_header_setf(&u->ck_header, err, "update_freq", "%d", u->K))
        return -1;
    if (!(u->config_text = tfm_config_format(cfg)))
        return tfm_fail(err, "out of memory");

    /* host memory: R replicas (on a GPU: in its memory) and the checkpoint staging buffer */
    double limit = o->memory_limit > 0 ? o->memory_limit : physical_memory();
    double need = (o->backends ? 0 : (double)tfm_model_memory(cfg, cfg->tokens) * u->R) +
                  (double)tfm_model_param_memory(cfg) / 4;
    if (limit > 0 && need > limit)
        return tfm_fail(err, "the model with a batch budget of tokens=%d needs %.2f GiB "
                        "(%d rank%s), more than the %.2f GiB available: lower the budget "
                        "(--set tokens=N and tfm-batch --tokens N) or --ranks",
                        cfg->tokens, need / 1073741824.0, u->R, u->R > 1 ? "s" : "",
                        limit / 1073741824.0);

    /* ranks: a backend and a model replica each */
    int threads = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    int per = threads / u->R > 0 ? threads / u->R : 1;
    if (!(u->comm = tfm_comm_threads(u->R, err)) ||
        (u->W > 1 && !(u->procs = tfm_comm_procs(u->g, u->W, &(struct tfm_dist_watch){
                                                      o->stop, o->notes, o->prog}, err))))
        return -1;
    if (u->procs)
        tfm_comm_stack(u->comm, u->procs);
    if (!(u->rep = calloc((size_t)u->R, sizeof *u->rep)) ||
        !(u->slots = calloc((size_t)u->R * (size_t)u->K, sizeof *u->slots)))
        return tfm_fail(err, "out of memory");
    for (int r = 0; r < u->R; r++) {
        struct replica *p = &u->rep[r];
        p->run = u;
        p->rank = r;
        if (o->backends) {
            p->be = o->backends[r];
            if (p->be->bind)
                p->be->bind(p->be);
        } else if (!(p->be = tfm_backend_cpu(per, err))) {
            return -1;
        }
        if (u->R * u->W > 1) {
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
        if (u->R * u->W > 1 && p->be->kind == TFM_BACKEND_SIM &&
            !(p->stage = malloc((size_t)tfm_model_count(p->m) * sizeof *p->stage)))
            return tfm_fail(err, "out of memory");
    }
    /* GPU ranks: NCCL communicators, process 0's id passed over the processes' links */
    if (u->R * u->W > 1 && o->backends && o->backends[0]->kind == TFM_BACKEND_CUDA) {
        unsigned char id[TFM_GPU_COMM_ID_BYTES];
        struct tfm_gpu_comm *c[TFM_DIST_MAX_LOCAL];
        if (tfm_gpu_comm_id(u->procs, u->g == 0, id, err) ||
            tfm_gpu_comm_open(o->backends, u->R, id, u->R * u->W, u->g * u->R, u->timeout, c,
                              err))
            return tfm_error_prefix(err, "the GPUs' communicators (NCCL)");
        for (int r = 0; r < u->R; r++)
            u->rep[r].nccl = c[r];
    }
    if (!(u->host = malloc((size_t)tfm_model_count(u->rep[0].m) * sizeof *u->host)))
        return tfm_fail(err, "out of memory");

    /* where the data and the counters stand */
    if (*ck) {
        const struct tfm_ckpt_state *st = &(*ck)->state;
        if (st->nrng != 1)
            return tfm_fail(err, "%s: state has %d rng words, tfm-train writes 1", resume_path,
                            st->nrng);
        u->step = st->step;
        u->counter = (int64_t)st->rng[0];
        u->tokens = st->tokens;
        u->elapsed0 = (double)st->elapsed_ms / 1000;
        u->saved_step = u->step;
        if (!u->train.repeat && (st->epoch > 0))
            return tfm_fail(err, "<stdin>: the checkpoint is in epoch %lld of its stream; "
                            "resume from a file", (long long)st->epoch);
        if (data_skip(&u->train, st->epoch, st->batch_pos, err))
            return -1;
        if (o->notes)
            fprintf(o->notes, "%s: resuming from %s: update %lld, epoch %lld, batch %lld\n",
                    o->prog, resume_path, (long long)st->step, (long long)st->epoch,
                    (long long)st->batch_pos);
    }
    u->start_step = u->step;
    u->start_pos = u->train.pos;
    return 0;
}

int tfm_train_run(struct tfm_config *cfg, const struct tfm_train_opts *o,
                  struct tfm_train_result *res, struct tfm_error *err)
{
    memset(res, 0, sizeof *res);
    res->valid_loss = res->valid_ppl = -1;
    if (o->update_freq < 1 || o->ranks < 1 || o->ranks > TFM_DIST_MAX_LOCAL || o->report_every < 1)
        return tfm_fail(err, "bad update_freq %d, ranks %d or report interval", o->update_freq,
                        o->ranks);
    struct run u = {.o = o, .cfg = cfg, .res = res, .R = o->ranks, .K = o->update_freq,
                    .W = o->world > 1 ? o->world : 1, .g = o->world_rank,
                    .saved_step = -1, .valid_step = -1};
    if (u.g < 0 || u.g >= u.W)
        return tfm_fail(err, "process %d of %d", u.g, u.W);
    if (bucket_floats(&u.bucket, err) || tfm_gpu_comm_timeout(&u.timeout, err))
        return -1;
    struct tfm_checkpoint *ck = NULL;
    int rc = setup(&u, &ck, err);
    tfm_checkpoint_free(ck);
    if (rc == 0 && u.W > 1)
        rc = same_start(&u, err);
    if (rc == 0)
        rc = tfm_progress_open(&u.prog, o->prog, o->progress, o->log_path, err);
    if (rc == 0) {
        u.t0 = u.last_save = u.iv_time = now_s();
        u.prog.valid_out = o->notes;
        u.prog.max_steps = o->max_steps;
        u.prog.max_time = o->max_time > 0 ? u.elapsed0 + o->max_time : 0;
        u.prog.start_step = u.step;
        u.prog.start_elapsed = u.elapsed0;
        void *args[TFM_DIST_MAX_LOCAL];
        for (int r = 0; r < u.R; r++)
            args[r] = &u.rep[r];
        int bad = tfm_dist_run(u.R, rank_main, args, u.comm, err);
        if (bad < 0) {
            rc = -1;
        } else if (u.failed) {
            *err = u.err;
            rc = -1;
        } else if (bad > 0) {
            /* the first rank with a message of its own (not "ranks stopped") */
            int pick = -1;
            for (int r = 0; r < u.R && pick < 0; r++)
                if (u.rep[r].err.msg[0] && strncmp(u.rep[r].err.msg, "ranks stopped", 13) != 0)
                    pick = r;
            for (int r = 0; r < u.R && pick < 0; r++)
                if (u.rep[r].err.msg[0])
                    pick = r;
            tfm_fail(err, "%s", pick >= 0 ? u.rep[pick].err.msg : "a rank failed");
            rc = -1;
        } else {
            /* a clean end: last report, validation and checkpoint of the final state */
            res->end = u.end;
            if (u.step % o->report_every != 0)
                rc = report(&u);
            if (rc == 0 && u.g == 0 && o->valid_path && u.valid_step != u.step)
                rc = validate(&u, err);
            if (rc == 0 && u.g == 0 && u.saved_step != u.step)
                rc = save_checkpoint(&u, err);
            if (rc == 0 && u.log_failed) {
                tfm_fail(err, "%s; stopped at update %lld, its checkpoint saved",
                         u.log_err.msg, (long long)u.step);
                rc = -1;
            }
        }
        res->step = u.step;
        if (tfm_progress_close(&u.prog, rc ? NULL : err))
            rc = -1;
    }
    for (int r = 0; u.rep && r < u.R; r++) {
        if (u.rep[r].be && u.rep[r].be->bind)
            u.rep[r].be->bind(u.rep[r].be);
        tfm_gpu_comm_free(u.rep[r].nccl);
        tfm_model_free(u.rep[r].m);
        free(u.rep[r].stage);
        if (u.rep[r].be && !o->backends)
            u.rep[r].be->destroy(u.rep[r].be);
    }
    for (int i = 0; u.slots && i < u.R * u.K; i++) {
        free(u.slots[i].src);
        free(u.slots[i].tgt);
    }
    free(u.slots);
    free(u.rep);
    free(u.host);
    free(u.config_text);
    tfm_comm_free(u.comm);
    tfm_comm_free(u.procs);
    data_close(&u.train);
    if (u.ck_header.kind[0])
        tfm_header_free(&u.ck_header);
    tfm_checkpoint_unlock(u.lock);
    /* a failed run leaves no empty directory of its own behind (rmdir removes only an
     * empty one; a directory that was there before is never this run's) */
    if (rc && u.created_dir)
        rmdir(o->out_dir);
    return rc;
}
