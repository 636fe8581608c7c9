/* test_train.c: the training loop and its pieces: rank placement from the environment,
 * the in-process all-reduce (sum, rank order, bitwise agreement, abort), durations and
 * progress lines; then tfm_train_run on a synthetic copy task: a resumed run equals an
 * uninterrupted one bit for bit, R ranks equal 1 rank with R-fold accumulation up to float
 * reassociation, NaN, budget and memory errors; a resume refuses a checkpoint that does
 * not hold its config's model, a locked directory is refused, a failed run leaves no
 * directory it made. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "checkpoint.h"
#include "config.h"
#include "dist.h"
#include "progress.h"
#include "stream.h"
#include "train.h"

static void clear_env(void)
{
    const char *v[] = {"TFM_RANK", "TFM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                       "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                       "SLURM_STEP_NUM_TASKS"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        unsetenv(v[i]);
}

static void test_env(void)
{
    struct tfm_dist_env e;
    struct tfm_error err;
    clear_env();
    CHECK(tfm_dist_env_read(&e, &err) == 0 && e.rank == 0 && e.world == 1);
    CHECK_STR(e.source, "none");
    setenv("SLURM_PROCID", "3", 1);
    setenv("SLURM_NTASKS", "8", 1);
    CHECK(tfm_dist_env_read(&e, &err) == 0 && e.world == 1);   /* not in an srun step */
    setenv("SLURM_STEP_NUM_TASKS", "8", 1);
    CHECK(tfm_dist_env_read(&e, &err) == 0 && e.rank == 3 && e.world == 8);
    CHECK_STR(e.source, "SLURM_PROCID");
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);     /* OpenMPI before Slurm */
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    CHECK(tfm_dist_env_read(&e, &err) == 0 && e.rank == 1 && e.world == 2);
    setenv("TFM_RANK", "0", 1);                 /* tfm's own first */
    setenv("TFM_WORLD_SIZE", "4", 1);
    CHECK(tfm_dist_env_read(&e, &err) == 0 && e.rank == 0 && e.world == 4);
    setenv("TFM_RANK", "4", 1);
    CHECK(tfm_dist_env_read(&e, &err) == -1);
    CHECK_STR(err.msg, "environment: TFM_RANK=4 outside TFM_WORLD_SIZE=4");
    setenv("TFM_RANK", "x1", 1);
    CHECK(tfm_dist_env_read(&e, &err) == -1);
    CHECK(strstr(err.msg, "TFM_RANK='x1': not an integer") != NULL);
    unsetenv("TFM_RANK");
    CHECK(tfm_dist_env_read(&e, &err) == -1);
    CHECK_STR(err.msg, "environment: TFM_WORLD_SIZE is set but TFM_RANK is not");
    clear_env();
}

enum { NR = 4, NELEM = 1001 };
static struct tfm_comm *comm;
static float bufs[NR][NELEM];
static double dbufs[NR][3];

static int reduce_rank(int rank, void *arg)
{
    (void)arg;
    struct tfm_error err;
    for (int i = 0; i < NELEM; i++)     /* values whose sum depends on the order */
        bufs[rank][i] = (rank == 0 ? 1e8f : 1.0f) * (float)(i % 7 + 1) * (rank % 2 ? -1.0f : 1.0f) +
                        0.1f * (float)rank;
    dbufs[rank][0] = rank;
    dbufs[rank][1] = 1;
    dbufs[rank][2] = 0.5;
    if (tfm_comm_sum_f32(comm, rank, bufs[rank], NELEM, &err) ||
        tfm_comm_sum_f64(comm, rank, dbufs[rank], 3, &err) || tfm_comm_barrier(comm, rank, &err))
        return 1;
    return 0;
}

static void test_allreduce(void)
{
    struct tfm_error err;
    comm = tfm_comm_threads(NR, &err);
    CHECK(comm && tfm_comm_size(comm) == NR);
    void *args[NR] = {0};
    for (int rep = 0; rep < 3; rep++) {
        CHECK_EQ_INT(tfm_dist_run(NR, reduce_rank, args, comm, &err), 0);
        for (int i = 0; i < NELEM; i++) {
            /* the expected sum, in rank order */
            float want = 0;
            for (int r = 0; r < NR; r++) {
                float v = (r == 0 ? 1e8f : 1.0f) * (float)(i % 7 + 1) * (r % 2 ? -1.0f : 1.0f) +
                          0.1f * (float)r;
                want = r == 0 ? v : want + v;
            }
            for (int r = 0; r < NR; r++)
                if (memcmp(&bufs[r][i], &want, sizeof want) != 0) {
                    CHECK(bufs[r][i] == want);
                    i = NELEM;
                    break;
                }
        }
        for (int r = 0; r < NR; r++)
            CHECK(dbufs[r][0] == 6 && dbufs[r][1] == 4 && dbufs[r][2] == 2);
    }
    tfm_comm_free(comm);
    CHECK(tfm_comm_threads(0, &err) == NULL);
    CHECK(tfm_comm_threads(TFM_DIST_MAX_LOCAL + 1, &err) == NULL);
}

static int abort_rank(int rank, void *arg)
{
    (void)arg;
    struct tfm_error err;
    if (rank == 2) {
        tfm_comm_abort(comm, "rank 2: loss is NaN");
        return 1;
    }
    float x = 1;
    int rc = tfm_comm_sum_f32(comm, rank, &x, 1, &err);
    if (rc == 0 || !strstr(err.msg, "ranks stopped: rank 2: loss is NaN"))
        return 2;
    return 1;
}

static void test_abort(void)
{
    struct tfm_error err;
    comm = tfm_comm_threads(3, &err);
    void *args[3] = {0};
    CHECK_EQ_INT(tfm_dist_run(3, abort_rank, args, comm, &err), 3);
    tfm_comm_free(comm);
}

static void test_duration(void)
{
    double s;
    CHECK(tfm_duration_parse("90s", &s) == 0 && s == 90);
    CHECK(tfm_duration_parse("10m", &s) == 0 && s == 600);
    CHECK(tfm_duration_parse("2h", &s) == 0 && s == 7200);
    CHECK(tfm_duration_parse("1h30m", &s) == 0 && s == 5400);
    CHECK(tfm_duration_parse("1.5h", &s) == 0 && s == 5400);
    CHECK(tfm_duration_parse("1d", &s) == 0 && s == 86400);
    CHECK(tfm_duration_parse("45", &s) == 0 && s == 45);
    CHECK(tfm_duration_parse("0", &s) == 0 && s == 0);
    const char *bad[] = {"", "m", "10x", "-5m", "1.5.3", "10 m", "1e3", "5m-", "nan", "inf"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (tfm_duration_parse(bad[i], &s) != -1) {
            printf("#   accepted '%s'\n", bad[i]);
            CHECK(0);
        }
    char b[32];
    tfm_duration_format(42, b, sizeof b);
    CHECK_STR(b, "42s");
    tfm_duration_format(245, b, sizeof b);
    CHECK_STR(b, "4m05s");
    tfm_duration_format(3720, b, sizeof b);
    CHECK_STR(b, "1h02m");
    tfm_duration_format(273600, b, sizeof b);
    CHECK_STR(b, "3d04h");
}

static void test_progress(void)
{
    struct tfm_progress p;
    struct tfm_error err;
    char log[] = "/tmp/tfm-test-progress.XXXXXX";
    int fd = mkstemp(log);
    CHECK(fd >= 0);
    close(fd);
    CHECK(tfm_progress_open(&p, "tfm-train", NULL, log, &err) == 0);
    p.max_steps = 1000;
    p.start_step = 100;     /* resumed at step 100 after 50 s */
    p.start_elapsed = 50;
    /* 100 steps in 20 s: 0.2 s a step, 700 steps left: 140 s */
    CHECK_NEAR(tfm_progress_eta(&p, 300, 90), 140, 1e-9);
    p.max_time = 100;       /* but only 10 s of --max-time left */
    CHECK_NEAR(tfm_progress_eta(&p, 300, 90), 10, 1e-9);
    p.max_time = 0;
    struct tfm_progress_row r = {.step = 300, .loss = 4.5, .ppl = 90.017, .lr = 3.1e-4,
                                 .tokens_per_s = 12345, .elapsed = 90, .tokens = 777};
    char line[256];
    tfm_progress_format(&p, &r, line, sizeof line);
    CHECK_STR(line, "step 300/1000 loss 4.5000 ppl 90.02 lr 3.100e-04 12.3k tok/s elapsed 1m30s eta 2m20s");
    /* a diverging run's perplexity does not push the rest off the line */
    struct tfm_progress_row big = r;
    big.loss = 690;
    big.ppl = exp(690);
    char wide[512];
    tfm_progress_format(&p, &big, wide, sizeof wide);
    CHECK_STR(wide, "step 300/1000 loss 690.0000 ppl 4.605e+299 lr 3.100e-04 12.3k tok/s elapsed 1m30s eta 2m20s");
    big.ppl = INFINITY;
    tfm_progress_format(&p, &big, wide, sizeof wide);
    CHECK_STR(wide, "step 300/1000 loss 690.0000 ppl inf lr 3.100e-04 12.3k tok/s elapsed 1m30s eta 2m20s");
    big.ppl = 999999.994;   /* %.2f would round it to 1000000.00 */
    tfm_progress_format(&p, &big, wide, sizeof wide);
    CHECK_STR(wide, "step 300/1000 loss 690.0000 ppl 999999.99 lr 3.100e-04 12.3k tok/s elapsed 1m30s eta 2m20s");
    /* a rate that rounds to 1000 at three digits is written with the next unit, never
     * in exponent form ("1e+03 tok/s", "1e+03k tok/s") */
    static const struct { double v; const char *text; } rates[] = {
        {0, "0"}, {999.4, "999"}, {999.5, "1k"}, {999.7, "1k"}, {1000, "1k"}, {12345, "12.3k"},
        {99960, "100k"}, {999700, "1M"}, {1.5e6, "1.5M"}, {999.7e6, "1G"}, {2.5e9, "2.5G"},
    };
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        struct tfm_progress_row q = r;
        char want[256];
        q.tokens_per_s = rates[i].v;
        tfm_progress_format(&p, &q, wide, sizeof wide);
        snprintf(want, sizeof want, "step 300/1000 loss 4.5000 ppl 90.02 lr 3.100e-04 %s tok/s "
                 "elapsed 1m30s eta 2m20s", rates[i].text);
        CHECK_STR(wide, want);
    }
    CHECK(tfm_progress_report(&p, &r, &err) == 0);
    struct tfm_progress_row v = {.valid = 1, .step = 300, .loss = 4.0, .ppl = 54.6, .elapsed = 90,
                                 .tokens = 50};
    tfm_progress_format(&p, &v, line, sizeof line);
    CHECK_STR(line, "valid step 300 loss 4.0000 ppl 54.60 tokens 50");
    CHECK(tfm_progress_report(&p, &v, &err) == 0);
    v.has_bleu = 1;
    v.bleu = 27.5;
    tfm_progress_format(&p, &v, line, sizeof line);
    CHECK_STR(line, "valid step 300 loss 4.0000 ppl 54.60 tokens 50 bleu 27.50");
    CHECK(tfm_progress_report(&p, &v, &err) == 0);
    CHECK(tfm_progress_close(&p, &err) == 0);
    /* appending keeps one header */
    CHECK(tfm_progress_open(&p, "tfm-train", NULL, log, &err) == 0);
    CHECK(tfm_progress_report(&p, &r, &err) == 0);
    CHECK(tfm_progress_close(&p, &err) == 0);
    FILE *f = fopen(log, "r");
    char text[1024] = {0};
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = 0;
    CHECK_STR(text, "kind\tstep\tloss\tppl\tlr\ttokens_per_s\telapsed_s\ttokens\tbleu\n"
                    "train\t300\t4.500000\t90.017000\t3.100000e-04\t12345.0\t90.000\t777\t-\n"
                    "valid\t300\t4.000000\t54.600000\t-\t-\t90.000\t50\t-\n"
                    "valid\t300\t4.000000\t54.600000\t-\t-\t90.000\t50\t27.5000\n"
                    "train\t300\t4.500000\t90.017000\t3.100000e-04\t12345.0\t90.000\t777\t-\n");
    unlink(log);
    CHECK(tfm_progress_open(&p, "tfm-train", NULL, "/nonexistent/dir/log", &err) == -1);
    CHECK(strstr(err.msg, "/nonexistent/dir/log: No such file") != NULL);
}

/* ---- tfm_train_run on a synthetic task ------------------------------------------------ */

static char dir[256];

/* nb batches of 8 sentences of up to S tokens (S <= 40; the first of each batch S long when
 * first_full), tgt = the source reversed; ids in [4, 32); x the generator's seed. */
static int write_task(const char *path, int nb, int S, uint64_t x, int first_full)
{
    enum { B = 8, SMAX = 40, V = 32 };
    struct tfm_error err;
    struct tfm_header h;
    tfm_header_init(&h, TFM_KIND_BATCHES);
    struct tfm_writer *w = tfm_writer_open(path, &h, 0, &err);
    tfm_header_free(&h);
    if (!w)
        return -1;
    for (int b = 0; b < nb; b++) {
        int64_t idx[B];
        int32_t src[B * SMAX] = {0}, tgt[B * SMAX] = {0};
        for (int i = 0; i < B; i++) {
            idx[i] = b * B + i;
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            int len = first_full && i == 0 ? S : 3 + (int)((x >> 33) % (S - 3));
            for (int t = 0; t < len - 1; t++) {
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                src[i * S + t] = 4 + (int)((x >> 33) % (V - 4));
            }
            src[i * S + len - 1] = 3;
            for (int t = 0; t < len - 1; t++)
                tgt[i * S + t] = src[i * S + len - 2 - t];
            tgt[i * S + len - 1] = 3;
        }
        int64_t d1[1] = {B}, d2[2] = {B, S};
        if (tfm_writer_put(w, "batch.index", TFM_I64, 1, d1, idx, &err) ||
            tfm_writer_put(w, "batch.src", TFM_I32, 2, d2, src, &err) ||
            tfm_writer_put(w, "batch.tgt", TFM_I32, 2, d2, tgt, &err)) {
            tfm_writer_abort(w);
            return -1;
        }
    }
    return tfm_writer_close(w, &err);
}

/* nb batches of 8 sentences of up to 10 tokens. */
static int write_batches(const char *path, int nb) { return write_task(path, nb, 10, 12345, 0); }

static void tiny(struct tfm_config *c)
{
    struct tfm_error err;
    tfm_config_defaults(c);
    const char text[] = "layers = 1\nd_model = 32\nd_ff = 64\nheads = 4\nmax_len = 16\n"
                        "tokens = 256\nwarmup = 50\ndropout = 0.1\nvocab = 32\n";
    if (tfm_config_parse(c, text, sizeof text - 1, "tiny", &err))
        printf("# %s\n", err.msg);
}

static char batches[300];

static void opts(struct tfm_train_opts *o, struct tfm_config *c, const char *sub, int steps)
{
    static char out[8][300];
    static int k;
    k = (k + 1) % 8;
    snprintf(out[k], sizeof out[k], "%s/%s", dir, sub);
    tfm_train_defaults(o);
    o->train_path = batches;
    o->out_dir = out[k];
    c->max_steps = steps;
    o->save_every_sec = 0;
    o->threads = 2;
}

static int run(struct tfm_config *c, struct tfm_train_opts *o, struct tfm_train_result *res)
{
    struct tfm_error err;
    int rc = tfm_train_run(c, o, res, &err);
    if (rc)
        printf("# %s\n", err.msg);
    return rc;
}

static struct tfm_checkpoint *load(const char *sub, int64_t step)
{
    char path[400];
    struct tfm_error err;
    snprintf(path, sizeof path, "%s/%s/step-%06lld.tfm", dir, sub, (long long)step);
    struct tfm_checkpoint *c = tfm_checkpoint_load(path, 0, &err);
    if (!c)
        printf("# %s\n", err.msg);
    return c;
}

/* Largest |a - b| over the tensors named prefix*; -1 if they differ in names or shapes. */
static double max_diff(const struct tfm_checkpoint *a, const struct tfm_checkpoint *b,
                       const char *prefix)
{
    double m = 0;
    if (a->ntensors != b->ntensors)
        return -1;
    for (int i = 0; i < a->ntensors; i++) {
        const struct tfm_ckpt_tensor *x = &a->tensors[i];
        if (strncmp(x->name, prefix, strlen(prefix)) != 0)
            continue;
        const struct tfm_ckpt_tensor *y = tfm_checkpoint_find(b, x->name);
        if (!y || y->count != x->count)
            return -1;
        for (int64_t j = 0; j < x->count; j++) {
            double d = fabs((double)x->data[j] - (double)y->data[j]);
            if (d > m || d != d)
                m = d;
        }
    }
    return m;
}

static int bitwise_equal(const struct tfm_checkpoint *a, const struct tfm_checkpoint *b)
{
    if (a->ntensors != b->ntensors)
        return 0;
    for (int i = 0; i < a->ntensors; i++) {
        const struct tfm_ckpt_tensor *y = tfm_checkpoint_find(b, a->tensors[i].name);
        if (!y || y->count != a->tensors[i].count ||
            memcmp(y->data, a->tensors[i].data, (size_t)y->count * sizeof *y->data) != 0)
            return 0;
    }
    return 1;
}

static void test_train_resume(void)
{
    struct tfm_config c;
    struct tfm_train_opts o;
    struct tfm_train_result res;
    /* 57 batches: 90 updates cross an epoch boundary */
    tiny(&c);
    opts(&o, &c, "whole", 90);
    CHECK(run(&c, &o, &res) == 0);
    CHECK_EQ_INT(res.end, TFM_TRAIN_MAX_STEPS);
    CHECK_EQ_INT(res.step, 90);
    CHECK(res.loss > 0 && res.loss < 3.5);      /* uniform over 32 ids would be 3.47 */
    /* the same in three pieces: 33, then to 70, then to 90 */
    int64_t stops[3] = {33, 70, 90};
    for (int i = 0; i < 3; i++) {
        tiny(&c);
        opts(&o, &c, "pieces", stops[i]);
        o.resume = i > 0;
        CHECK(run(&c, &o, &res) == 0);
        CHECK_EQ_INT(res.step, stops[i]);
    }
    struct tfm_checkpoint *a = load("whole", 90), *b = load("pieces", 90);
    struct tfm_checkpoint *mid = load("pieces", 70);
    CHECK(a && b && mid);
    if (a && b && mid) {
        CHECK(bitwise_equal(a, b));
        CHECK(!bitwise_equal(a, mid));
        CHECK_EQ_INT(b->state.epoch, 1);
        CHECK_EQ_INT(b->state.batch_pos, 90 - 57);
        CHECK_EQ_INT(b->state.rng[0], 90);
        CHECK_EQ_INT(a->state.tokens, b->state.tokens);
    }
    tfm_checkpoint_free(a);
    tfm_checkpoint_free(b);
    tfm_checkpoint_free(mid);
    /* resuming with a changed architecture is refused; max_steps may change */
    tiny(&c);
    c.d_ff = 128;
    opts(&o, &c, "pieces", 100);
    o.resume = 1;
    struct tfm_error err;
    CHECK(tfm_train_run(&c, &o, &res, &err) == -1);
    CHECK(strstr(err.msg, "config key 'd_ff' is 64 in the checkpoint and 128 now") != NULL);
    /* without --resume a directory with checkpoints is refused */
    tiny(&c);
    opts(&o, &c, "pieces", 100);
    CHECK(tfm_train_run(&c, &o, &res, &err) == -1);
    CHECK(strstr(err.msg, "holds checkpoints") != NULL);
    /* a newer checkpoint that does not hold its config's model is refused on resume,
     * naming it and the tensor: the same count in another shape, an extra tensor, a
     * missing moment, a NaN moment */
    static const char *const how[4] = {"reshape", "extra", "drop", "nan"};
    static const char *const want[4] = {
        "cannot resume: %s: tensor param.enc.0.ffn.w1: shape 64x32, config wants 32x64",
        "cannot resume: %s: tensor param.enc.2.ffn.w1: not a parameter of the model its "
        "config describes (layer 2; the config has layers = 1)",
        "cannot resume: %s: tensor adam.v.dec.0.ffn.b2 missing (config wants 32): the other "
        "Adam moments are there",
        "cannot resume: %s: tensor adam.m.emb: element 3 is NaN"};
    char good[400], bad[400], msg[1200];
    snprintf(good, sizeof good, "%s/pieces/step-000090.tfm", dir);
    snprintf(bad, sizeof bad, "%s/pieces/step-000095.tfm", dir);
    for (int k = 0; k < 4; k++) {
        struct tfm_checkpoint *g = tfm_checkpoint_load(good, 0, &err);
        CHECK(g != NULL);
        if (!g)
            break;
        struct tfm_writer *w = tfm_checkpoint_begin(bad, &g->header, g->config, &g->state, &err);
        for (int i = 0; w && i < g->ntensors; i++) {
            struct tfm_ckpt_tensor *t = &g->tensors[i];
            int64_t d[2] = {t->dims[0], t->dims[1]};
            if (k == 0 && strcmp(t->name, "param.enc.0.ffn.w1") == 0) {
                d[0] = t->dims[1];
                d[1] = t->dims[0];
            }
            if (k == 2 && strcmp(t->name, "adam.v.dec.0.ffn.b2") == 0)
                continue;
            if (k == 3 && strcmp(t->name, "adam.m.emb") == 0)
                t->data[3] = NAN;
            CHECK(tfm_writer_put(w, t->name, TFM_F32, t->rank, d, t->data, &err) == 0);
        }
        if (w && k == 1) {
            struct tfm_ckpt_tensor *t = tfm_checkpoint_find(g, "param.enc.0.ffn.w1");
            CHECK(tfm_writer_put(w, "param.enc.2.ffn.w1", TFM_F32, t->rank, t->dims, t->data,
                                 &err) == 0);
        }
        CHECK(w && tfm_writer_close(w, &err) == 0);
        tfm_checkpoint_free(g);
        tiny(&c);
        opts(&o, &c, "pieces", 100);
        o.resume = 1;
        CHECK(tfm_train_run(&c, &o, &res, &err) == -1);
        snprintf(msg, sizeof msg, want[k], bad);
        printf("# %s: %s\n", how[k], err.msg);
        CHECK_STR(err.msg, msg);
    }
    unlink(bad);
    /* the good one still resumes */
    tiny(&c);
    opts(&o, &c, "pieces", 92);
    o.resume = 1;
    CHECK(run(&c, &o, &res) == 0);
    CHECK_EQ_INT(res.step, 92);
}

static void test_train_ranks(void)
{
    /* Adam's first steps amplify tiny differences of near-zero gradients (m/sqrt(v) is
     * about sign(g)); adam_eps = 1e-3 keeps the comparison about the gradients.  Training
     * is chaotic beyond a few steps: the float reassociation of the gradient sums (1e-8
     * after one step) can tip a ReLU or a dropped unit's neighbour and then grows (with
     * the vectorized cross-entropy: 6e-8 after 5 steps, 2e-5 after 10, 6e-4 after 20),
     * so the runs are compared after 5 steps, where any real difference (a batch on the
     * wrong rank, a wrong normalization) shows as 1e-3 or more: other data gives 7e-3. */
    /* Gradients are summed in buckets as the backward pass finishes them (train.c): with
     * buckets of 262 floats (a tiny model has 22400) a bucket summed before the last write
     * to it, or twice, changes the result far beyond the bound below (a hook placed one
     * layer too early gives 6e-3). */
    setenv("TFM_BUCKET_MB", "0.001", 1);
    const char *sub[4] = {"r4", "k4", "r2k2", "k2"};
    int ranks[4] = {4, 1, 2, 1}, freq[4] = {1, 4, 2, 2};
    struct tfm_checkpoint *ck[4] = {0};
    for (int i = 0; i < 4; i++) {
        struct tfm_config c;
        struct tfm_train_opts o;
        struct tfm_train_result res;
        tiny(&c);
        c.adam_eps = 1e-3;
        opts(&o, &c, sub[i], 5);
        o.ranks = ranks[i];
        o.update_freq = freq[i];
        CHECK(run(&c, &o, &res) == 0);
        ck[i] = load(sub[i], 5);
    }
    if (ck[0] && ck[1] && ck[2] && ck[3]) {
        double d01 = max_diff(ck[0], ck[1], "param."), d21 = max_diff(ck[2], ck[1], "param.");
        double d31 = max_diff(ck[3], ck[1], "param.");
        printf("# max |diff|: 4 ranks %.3g, 2 ranks x 2 %.3g, other data %.3g\n", d01, d21, d31);
        CHECK(d01 >= 0 && d01 < 1e-6);
        CHECK(d21 >= 0 && d21 < 1e-6);
        CHECK(d31 > 1e-3);      /* the comparison can fail: other batches differ */
        CHECK(max_diff(ck[0], ck[1], "adam.") < 1e-6);
        CHECK_STR(tfm_header_get(&ck[0]->header, "ranks"), "4");
    } else {
        CHECK(0);
    }
    for (int i = 0; i < 4; i++)
        tfm_checkpoint_free(ck[i]);
    /* two ranks are deterministic: the same bits twice */
    struct tfm_checkpoint *x[2] = {0};
    for (int i = 0; i < 2; i++) {
        struct tfm_config c;
        struct tfm_train_opts o;
        struct tfm_train_result res;
        tiny(&c);
        opts(&o, &c, i ? "det1" : "det0", 10);
        o.ranks = 2;
        CHECK(run(&c, &o, &res) == 0);
        x[i] = load(i ? "det1" : "det0", 10);
    }
    CHECK(x[0] && x[1] && bitwise_equal(x[0], x[1]));
    tfm_checkpoint_free(x[0]);
    tfm_checkpoint_free(x[1]);
    /* the bucket size must be a size */
    setenv("TFM_BUCKET_MB", "lots", 1);
    {
        struct tfm_config c;
        struct tfm_train_opts o;
        struct tfm_train_result res;
        struct tfm_error err;
        tiny(&c);
        opts(&o, &c, "badbucket", 1);
        o.ranks = 2;
        CHECK(tfm_train_run(&c, &o, &res, &err) == -1);
        CHECK(strstr(err.msg, "TFM_BUCKET_MB=lots") != NULL);
    }
    unsetenv("TFM_BUCKET_MB");
}

static void test_train_errors(void)
{
    struct tfm_config c;
    struct tfm_train_opts o;
    struct tfm_train_result res;
    struct tfm_error err;
    /* Adam with eps 0 turns an exactly zero gradient (the untied source embedding of pad)
     * into 0/0 = NaN: the checkpoint of that update is refused, naming it */
    tiny(&c);
    c.adam_eps = 0;
    c.tie = 0;
    opts(&o, &c, "nan", 50);
    c.save_every = 1;
    CHECK(tfm_train_run(&c, &o, &res, &err) == -1);
    printf("# %s\n", err.msg);
    CHECK(strstr(err.msg, "update 1: ") == err.msg);
    CHECK(strstr(err.msg, "element 0 is NaN: not writing a poisoned checkpoint") != NULL);
    char none[400];
    snprintf(none, sizeof none, "%s/nan/step-000001.tfm", dir);
    CHECK(access(none, F_OK) != 0);
    /* without a checkpoint in between, the next forward pass meets the NaN */
    tiny(&c);
    c.adam_eps = 0;
    c.tie = 0;
    opts(&o, &c, "nan2", 50);
    CHECK(tfm_train_run(&c, &o, &res, &err) == -1);
    printf("# %s\n", err.msg);
    CHECK(strstr(err.msg, "update 2: ") != NULL);
    CHECK(strstr(err.msg, "NaN") != NULL);
    CHECK(strstr(err.msg, "stopping without a checkpoint") != NULL);
    snprintf(none, sizeof none, "%s/nan2/last.tfm", dir);
    CHECK(access(none, F_OK) != 0);
    /* a batch over the budget */
    tiny(&c);
    c.tokens = 64;
    opts(&o, &c, "budget", 5);
    CHECK(tfm_train_run(&c, &o, &res, &err) == -1);
    CHECK(strstr(err.msg, "batch 0: 8 x 10 = 80 padded source tokens exceed the batch budget "
                          "tokens=64") != NULL);
    /* the failed run made its directory: it is gone; one that was there stays */
    char made[400];
    snprintf(made, sizeof made, "%s/budget", dir);
    CHECK(access(made, F_OK) != 0);
    snprintf(made, sizeof made, "%s/there", dir);
    CHECK(mkdir(made, 0777) == 0);
    tiny(&c);
    c.tokens = 64;
    opts(&o, &c, "there", 5);
    CHECK(tfm_train_run(&c, &o, &res, &err) == -1);
    CHECK(access(made, F_OK) == 0);
    /* a directory another run holds is refused, naming it; free again, it is used */
    struct tfm_ckpt_lock *l = tfm_checkpoint_lock(made, &err);
    CHECK(l != NULL);
    tiny(&c);
    opts(&o, &c, "there", 2);
    CHECK(tfm_train_run(&c, &o, &res, &err) == -1);
    CHECK(strstr(err.msg, "there: in use by another run (pid ") != NULL);
    char none_ck[400];
    snprintf(none_ck, sizeof none_ck, "%s/there/last.tfm", dir);
    CHECK(access(none_ck, F_OK) != 0);
    CHECK(access(made, F_OK) == 0);     /* not this run's to remove */
    tfm_checkpoint_unlock(l);
    CHECK(run(&c, &o, &res) == 0);
    CHECK(access(none_ck, F_OK) == 0);
    /* a memory limit: below the model's part (parameters, gradients, Adam moments, the
     * staging buffer) no budget helps; above it, the budget is the one to lower */
    tiny(&c);
    opts(&o, &c, "memory", 5);
    double acts = (double)tfm_model_activation_memory(&c, c.tokens);
    double model = (double)tfm_model_memory(&c, c.tokens) - acts +
                   (double)tfm_model_param_memory(&c) / 4;
    o.memory_limit = model * 0.9;
    CHECK(tfm_train_run(&c, &o, &res, &err) == -1);
    CHECK(strstr(err.msg, "for its parameters, gradients and Adam moments alone (1 rank)") &&
          strstr(err.msg, "at any batch budget: train a smaller model") &&
          !strstr(err.msg, "tokens=N"));
    o.memory_limit = model + acts / 2;
    CHECK(tfm_train_run(&c, &o, &res, &err) == -1);
    CHECK(strstr(err.msg, "lower the budget (--set tokens=N") != NULL);
    /* a stop request before the first update: nothing trained, no checkpoint of the
     * untrained model (it wrote step-000000.tfm), no directory left */
    volatile sig_atomic_t stop = 1;
    tiny(&c);
    opts(&o, &c, "stop", 5);
    o.stop = &stop;
    CHECK(run(&c, &o, &res) == 0);
    CHECK_EQ_INT(res.end, TFM_TRAIN_STOPPED);
    CHECK_EQ_INT(res.step, 0);
    CHECK_EQ_INT(res.start_step, 0);
    CHECK_STR(res.last_checkpoint, "");
    CHECK(access(o.out_dir, F_OK) != 0);
}

/* nb batches of 8 sentences of up to 40 tokens (8 x 40 = 320 target rows: two chunks of
 * the output layer at a vocabulary of 33000, whose chunks have 256 rows). */
static int write_wide_batches(const char *path, int nb)
{
    return write_task(path, nb, 40, 54321, 1);
}

/* No host in the step: an update reads the device once (its statistics), whatever the
 * number of micro-batches (update_freq 3) and of output chunks (two a batch).  Counted on
 * the sim backend, whose every host read tfm_backend_sim_reads counts, as the difference
 * between runs of 4 and of 2 updates (setting up and the last checkpoint read the same in
 * both); the loss the runs report is the one a CPU run reports, bit for bit. */
static void test_train_reads(void)
{
    char path[400];
    snprintf(path, sizeof path, "%s/wide.tfm", dir);
    CHECK(write_wide_batches(path, 14) == 0);
    long reads[2] = {0, 0};
    double loss[2] = {0, 0};
    for (int i = 0; i < 3; i++) {
        struct tfm_config c;
        struct tfm_train_opts o;
        struct tfm_train_result res;
        struct tfm_error err;
        struct tfm_backend *be = i < 2 ? tfm_backend_sim(2, &err) : NULL;
        CHECK(i == 2 || be != NULL);
        if (i < 2 && !be)
            return;
        tiny(&c);
        c.vocab = 33000;
        c.tokens = 320;
        c.max_len = 48;
        opts(&o, &c, i == 0 ? "reads2" : i == 1 ? "reads4" : "reads4cpu", i ? 4 : 2);
        o.train_path = path;
        o.update_freq = 3;
        o.backends = i < 2 ? &be : NULL;
        long r0 = be ? tfm_backend_sim_reads(be) : 0;
        CHECK(run(&c, &o, &res) == 0);
        if (be) {
            reads[i] = tfm_backend_sim_reads(be) - r0;
            be->destroy(be);
        }
        loss[i == 2] = res.loss;
    }
    printf("# host reads: %ld in a run of 2 updates, %ld in one of 4\n", reads[0], reads[1]);
    CHECK_EQ_INT(reads[1] - reads[0], 2);
    CHECK(loss[0] == loss[1]);
}

int main(void)
{
    t_run("rank and world from the environment", test_env);
    t_run("all-reduce sums in rank order, same bits everywhere", test_allreduce);
    t_run("an aborting rank stops the others", test_abort);
    t_run("durations", test_duration);
    t_run("progress line, ETA and log", test_progress);
    snprintf(dir, sizeof dir, "%s/tfm-test-train.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(batches, sizeof batches, "%s/copy.tfm", dir);
    if (write_batches(batches, 57)) {
        printf("# cannot write %s\n", batches);
        return 1;
    }
    t_run("a resumed run equals an uninterrupted one, bit for bit", test_train_resume);
    t_run("R ranks equal 1 rank with update_freq R", test_train_ranks);
    t_run("NaN, budget, memory and stop", test_train_errors);
    t_run("an update reads the device once", test_train_reads);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", dir);
    return t_done();
}
