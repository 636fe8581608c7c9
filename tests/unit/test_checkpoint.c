/* test_checkpoint.c: checkpoint write/load round trips, refusal of poisoned values and of
 * wrong kinds, compatibility, directory listing, pruning, last.tfm, the directory lock,
 * the check of a checkpoint against the model its config describes (and loading it into
 * one), averaging. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "checkpoint.h"
#include "model.h"
#include "stream.h"

static char dir[256];

static const char *path_in(const char *name)
{
    static char buf[16][512];
    static int k;
    k = (k + 1) % 16;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static const char CONFIG[] = "d_model = 8\nlayers = 1\n";
/* A SentencePiece model of 8 pieces, the vocab = 8 of the configs below (a checkpoint's
 * vocabulary must have as many pieces as its config says): a ModelProto of its pieces
 * alone, each (1: piece, 2: score 0, 3: type), <pad> <unk> <s> </s> (tfm's ids 0-3, of
 * type control, unknown, control, control), then U+2581 a b c (normal). */
#define PIECE(len, type, ...) 0x0a, (len) + 9, 0x0a, (len), __VA_ARGS__, 0x15, 0, 0, 0, 0, \
                              0x18, (type)
static const unsigned char SPM[] = {
    PIECE(5, 3, '<', 'p', 'a', 'd', '>'), PIECE(5, 2, '<', 'u', 'n', 'k', '>'),
    PIECE(3, 3, '<', 's', '>'),           PIECE(4, 3, '<', '/', 's', '>'),
    PIECE(3, 1, 0xe2, 0x96, 0x81),        PIECE(1, 1, 'a'),
    PIECE(1, 1, 'b'),                     PIECE(1, 1, 'c'),
};

/* A checkpoint at path with params w [2,3] = base + i and b [3] = -base - i. */
static int write_ckpt(const char *path, int64_t step, float base, const char *config, int adam)
{
    struct tfm_error err;
    struct tfm_header h;
    tfm_header_init(&h, "ignored");
    tfm_header_set_spm(&h, SPM, sizeof SPM, &err);
    tfm_header_set(&h, "producer", "test", &err);
    struct tfm_ckpt_state st = {.step = step, .epoch = 2, .batch_pos = 17, .tokens = 12345,
                                .elapsed_ms = 999, .seed = 7, .nrng = 2,
                                .rng = {0xdeadbeefcafef00dull, 42}};
    struct tfm_writer *w = tfm_checkpoint_begin(path, &h, config, &st, &err);
    tfm_header_free(&h);
    if (!w) {
        printf("# %s\n", err.msg);
        return -1;
    }
    float wv[6], bv[3];
    for (int i = 0; i < 6; i++)
        wv[i] = base + (float)i;
    for (int i = 0; i < 3; i++)
        bv[i] = -base - (float)i;
    int64_t dw[2] = {2, 3}, db[1] = {3};
    if (tfm_checkpoint_put(w, TFM_CKPT_PARAM, "w", 2, dw, wv, &err) ||
        tfm_checkpoint_put(w, TFM_CKPT_PARAM, "b", 1, db, bv, &err) ||
        (adam && (tfm_checkpoint_put(w, TFM_CKPT_ADAM_M, "w", 2, dw, wv, &err) ||
                  tfm_checkpoint_put(w, TFM_CKPT_ADAM_V, "w", 2, dw, wv, &err)))) {
        printf("# %s\n", err.msg);
        tfm_writer_abort(w);
        return -1;
    }
    if (tfm_writer_close(w, &err)) {
        printf("# %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void test_round_trip(void)
{
    struct tfm_error err;
    const char *p = path_in("rt.tfm");
    CHECK(write_ckpt(p, 1000, 1.5f, CONFIG, 1) == 0);
    struct tfm_checkpoint *c = tfm_checkpoint_load(p, 0, &err);
    CHECK(c != NULL);
    if (!c) {
        printf("# %s\n", err.msg);
        return;
    }
    CHECK_STR(c->header.kind, "checkpoint");
    CHECK_STR(tfm_header_get(&c->header, "step"), "1000");
    CHECK_STR(tfm_header_get(&c->header, "producer"), "test");
    CHECK_EQ_INT(c->header.spm_size, sizeof SPM);
    CHECK_STR(c->config, CONFIG);
    CHECK_EQ_INT(c->state.step, 1000);
    CHECK_EQ_INT(c->state.epoch, 2);
    CHECK_EQ_INT(c->state.batch_pos, 17);
    CHECK_EQ_INT(c->state.shard_pos, 0);
    CHECK_EQ_INT(c->state.tokens, 12345);
    CHECK_EQ_INT(c->state.elapsed_ms, 999);
    CHECK_EQ_INT(c->state.seed, 7);
    CHECK_EQ_INT(c->state.nrng, 2);
    CHECK(c->state.rng[0] == 0xdeadbeefcafef00dull);
    CHECK_EQ_INT(c->ntensors, 4);
    struct tfm_ckpt_tensor *w = tfm_checkpoint_find(c, "param.w");
    CHECK(w && w->rank == 2 && w->dims[0] == 2 && w->dims[1] == 3 && w->count == 6);
    CHECK(w && w->data[5] == 6.5f);
    CHECK(tfm_checkpoint_find(c, "adam.v.w") != NULL);
    CHECK(tfm_checkpoint_find(c, "param.nope") == NULL);
    tfm_checkpoint_free(c);
    c = tfm_checkpoint_load(p, TFM_CKPT_NO_OPTIMIZER, &err);
    CHECK(c && c->ntensors == 2 && !tfm_checkpoint_find(c, "adam.m.w"));
    tfm_checkpoint_free(c);
    /* mapped: the same values, pointing into the file's map, not copies */
    c = tfm_checkpoint_load(p, TFM_CKPT_NO_OPTIMIZER | TFM_CKPT_MAPPED, &err);
    w = c ? tfm_checkpoint_find(c, "param.w") : NULL;
    CHECK(c && c->map && c->ntensors == 2 && w && !w->owned && w->data[5] == 6.5f);
    CHECK(c && tfm_checkpoint_find(c, "param.b")->data[2] == -3.5f);
    tfm_checkpoint_free(c);
}

static int skip_adam(const char *name, void *ctx)
{
    (void)ctx;
    return strncmp(name, "adam.", 5) == 0;
}

/* With TFM_CKPT_NO_OPTIMIZER the Adam records are read, checked and dropped: a corrupt
 * Adam payload is refused as by a full load.  With TFM_CKPT_SKIP_OPTIMIZER they are passed
 * over unread: the corrupt payload goes unnoticed (and costs nothing). */
static void test_skip_optimizer(void)
{
    struct tfm_error err;
    const char *p = path_in("adam.tfm"), *bad = path_in("adam-bad.tfm");
    CHECK(write_ckpt(p, 3, 2.0f, CONFIG, 1) == 0);
    FILE *f = fopen(p, "rb");
    static char buf[65536];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    /* the last tensor (adam.v.w, 24 bytes of floats 2..7) before the end record: find
     * its payload by value and flip a bit */
    float want[6] = {2, 3, 4, 5, 6, 7};
    size_t at = 0;
    for (size_t i = 0; i + sizeof want <= n; i += 4)
        if (memcmp(buf + i, want, sizeof want) == 0)
            at = i;                 /* the last match: adam.v.w */
    CHECK(at > 0);
    buf[at + 4] ^= 0x01;
    f = fopen(bad, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    struct tfm_checkpoint *c = tfm_checkpoint_load(bad, 0, &err);
    CHECK(c == NULL && strstr(err.msg, "'adam.v.w'") && strstr(err.msg, "crc mismatch"));
    tfm_checkpoint_free(c);
    c = tfm_checkpoint_load(bad, TFM_CKPT_NO_OPTIMIZER, &err);
    CHECK(c == NULL && strstr(err.msg, "'adam.v.w'") && strstr(err.msg, "crc mismatch"));
    tfm_checkpoint_free(c);
    c = tfm_checkpoint_load(bad, TFM_CKPT_SKIP_OPTIMIZER, &err);
    CHECK(c != NULL && c->ntensors == 2 && !tfm_checkpoint_find(c, "adam.m.w"));
    tfm_checkpoint_free(c);
    c = tfm_checkpoint_load(bad, TFM_CKPT_SKIP_OPTIMIZER | TFM_CKPT_MAPPED, &err);
    CHECK(c != NULL && c->ntensors == 2);
    tfm_checkpoint_free(c);
    /* the same through a pipe (no map: the skipped payloads are read and dropped) */
    int fds[2];
    CHECK(pipe(fds) == 0 && n < 65536 && write(fds[1], buf, n) == (ssize_t)n);
    close(fds[1]);
    struct tfm_reader *r = tfm_reader_open_fd(fds[0], "pipe", &err);
    CHECK(r != NULL);
    if (r) {
        tfm_reader_skip(r, skip_adam, NULL);
        struct tfm_record rec;
        int k, params = 0, adam = 0;
        while ((k = tfm_reader_next(r, &rec, &err)) == 1) {
            params += strncmp(rec.name, "param.", 6) == 0;
            adam += strncmp(rec.name, "adam.", 5) == 0;
            CHECK(!rec.mapped);
        }
        CHECK(k == 0);              /* the end record counted the skipped ones too */
        CHECK(params == 2 && adam == 0);
        tfm_reader_close(r);
    }
    close(fds[0]);
}

static void test_poison_refused(void)
{
    struct tfm_error err;
    const char *p = path_in("nan.tfm");
    struct tfm_ckpt_state st = {.step = 3};
    struct tfm_writer *w = tfm_checkpoint_begin(p, NULL, CONFIG, &st, &err);
    CHECK(w != NULL);
    float v[3] = {1, NAN, 2};
    int64_t d = 3;
    CHECK(tfm_checkpoint_put(w, TFM_CKPT_PARAM, "x", 1, &d, v, &err) == -1);
    CHECK(strstr(err.msg, "'param.x' element 1 is NaN") != NULL);
    v[1] = INFINITY;
    CHECK(tfm_checkpoint_put(w, TFM_CKPT_PARAM, "x", 1, &d, v, &err) == -1);
    CHECK(strstr(err.msg, "is Inf") != NULL);
    tfm_writer_abort(w);
    CHECK(access(p, F_OK) != 0);    /* nothing appeared */
}

static void test_refusals(void)
{
    struct tfm_error err;
    /* a stream of another kind */
    const char *p = path_in("tokens.tfm");
    struct tfm_header h;
    tfm_header_init(&h, TFM_KIND_TOKENS);
    struct tfm_writer *w = tfm_writer_open(p, &h, 0, &err);
    tfm_header_free(&h);
    CHECK(w && tfm_writer_close(w, &err) == 0);
    CHECK(tfm_checkpoint_load(p, 0, &err) == NULL);
    CHECK(strstr(err.msg, "not a checkpoint (stream kind 'tokens')") != NULL);
    /* a truncated checkpoint */
    const char *good = path_in("good.tfm"), *cut = path_in("cut.tfm");
    CHECK(write_ckpt(good, 5, 0, CONFIG, 0) == 0);
    FILE *f = fopen(good, "rb");
    char buf[65536];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    f = fopen(cut, "wb");
    fwrite(buf, 1, n - 100, f);
    fclose(f);
    CHECK(tfm_checkpoint_load(cut, 0, &err) == NULL);
    CHECK(strncmp(err.msg, cut, strlen(cut)) == 0);
    /* a flipped payload byte: crc */
    buf[n - 140] ^= 0x40;
    f = fopen(cut, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    CHECK(tfm_checkpoint_load(cut, 0, &err) == NULL);
    printf("# %s\n", err.msg);
    CHECK(tfm_checkpoint_load(path_in("missing.tfm"), 0, &err) == NULL);
}

static void test_compatible(void)
{
    struct tfm_error err;
    CHECK(write_ckpt(path_in("a.tfm"), 1, 0, CONFIG, 0) == 0);
    CHECK(write_ckpt(path_in("b.tfm"), 2, 1, CONFIG, 0) == 0);
    CHECK(write_ckpt(path_in("c.tfm"), 3, 1, "d_model = 8\nlayers = 2\n", 0) == 0);
    struct tfm_checkpoint *a = tfm_checkpoint_load(path_in("a.tfm"), 0, &err);
    struct tfm_checkpoint *b = tfm_checkpoint_load(path_in("b.tfm"), 0, &err);
    struct tfm_checkpoint *c = tfm_checkpoint_load(path_in("c.tfm"), 0, &err);
    CHECK(a && b && c);
    if (a && b && c) {
        CHECK(tfm_checkpoint_compatible(a, b, &err) == 0);
        CHECK(tfm_checkpoint_compatible(a, c, &err) == -1);
        CHECK_STR(err.msg, "different config: 'layers = 1' against 'layers = 2'");
        free(b->config);    /* run keys may differ */
        b->config = strdup("d_model = 8\nmax_steps = 9\nlayers = 1\nkeep = 2\n");
        CHECK(tfm_checkpoint_compatible(a, b, &err) == 0);
        free(b->config);
        b->config = strdup("d_model = 8\n");
        CHECK(tfm_checkpoint_compatible(a, b, &err) == -1);     /* the default, 6 */
        CHECK_STR(err.msg, "different config: 'layers = 1' against 'layers = 6'");
        /* values, not text: spacing, comments, a key at its default written or not (a
         * version that added the key) */
        free(b->config);
        b->config = strdup("# resumed\nlayers=1\n  d_model =   8\nheads = 8\nmin_len = 1\n");
        CHECK(tfm_checkpoint_compatible(a, b, &err) == 0);
        CHECK(tfm_checkpoint_compatible(b, a, &err) == 0);
        tfm_header_set_spm(&b->header, "x", 1, &err);
        free(b->config);
        b->config = strdup(CONFIG);
        CHECK(tfm_checkpoint_compatible(a, b, &err) == -1);
        CHECK(strstr(err.msg, "different vocabulary") != NULL);
    }
    tfm_checkpoint_free(a);
    tfm_checkpoint_free(b);
    tfm_checkpoint_free(c);
}

static void test_directory(void)
{
    struct tfm_error err;
    char sub[512];
    snprintf(sub, sizeof sub, "%s/run", dir);
    int created = -1;
    CHECK(tfm_checkpoint_dir_ready(sub, &created, &err) == 0);
    CHECK_EQ_INT(created, 1);
    CHECK(tfm_checkpoint_dir_ready(sub, &created, &err) == 0);
    CHECK_EQ_INT(created, 0);      /* there already: not this call's */
    char p[600];
    CHECK(tfm_checkpoint_path(p, sizeof p, sub, 42) == 0);
    CHECK(strcmp(p + strlen(sub), "/step-000042.tfm") == 0);
    int64_t steps_in[] = {300, 20, 1000000, 4000};
    for (int i = 0; i < 4; i++) {
        tfm_checkpoint_path(p, sizeof p, sub, steps_in[i]);
        CHECK(write_ckpt(p, steps_in[i], (float)i, CONFIG, 0) == 0);
    }
    FILE *f = fopen(path_in("run/step-12.tfm"), "w");   /* too few digits: not a checkpoint */
    if (f)
        fclose(f);
    char **paths;
    int64_t *steps;
    int n;
    CHECK(tfm_checkpoint_list(sub, &paths, &steps, &n, &err) == 0);
    CHECK_EQ_INT(n, 4);
    if (n == 4) {
        CHECK_EQ_INT(steps[0], 20);
        CHECK_EQ_INT(steps[3], 1000000);
        CHECK(strstr(paths[3], "/step-1000000.tfm") != NULL);
    }
    tfm_checkpoint_list_free(paths, steps, n);
    CHECK(tfm_checkpoint_link_last(sub, 1000000, &err) == 0);
    char target[256] = {0};
    CHECK(readlink(path_in("run/last.tfm"), target, sizeof target - 1) > 0);
    CHECK_STR(target, "step-1000000.tfm");
    struct tfm_checkpoint *c = tfm_checkpoint_load(path_in("run/last.tfm"), 0, &err);
    CHECK(c && c->state.step == 1000000);
    tfm_checkpoint_free(c);
    CHECK(tfm_checkpoint_prune(sub, 2, &err) == 0);
    CHECK(tfm_checkpoint_list(sub, &paths, &steps, &n, &err) == 0);
    CHECK(n == 2 && steps[0] == 4000 && steps[1] == 1000000);
    tfm_checkpoint_list_free(paths, steps, n);
    /* leftovers of a dead writer go, those of a live one (the parent) stay */
    FILE *g = fopen(path_in("run/step-000077.tfm.tmp.999999999"), "w");
    if (g)
        fclose(g);
    char live[64];
    snprintf(live, sizeof live, "run/step-000078.tfm.tmp.%ld", (long)getppid());
    g = fopen(path_in(live), "w");
    if (g)
        fclose(g);
    /* and one with this process's PID: a killed writer's that had it (in a container) */
    char own[64];
    snprintf(own, sizeof own, "run/.last.tfm.%ld", (long)getpid());
    g = fopen(path_in(own), "w");
    if (g)
        fclose(g);
    CHECK_EQ_INT(tfm_checkpoint_clean(sub, &err), 2);
    CHECK(access(path_in("run/step-000077.tfm.tmp.999999999"), F_OK) != 0);
    CHECK(access(path_in(own), F_OK) != 0);
    CHECK(access(path_in(live), F_OK) == 0);
    CHECK(tfm_checkpoint_dir_ready(path_in("rt.tfm"), NULL, &err) == -1);
    CHECK(strstr(err.msg, "not a directory") != NULL);
    if (geteuid() != 0) {
        CHECK(tfm_checkpoint_dir_ready("/proc/tfm-no", NULL, &err) == -1);
        CHECK(strstr(err.msg, "cannot create directory") != NULL);
    }
}

/* ---- checkpoints of a model ------------------------------------------------------- */

/* A small model: 1 layer, d_model 8, d_ff 16, vocab 8 (emb 8x8, enc.0.ffn.w1 8x16 ...). */
static const char MODEL1[] = "layers = 1\nd_model = 8\nd_ff = 16\nheads = 2\nvocab = 8\n"
                             "max_len = 8\ntokens = 8\n";
static const char MODEL2[] = "layers = 2\nd_model = 8\nd_ff = 16\nheads = 2\nvocab = 8\n"
                             "max_len = 8\ntokens = 8\n";

/* What write_model changes in an otherwise good checkpoint of a model. */
struct edit {
    const char *poison;     /* this tensor gets value bad at element 3 (or at) */
    float bad;
    int at;                 /* > 0: the poisoned element instead of 3 */
    const char *drop;       /* this tensor is left out */
    const char *extra;      /* a tensor of this name is added (shape 2) */
    const char *reshape;    /* this rank-2 tensor is written with its dims swapped */
    int adam;               /* 0: no moments, 1: both, 2: adam.m only */
};

/* A checkpoint at path of the model that layout (config text) describes, with config text
 * in the file, parameters base + (j % 7) and the same values as moments, edited by e. */
static int write_model(const char *path, const char *layout, const char *config, int64_t step,
                       float base, const struct edit *e)
{
    struct tfm_error err;
    struct tfm_config cfg;
    tfm_config_defaults(&cfg);
    struct tfm_param *p = NULL;
    int np = 0;
    if (tfm_config_parse(&cfg, layout, strlen(layout), "layout", &err) ||
        tfm_model_layout(&cfg, &p, &np, &err)) {
        printf("# %s\n", err.msg);
        return -1;
    }
    struct tfm_header h;
    tfm_header_init(&h, "ignored");
    tfm_header_set_spm(&h, SPM, sizeof SPM, &err);
    struct tfm_ckpt_state st = {.step = step, .nrng = 1};
    struct tfm_writer *w = tfm_checkpoint_begin(path, &h, config, &st, &err);
    tfm_header_free(&h);
    int rc = w ? 0 : -1;
    static const char *const prefix[3] = {"param.", "adam.m.", "adam.v."};
    for (int part = 0; rc == 0 && part < (e->adam == 0 ? 1 : e->adam == 1 ? 3 : 2); part++)
        for (int i = 0; rc == 0 && i < np; i++) {
            char name[256];
            snprintf(name, sizeof name, "%s%s", prefix[part], p[i].name);
            if (e->drop && strcmp(name, e->drop) == 0)
                continue;
            float *v = malloc((size_t)p[i].count * sizeof *v);
            for (int64_t j = 0; j < p[i].count; j++)
                v[j] = base + (float)(j % 7);
            if (e->poison && strcmp(name, e->poison) == 0)
                v[e->at > 0 ? e->at : 3] = e->bad;
            int64_t dims[2] = {p[i].dims[0], p[i].dims[1]};
            if (e->reshape && strcmp(name, e->reshape) == 0) {
                dims[0] = p[i].dims[1];
                dims[1] = p[i].dims[0];
            }
            rc = tfm_writer_put(w, name, TFM_F32, p[i].rank, dims, v, &err);
            free(v);
        }
    if (rc == 0 && e->extra) {
        float v[2] = {1, 2};
        int64_t d = 2;
        rc = tfm_writer_put(w, e->extra, TFM_F32, 1, &d, v, &err);
    }
    free(p);
    if (rc == 0)
        rc = tfm_writer_close(w, &err);
    else if (w)
        tfm_writer_abort(w);
    if (rc)
        printf("# %s\n", err.msg);
    return rc;
}

/* The message of tfm_checkpoint_check on a model checkpoint edited by e ("" when it
 * passes), loaded with flags, checked with optimizer. */
static const char *check_msg(const char *name, const char *layout, const char *config,
                             const struct edit *e, int flags, int optimizer)
{
    static char msg[1100];
    struct tfm_error err;
    struct tfm_config cfg;
    const char *p = path_in(name);
    if (write_model(p, layout, config, 1, 0.25f, e))
        return "(not written)";
    struct tfm_checkpoint *c = tfm_checkpoint_load(p, flags, &err);
    if (!c)
        return "(not loaded)";
    int rc = tfm_checkpoint_config(c, &cfg, &err);
    if (rc == 0)
        rc = tfm_checkpoint_check(c, &cfg, optimizer, &err);
    tfm_checkpoint_free(c);
    /* the message without the directory: "name: tensor ..." */
    snprintf(msg, sizeof msg, "%s", rc ? err.msg + strlen(dir) + 1 : "");
    if (rc && strncmp(err.msg, dir, strlen(dir)) != 0)
        snprintf(msg, sizeof msg, "(no path) %s", err.msg);
    return msg;
}

static void test_model_check(void)
{
    const struct edit none = {0}, both = {.adam = 1};
    CHECK_STR(check_msg("m1.tfm", MODEL1, MODEL1, &none, 0, 0), "");
    CHECK_STR(check_msg("m1a.tfm", MODEL1, MODEL1, &both, 0, 1), "");
    /* non-finite values, in parameters and moments; a negative second moment */
    struct edit e = {.poison = "param.enc.0.ffn.w1", .bad = NAN};
    CHECK_STR(check_msg("nan.tfm", MODEL1, MODEL1, &e, 0, 0),
              "nan.tfm: tensor param.enc.0.ffn.w1: element 3 is NaN");
    e = (struct edit){.poison = "param.emb", .bad = -INFINITY};
    CHECK_STR(check_msg("inf.tfm", MODEL1, MODEL1, &e, 0, 0),
              "inf.tfm: tensor param.emb: element 3 is Inf");
    /* the scan's vector lanes and its tail: the last of emb's 64, the 17th of w1's 128 */
    e = (struct edit){.poison = "param.emb", .bad = INFINITY, .at = 63};
    CHECK_STR(check_msg("inf63.tfm", MODEL1, MODEL1, &e, 0, 0),
              "inf63.tfm: tensor param.emb: element 63 is Inf");
    e = (struct edit){.poison = "param.enc.0.ffn.w1", .bad = NAN, .at = 16};
    CHECK_STR(check_msg("nan16.tfm", MODEL1, MODEL1, &e, 0, 0),
              "nan16.tfm: tensor param.enc.0.ffn.w1: element 16 is NaN");
    e = (struct edit){.poison = "adam.m.dec.0.cross.wkv", .bad = NAN, .adam = 1};
    CHECK_STR(check_msg("mnan.tfm", MODEL1, MODEL1, &e, 0, 1),
              "mnan.tfm: tensor adam.m.dec.0.cross.wkv: element 3 is NaN");
    /* (dropped, or passed over unread, the moments are not looked at) */
    CHECK_STR(check_msg("mnan.tfm", MODEL1, MODEL1, &e, TFM_CKPT_NO_OPTIMIZER, 0), "");
    CHECK_STR(check_msg("mnan.tfm", MODEL1, MODEL1, &e, TFM_CKPT_SKIP_OPTIMIZER, 0), "");
    e = (struct edit){.poison = "adam.v.enc.0.ln1.g", .bad = -1e-30f, .adam = 1};
    CHECK_STR(check_msg("vneg.tfm", MODEL1, MODEL1, &e, 0, 1),
              "vneg.tfm: tensor adam.v.enc.0.ln1.g: element 3 is negative (a second moment "
              "never is)");
    e = (struct edit){.poison = "adam.v.enc.0.ln1.g", .bad = -0.0f, .adam = 1};
    CHECK_STR(check_msg("vzero.tfm", MODEL1, MODEL1, &e, 0, 1), "");
    /* a config that does not describe the tensors: fewer layers, more layers, untied */
    CHECK_STR(check_msg("l1.tfm", MODEL2, MODEL1, &none, 0, 0),
              "l1.tfm: tensor param.enc.1.self.wqkv: not a parameter of the model its config "
              "describes (layer 1; the config has layers = 1)");
    CHECK_STR(check_msg("l3.tfm", MODEL1, MODEL2, &none, 0, 0),
              "l3.tfm: tensor param.enc.1.self.wqkv missing (config wants 8x24)");
    char untied[256];
    snprintf(untied, sizeof untied, "%stie = 0\n", MODEL1);
    CHECK_STR(check_msg("tie.tfm", MODEL1, untied, &none, 0, 0),
              "tie.tfm: tensor param.emb: not a parameter of the model its config describes "
              "(the config has tie = 0)");
    /* the same shapes under another width */
    CHECK_STR(check_msg("ff.tfm", MODEL1, "layers = 1\nd_model = 8\nd_ff = 32\nheads = 2\n"
                        "vocab = 8\nmax_len = 8\ntokens = 8\n", &none, 0, 0),
              "ff.tfm: tensor param.enc.0.ffn.w1: shape 8x16, config wants 8x32");
    /* an extra tensor, a missing one, a reshaped one (the same count) */
    e = (struct edit){.extra = "param.enc.0.ffn.w3"};
    CHECK_STR(check_msg("extra.tfm", MODEL1, MODEL1, &e, 0, 0),
              "extra.tfm: tensor param.enc.0.ffn.w3: not a parameter of the model its config "
              "describes");
    e = (struct edit){.drop = "param.dec.0.ln3.b"};
    CHECK_STR(check_msg("drop.tfm", MODEL1, MODEL1, &e, 0, 0),
              "drop.tfm: tensor param.dec.0.ln3.b missing (config wants 8)");
    e = (struct edit){.reshape = "param.enc.0.ffn.w1"};
    CHECK_STR(check_msg("reshape.tfm", MODEL1, MODEL1, &e, 0, 0),
              "reshape.tfm: tensor param.enc.0.ffn.w1: shape 16x8, config wants 8x16");
    /* the moments: all of them to resume, all or none otherwise */
    CHECK_STR(check_msg("noadam.tfm", MODEL1, MODEL1, &none, 0, 1),
              "noadam.tfm: tensor adam.m.emb missing (config wants 8x8): no optimizer state "
              "to resume from (dropped, as tfm-avg does?)");
    e = (struct edit){.adam = 2};
    CHECK_STR(check_msg("halfadam.tfm", MODEL1, MODEL1, &e, 0, 0),
              "halfadam.tfm: tensor adam.v.emb missing (config wants 8x8): the other Adam "
              "moments are there");
    e = (struct edit){.drop = "adam.v.dec.0.ffn.b2", .adam = 1};
    CHECK_STR(check_msg("dropv.tfm", MODEL1, MODEL1, &e, 0, 1),
              "dropv.tfm: tensor adam.v.dec.0.ffn.b2 missing (config wants 8): the other Adam "
              "moments are there");
    /* a vocabulary of another size than the config's (the tensors that config's) */
    char vocab9[256];
    snprintf(vocab9, sizeof vocab9, "%svocab = 9\n", MODEL1);
    CHECK_STR(check_msg("vocab.tfm", vocab9, vocab9, &none, 0, 0),
              "vocab.tfm: its vocabulary has 8 pieces, its config says vocab=9");
    /* a config that is no model */
    CHECK_STR(check_msg("heads.tfm", MODEL1, "layers = 1\nd_model = 8\nheads = 3\nvocab = 8\n",
                        &none, 0, 0),
              "heads.tfm: config: d_model 8 is not divisible by heads 3");
}

/* tfm_checkpoint_to_model: the values arrive; a failed check copies nothing. */
static void test_to_model(void)
{
    struct tfm_error err;
    struct tfm_config cfg;
    struct tfm_backend *be = tfm_backend_cpu(1, &err);
    CHECK(be != NULL);
    if (!be)
        return;
    const struct edit both = {.adam = 1}, nan = {.poison = "param.dec.0.ffn.b2", .bad = NAN, .adam = 1};
    const char *good = path_in("tm.tfm"), *bad = path_in("tmbad.tfm");
    CHECK(write_model(good, MODEL1, MODEL1, 5, 0.5f, &both) == 0);
    CHECK(write_model(bad, MODEL1, MODEL1, 5, 0.5f, &nan) == 0);
    struct tfm_checkpoint *c = tfm_checkpoint_load(good, 0, &err);
    struct tfm_checkpoint *b = tfm_checkpoint_load(bad, 0, &err);
    tfm_config_defaults(&cfg);
    CHECK(c && b && tfm_checkpoint_config(c, &cfg, &err) == 0);
    struct tfm_model *m = c ? tfm_model_create(&cfg, be, 0, &err) : NULL;
    CHECK(m != NULL);
    if (c && b && m) {
        int64_t n = tfm_model_count(m);
        float *host = malloc((size_t)n * sizeof *host);
        const struct tfm_param *w1 = tfm_model_find(m, "enc.0.ffn.w1");
        tfm_model_download(m, TFM_PARAMS, host);
        float before = host[w1->offset + 3];
        CHECK(before != 3.5f);                      /* initialized, not yet loaded */
        CHECK(tfm_checkpoint_to_model(b, m, 1, &err) == -1);
        CHECK(strstr(err.msg, "tmbad.tfm: tensor param.dec.0.ffn.b2: element 3 is NaN") != NULL);
        tfm_model_download(m, TFM_PARAMS, host);
        CHECK(host[w1->offset + 3] == before);      /* nothing copied */
        CHECK(tfm_checkpoint_to_model(c, m, 1, &err) == 0);
        tfm_model_download(m, TFM_PARAMS, host);
        CHECK(host[w1->offset + 3] == 3.5f && host[w1->offset + 7] == 0.5f);
        tfm_model_download(m, TFM_ADAM_V, host);
        CHECK(host[w1->offset + 6] == 6.5f);
        free(host);
        /* a model of another config refuses the checkpoint */
        struct tfm_config other = cfg;
        other.d_ff = 32;
        struct tfm_model *m2 = tfm_model_create(&other, be, 0, &err);
        CHECK(m2 && tfm_checkpoint_to_model(c, m2, 0, &err) == -1);
        CHECK(strstr(err.msg, "tm.tfm: tensor param.enc.0.ffn.w1: shape 8x16, config wants 8x32") != NULL);
        tfm_model_free(m2);
    }
    tfm_model_free(m);
    tfm_checkpoint_free(c);
    tfm_checkpoint_free(b);
    be->destroy(be);
}

/* Bytes of this process's memory maps of files whose path ends in name. */
static long mapped_bytes(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    long sum = 0;
    size_t n = strlen(name);
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        size_t len = strcspn(line, "\n");
        line[len] = 0;
        if (len >= n && strcmp(line + len - n, name) == 0 && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
            sum += (long)(hi - lo);
    }
    if (f)
        fclose(f);
    return sum;
}

/* The loss of an inference model of cfg on be, its parameters from c (shared where it can:
 * *shared gets how many), with the checks of what sharing means on the way; NAN when it
 * cannot be made. */
static double shared_loss(const struct tfm_checkpoint *c, const struct tfm_config *cfg,
                          struct tfm_backend *be, int share, int *shared)
{
    static const int32_t src[6] = {4, 5, 6, 3, 7, 5}, tgt[6] = {5, 6, 7, 4, 3, 0};
    struct tfm_error err;
    struct tfm_model *m = tfm_model_create_inference(cfg, be, 8, &err);
    CHECK(m != NULL);
    if (!m)
        return NAN;
    *shared = share ? tfm_checkpoint_share_model(c, m, &err) : tfm_checkpoint_to_model(c, m, 0, &err);
    CHECK(*shared >= 0 && tfm_model_shared(m) == *shared);
    int np = tfm_model_nparams(m), in_place = 0;
    for (int i = 0; i < np; i++) {
        const struct tfm_param *p = tfm_model_param(m, i);
        char full[80];
        snprintf(full, sizeof full, "param.%s", p->name);
        const struct tfm_ckpt_tensor *t = tfm_checkpoint_find(c, full);
        in_place += t && p->data == t->data && p->w == t->data;
    }
    CHECK(in_place == *shared);             /* the shared ones read the map itself */
    struct tfm_loss l;
    double loss = tfm_model_eval_batch(m, 2, 3, 3, src, tgt, &l, &err) == 0 ? l.loss : NAN;
    CHECK(isfinite(loss));
    /* the whole block as it would be after a copy, the padding zero */
    int64_t n = tfm_model_count(m);
    float *host = malloc((size_t)n * sizeof *host);
    tfm_model_download(m, TFM_PARAMS, host);
    const struct tfm_param *w1 = tfm_model_find(m, "enc.0.ffn.w1");
    CHECK(host[w1->offset + 3] == 3.5f && host[w1->offset + 7] == 0.5f);
    CHECK(host[tfm_model_find(m, "enc.0.ln1.g")->offset + 8] == 0.0f);   /* D 8: padding */
    const struct tfm_ckpt_tensor *t = tfm_checkpoint_find(c, "param.enc.0.ffn.w1");
    if (w1->data == t->data) {
        /* set again: the model's own memory, the checkpoint's untouched */
        float *v = malloc((size_t)t->count * sizeof *v);
        for (int64_t j = 0; j < t->count; j++)
            v[j] = -1.0f;
        CHECK(tfm_model_set(m, TFM_PARAMS, "enc.0.ffn.w1", v, t->count, &err) == 0);
        CHECK(tfm_model_shared(m) == *shared - 1 && w1->data != t->data);
        CHECK(w1->data[3] == -1.0f && t->data[3] == 3.5f);
        tfm_model_upload(m, TFM_PARAMS, host);      /* all of them copied in again */
        CHECK(tfm_model_shared(m) == 0 && w1->data[3] == 3.5f);
        double again = tfm_model_eval_batch(m, 2, 3, 3, src, tgt, &l, &err) == 0 ? l.loss : NAN;
        CHECK(again == loss);
        free(v);
    }
    free(host);
    tfm_model_free(m);
    return loss;
}

/* tfm_checkpoint_share_model: on the CPU at fp32 every parameter is read in the
 * checkpoint's map and the model computes what a copy does, bit for bit; where the ops do
 * not read fp32 host memory (the CPU's bf16 emulation, the sim device) or the checkpoint
 * was not mapped, it copies. */
static void test_share_model(void)
{
    struct tfm_error err;
    struct tfm_config cfg;
    const struct edit both = {.adam = 1};
    const char *path = path_in("share.tfm");
    CHECK(write_model(path, MODEL1, MODEL1, 5, 0.5f, &both) == 0);
    struct tfm_checkpoint *c =
        tfm_checkpoint_load(path, TFM_CKPT_SKIP_OPTIMIZER | TFM_CKPT_MAPPED, &err);
    tfm_config_defaults(&cfg);
    CHECK(c && tfm_checkpoint_config(c, &cfg, &err) == 0);
    if (!c) {
        printf("# %s\n", err.msg);
        return;
    }
    /* the moments, passed over at the end of the file, are no longer mapped */
    struct stat st;
    CHECK(stat(path, &st) == 0);
    long mapped = mapped_bytes("share.tfm"), page = sysconf(_SC_PAGESIZE);
    const struct tfm_ckpt_tensor *last = &c->tensors[c->ntensors - 1];
    long params_end = (long)((const char *)(last->data + last->count) - (const char *)c->tensors[0].data);
    CHECK(mapped > 0 && mapped < st.st_size / 2 && mapped <= params_end + 2 * page);
    /* the values of a mapped (read-only) checkpoint are tested once */
    CHECK(tfm_checkpoint_check(c, &cfg, 0, &err) == 0);
    int ok = 0;
    for (int i = 0; i < c->ntensors; i++)
        ok += c->tensors[i].values_ok;
    CHECK(ok == c->ntensors);
    int np = 0, shared = -1, copied = -1;
    struct tfm_param *layout = NULL;
    CHECK(tfm_model_layout(&cfg, &layout, &np, &err) == 0 && np > 10);
    free(layout);
    struct tfm_backend *be = tfm_backend_cpu(1, &err);
    CHECK(be != NULL);
    if (be) {
        double a = shared_loss(c, &cfg, be, 1, &shared);
        double b = shared_loss(c, &cfg, be, 0, &copied);
        CHECK(shared == np && copied == 0);
        CHECK(a == b);
        /* a training model copies (and gets only the parameters) */
        struct tfm_model *t = tfm_model_create(&cfg, be, 8, &err);
        CHECK(t && tfm_checkpoint_share_model(c, t, &err) == 0 && tfm_model_shared(t) == 0);
        tfm_model_free(t);
        be->destroy(be);
    }
    struct tfm_config bf = cfg;
    bf.precision = TFM_PRECISION_BF16;
    be = tfm_backend_cpu(1, &err);
    if (be) {
        shared_loss(c, &bf, be, 1, &shared);
        CHECK(shared == 0);                 /* the ops read the compute copy */
        be->destroy(be);
    }
    be = tfm_backend_sim(1, &err);
    CHECK(be != NULL);
    if (be) {
        shared_loss(c, &cfg, be, 1, &shared);
        CHECK(shared == 0);                 /* device memory */
        be->destroy(be);
    }
    /* not mapped: the tensors are the checkpoint's own copies, which are not promised to
     * be 64-byte aligned; whatever is shared reads them (c outlives the model) */
    struct tfm_checkpoint *own = tfm_checkpoint_load(path, TFM_CKPT_SKIP_OPTIMIZER, &err);
    be = tfm_backend_cpu(1, &err);
    CHECK(own && be);
    if (own && be) {
        double a = shared_loss(own, &cfg, be, 1, &shared);
        double b = shared_loss(own, &cfg, be, 0, &copied);
        CHECK(a == b && copied == 0);
        /* its own copies may change: tested at every check */
        struct tfm_ckpt_tensor *t = &own->tensors[own->ntensors - 1];
        CHECK(t->values_ok == 0);
        t->data[1] = NAN;
        CHECK(tfm_checkpoint_check(own, &cfg, 0, &err) == -1);
        CHECK(strstr(err.msg, ": element 1 is NaN") != NULL);
    }
    if (be)
        be->destroy(be);
    tfm_checkpoint_free(own);
    tfm_checkpoint_free(c);
}

static void test_lock(void)
{
    struct tfm_error err;
    char sub[512], lockfile[600], host[256] = "?", want[2048];
    snprintf(sub, sizeof sub, "%s/locked", dir);
    snprintf(lockfile, sizeof lockfile, "%s/.tfm-train.lock", sub);
    CHECK(tfm_checkpoint_dir_ready(sub, NULL, &err) == 0);
    struct tfm_ckpt_lock *a = tfm_checkpoint_lock(sub, &err);
    CHECK(a != NULL);
    /* another open file: refused (flock locks conflict even within a process), naming
     * the holder */
    struct tfm_ckpt_lock *b = tfm_checkpoint_lock(sub, &err);
    CHECK(b == NULL);
    gethostname(host, sizeof host - 1);
    snprintf(want, sizeof want, "%s: in use by another run (pid %ld on host %s; lock %s): wait "
             "for it to end, or use another directory", sub, (long)getpid(), host, lockfile);
    CHECK_STR(err.msg, want);
    tfm_checkpoint_unlock(a);
    CHECK(access(lockfile, F_OK) != 0);         /* removed with the lock */
    b = tfm_checkpoint_lock(sub, &err);
    CHECK(b != NULL);
    tfm_checkpoint_unlock(b);
    /* a directory that is not there */
    CHECK(tfm_checkpoint_lock(path_in("nowhere/x"), &err) == NULL);
    CHECK(strstr(err.msg, "nowhere/x/.tfm-train.lock: No such file or directory") != NULL);
}

static void test_average(void)
{
    struct tfm_error err;
    const struct edit both = {.adam = 1};
    const char *in[3] = {path_in("v1.tfm"), path_in("v2.tfm"), path_in("v3.tfm")};
    for (int i = 0; i < 3; i++)
        CHECK(write_model(in[i], MODEL1, MODEL1, 100 * (i + 1), (float)i * 0.5f, &both) == 0);
    const char *out = path_in("avg.tfm");
    CHECK(tfm_checkpoint_average(in, 3, 0, out, &err) == 0);
    struct tfm_checkpoint *c = tfm_checkpoint_load(out, 0, &err);
    CHECK(c != NULL);
    if (c) {
        struct tfm_config cfg;
        CHECK(tfm_checkpoint_config(c, &cfg, &err) == 0 &&
              tfm_checkpoint_check(c, &cfg, 0, &err) == 0);
        CHECK(tfm_checkpoint_find(c, "adam.m.emb") == NULL);      /* optimizer dropped */
        struct tfm_ckpt_tensor *w = tfm_checkpoint_find(c, "param.enc.0.ffn.w1");
        /* bases 0, 0.5, 1: mean 0.5 */
        CHECK(w && w->data[0] == 0.5f && w->data[5] == 5.5f);
        CHECK_EQ_INT(c->state.step, 300);
        CHECK_STR(tfm_header_get(&c->header, "averaged"), "3");
        CHECK_STR(tfm_header_get(&c->header, "averaged.steps"), "100,200,300");
        CHECK_STR(tfm_header_get(&c->header, "step"), "300");
        CHECK_EQ_INT(c->header.spm_size, sizeof SPM);
    }
    tfm_checkpoint_free(c);
    CHECK(tfm_checkpoint_average(in, 3, 1, out, &err) == 0);
    c = tfm_checkpoint_load(out, 0, &err);
    CHECK(c && tfm_checkpoint_find(c, "adam.m.emb") &&
          tfm_checkpoint_find(c, "adam.m.emb")->data[1] == 1.5f);
    tfm_checkpoint_free(c);
    /* Exact sums: 1e8, 1 and -1e8 have the mean 1/3, which a float sum loses (1e8 + 1 is
     * 1e8 in float); 3e38 three times, and Adam's second moments of 2e38, overflow a float
     * sum (it used to be refused as Inf) and have finite means */
    static const struct { const char *name; float v[3], mean; } exact[] = {
        {"param.enc.0.ffn.w1", {1e8f, 1.0f, -1e8f}, (float)(1.0 / 3)},
        {"param.dec.0.ffn.w2", {3e38f, 3e38f, 3e38f}, 3e38f},
        {"adam.v.emb", {2e38f, 2e38f, 2e38f}, 2e38f},
    };
    for (size_t e = 0; e < sizeof exact / sizeof *exact; e++) {
        for (int i = 0; i < 3; i++) {
            const struct edit one = {.adam = 1, .poison = exact[e].name, .bad = exact[e].v[i]};
            CHECK(write_model(in[i], MODEL1, MODEL1, 100 * (i + 1), (float)i * 0.5f, &one) == 0);
        }
        CHECK(tfm_checkpoint_average(in, 3, 1, out, &err) == 0);
        c = tfm_checkpoint_load(out, 0, &err);
        struct tfm_ckpt_tensor *t = c ? tfm_checkpoint_find(c, exact[e].name) : NULL;
        CHECK(t != NULL);
        if (t) {
            if (t->data[3] != exact[e].mean)
                printf("# %s: %.9g, expected %.9g\n", exact[e].name, t->data[3], exact[e].mean);
            CHECK(t->data[3] == exact[e].mean);
            CHECK(t->data[2] == 2.5f);          /* the others as before */
        }
        tfm_checkpoint_free(c);
    }
    /* a config mismatch is refused and writes nothing */
    const char *bad[2] = {in[0], path_in("other.tfm")};
    static const char wide[] = "layers = 1\nd_model = 16\nd_ff = 16\nheads = 2\nvocab = 8\n"
                               "max_len = 8\ntokens = 8\n";
    CHECK(write_model(bad[1], wide, wide, 9, 0, &both) == 0);
    const char *out2 = path_in("avg2.tfm");
    CHECK(tfm_checkpoint_average(bad, 2, 0, out2, &err) == -1);
    CHECK(strstr(err.msg, "different config: 'd_model = 16' against 'd_model = 8'") != NULL);
    CHECK(access(out2, F_OK) != 0);
    /* each input must hold the model of its config, finite: named, nothing written */
    const struct edit nan = {.poison = "param.enc.0.ffn.b1", .bad = NAN};
    CHECK(write_model(bad[1], MODEL1, MODEL1, 9, 0, &nan) == 0);
    CHECK(tfm_checkpoint_average(bad, 2, 0, out2, &err) == -1);
    CHECK(strstr(err.msg, "other.tfm: tensor param.enc.0.ffn.b1: element 3 is NaN") != NULL);
    CHECK(access(out2, F_OK) != 0);
    CHECK(write_model(bad[1], MODEL2, MODEL1, 9, 0, &both) == 0);
    CHECK(tfm_checkpoint_average(bad, 2, 0, out2, &err) == -1);
    CHECK(strstr(err.msg, "other.tfm: tensor param.enc.1.self.wqkv: not a parameter") != NULL);
    CHECK(access(out2, F_OK) != 0);
}

/* State layout 1 (a position in one process's shard) is read as such, and a state read
 * from it is written back in it, not passed off as layout 2's run-wide position. */
static void test_state_layout_1(void)
{
    struct tfm_error err;
    const char *p = path_in("v1.tfm");
    struct tfm_ckpt_state st = {.step = 9, .epoch = 1, .batch_pos = 5, .shard_pos = 1, .nrng = 1};
    struct tfm_writer *w = tfm_checkpoint_begin(p, NULL, CONFIG, &st, &err);
    CHECK(w && tfm_writer_close(w, &err) == 0);
    struct tfm_checkpoint *c = tfm_checkpoint_load(p, 0, &err);
    CHECK(c != NULL);
    if (!c)
        return;
    CHECK_EQ_INT(c->state.shard_pos, 1);
    CHECK_EQ_INT(c->state.batch_pos, 5);
    CHECK_EQ_INT(c->state.epoch, 1);
    tfm_checkpoint_free(c);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/tfm-test-ckpt.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    t_run("checkpoint round trip", test_round_trip);
    t_run("state layout 1", test_state_layout_1);
    t_run("NaN and Inf are refused", test_poison_refused);
    t_run("optimizer records dropped after their check, or passed over unread",
          test_skip_optimizer);
    t_run("wrong kind, truncated, corrupt, missing", test_refusals);
    t_run("compatibility", test_compatible);
    t_run("directory list, last.tfm, prune", test_directory);
    t_run("the directory lock", test_lock);
    t_run("a checkpoint against the model its config describes", test_model_check);
    t_run("a checkpoint into a model", test_to_model);
    t_run("an inference model reads a mapped checkpoint in place", test_share_model);
    t_run("average", test_average);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", dir);
    return t_done();
}
