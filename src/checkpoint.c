/* checkpoint.c: writing, loading, checking, comparing, listing and locking checkpoints
 * (see checkpoint.h).  Writing and loading are generic over named f32 tensors; the check
 * against a model takes the names and shapes from model.c's layout of the config.
 */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "model.h"
#include "output.h"
#include "progress.h"
#include "spm.h"
#include "util.h"

enum { STATE_FIXED = 8, STATE_VERSION = 2, STATE_SHARD_POS = 1 };

/* ---- writing ---------------------------------------------------------------------- */

/* tfm_checkpoint_begin on out, an output already open that the writer takes over (given
 * up on failure), or at path when out is NULL. */
static struct tfm_writer *begin(const char *path, struct tfm_output *out,
                                const struct tfm_header *base, const char *config,
                                const struct tfm_ckpt_state *st, struct tfm_error *err)
{
    struct tfm_header h;
    if (st->nrng < 0 || st->nrng > TFM_CKPT_MAX_RNG) {
        if (out)
            tfm_output_abort(out);
        tfm_fail(err, "%s: %d rng words (at most %d)", path, st->nrng, TFM_CKPT_MAX_RNG);
        return NULL;
    }
    if (base) {
        if (tfm_header_copy(&h, base, err)) {
            if (out)
                tfm_output_abort(out);
            return NULL;
        }
        snprintf(h.kind, sizeof h.kind, "%s", TFM_KIND_CHECKPOINT);
    } else {
        tfm_header_init(&h, TFM_KIND_CHECKPOINT);
    }
    struct tfm_writer *w = NULL;
    if (tfm_header_setf(&h, err, "step", "%lld", (long long)st->step)) {
        if (out)
            tfm_output_abort(out);
        goto out;
    }
    w = out ? tfm_writer_open_output(out, &h, 0, err) : tfm_writer_open(path, &h, 0, err);
    if (!w)
        goto out;
    int64_t n = (int64_t)strlen(config);
    if (tfm_writer_put(w, "config", TFM_U8, 1, &n, config, err))
        goto fail;
    /* a state read from layout 1 (tfm-avg's copy of one) keeps its layout and meaning */
    int64_t s[STATE_FIXED + TFM_CKPT_MAX_RNG] = {
        st->shard_pos ? STATE_SHARD_POS : STATE_VERSION, st->step, st->epoch, st->batch_pos, st->tokens, st->elapsed_ms,
        st->seed, st->nrng,
    };
    for (int i = 0; i < st->nrng; i++)
        memcpy(&s[STATE_FIXED + i], &st->rng[i], sizeof st->rng[i]);
    int64_t ns = STATE_FIXED + st->nrng;
    if (tfm_writer_put(w, "state", TFM_I64, 1, &ns, s, err))
        goto fail;
    goto out;
fail:
    tfm_writer_abort(w);
    w = NULL;
out:
    tfm_header_free(&h);
    return w;
}

struct tfm_writer *tfm_checkpoint_begin(const char *path, const struct tfm_header *base,
                                        const char *config, const struct tfm_ckpt_state *st,
                                        struct tfm_error *err)
{
    return begin(path, NULL, base, config, st, err);
}

int tfm_checkpoint_put(struct tfm_writer *w, const char *prefix, const char *name, int rank,
                       const int64_t *dims, const float *data, struct tfm_error *err)
{
    char full[TFM_MAX_NAME + 1];
    int len = snprintf(full, sizeof full, "%s%s", prefix, name);
    if (len < 0 || len > TFM_MAX_NAME)
        return tfm_fail(err, "%s: tensor name '%s%s' too long", tfm_writer_name(w), prefix, name);
    int64_t count = 1;
    for (int i = 0; i < rank; i++)
        count *= dims[i];
    for (int64_t i = 0; i < count; i++)
        if (!isfinite(data[i]))
            return tfm_fail(err, "%s: '%s' element %lld is %s: not writing a poisoned "
                            "checkpoint", tfm_writer_name(w), full, (long long)i,
                            isnan(data[i]) ? "NaN" : "Inf");
    return tfm_writer_put(w, full, TFM_F32, rank, dims, data, err);
}

/* ---- reading ---------------------------------------------------------------------- */

void tfm_checkpoint_free(struct tfm_checkpoint *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->ntensors; i++) {
        free(c->tensors[i].name);
        if (c->tensors[i].owned)
            free(c->tensors[i].data);
    }
    free(c->tensors);
    tfm_reader_close(c->map);
    free(c->path);
    free(c->config);
    tfm_header_free(&c->header);
    free(c);
}

struct tfm_ckpt_tensor *tfm_checkpoint_find(const struct tfm_checkpoint *c, const char *name)
{
    for (int i = 0; i < c->ntensors; i++)
        if (strcmp(c->tensors[i].name, name) == 0)
            return &c->tensors[i];
    return NULL;
}

static int is_prefixed(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int read_state(struct tfm_reader *r, const struct tfm_record *rec,
                      struct tfm_ckpt_state *st, struct tfm_error *err)
{
    if (rec->dtype != TFM_I64 || rec->rank != 1 || rec->count < STATE_FIXED)
        return tfm_reader_fail(r, rec, err, "expected i64 [>=%d], got %s rank %d",
                               STATE_FIXED, tfm_dtype_name(rec->dtype), rec->rank);
    int64_t s[STATE_FIXED];
    memcpy(s, rec->data, sizeof s);
    if (s[0] != STATE_VERSION && s[0] != STATE_SHARD_POS)
        return tfm_reader_fail(r, rec, err, "state layout version %lld (this tfm reads %d and %d)",
                               (long long)s[0], STATE_SHARD_POS, STATE_VERSION);
    st->shard_pos = s[0] == STATE_SHARD_POS;
    if (s[7] < 0 || s[7] > TFM_CKPT_MAX_RNG || rec->count != STATE_FIXED + s[7])
        return tfm_reader_fail(r, rec, err, "bad rng word count %lld", (long long)s[7]);
    if (s[1] < 0 || s[2] < 0 || s[3] < 0 || s[4] < 0 || s[5] < 0)
        return tfm_reader_fail(r, rec, err, "negative step, epoch, position or time");
    st->step = s[1];
    st->epoch = s[2];
    st->batch_pos = s[3];
    st->tokens = s[4];
    st->elapsed_ms = s[5];
    st->seed = s[6];
    st->nrng = (int)s[7];
    memcpy(st->rng, (const int64_t *)rec->data + STATE_FIXED, (size_t)st->nrng * 8);
    return 0;
}

static int is_adam(const char *name, void *ctx)
{
    (void)ctx;
    return is_prefixed(name, TFM_CKPT_ADAM_M) || is_prefixed(name, TFM_CKPT_ADAM_V);
}

struct tfm_checkpoint *tfm_checkpoint_load(const char *path, int flags, struct tfm_error *err)
{
    struct tfm_reader *r = tfm_reader_open(path, err);
    if (!r)
        return NULL;
    struct tfm_checkpoint *c = calloc(1, sizeof *c);
    if (!c) {
        tfm_reader_close(r);
        tfm_fail(err, "%s: out of memory", path);
        return NULL;
    }
    const struct tfm_header *h = tfm_reader_header(r);
    if (!(c->path = strdup(path))) {
        tfm_header_init(&c->header, "");
        goto oom;
    }
    if (tfm_header_copy(&c->header, h, err)) {
        tfm_header_init(&c->header, "");
        goto fail_prefix;
    }
    if (strcmp(h->kind, TFM_KIND_CHECKPOINT) != 0) {
        tfm_fail(err, "%s: not a checkpoint (stream kind '%s')", path, h->kind);
        goto fail;
    }
    if (flags & TFM_CKPT_SKIP_OPTIMIZER) {
        flags |= TFM_CKPT_NO_OPTIMIZER;
        tfm_reader_skip(r, is_adam, NULL);
    }
    int cap = 0, have_state = 0, ret;
    struct tfm_record rec;
    while ((ret = tfm_reader_next(r, &rec, err)) == 1) {
        if (strcmp(rec.name, "config") == 0) {
            if (rec.dtype != TFM_U8 || rec.rank != 1) {
                tfm_reader_fail(r, &rec, err, "config must be u8 [n]");
                goto fail;
            }
            if (c->config || memchr(rec.data, 0, rec.nbytes)) {
                tfm_reader_fail(r, &rec, err, c->config ? "second config" : "NUL in config");
                goto fail;
            }
            if (!(c->config = malloc(rec.nbytes + 1)))
                goto oom;
            memcpy(c->config, rec.data, rec.nbytes);
            c->config[rec.nbytes] = 0;
            continue;
        }
        if (strcmp(rec.name, "state") == 0) {
            if (have_state) {
                tfm_reader_fail(r, &rec, err, "second state record");
                goto fail;
            }
            if (read_state(r, &rec, &c->state, err))
                goto fail;
            have_state = 1;
            continue;
        }
        int adam = is_prefixed(rec.name, TFM_CKPT_ADAM_M) || is_prefixed(rec.name, TFM_CKPT_ADAM_V);
        if (!adam && !is_prefixed(rec.name, TFM_CKPT_PARAM)) {
            tfm_reader_fail(r, &rec, err, "unknown record in a checkpoint");
            goto fail;
        }
        if (rec.dtype != TFM_F32) {
            tfm_reader_fail(r, &rec, err, "tensor is %s, expected f32", tfm_dtype_name(rec.dtype));
            goto fail;
        }
        if (adam && (flags & TFM_CKPT_NO_OPTIMIZER))
            continue;
        if (tfm_checkpoint_find(c, rec.name)) {
            tfm_reader_fail(r, &rec, err, "duplicate tensor");
            goto fail;
        }
        if (c->ntensors == cap) {
            if (cap >= TFM_CKPT_MAX_TENSORS) {
                tfm_reader_fail(r, &rec, err, "more than %d tensors", TFM_CKPT_MAX_TENSORS);
                goto fail;
            }
            int ncap = cap ? 2 * cap : 64;
            void *p = realloc(c->tensors, (size_t)ncap * sizeof *c->tensors);
            if (!p)
                goto oom;
            c->tensors = p;
            cap = ncap;
        }
        struct tfm_ckpt_tensor *t = &c->tensors[c->ntensors];
        memset(t, 0, sizeof *t);
        t->name = strdup(rec.name);
        t->owned = !((flags & TFM_CKPT_MAPPED) && rec.mapped);
        t->data = t->owned ? malloc(rec.nbytes ? rec.nbytes : 1) : (float *)rec.data;
        if (!t->name || !t->data) {
            free(t->name);
            if (t->owned)
                free(t->data);
            goto oom;
        }
        c->ntensors++;
        if (t->owned)
            memcpy(t->data, rec.data, rec.nbytes);
        t->rank = rec.rank;
        memcpy(t->dims, rec.dims, sizeof t->dims);
        t->count = rec.count;
    }
    if (ret < 0)
        goto fail;
    if (!c->config) {
        tfm_fail(err, "%s: no config record", path);
        goto fail;
    }
    if (!have_state) {
        tfm_fail(err, "%s: no state record", path);
        goto fail;
    }
    if (flags & TFM_CKPT_MAPPED) {
        /* the moments that were passed over (the end of the file) give their address
         * space back: a decoding run keeps the parameters' part mapped while it lasts */
        const unsigned char *end = NULL;
        for (int i = 0; i < c->ntensors; i++) {
            const struct tfm_ckpt_tensor *t = &c->tensors[i];
            const unsigned char *e = (const unsigned char *)(t->data + t->count);
            if (!t->owned && e > end)
                end = e;
        }
        if (end)
            tfm_reader_unmap_after(r, end);
        c->map = r;                 /* closed by tfm_checkpoint_free */
    } else
        tfm_reader_close(r);
    return c;
oom:
    tfm_fail(err, "out of memory");
fail_prefix:
    tfm_error_prefix(err, "%s", path);
fail:
    tfm_reader_close(r);
    tfm_checkpoint_free(c);
    return NULL;
}

/* precision too: master weights and Adam moments are fp32 at every precision, so a run
 * may go on at another one (tfm-config(5), precision).  The keys of the search are not
 * read by training (only --valid-bleu decodes with them), so they may change as well. */
const char *const tfm_checkpoint_run_keys[] = {"max_steps", "save_every", "keep", "precision",
                                               "beam", "alpha", "max_len_b", "min_len", NULL};

/* c's config text over the defaults, unchecked. */
static int config_of(const struct tfm_checkpoint *c, struct tfm_config *cfg,
                     struct tfm_error *err)
{
    tfm_config_defaults(cfg);
    if (tfm_config_parse(cfg, c->config, strlen(c->config), "config", err))
        return tfm_error_prefix(err, "%s", c->path);
    return 0;
}

/* The first key but the run keys whose value differs between a and b, its two values in
 * va and vb (n bytes each); NULL when none does. */
static const char *config_difference(const struct tfm_config *a, const struct tfm_config *b,
                                     char *va, char *vb, size_t n)
{
    int nkeys;
    const struct tfm_config_key *keys = tfm_config_keys(&nkeys);
    for (int i = 0; i < nkeys; i++) {
        if (tfm_checkpoint_key_may_change(keys[i].name))
            continue;
        tfm_config_get(a, keys[i].name, va, n);
        tfm_config_get(b, keys[i].name, vb, n);
        if (strcmp(va, vb) != 0)
            return keys[i].name;
    }
    return NULL;
}

/* 0 when the configs of c and ref give every key but the run keys the same value, else
 * -1 naming the first key that differs.  Values, not the text: a config written without
 * a key that a later version added (its default), with comments or other spacing, is the
 * same model, as tfm-train --resume takes it (tfm_checkpoint_same_config). */
static int compare_configs(const struct tfm_checkpoint *c, const struct tfm_checkpoint *ref,
                           struct tfm_error *err)
{
    struct tfm_config a, b;
    if (config_of(c, &a, err) || config_of(ref, &b, err))
        return -1;
    char va[256], vb[256];
    const char *key = config_difference(&a, &b, va, vb, sizeof va);
    if (key)
        return tfm_fail(err, "different config: '%s = %s' against '%s = %s'", key, va, key,
                        vb);
    return 0;
}

int tfm_checkpoint_compatible(const struct tfm_checkpoint *c, const struct tfm_checkpoint *ref,
                              struct tfm_error *err)
{
    if (compare_configs(c, ref, err))
        return -1;
    uint32_t va = tfm_header_vocab_id(&c->header), vb = tfm_header_vocab_id(&ref->header);
    if (va != vb)
        return tfm_fail(err, "different vocabulary (crc %08x against %08x)", va, vb);
    if (c->ntensors != ref->ntensors)
        return tfm_fail(err, "%d tensors against %d", c->ntensors, ref->ntensors);
    for (int i = 0; i < c->ntensors; i++) {
        const struct tfm_ckpt_tensor *a = &c->tensors[i];
        const struct tfm_ckpt_tensor *b = tfm_checkpoint_find(ref, a->name);
        if (!b)
            return tfm_fail(err, "tensor '%s' missing from the other", a->name);
        if (a->rank != b->rank || memcmp(a->dims, b->dims, (size_t)a->rank * sizeof a->dims[0]))
            return tfm_fail(err, "tensor '%s' has a different shape", a->name);
    }
    return 0;
}

/* ---- checkpoints of a model -------------------------------------------------------- */

int tfm_checkpoint_config(const struct tfm_checkpoint *c, struct tfm_config *cfg,
                          struct tfm_error *err)
{
    if (config_of(c, cfg, err))
        return -1;
    if (tfm_config_check(cfg, 1, err))
        return tfm_error_prefix(err, "%s: config", c->path);
    return 0;
}

/* "64x128" into buf. */
static const char *shape_text(char *buf, size_t n, int rank, const int64_t *dims)
{
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < rank && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? "x" : "",
                                 (long long)dims[i]);
    if (rank == 0)
        snprintf(buf, n, "scalar");
    return buf;
}

/* Why a model of cfg has no parameter name: the config key that decides it, when one does. */
static void why_not(const struct tfm_config *cfg, const char *name, char *buf, size_t n)
{
    int layer;
    char stack[4];
    buf[0] = 0;
    if (sscanf(name, "%3[a-z].%d.", stack, &layer) == 2 &&
        (strcmp(stack, "enc") == 0 || strcmp(stack, "dec") == 0) && layer >= cfg->layers)
        snprintf(buf, n, " (layer %d; the config has layers = %d)", layer, cfg->layers);
    else if (strcmp(name, "emb") == 0 || strcmp(name, "src_emb") == 0 ||
             strcmp(name, "tgt_emb") == 0 || strcmp(name, "out") == 0)
        snprintf(buf, n, " (the config has tie = %d)", cfg->tie);
    else if (strcmp(name, "enc.pos") == 0 || strcmp(name, "dec.pos") == 0)
        snprintf(buf, n, " (the config has pos = %s)",
                 cfg->pos == TFM_POS_LEARNED ? "learned" : "sinusoid");
    else if (strncmp(name, "enc.ln.", 7) == 0 || strncmp(name, "dec.ln.", 7) == 0)
        snprintf(buf, n, " (the config has norm = %s)", cfg->norm == TFM_NORM_PRE ? "pre" : "post");
}

/* The first element of x[0..n) that is NaN or Inf (or, with nonneg, below zero), or -1.
 * Whole blocks are tested on the bits first, a loop the compiler vectorizes; compiled
 * for AVX-512, AVX2 and the x86-64 baseline, the loader picking what the CPU runs. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static int64_t first_bad(const float *x, int64_t n, int nonneg)
{
    for (int64_t i = 0; i < n; i += 4096) {
        int64_t e = n - i < 4096 ? n : i + 4096;
        uint32_t bad = 0;
        /* a reduction the compiler vectorizes only when told: 16 lanes of AVX-512 instead
         * of one, a tenth of a base model's load time */
#pragma omp simd reduction(| : bad)
        for (int64_t j = i; j < e; j++) {
            uint32_t b;
            memcpy(&b, &x[j], sizeof b);
            /* exponent all ones: NaN or Inf; sign set and not -0: negative */
            bad |= (uint32_t)((b & 0x7f800000u) == 0x7f800000u) | (uint32_t)(nonneg && b > 0x80000000u);
        }
        if (bad)
            for (int64_t j = i; j < e; j++)
                if (!isfinite(x[j]) || (nonneg && x[j] < 0))
                    return j;
    }
    return -1;
}

static const char *const part_prefix[3] = {TFM_CKPT_PARAM, TFM_CKPT_ADAM_M, TFM_CKPT_ADAM_V};

int tfm_checkpoint_check(const struct tfm_checkpoint *c, const struct tfm_config *cfg,
                         int optimizer, struct tfm_error *err)
{
    /* the embedding rows are the vocabulary's pieces: a model of another vocabulary would
     * write ids that mean other pieces, or none */
    if (c->header.spm) {
        int pieces = tfm_spm_proto_vocab_size(c->header.spm, c->header.spm_size, err);
        if (pieces < 0)
            return tfm_error_prefix(err, "%s: vocabulary", c->path);
        if (pieces != cfg->vocab)
            return tfm_fail(err, "%s: its vocabulary has %d pieces, its config says vocab=%d",
                            c->path, pieces, cfg->vocab);
    }
    struct tfm_param *p;
    int np;
    if (tfm_model_layout(cfg, &p, &np, err))
        return tfm_error_prefix(err, "%s: config", c->path);
    int rc = -1, have[3] = {0, 0, 0};
    char a[64], b[64], why[96];
    /* every tensor: a parameter of the model, its shape, finite values */
    for (int i = 0; i < c->ntensors; i++) {
        const struct tfm_ckpt_tensor *t = &c->tensors[i];
        int part = 0;
        while (part < 3 && strncmp(t->name, part_prefix[part], strlen(part_prefix[part])) != 0)
            part++;
        const char *name = t->name + (part < 3 ? strlen(part_prefix[part]) : 0);
        const struct tfm_param *q = NULL;
        for (int k = 0; part < 3 && k < np && !q; k++)
            if (strcmp(p[k].name, name) == 0)
                q = &p[k];
        if (!q) {
            why_not(cfg, name, why, sizeof why);
            tfm_fail(err, "%s: tensor %s: not a parameter of the model its config describes%s",
                     c->path, t->name, why);
            goto out;
        }
        if (t->rank != q->rank || memcmp(t->dims, q->dims, (size_t)q->rank * sizeof *q->dims)) {
            tfm_fail(err, "%s: tensor %s: shape %s, config wants %s", c->path, t->name,
                     shape_text(a, sizeof a, t->rank, t->dims),
                     shape_text(b, sizeof b, q->rank, q->dims));
            goto out;
        }
        int64_t j = t->values_ok ? -1 : first_bad(t->data, t->count, part == 2);
        if (j >= 0) {
            float v = t->data[j];
            tfm_fail(err, "%s: tensor %s: element %lld is %s", c->path, t->name, (long long)j,
                     isnan(v) ? "NaN" : isinf(v) ? "Inf" : "negative (a second moment never is)");
            goto out;
        }
        /* a mapped tensor is read-only: decoding checks before it allocates the model, and
         * the load into it checks again, reading 250 MB of a base model once, not twice
         * (the field is the checkpoint's memo, not its contents) */
        if (!t->owned)
            ((struct tfm_ckpt_tensor *)t)->values_ok = 1;
        have[part]++;
    }
    /* every parameter, and the moments as asked; the tensors are distinct (load) */
    int moments = optimizer || have[1] > 0 || have[2] > 0;
    for (int part = 0; part < (moments ? 3 : 1); part++) {
        if (have[part] == np)
            continue;
        for (int k = 0; k < np; k++) {
            char full[TFM_MAX_NAME + 1];
            snprintf(full, sizeof full, "%s%s", part_prefix[part], p[k].name);
            if (tfm_checkpoint_find(c, full))
                continue;
            tfm_fail(err, "%s: tensor %s missing (config wants %s)%s", c->path, full,
                     shape_text(a, sizeof a, p[k].rank, p[k].dims),
                     part == 0 ? ""
                     : have[1] + have[2] == 0 ? ": no optimizer state to resume from "
                                                "(dropped, as tfm-avg does?)"
                                              : ": the other Adam moments are there");
            goto out;
        }
    }
    rc = 0;
out:
    free(p);
    return rc;
}

/* tfm_checkpoint_to_model, the parameters shared where the model can (share). */
static int into_model(const struct tfm_checkpoint *c, struct tfm_model *m, int optimizer,
                      int share, struct tfm_error *err)
{
    static const enum tfm_block blocks[3] = {TFM_PARAMS, TFM_ADAM_M, TFM_ADAM_V};
    if (tfm_checkpoint_check(c, tfm_model_config(m), optimizer, err))
        return -1;
    int shared = 0;
    for (int part = 0; part < (optimizer ? 3 : 1); part++)
        for (int i = 0; i < tfm_model_nparams(m); i++) {
            const struct tfm_param *p = tfm_model_param(m, i);
            char full[TFM_MAX_NAME + 1];
            snprintf(full, sizeof full, "%s%s", part_prefix[part], p->name);
            const struct tfm_ckpt_tensor *t = tfm_checkpoint_find(c, full);
            int k = share ? tfm_model_share(m, p->name, t->data, t->count, err)
                          : tfm_model_set(m, blocks[part], p->name, t->data, t->count, err);
            if (k < 0)
                return tfm_error_prefix(err, "%s", c->path);
            shared += k;
        }
    return shared;
}

int tfm_checkpoint_to_model(const struct tfm_checkpoint *c, struct tfm_model *m, int optimizer,
                            struct tfm_error *err)
{
    return into_model(c, m, optimizer, 0, err);
}

int tfm_checkpoint_share_model(const struct tfm_checkpoint *c, struct tfm_model *m,
                               struct tfm_error *err)
{
    return into_model(c, m, 0, 1, err);
}

/* ---- directories ------------------------------------------------------------------ */

int tfm_checkpoint_path(char *buf, size_t n, const char *dir, int64_t step)
{
    int len = snprintf(buf, n, "%s/step-%06lld.tfm", dir, (long long)step);
    return len < 0 || (size_t)len >= n ? -1 : 0;
}

/* The step of a file name "step-N.tfm" (N: 6 to 18 digits), or -1. */
static int64_t step_of(const char *name)
{
    if (strncmp(name, "step-", 5) != 0)
        return -1;
    const char *p = name + 5;
    int64_t v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        if (++digits > 18)
            return -1;
        v = v * 10 + (*p++ - '0');
    }
    return digits >= 6 && strcmp(p, ".tfm") == 0 ? v : -1;
}

static int cmp_i64_idx(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

void tfm_checkpoint_list_free(char **paths, int64_t *steps, int n)
{
    for (int i = 0; paths && i < n; i++)
        free(paths[i]);
    free(paths);
    free(steps);
}

int tfm_checkpoint_list(const char *dir, char ***paths_out, int64_t **steps_out, int *n_out,
                        struct tfm_error *err)
{
    *paths_out = NULL;
    *steps_out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d)
        return tfm_fail(err, "%s: %s", dir, strerror(errno));
    int64_t *pairs = NULL;  /* (step, unused) pairs, sorted by step */
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s = step_of(e->d_name);
        if (s < 0)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            void *p = realloc(pairs, (size_t)cap * 2 * sizeof *pairs);
            if (!p) {
                free(pairs);
                closedir(d);
                return tfm_fail(err, "out of memory");
            }
            pairs = p;
        }
        pairs[2 * n] = s;
        pairs[2 * n + 1] = 0;
        n++;
    }
    closedir(d);
    if (n > 0)                  /* qsort must not get the NULL of an empty list */
        qsort(pairs, (size_t)n, 2 * sizeof *pairs, cmp_i64_idx);
    char **paths = calloc((size_t)n + 1, sizeof *paths);
    int64_t *steps = malloc(((size_t)n + 1) * sizeof *steps);
    if (!paths || !steps)
        goto oom;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(dir) + 32;
        if (!(paths[i] = malloc(len)))
            goto oom;
        tfm_checkpoint_path(paths[i], len, dir, pairs[2 * i]);
        steps[i] = pairs[2 * i];
    }
    free(pairs);
    *paths_out = paths;
    *steps_out = steps;
    *n_out = n;
    return 0;
oom:
    free(pairs);
    tfm_checkpoint_list_free(paths, steps, n);
    return tfm_fail(err, "out of memory");
}

int tfm_checkpoint_link_last(const char *dir, int64_t step, struct tfm_error *err)
{
    char target[64], tmp[4096], last[4096];
    snprintf(target, sizeof target, "step-%06lld.tfm", (long long)step);
    int a = snprintf(tmp, sizeof tmp, "%s/.last.tfm.%ld", dir, (long)getpid());
    int b = snprintf(last, sizeof last, "%s/last.tfm", dir);
    if (a < 0 || b < 0 || (size_t)a >= sizeof tmp || (size_t)b >= sizeof last)
        return tfm_fail(err, "%s: path too long", dir);
    unlink(tmp);
    if (symlink(target, tmp) != 0)
        return tfm_fail(err, "%s: %s", tmp, strerror(errno));
    if (rename(tmp, last) != 0) {
        int e = errno;
        unlink(tmp);
        return tfm_fail(err, "%s: %s", last, strerror(e));
    }
    return 0;
}

int tfm_checkpoint_prune(const char *dir, int keep, struct tfm_error *err)
{
    if (keep <= 0)
        return 0;
    char **paths;
    int64_t *steps;
    int n;
    if (tfm_checkpoint_list(dir, &paths, &steps, &n, err))
        return -1;
    int rc = 0;
    for (int i = 0; i < n - keep; i++)
        if (unlink(paths[i]) != 0 && errno != ENOENT) {
            rc = tfm_fail(err, "%s: %s", paths[i], strerror(errno));
            break;
        }
    tfm_checkpoint_list_free(paths, steps, n);
    return rc;
}

int tfm_checkpoint_dir_ready(const char *dir, int *created, struct tfm_error *err)
{
    struct stat st;
    if (created)
        *created = 0;
    if (stat(dir, &st) != 0) {
        /* EEXIST: another process of the run made it between the two calls */
        int made = errno == ENOENT && mkdir(dir, 0777) == 0;
        if (!made && errno != EEXIST)
            return tfm_fail(err, "%s: cannot create directory: %s", dir, strerror(errno));
        if (created)
            *created = made;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return tfm_fail(err, "%s: not a directory", dir);
    } else if (!S_ISDIR(st.st_mode)) {
        return tfm_fail(err, "%s: not a directory", dir);
    }
    char probe[4096];
    int len = snprintf(probe, sizeof probe, "%s/.tfm-train-probe.%ld", dir, (long)getpid());
    if (len < 0 || (size_t)len >= sizeof probe)
        return tfm_fail(err, "%s: path too long", dir);
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd < 0)
        return tfm_fail(err, "%s: cannot write checkpoints there: %s", dir, strerror(errno));
    close(fd);
    unlink(probe);
    return 0;
}

/* ---- the run's lock ------------------------------------------------------------------ */

#define LOCK_NAME ".tfm-train.lock"

struct tfm_ckpt_lock {
    int fd;
    char path[4096];
};

/* What the lock file at fd says of its holder ("pid=N host=H"), into buf; "" if nothing
 * yet (the holder writes it right after taking the lock: wait a little for it). */
static void lock_holder(int fd, char *buf, size_t n)
{
    buf[0] = 0;
    for (int tries = 0; tries < 20; tries++) {
        ssize_t k = pread(fd, buf, n - 1, 0);
        if (k > 0) {
            buf[k] = 0;
            buf[strcspn(buf, "\n")] = 0;
            return;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

struct tfm_ckpt_lock *tfm_checkpoint_lock(const char *dir, struct tfm_error *err)
{
    struct tfm_ckpt_lock *l = calloc(1, sizeof *l);
    if (!l) {
        tfm_fail(err, "out of memory");
        return NULL;
    }
    int len = snprintf(l->path, sizeof l->path, "%s/%s", dir, LOCK_NAME);
    if (len < 0 || (size_t)len >= sizeof l->path) {
        free(l);
        tfm_fail(err, "%s: path too long", dir);
        return NULL;
    }
    /* The holder removes the file when it is done: a lock taken on a file that was
     * removed (or replaced) meanwhile protects nothing, so open again until the file
     * locked is the one at the path. */
    for (;;) {
        l->fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (l->fd < 0) {
            tfm_fail(err, "%s: %s", l->path, strerror(errno));
            break;
        }
        if (flock(l->fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            char who[256];
            if (e == EWOULDBLOCK)
                lock_holder(l->fd, who, sizeof who);
            if (e != EWOULDBLOCK)
                tfm_fail(err, "%s: cannot lock: %s", l->path, strerror(e));
            else
                tfm_fail(err, "%s: in use by another run (%s; lock %s): wait for it to end, or "
                         "use another directory", dir, who[0] ? who : "holder unknown", l->path);
            close(l->fd);
            break;
        }
        struct stat a, b;
        if (fstat(l->fd, &a) == 0 && stat(l->path, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino) {
            char host[256] = "?", text[400];
            gethostname(host, sizeof host - 1);
            host[sizeof host - 1] = 0;
            int n = snprintf(text, sizeof text, "pid %ld on host %s\n", (long)getpid(), host);
            if (ftruncate(l->fd, 0) != 0 || pwrite(l->fd, text, (size_t)n, 0) != n) {
                tfm_fail(err, "%s: %s", l->path, strerror(errno));
                unlink(l->path);
                close(l->fd);
                break;
            }
            return l;
        }
        close(l->fd);
    }
    free(l);
    return NULL;
}

void tfm_checkpoint_unlock(struct tfm_ckpt_lock *l)
{
    if (!l)
        return;
    unlink(l->path);            /* first: nobody may lock it as it goes */
    close(l->fd);
    free(l);
}

/* ---- averaging -------------------------------------------------------------------- */

/* A checkpoint loaded and checked against its own config. */
static struct tfm_checkpoint *load_checked(const char *path, int flags, struct tfm_error *err)
{
    struct tfm_checkpoint *c = tfm_checkpoint_load(path, flags, err);
    struct tfm_config cfg;
    if (c && (tfm_checkpoint_config(c, &cfg, err) || tfm_checkpoint_check(c, &cfg, 0, err))) {
        tfm_checkpoint_free(c);
        return NULL;
    }
    return c;
}

/* Progress of an average: k of n checkpoints read, bytes (of values) so far. */
static void average_progress(void (*progress)(void *, const char *), void *ctx, int k, int n,
                             const char *path, int64_t step, double bytes, double t0)
{
    if (!progress)
        return;
    double dt = tfm_now() - t0;
    char line[4400], left[32] = "0s";
    if (k < n)
        tfm_duration_format(dt / k * (n - k), left, sizeof left);
    int giga = bytes >= 1e9;
    snprintf(line, sizeof line, "read %d/%d: %s (step %lld), %.*f %s in %.1fs (%.0f MB/s), eta %s",
             k, n, strcmp(path, "-") == 0 ? "<stdin>" : path, (long long)step, giga ? 2 : 1,
             bytes / (giga ? 1e9 : 1e6), giga ? "GB" : "MB", dt, dt > 0 ? bytes / 1e6 / dt : 0.0,
             left);
    progress(ctx, line);
}

int tfm_checkpoint_average(const char *const *paths, int n, int keep_optimizer, const char *out,
                           struct tfm_error *err)
{
    return tfm_checkpoint_average_progress(paths, n, keep_optimizer, out, NULL, NULL, err);
}

int tfm_checkpoint_average_progress(const char *const *paths, int n, int keep_optimizer,
                                    const char *out,
                                    void (*progress)(void *ctx, const char *line), void *ctx,
                                    struct tfm_error *err)
{
    double t0 = tfm_now();
    if (n < 1)
        return tfm_fail(err, "no checkpoint to average");
    /* the output first: a path that cannot be written fails before the inputs are read */
    struct tfm_output o = {.fd = -1};
    int to_file = out && strcmp(out, "-") != 0;
    if (to_file && tfm_output_open(&o, out, err))
        return -1;
    /* the inputs' values are read in their memory maps: the sums are the memory this takes */
    int flags = (keep_optimizer ? 0 : TFM_CKPT_NO_OPTIMIZER) | TFM_CKPT_MAPPED;
    struct tfm_checkpoint *ref = load_checked(paths[0], flags, err), *c = NULL;
    double *sum = NULL;         /* (total) every value's sum so far, the tensors of ref in turn */
    float *mean = NULL;         /* (largest) one tensor's mean, as written */
    if (!ref) {
        tfm_output_abort(&o);
        return -1;
    }
    int64_t total = 0, largest = 1;
    int moments = 0;            /* Adam moments among the values averaged */
    for (int i = 0; i < ref->ntensors; i++) {
        moments |= is_adam(ref->tensors[i].name, NULL);
        total += ref->tensors[i].count;
        if (ref->tensors[i].count > largest)
            largest = ref->tensors[i].count;
    }
    if (!(sum = malloc((size_t)(total > 0 ? total : 1) * sizeof *sum)) ||
        !(mean = malloc((size_t)largest * sizeof *mean))) {
        tfm_fail(err, "out of memory (%.2f GiB for the sums of %lld values)",
                 (double)total * sizeof *sum / 1073741824.0, (long long)total);
        goto fail;
    }
    /* Summed in double, divided by n there and rounded to float once: the sum of an
     * element's values is exact while the largest of their magnitudes is at most
     * 2^(29 - ceil(log2 n)) times the smallest nonzero one, and the result is then the
     * correctly rounded mean (man/tfm-avg.1); finite values have a finite mean however
     * large their sum in float would be. */
    double *s = sum;
    for (int i = 0; i < ref->ntensors; i++) {
        const struct tfm_ckpt_tensor *t = &ref->tensors[i];
        for (int64_t j = 0; j < t->count; j++)
            s[j] = t->data[j];
        s += t->count;
    }
    double bytes = (double)total * sizeof(float);
    average_progress(progress, ctx, 1, n, paths[0], ref->state.step, bytes, t0);
    char steps[TFM_MAX_VALUE + 1];
    int64_t first = ref->state.step;
    int used = snprintf(steps, sizeof steps, "%lld", (long long)first);
    for (int k = 1; k < n; k++) {
        if (!(c = load_checked(paths[k], flags, err)))
            goto fail;
        if (tfm_checkpoint_compatible(c, ref, err)) {
            tfm_error_prefix(err, "%s and %s", paths[k], paths[0]);
            goto fail;
        }
        s = sum;
        for (int i = 0; i < ref->ntensors; i++) {
            const struct tfm_ckpt_tensor *t = &ref->tensors[i];
            const float *b = tfm_checkpoint_find(c, t->name)->data;     /* (count) */
            for (int64_t j = 0; j < t->count; j++)
                s[j] += b[j];
            s += t->count;
        }
        if (used >= 0 && (size_t)used < sizeof steps)
            used += snprintf(steps + used, sizeof steps - (size_t)used, ",%lld",
                             (long long)c->state.step);
        bytes += (double)total * sizeof(float);
        average_progress(progress, ctx, k + 1, n, paths[k], c->state.step, bytes, t0);
        /* the newest keeps its header, config and state (the run keys of its config, such
         * as max_steps or precision, may differ from the others') */
        tfm_header_free(&ref->header);
        ref->header = c->header;
        tfm_header_init(&c->header, "");
        free(ref->config);
        ref->config = c->config;
        c->config = NULL;
        ref->state = c->state;
        tfm_checkpoint_free(c);
        c = NULL;
    }
    if (tfm_header_setf(&ref->header, err, "averaged", "%d", n))
        goto fail;
    if ((size_t)used >= sizeof steps)
        snprintf(steps, sizeof steps, "%lld,...,%lld", (long long)first, (long long)ref->state.step);
    if (tfm_header_set(&ref->header, "averaged.steps", steps, err))
        goto fail;
    struct tfm_writer *w = begin(out, to_file ? &o : NULL, &ref->header, ref->config,
                                 &ref->state, err);
    if (!w)
        goto fail;
    s = sum;
    for (int i = 0; i < ref->ntensors; i++) {
        const struct tfm_ckpt_tensor *t = &ref->tensors[i];
        for (int64_t j = 0; j < t->count; j++)
            mean[j] = (float)(s[j] / n);
        s += t->count;
        if (tfm_checkpoint_put(w, "", t->name, t->rank, t->dims, mean, err)) {
            tfm_writer_abort(w);
            goto fail;
        }
    }
    free(sum);
    free(mean);
    tfm_checkpoint_free(ref);
    if (tfm_writer_close(w, err))
        return -1;
    if (progress) {
        char line[4400];
        snprintf(line, sizeof line, "wrote %s: the mean of %d checkpoint%s (step%s %s), %lld "
                 "values%s, in %.1fs", to_file ? out : "standard output", n, n == 1 ? "" : "s",
                 n == 1 ? "" : "s", steps, (long long)total,
                 moments ? " (the parameters and their Adam moments)" : " (the parameters)",
                 tfm_now() - t0);
        progress(ctx, line);
    }
    return 0;
fail:
    tfm_output_abort(&o);           /* nothing once the writer took it */
    free(sum);
    free(mean);
    tfm_checkpoint_free(c);
    tfm_checkpoint_free(ref);
    return -1;
}

/* The PID at the end of a leftover name ("step-000010.tfm.tmp.123", ".last.tfm.123"), or 0. */
static long leftover_pid(const char *name)
{
    const char *p = NULL;
    if (strncmp(name, "step-", 5) == 0 && (p = strstr(name, ".tfm.tmp.")))
        p += 9;
    else if (strncmp(name, ".last.tfm.", 10) == 0)
        p = name + 10;
    if (!p || !*p)
        return 0;
    char *end;
    long pid = strtol(p, &end, 10);
    return *end || pid <= 0 ? 0 : pid;
}

int tfm_checkpoint_clean(const char *dir, struct tfm_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return tfm_fail(err, "%s: %s", dir, strerror(errno));
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid = leftover_pid(e->d_name);
        /* this process has written nothing yet: a file with its PID is a killed writer's
         * that had the same PID (a restarted container's processes often do) */
        if (pid <= 0 || (pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno != ESRCH)))
            continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path &&
            unlink(path) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

/* ---- resuming (train.c) ---------------------------------------------------------------- */

int tfm_checkpoint_key_may_change(const char *key)
{
    for (int i = 0; tfm_checkpoint_run_keys[i]; i++)
        if (strcmp(key, tfm_checkpoint_run_keys[i]) == 0)
            return 1;
    return 0;
}

int tfm_checkpoint_find_last(const char *dir, char *path, size_t n, struct tfm_error *err)
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

int tfm_checkpoint_same_config(const struct tfm_config *cfg, const struct tfm_config *ck,
                               const char *path, struct tfm_error *err)
{
    char a[256], b[256];
    const char *key = config_difference(cfg, ck, a, b, sizeof a);
    if (key)
        return tfm_fail(err, "%s: config key '%s' is %s in the checkpoint and %s now: "
                        "resume with the checkpoint's config (only max_steps, save_every, "
                        "keep, precision and the search's beam, alpha, max_len_b and min_len "
                        "may change)", path, key, b, a);
    return 0;
}
