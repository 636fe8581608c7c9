/* model.c: the Transformer's parameters, forward, backward and incremental decoding
 * (model.h), written against the backend table only: no loops over tensor elements here
 * except on the host when initializing parameters and checking batches.
 * The attention weights for inspection (tfm_model_attention) are computed on the host too.
 * Not here: the ops (backend_cpu.c), the optimizer (optim.c), the training loop.
 */
#include "model.h"
#include "topk.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameters ------------------------------------------------------------------------ */

#define MAX_PARAMS 4096

struct attn_p {                 /* self-attention (wqkv) or cross-attention (wq + wkv) */
    struct tfm_param *wqkv, *bqkv, *wq, *bq, *wkv, *bkv, *wo, *bo;
};
struct ffn_p {
    struct tfm_param *w1, *b1, *w2, *b2;
};
struct ln_p {
    struct tfm_param *g, *b;
};
struct enc_p {
    struct attn_p self;
    struct ln_p ln1;
    struct ffn_p ffn;
    struct ln_p ln2;
};
struct dec_p {
    struct attn_p self;
    struct ln_p ln1;
    struct attn_p cross;
    struct ln_p ln2;
    struct ffn_p ffn;
    struct ln_p ln3;
};

/* ---- activations: what the forward keeps for the backward -------------------------------- */

struct blk {                    /* one residual block (sub-layer + add + norm) */
    float *r;                   /* post: x + Drop(F(x)), the LN input; pre: LN(x), F's input */
    float *y;                   /* block output (M,D) */
    float *mean, *rstd;         /* (M) */
};
struct enc_a {
    struct blk a, f;
    float *qkv;                 /* (M,3D) */
    float *o;                   /* (M,D) attention output before wo */
    float *lse;                 /* (B,H,S) */
    float *h;                   /* (M,F) ReLU output after dropout */
};
struct dec_a {
    struct blk a, c, f;
    float *qkv, *o, *lse;       /* self-attention */
    float *q, *co, *clse;       /* cross-attention: q (M,D), output (M,D), lse (B,H,T) */
    float *kv;                  /* (Ms,2D) encoder keys and values of this layer */
    float *h;
};
struct acts {
    int32_t *src, *tgt_in, *labels, *src_len;   /* (M) (M) (M) (M) */
    float *xe, *xd;             /* (M,D) embedding outputs (after dropout) */
    struct enc_a *enc;
    struct dec_a *dec;
    struct blk efin, dfin;      /* pre-norm final LNs (r unused: y = LN(x)) */
    /* scratch */
    float *tmp;                 /* (M,D) sub-layer output */
    float *g, *t1, *t2;         /* (M,D) gradients of the residual stream */
    float *dqkv;                /* (M,3D) */
    float *dO;                  /* (M,D) */
    float *dq;                  /* (M,D) */
    float *df;                  /* (M,F) */
    float *denc;                /* (M,D) gradient of the encoder output */
    float *dkv;                 /* (M,2D) */
    float *logits;              /* (C,V) */
    float *loss, *nll;          /* (C) */
};

enum { STEP_STATS = 0, BATCH_STATS = 1 };

struct tfm_model {
    struct tfm_config cfg;
    struct tfm_backend *be;
    int D, F, H, V, L, N, dk;
    int64_t M;                  /* token budget per side */
    int C;                      /* output rows per logits chunk */
    int np;
    struct tfm_param params[MAX_PARAMS];
    int64_t count;              /* floats per block */
    float *arena;               /* 4 * count floats (training) or count (inference) */
    void *wcopy;                /* count weights in the backend's precision, or NULL (fp32) */
    int counted;                /* counted in be->models */
    int inference;              /* parameters only: no gradients, no Adam moments */
    struct tfm_param *emb_src, *emb_tgt, *emb_out, *pos_enc, *pos_dec;
    struct enc_p *enc;
    struct dec_p *dec;
    struct ln_p efin, dfin;
    float *pe;                  /* (L,D) sinusoids, or NULL */
    void *act_mem;
    struct acts a;
    /* device: [STEP_STATS] the optimizer step's statistics (backend.h), which the training
     * batches add their losses to and tfm_optim_step reads; [BATCH_STATS] one batch's
     * losses, for the entry points that return them */
    struct tfm_step_stats *stats;
    int32_t *host_ints;         /* (3M + M) host staging for ids */
};

/* ---- the parameters: build_params is their one list (names, shapes, order, start) ---- */

static struct tfm_param *add_param(struct tfm_model *m, const char *name, int rank, int64_t d0,
                                   int64_t d1, enum tfm_init init, int parts)
{
    struct tfm_param *p = &m->params[m->np++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->rank = rank;
    p->dims[0] = d0;
    p->dims[1] = rank == 2 ? d1 : 1;
    p->count = d0 * p->dims[1];
    p->init = init;
    p->parts = parts;
    p->offset = (size_t)m->count;
    m->count += (p->count + 15) / 16 * 16;
    return p;
}

/* A matrix (d0, d1) made of `parts` side by side, or a bias (d0) (d1 0). */
static struct tfm_param *addf(struct tfm_model *m, int64_t d0, int64_t d1, int parts,
                              const char *fmt, int layer, const char *what)
{
    char name[64];
    snprintf(name, sizeof name, fmt, layer, what);
    return d1 ? add_param(m, name, 2, d0, d1, TFM_INIT_XAVIER, parts)
              : add_param(m, name, 1, d0, 0, TFM_INIT_ZERO, 1);
}

static void add_attn(struct tfm_model *m, struct attn_p *a, const char *pfx, int l, int cross)
{
    int D = m->D;
    char f[48];
    snprintf(f, sizeof f, "%s.%%d.%s.%%s", pfx, cross ? "cross" : "self");
    memset(a, 0, sizeof *a);
    if (!cross) {
        a->wqkv = addf(m, D, 3 * D, 3, f, l, "wqkv");
        a->bqkv = addf(m, 3 * D, 0, 1, f, l, "bqkv");
    } else {
        a->wq = addf(m, D, D, 1, f, l, "wq");
        a->bq = addf(m, D, 0, 1, f, l, "bq");
        a->wkv = addf(m, D, 2 * D, 2, f, l, "wkv");
        a->bkv = addf(m, 2 * D, 0, 1, f, l, "bkv");
    }
    a->wo = addf(m, D, D, 1, f, l, "wo");
    a->bo = addf(m, D, 0, 1, f, l, "bo");
}

static void add_ln(struct tfm_model *m, struct ln_p *n, const char *name)
{
    char g[64], b[64];
    snprintf(g, sizeof g, "%s.g", name);
    snprintf(b, sizeof b, "%s.b", name);
    n->g = add_param(m, g, 1, m->D, 0, TFM_INIT_ONE, 1);
    n->b = add_param(m, b, 1, m->D, 0, TFM_INIT_ZERO, 1);
}

static void add_layer_ln(struct tfm_model *m, struct ln_p *n, const char *pfx, int l,
                         const char *nm)
{
    char name[48];
    snprintf(name, sizeof name, "%s.%d.%s", pfx, l, nm);
    add_ln(m, n, name);
}

static void add_ffn(struct tfm_model *m, struct ffn_p *p, const char *pfx, int l)
{
    char f[48];
    snprintf(f, sizeof f, "%s.%%d.ffn.%%s", pfx);
    p->w1 = addf(m, m->D, m->F, 1, f, l, "w1");
    p->b1 = addf(m, m->F, 0, 1, f, l, "b1");
    p->w2 = addf(m, m->F, m->D, 1, f, l, "w2");
    p->b2 = addf(m, m->D, 0, 1, f, l, "b2");
}

/* The parameter list of cfg, in checkpoint order: what tfm_model_create allocates, what
 * tfm_model_layout and the memory estimates count, how each tensor starts. */
static void build_params(struct tfm_model *m)
{
    const struct tfm_config *c = &m->cfg;
    m->np = 0;
    m->count = 0;
    if (c->tie) {
        m->emb_src = m->emb_tgt = m->emb_out =
            add_param(m, "emb", 2, m->V, m->D, TFM_INIT_NORMAL, 1);
    } else {
        m->emb_src = add_param(m, "src_emb", 2, m->V, m->D, TFM_INIT_NORMAL, 1);
        m->emb_tgt = add_param(m, "tgt_emb", 2, m->V, m->D, TFM_INIT_NORMAL, 1);
        m->emb_out = add_param(m, "out", 2, m->V, m->D, TFM_INIT_NORMAL, 1);
    }
    m->pos_enc = m->pos_dec = NULL;
    if (c->pos == TFM_POS_LEARNED) {
        m->pos_enc = add_param(m, "enc.pos", 2, m->L, m->D, TFM_INIT_NORMAL, 1);
        m->pos_dec = add_param(m, "dec.pos", 2, m->L, m->D, TFM_INIT_NORMAL, 1);
    }
    for (int l = 0; l < m->N; l++) {
        add_attn(m, &m->enc[l].self, "enc", l, 0);
        add_layer_ln(m, &m->enc[l].ln1, "enc", l, "ln1");
        add_ffn(m, &m->enc[l].ffn, "enc", l);
        add_layer_ln(m, &m->enc[l].ln2, "enc", l, "ln2");
    }
    if (c->norm == TFM_NORM_PRE)
        add_ln(m, &m->efin, "enc.ln");
    for (int l = 0; l < m->N; l++) {
        add_attn(m, &m->dec[l].self, "dec", l, 0);
        add_layer_ln(m, &m->dec[l].ln1, "dec", l, "ln1");
        add_attn(m, &m->dec[l].cross, "dec", l, 1);
        add_layer_ln(m, &m->dec[l].ln2, "dec", l, "ln2");
        add_ffn(m, &m->dec[l].ffn, "dec", l);
        add_layer_ln(m, &m->dec[l].ln3, "dec", l, "ln3");
    }
    if (c->norm == TFM_NORM_PRE)
        add_ln(m, &m->dfin, "dec.ln");
}

/* A model without memory with cfg's parameter list (build_params): free with
 * shell_free.  NULL when out of memory.  cfg must be checked. */
static struct tfm_model *shell(const struct tfm_config *cfg)
{
    struct tfm_model *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->cfg = *cfg;
    m->D = cfg->d_model;
    m->F = cfg->d_ff;
    m->V = cfg->vocab;
    m->L = cfg->max_len;
    m->N = cfg->layers;
    m->enc = calloc((size_t)m->N, sizeof *m->enc);
    m->dec = calloc((size_t)m->N, sizeof *m->dec);
    if (!m->enc || !m->dec) {
        free(m->enc);
        free(m->dec);
        free(m);
        return NULL;
    }
    build_params(m);
    return m;
}

static void shell_free(struct tfm_model *m)
{
    if (m) {
        free(m->enc);
        free(m->dec);
    }
    free(m);
}

/* Rows per logits chunk: about 8M floats, at least 256 rows, at most M. */
static int chunk_rows(int64_t M, int V)
{
    int64_t c = ((int64_t)1 << 23) / V;
    if (c < 256)
        c = 256;
    if (c > M)
        c = M;
    return (int)c;
}

/* Carving an arena: the next block of `bytes` (rounded up to 64) at *off from base, or
 * NULL while only measuring (base NULL); *off moves past it.  TAKE takes n elements of a
 * type, TAKEA n activations of the backend's element size `act` (typed float * because
 * the ops take float *, but act bytes each: stepped through with ACT, never with float
 * arithmetic); both need `base`, `off` (and `act`) where they are used. */
static void *take(char *base, size_t *off, size_t bytes)
{
    void *p = base ? base + *off : NULL;
    *off += (bytes + 63) / 64 * 64;
    return p;
}
#define TAKE(ptr, type, n) ((ptr) = (type *)take(base, &off, (size_t)(n) * sizeof(type)))
#define TAKEA(ptr, n) ((ptr) = (float *)take(base, &off, (size_t)(n) * act))

/* The layers' activation sets: training keeps every layer's for the backward pass;
 * inference needs a layer's only until the next has run, so layer l uses set l % 2 of two
 * (its input is the other set, never the one it writes): a third of the layers'
 * activation memory at 6 layers, fewer fresh pages to clear, and the same buffers warm in
 * cache from layer to layer. */
static int layer_sets(int layers, int inference)
{
    return inference && layers > 2 ? 2 : layers;
}

/* Lay out the activation arena at base (NULL: only measure).  Returns bytes. */
static size_t carve(const struct tfm_config *c, int64_t M, size_t act, int inference,
                    char *base, struct acts *a)
{
    size_t off = 0;
    int64_t D = c->d_model, F = c->d_ff, H = c->heads, V = c->vocab;
    int N = c->layers, C = chunk_rows(M, c->vocab);
    int sets = layer_sets(N, inference);
    int32_t *ip = NULL;
    float *fp = NULL;
    struct acts dummy;
    if (!a)
        a = &dummy;
    TAKE(a->src, int32_t, M);
    TAKE(a->tgt_in, int32_t, M);
    TAKE(a->labels, int32_t, M);
    TAKE(a->src_len, int32_t, M);
    TAKEA(a->xe, M * D);
    TAKEA(a->xd, M * D);
    for (int l = 0; l < sets; l++) {
        struct enc_a *e = base ? &a->enc[l] : &(struct enc_a){0};
        struct blk *bs[2] = {&e->a, &e->f};
        for (int k = 0; k < 2; k++) {
            TAKEA(bs[k]->r, M * D);
            TAKEA(bs[k]->y, M * D);
            TAKE(bs[k]->mean, float, M);
            TAKE(bs[k]->rstd, float, M);
        }
        TAKEA(e->qkv, M * 3 * D);
        TAKEA(e->o, M * D);
        TAKE(e->lse, float, M * H);
        TAKEA(e->h, M * F);
    }
    for (int l = 0; l < sets; l++) {
        struct dec_a *d = base ? &a->dec[l] : &(struct dec_a){0};
        struct blk *bs[3] = {&d->a, &d->c, &d->f};
        for (int k = 0; k < 3; k++) {
            TAKEA(bs[k]->r, M * D);
            TAKEA(bs[k]->y, M * D);
            TAKE(bs[k]->mean, float, M);
            TAKE(bs[k]->rstd, float, M);
        }
        TAKEA(d->qkv, M * 3 * D);
        TAKEA(d->o, M * D);
        TAKE(d->lse, float, M * H);
        TAKEA(d->q, M * D);
        TAKEA(d->co, M * D);
        TAKE(d->clse, float, M * H);
        TAKEA(d->kv, M * 2 * D);
        TAKEA(d->h, M * F);
    }
    for (int l = sets; base && l < N; l++) {
        a->enc[l] = a->enc[l % sets];
        a->dec[l] = a->dec[l % sets];
    }
    if (c->norm == TFM_NORM_PRE) {
        struct blk *bs[2] = {&a->efin, &a->dfin};
        for (int k = 0; k < 2; k++) {
            TAKEA(bs[k]->y, M * D);
            TAKE(bs[k]->mean, float, M);
            TAKE(bs[k]->rstd, float, M);
        }
    }
    TAKEA(a->tmp, M * D);
    TAKEA(a->g, M * D);
    TAKEA(a->t1, M * D);
    TAKEA(a->t2, M * D);
    TAKEA(a->dqkv, M * 3 * D);
    TAKEA(a->dO, M * D);
    TAKEA(a->dq, M * D);
    TAKEA(a->df, M * F);
    TAKEA(a->denc, M * D);
    TAKEA(a->dkv, M * 2 * D);
    TAKEA(a->logits, (int64_t)C * V);
    TAKE(a->loss, float, M);        /* every row's, read once a batch */
    TAKE(a->nll, float, M);
    (void)ip;
    (void)fp;
    return off;
}

size_t tfm_model_param_memory(const struct tfm_config *cfg)
{
    struct tfm_error err;
    if (tfm_config_check(cfg, 1, &err) < 0 || (int64_t)cfg->layers * 32 + 8 > MAX_PARAMS)
        return 0;
    struct tfm_model *m = shell(cfg);
    size_t n = m ? (size_t)m->count : 0;
    shell_free(m);
    return n * 4 * sizeof(float);
}

size_t tfm_model_memory(const struct tfm_config *cfg, int64_t max_tokens)
{
    size_t p = tfm_model_param_memory(cfg);
    if (p == 0 || max_tokens < 1)
        return 0;
    size_t pe = cfg->pos == TFM_POS_SINUSOID ? (size_t)cfg->max_len * cfg->d_model * 4 : 0;
    /* the compute copy of the weights at bf16, and at auto (bf16 on a GPU): fp32 words,
     * an upper bound */
    size_t w = cfg->precision != TFM_PRECISION_FP32 ? p / 4 : 0;
    return p + pe + w + carve(cfg, max_tokens, sizeof(float), 0, NULL, NULL);
}

size_t tfm_model_activation_memory(const struct tfm_config *cfg, int64_t max_tokens)
{
    if (tfm_model_param_memory(cfg) == 0 || max_tokens < 1)
        return 0;
    return carve(cfg, max_tokens, sizeof(float), 0, NULL, NULL);
}

/* ---- initialization ------------------------------------------------------------------------ */

static void init_tensor(const struct tfm_param *p, int idx, uint64_t seed, int D, float *out)
{
    uint64_t key = tfm_rng_key(seed, 0x1417, (uint64_t)idx);
    switch (p->init) {
    case TFM_INIT_NORMAL: {                     /* Box-Muller, sd 1/sqrt(D) */
        double sd = 1.0 / sqrt((double)D);
        for (int64_t i = 0; i < p->count; i++) {
            double u1 = tfm_rng_uniform(key, 2 * (uint64_t)i) + 1.0 / (1 << 25);
            double u2 = tfm_rng_uniform(key, 2 * (uint64_t)i + 1);
            out[i] = (float)(sd * sqrt(-2.0 * log(u1)) * cos(2 * M_PI * u2));
        }
        break;
    }
    case TFM_INIT_XAVIER: {                     /* each of the parts is one matrix */
        double fan_in = (double)p->dims[0], fan_out = (double)p->dims[1] / p->parts;
        double a = sqrt(6.0 / (fan_in + fan_out));
        for (int64_t i = 0; i < p->count; i++)
            out[i] = (float)(a * (2.0 * tfm_rng_uniform(key, (uint64_t)i) - 1.0));
        break;
    }
    case TFM_INIT_ONE:
        for (int64_t i = 0; i < p->count; i++)
            out[i] = 1.0f;
        break;
    case TFM_INIT_ZERO:
        for (int64_t i = 0; i < p->count; i++)
            out[i] = 0.0f;
        break;
    }
}

double tfm_model_sinusoid(int pos, int dim, int d_model)
{
    double ang = pos / pow(10000.0, (double)(dim - dim % 2) / d_model);
    return dim % 2 ? cos(ang) : sin(ang);
}

/* ---- create / free ---------------------------------------------------------------------------- */

void tfm_model_free(struct tfm_model *m)
{
    if (!m)
        return;
    if (m->be) {
        m->be->free(m->be, m->arena);
        m->be->free(m->be, m->act_mem);
        m->be->free(m->be, m->pe);
        m->be->free(m->be, m->wcopy);
        m->be->free(m->be, m->stats);
        if (m->counted)
            m->be->models--;
    }
    free(m->a.enc);
    free(m->a.dec);
    free(m->enc);
    free(m->dec);
    free(m->host_ints);
    free(m);
}

static struct tfm_model *create(const struct tfm_config *cfg, struct tfm_backend *be,
                                int64_t max_tokens, int inference, struct tfm_error *err)
{
    if (tfm_config_check(cfg, 1, err) < 0)
        return NULL;
    if (max_tokens == 0)
        max_tokens = cfg->tokens;
    if (max_tokens < 1 || max_tokens > ((int64_t)1 << 30)) {
        tfm_fail(err, "token budget %lld: out of range [1, 2^30]", (long long)max_tokens);
        return NULL;
    }
    if ((int64_t)cfg->layers * 32 + 8 > MAX_PARAMS) {
        tfm_fail(err, "layers %d: too many parameter tensors", cfg->layers);
        return NULL;
    }
    if (tfm_backend_set_precision(be, (enum tfm_precision)cfg->precision, err) < 0)
        return NULL;
    struct tfm_model *m = calloc(1, sizeof *m);
    if (!m) {
        tfm_fail(err, "out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    m->be = be;
    m->counted = 1;
    be->models++;
    m->inference = inference;
    m->D = cfg->d_model;
    m->F = cfg->d_ff;
    m->H = cfg->heads;
    m->V = cfg->vocab;
    m->L = cfg->max_len;
    m->N = cfg->layers;
    m->dk = m->D / m->H;
    m->M = max_tokens;
    m->C = chunk_rows(max_tokens, m->V);
    m->enc = calloc((size_t)m->N, sizeof *m->enc);
    m->dec = calloc((size_t)m->N, sizeof *m->dec);
    m->a.enc = calloc((size_t)m->N, sizeof *m->a.enc);
    m->a.dec = calloc((size_t)m->N, sizeof *m->a.dec);
    m->host_ints = malloc(4 * (size_t)max_tokens * sizeof(int32_t));
    if (!m->enc || !m->dec || !m->a.enc || !m->a.dec || !m->host_ints) {
        tfm_fail(err, "out of memory");
        goto fail;
    }
    build_params(m);
    size_t pbytes = (size_t)m->count * (inference ? 1 : 4) * sizeof(float);
    m->arena = be->alloc(be, pbytes, err);
    if (!m->arena)
        goto fail_mem;
    for (int i = 0; i < m->np; i++) {
        struct tfm_param *p = &m->params[i];
        p->data = m->arena + p->offset;
        if (!inference) {
            p->grad = m->arena + m->count + p->offset;
            p->m = m->arena + 2 * m->count + p->offset;
            p->v = m->arena + 3 * m->count + p->offset;
        }
    }
    if (be->precision != TFM_PRECISION_FP32) {
        m->wcopy = be->alloc(be, (size_t)m->count * be->act_size, err);
        if (!m->wcopy)
            goto fail_mem;
    }
    for (int i = 0; i < m->np; i++) {
        struct tfm_param *p = &m->params[i];
        p->w = m->wcopy ? (float *)(void *)((char *)m->wcopy + p->offset * be->act_size)
                        : p->data;
    }
    size_t abytes = carve(cfg, max_tokens, be->act_size, inference, NULL, NULL);
    m->act_mem = be->alloc(be, abytes, err);
    if (!m->act_mem)
        goto fail_mem;
    carve(cfg, max_tokens, be->act_size, inference, m->act_mem, &m->a);
    m->stats = be->alloc(be, 2 * sizeof *m->stats, err);        /* zero-filled */
    if (!m->stats)
        goto fail_mem;
    if (be->reserve(be, m->L, m->L, err) < 0)
        goto fail_mem;
    /* a training step's workspace, once: no step allocates (backend.h) */
    if (!inference && be->reserve_step &&
        be->reserve_step(be, max_tokens, m->D, m->F, m->H, m->V, err) < 0)
        goto fail_mem;
    /* Host-side init, uploaded once. */
    size_t hostn = (size_t)m->count;
    if (cfg->pos == TFM_POS_SINUSOID && (size_t)m->L * m->D > hostn)
        hostn = (size_t)m->L * m->D;
    float *host = calloc(hostn, sizeof(float));
    if (!host) {
        tfm_fail(err, "out of memory");
        goto fail;
    }
    if (!inference) {
        for (int i = 0; i < m->np; i++)
            init_tensor(&m->params[i], i, (uint64_t)cfg->seed, m->D,
                        host + m->params[i].offset);
        be->upload(be, m->arena, host, (size_t)m->count * sizeof(float));
        tfm_model_sync_weights(m);
        /* Touch the gradients and moments now: the allocator's pages are mapped lazily,
         * and Adam's first read-then-write of a page would otherwise cost a copy-on-write
         * fault with a TLB shootdown across the threads inside the first steps. */
        be->zero(be, m->arena + m->count, (size_t)m->count * 3 * sizeof(float));
    }
    if (cfg->pos == TFM_POS_SINUSOID) {
        m->pe = be->alloc(be, (size_t)m->L * m->D * be->act_size, err);
        if (!m->pe) {
            free(host);
            goto fail_mem;
        }
        for (int p = 0; p < m->L; p++)
            for (int i = 0; i < m->D; i++)
                host[(size_t)p * m->D + i] = (float)tfm_model_sinusoid(p, i, m->D);
        be->upload_act(be, m->pe, host, (size_t)m->L * m->D);   /* an activation */
    }
    free(host);
    return m;
fail_mem:
    tfm_error_prefix(err, "model of %.1f MiB for a budget of %lld tokens (lower tokens)",
                     tfm_model_memory(cfg, max_tokens) / 1048576.0, (long long)max_tokens);
fail:
    tfm_model_free(m);
    return NULL;
}

struct tfm_model *tfm_model_create(const struct tfm_config *cfg, struct tfm_backend *be,
                                   int64_t max_tokens, struct tfm_error *err)
{
    return create(cfg, be, max_tokens, 0, err);
}

struct tfm_model *tfm_model_create_inference(const struct tfm_config *cfg,
                                             struct tfm_backend *be, int64_t max_tokens,
                                             struct tfm_error *err)
{
    return create(cfg, be, max_tokens, 1, err);
}

const struct tfm_config *tfm_model_config(const struct tfm_model *m) { return &m->cfg; }
struct tfm_backend *tfm_model_backend(const struct tfm_model *m) { return m->be; }
int tfm_model_nparams(const struct tfm_model *m) { return m->np; }
int64_t tfm_model_count(const struct tfm_model *m) { return m->count; }

const struct tfm_param *tfm_model_param(const struct tfm_model *m, int i)
{
    return i >= 0 && i < m->np ? &m->params[i] : NULL;
}

int tfm_model_layout(const struct tfm_config *cfg, struct tfm_param **params, int *n,
                     struct tfm_error *err)
{
    *params = NULL;
    *n = 0;
    if (tfm_config_check(cfg, 1, err) < 0)
        return -1;
    if ((int64_t)cfg->layers * 32 + 8 > MAX_PARAMS)
        return tfm_fail(err, "layers %d: too many parameter tensors", cfg->layers);
    struct tfm_model *m = shell(cfg);
    if (m && (*params = malloc((size_t)m->np * sizeof **params))) {
        memcpy(*params, m->params, (size_t)m->np * sizeof **params);
        *n = m->np;
    }
    shell_free(m);
    return *params ? 0 : tfm_fail(err, "out of memory");
}

const struct tfm_param *tfm_model_find(const struct tfm_model *m, const char *name)
{
    for (int i = 0; i < m->np; i++)
        if (!strcmp(m->params[i].name, name))
            return &m->params[i];
    return NULL;
}

float *tfm_model_block(const struct tfm_model *m, enum tfm_block b)
{
    if (m->inference && b != TFM_PARAMS)
        return NULL;
    return m->arena + (size_t)b * m->count;
}

/* A parameter read where tfm_model_share pointed it, not from its place in the arena. */
static int is_shared(const struct tfm_model *m, const struct tfm_param *p)
{
    return p->data != m->arena + p->offset;
}

/* Back to its place in the arena (whose contents the caller sets next). */
static void unshare(struct tfm_model *m, struct tfm_param *p)
{
    if (!is_shared(m, p))
        return;
    p->data = p->w = m->arena + p->offset;      /* shared: fp32, no compute copy */
}

void tfm_model_download(const struct tfm_model *m, enum tfm_block b, float *host)
{
    if (b != TFM_PARAMS || !tfm_model_shared(m)) {
        m->be->download(m->be, host, tfm_model_block(m, b), (size_t)m->count * sizeof(float));
        return;
    }
    memset(host, 0, (size_t)m->count * sizeof(float));     /* the padding, as in the arena */
    for (int i = 0; i < m->np; i++)
        m->be->download(m->be, host + m->params[i].offset, m->params[i].data,
                        (size_t)m->params[i].count * sizeof(float));
}

void tfm_model_upload(struct tfm_model *m, enum tfm_block b, const float *host)
{
    if (b == TFM_PARAMS)
        for (int i = 0; i < m->np; i++)
            unshare(m, &m->params[i]);
    m->be->upload(m->be, tfm_model_block(m, b), host, (size_t)m->count * sizeof(float));
    if (b == TFM_PARAMS)
        tfm_model_sync_weights(m);
}

void tfm_model_sync_weights(struct tfm_model *m)
{
    if (m->wcopy)
        m->be->weights_copy(m->be, (float *)m->wcopy, m->arena, (size_t)m->count);
}

int tfm_model_set(struct tfm_model *m, enum tfm_block b, const char *name, const float *host,
                  int64_t count, struct tfm_error *err)
{
    const struct tfm_param *p = tfm_model_find(m, name);
    if (!p)
        return tfm_fail(err, "'%s': not a parameter of this model", name);
    if (!tfm_model_block(m, b))
        return tfm_fail(err, "'%s': an inference model keeps parameters only", name);
    if (p->count != count)
        return tfm_fail(err, "'%s': %lld values, the model has %lld", name, (long long)count,
                        (long long)p->count);
    if (b == TFM_PARAMS)
        unshare(m, (struct tfm_param *)p);
    m->be->upload(m->be, tfm_model_block(m, b) + p->offset, host, (size_t)count * sizeof(float));
    if (b == TFM_PARAMS && m->wcopy)
        m->be->weights_copy(m->be, p->w, p->data, (size_t)count);
    return 0;
}

int tfm_model_share(struct tfm_model *m, const char *name, const float *data, int64_t count,
                    struct tfm_error *err)
{
    const struct tfm_param *p = tfm_model_find(m, name);
    if (!p || p->count != count || !m->inference || m->wcopy || !m->be->host_memory ||
        (uintptr_t)data % 64 != 0)
        return tfm_model_set(m, TFM_PARAMS, name, data, count, err);
    struct tfm_param *q = (struct tfm_param *)p;
    q->data = q->w = (float *)data;     /* read only: no op writes an inference model's */
    return 1;
}

int tfm_model_shared(const struct tfm_model *m)
{
    int n = 0;
    for (int i = 0; i < m->np; i++)
        n += is_shared(m, &m->params[i]);
    return n;
}

void tfm_model_zero_grad(struct tfm_model *m)
{
    m->be->zero(m->be, tfm_model_block(m, TFM_GRADS), (size_t)m->count * sizeof(float));
    m->be->zero(m->be, &m->stats[STEP_STATS], sizeof *m->stats);
}

struct tfm_step_stats *tfm_model_step_stats(struct tfm_model *m)
{
    return &m->stats[STEP_STATS];
}

/* ---- batch checks ------------------------------------------------------------------------ */

/* Length of each row (tokens before the padding); -1 with err when a pad is followed by a
 * token or an id is out of range. */
static int row_lengths(const int32_t *ids, int B, int T, int V, const char *what, int32_t *len,
                       struct tfm_error *err)
{
    for (int b = 0; b < B; b++) {
        int n = 0, seen_pad = 0;
        for (int t = 0; t < T; t++) {
            int32_t x = ids[(size_t)b * T + t];
            if (x < 0 || x >= V)
                return tfm_fail(err, "%s[%d][%d] = %d: out of the vocabulary [0, %d)", what, b,
                                t, x, V);
            if (x == TFM_PAD)
                seen_pad = 1;
            else if (seen_pad)
                return tfm_fail(err, "%s[%d]: token %d after padding", what, b, t);
            else
                n++;
        }
        len[b] = n;
    }
    return 0;
}

static int check_batch(struct tfm_model *m, int B, int S, int T, struct tfm_error *err)
{
    if (B < 1 || S < 1 || T < 1)
        return tfm_fail(err, "batch of %d x %d source, %d x %d target tokens: empty", B, S, B, T);
    if (S > m->L || T > m->L)
        return tfm_fail(err, "batch with %d source / %d target positions: longer than max_len %d",
                        S, T, m->L);
    if ((int64_t)B * S > m->M || (int64_t)B * T > m->M)
        return tfm_fail(err, "batch of %d x %d source / %d x %d target padded tokens exceeds "
                        "the token budget %lld the model was built for (lower the batch "
                        "tokens, tfm-batch --tokens, or raise tokens)",
                        B, S, B, T, (long long)m->M);
    return 0;
}

/* ---- building blocks ------------------------------------------------------------------------ */

/* the weights an op reads (the compute copy at bf16), and a parameter's gradient */
#define DATA(p) ((p)->w)
#define GRAD(p) ((p)->grad)
/* The activation n elements past p: activations are be->act_size bytes each (backend.h,
 * precision), so the model never steps through them with float arithmetic.  Statistics,
 * losses, gradients and master weights are fp32 arrays and are indexed as such. */
#define ACT(p, n) tfm_act(be, (p), (n))

/* y (n,out), rows ldy apart, = x (n,in) W (in,out) + b (b NULL: no bias).  With a bias,
 * one gemm_bias (backend.h): the bias added in the product's epilogue on a GPU, and on the
 * CPU copied into y first and the product added to it, one pass over y fewer than a
 * product and then a bias pass. */
static void linear(struct tfm_model *m, float *y, int ldy, const float *x, int ldx, int n,
                   const struct tfm_param *w, const struct tfm_param *b)
{
    struct tfm_backend *be = m->be;
    int in = (int)w->dims[0], out = (int)w->dims[1];
    if (b)
        be->gemm_bias(be, 0, 0, n, out, in, x, ldx, DATA(w), out, DATA(b), 0, y, ldy);
    else
        be->gemm(be, 0, 0, n, out, in, 1.0f, x, ldx, DATA(w), out, 0.0f, y, ldy);
}

/* Backward of linear (dense y, ldy == out): dW += x^T dy; db += colsum dy;
 * dx = beta*dx + dy W^T (dx NULL: skip). */
static void linear_bwd(struct tfm_model *m, float *dx, float beta, const float *dy,
                       const float *x, int n, const struct tfm_param *w,
                       const struct tfm_param *b)
{
    struct tfm_backend *be = m->be;
    int in = (int)w->dims[0], out = (int)w->dims[1];
    be->gemm_grad(be, 1, 0, in, out, n, 1.0f, x, in, dy, out, 1.0f, GRAD(w), out);
    if (b)
        be->bias_bwd(be, GRAD(b), dy, n, out);
    if (dx)
        be->gemm(be, 0, 1, n, in, out, 1.0f, dy, out, DATA(w), out, beta, dx, in);
}

static uint64_t site(int stack, int layer, int k)
{
    return ((uint64_t)stack << 24) | ((uint64_t)layer << 8) | (uint64_t)k;
}

/* Dropout state of one forward pass. */
struct fwd {
    int train;                  /* dropout on */
    uint64_t rng_step;
    int B, S, T;
    int layers;                 /* run layers [0, layers) only (0: all): attention maps */
};

static uint64_t key(const struct tfm_model *m, const struct fwd *f, uint64_t s)
{
    return tfm_rng_key((uint64_t)m->cfg.seed, f->rng_step, s);
}

static float pdrop(const struct fwd *f, double p) { return f->train ? (float)p : 0.0f; }

/* Self-attention F(u) -> out (n,D), saving qkv, o, lse. */
static void self_attn_fwd(struct tfm_model *m, const struct fwd *f, const struct attn_p *p,
                          const float *u, int B, int Tq, const int32_t *klen, int causal,
                          float *qkv, float *o, float *lse, float *out, uint64_t s)
{
    struct tfm_backend *be = m->be;
    int n = B * Tq, D = m->D;
    linear(m, qkv, 3 * D, u, D, n, p->wqkv, p->bqkv);
    struct tfm_attn a = {B, m->H, Tq, Tq, m->dk, klen, causal, 1.0f / sqrtf((float)m->dk),
                         pdrop(f, m->cfg.attn_dropout), key(m, f, s)};
    be->attn_fwd(be, &a, qkv, 3 * D, ACT(qkv, D), 3 * D, ACT(qkv, 2 * D), 3 * D, o, D, lse);
    linear(m, out, D, o, D, n, p->wo, p->bo);
}

static void self_attn_bwd(struct tfm_model *m, const struct fwd *f, const struct attn_p *p,
                          const float *u, int B, int Tq, const int32_t *klen, int causal,
                          const float *qkv, const float *o, const float *lse, const float *dout,
                          float *du, float beta, uint64_t s)
{
    struct tfm_backend *be = m->be;
    struct acts *A = &m->a;
    int n = B * Tq, D = m->D;
    linear_bwd(m, A->dO, 0.0f, dout, o, n, p->wo, p->bo);
    struct tfm_attn a = {B, m->H, Tq, Tq, m->dk, klen, causal, 1.0f / sqrtf((float)m->dk),
                         pdrop(f, m->cfg.attn_dropout), key(m, f, s)};
    be->attn_bwd(be, &a, qkv, 3 * D, ACT(qkv, D), 3 * D, ACT(qkv, 2 * D), 3 * D, o, D, lse,
                 A->dO, D, A->dqkv, 3 * D, ACT(A->dqkv, D), 3 * D, ACT(A->dqkv, 2 * D), 3 * D);
    linear_bwd(m, du, beta, A->dqkv, u, n, p->wqkv, p->bqkv);
}

static void ffn_fwd(struct tfm_model *m, const struct fwd *f, const struct ffn_p *p,
                    const float *u, int n, float *h, float *out, uint64_t s)
{
    struct tfm_backend *be = m->be;
    float pr = pdrop(f, m->cfg.relu_dropout);
    if (pr > 0) {       /* the product, then bias, ReLU and dropout in one pass */
        be->gemm(be, 0, 0, n, m->F, m->D, 1.0f, u, m->D, DATA(p->w1), m->F, 0.0f, h, m->F);
        be->bias_act_dropout(be, h, DATA(p->b1), n, m->F, 1, pr, key(m, f, s));
    } else {            /* no dropout (eval, or relu_dropout 0): bias and ReLU in the product */
        be->gemm_bias(be, 0, 0, n, m->F, m->D, u, m->D, DATA(p->w1), m->F, DATA(p->b1), 1, h,
                      m->F);
    }
    linear(m, out, m->D, h, m->F, n, p->w2, p->b2);
}

static void ffn_bwd(struct tfm_model *m, const struct fwd *f, const struct ffn_p *p,
                    const float *u, int n, const float *h, const float *dout, float *du,
                    float beta)
{
    struct tfm_backend *be = m->be;
    float *df = m->a.df;
    linear_bwd(m, df, 0.0f, dout, h, n, p->w2, p->b2);
    float pr = pdrop(f, m->cfg.relu_dropout);
    be->relu_bwd(be, df, df, h, (size_t)n * m->F, tfm_dropout_scale(pr));
    linear_bwd(m, du, beta, df, u, n, p->w1, p->b1);
}

/* ---- forward ------------------------------------------------------------------------------ */

/* Residual block bookkeeping.  Post: r = x + Drop(F(x)); y = LN(r).
 * Pre: r = LN(x); y = x + Drop(F(r)).  blk_in returns F's input.  Each residual sum is
 * computed with the layer norm that reads it (add_dropout_layernorm): post-norm, the
 * block's own; pre-norm, the next block's (its r) or the stack's final one (its y), `next`
 * below, so that blk_in of a pre-norm block finds r ready (`ready`) except in the first
 * block of a stack, whose input is the embedding. */
struct next_ln {
    float *y, *mean, *rstd;     /* pre-norm: where the next layer norm writes */
    const struct ln_p *ln;
};

static struct next_ln next_blk(struct blk *k, const struct ln_p *ln)
{
    return (struct next_ln){k->r, k->mean, k->rstd, ln};
}

static struct next_ln next_fin(struct blk *k, const struct ln_p *ln)
{
    return (struct next_ln){k->y, k->mean, k->rstd, ln};
}

static const float *blk_in(struct tfm_model *m, struct blk *k, const struct ln_p *ln,
                           const float *x, int n, int ready)
{
    if (m->cfg.norm == TFM_NORM_PRE) {
        if (ready)
            return k->r;
        m->be->layernorm_fwd(m->be, k->r, k->mean, k->rstd, x, DATA(ln->g), DATA(ln->b), n,
                             m->D, (float)m->cfg.ln_eps);
        return k->r;
    }
    return x;
}

static void blk_out(struct tfm_model *m, const struct fwd *f, struct blk *k,
                    const struct ln_p *ln, const float *x, const float *sub, int n, uint64_t s,
                    struct next_ln next)
{
    struct tfm_backend *be = m->be;
    float p = pdrop(f, m->cfg.dropout), eps = (float)m->cfg.ln_eps;
    if (m->cfg.norm == TFM_NORM_PRE)
        be->add_dropout_layernorm(be, next.y, next.mean, next.rstd, k->y, x, sub,
                                  DATA(next.ln->g), DATA(next.ln->b), n, m->D, eps, p,
                                  key(m, f, s));
    else
        be->add_dropout_layernorm(be, k->y, k->mean, k->rstd, k->r, x, sub, DATA(ln->g),
                                  DATA(ln->b), n, m->D, eps, p, key(m, f, s));
}

/* Backward of a block: on entry *g = dL/dy; on exit *g = dL/dx.  fbwd computes F's
 * backward from dsub into du with the given beta.  Uses t1, t2.  The dropout backward of
 * each residual branch runs with the layer-norm backward before it (layernorm_bwd_dropout):
 * post-norm, the block's own (blk_bwd_begin); pre-norm, the one that ends the block above
 * (blk_bwd_end, or pre_top for the stack's final layer norm), which leaves dL/dF in t2 for
 * the block below (`next`: its dropout site, or the embedding's). */
struct blk_bwd {
    float *dsub;    /* where the caller's F backward reads dL/dF */
    float *du;      /* where it writes dL/du */
    float beta;     /* 1: accumulate into du */
};

static struct blk_bwd blk_bwd_begin(struct tfm_model *m, const struct fwd *f, struct blk *k,
                                    const struct ln_p *ln, int n, uint64_t s)
{
    struct tfm_backend *be = m->be;
    struct acts *A = &m->a;
    float p = pdrop(f, m->cfg.dropout);
    struct blk_bwd r;
    if (m->cfg.norm == TFM_NORM_PRE) {
        r.dsub = A->t2;         /* dropout(g): the block above left it there */
        r.du = A->t1;
        r.beta = 0.0f;
    } else {
        be->layernorm_bwd_dropout(be, A->t1, A->t2, GRAD(ln->g), GRAD(ln->b), A->g, k->r,
                                  k->mean, k->rstd, DATA(ln->g), n, m->D, 0, p, key(m, f, s));
        r.dsub = A->t2;
        r.du = A->t1;
        r.beta = 1.0f;
    }
    return r;
}

static void blk_bwd_end(struct tfm_model *m, const struct fwd *f, struct blk *k,
                        const struct ln_p *ln, const float *x, int n, uint64_t next)
{
    struct tfm_backend *be = m->be;
    struct acts *A = &m->a;
    if (m->cfg.norm == TFM_NORM_PRE) {
        /* dx = g (residual) + LN'(x)^T dh, dh in t1; t2 = dropout(dx) for below. */
        be->layernorm_bwd_dropout(be, A->g, A->t2, GRAD(ln->g), GRAD(ln->b), A->t1, x, k->mean,
                                  k->rstd, DATA(ln->g), n, m->D, 1,
                                  pdrop(f, m->cfg.dropout), key(m, f, next));
    } else {
        float *t = A->g;
        A->g = A->t1;
        A->t1 = t;
    }
}

#define ST_ENC 1
#define ST_DEC 2

static const float *enc_forward(struct tfm_model *m, const struct fwd *f)
{
    struct tfm_backend *be = m->be;
    struct acts *A = &m->a;
    int B = f->B, S = f->S, n = B * S, D = m->D;
    be->embed_fwd_dropout(be, A->xe, DATA(m->emb_src), A->src, n, D, sqrtf((float)D),
                          m->pos_enc ? DATA(m->pos_enc) : m->pe, S, 0,
                          pdrop(f, m->cfg.dropout), key(m, f, site(ST_ENC, 255, 0)));
    const float *x = A->xe;
    for (int l = 0; l < (f->layers ? f->layers : m->N); l++) {
        struct enc_a *e = &A->enc[l];
        struct enc_p *P = &m->enc[l];
        const float *u = blk_in(m, &e->a, &P->ln1, x, n, l > 0);
        self_attn_fwd(m, f, &P->self, u, B, S, A->src_len, 0, e->qkv, e->o, e->lse, A->tmp,
                      site(ST_ENC, l, 1));
        blk_out(m, f, &e->a, &P->ln1, x, A->tmp, n, site(ST_ENC, l, 2),
                next_blk(&e->f, &P->ln2));
        x = e->a.y;
        u = blk_in(m, &e->f, &P->ln2, x, n, 1);
        ffn_fwd(m, f, &P->ffn, u, n, e->h, A->tmp, site(ST_ENC, l, 3));
        blk_out(m, f, &e->f, &P->ln2, x, A->tmp, n, site(ST_ENC, l, 4),
                l + 1 < m->N ? next_blk(&A->enc[l + 1].a, &m->enc[l + 1].ln1)
                             : next_fin(&A->efin, &m->efin));
        x = e->f.y;
    }
    if (m->cfg.norm == TFM_NORM_PRE) {
        if (m->N == 0)
            be->layernorm_fwd(be, A->efin.y, A->efin.mean, A->efin.rstd, x, DATA(m->efin.g),
                              DATA(m->efin.b), n, D, (float)m->cfg.ln_eps);
        x = A->efin.y;
    }
    return x;
}

static const float *dec_forward(struct tfm_model *m, const struct fwd *f, const float *enc)
{
    struct tfm_backend *be = m->be;
    struct acts *A = &m->a;
    int B = f->B, S = f->S, T = f->T, n = B * T, D = m->D;
    be->embed_fwd_dropout(be, A->xd, DATA(m->emb_tgt), A->tgt_in, n, D, sqrtf((float)D),
                          m->pos_dec ? DATA(m->pos_dec) : m->pe, T, 0,
                          pdrop(f, m->cfg.dropout), key(m, f, site(ST_DEC, 255, 0)));
    const float *x = A->xd;
    float scale = 1.0f / sqrtf((float)m->dk);
    for (int l = 0; l < (f->layers ? f->layers : m->N); l++) {
        struct dec_a *d = &A->dec[l];
        struct dec_p *P = &m->dec[l];
        const float *u = blk_in(m, &d->a, &P->ln1, x, n, l > 0);
        self_attn_fwd(m, f, &P->self, u, B, T, NULL, 1, d->qkv, d->o, d->lse, A->tmp,
                      site(ST_DEC, l, 1));
        blk_out(m, f, &d->a, &P->ln1, x, A->tmp, n, site(ST_DEC, l, 2),
                next_blk(&d->c, &P->ln2));
        x = d->a.y;
        /* encoder-decoder attention */
        u = blk_in(m, &d->c, &P->ln2, x, n, 1);
        linear(m, d->q, D, u, D, n, P->cross.wq, P->cross.bq);
        linear(m, d->kv, 2 * D, enc, D, B * S, P->cross.wkv, P->cross.bkv);
        struct tfm_attn a = {B, m->H, T, S, m->dk, A->src_len, 0, scale,
                             pdrop(f, m->cfg.attn_dropout), key(m, f, site(ST_DEC, l, 3))};
        be->attn_fwd(be, &a, d->q, D, d->kv, 2 * D, ACT(d->kv, D), 2 * D, d->co, D, d->clse);
        linear(m, A->tmp, D, d->co, D, n, P->cross.wo, P->cross.bo);
        blk_out(m, f, &d->c, &P->ln2, x, A->tmp, n, site(ST_DEC, l, 4),
                next_blk(&d->f, &P->ln3));
        x = d->c.y;
        u = blk_in(m, &d->f, &P->ln3, x, n, 1);
        ffn_fwd(m, f, &P->ffn, u, n, d->h, A->tmp, site(ST_DEC, l, 5));
        blk_out(m, f, &d->f, &P->ln3, x, A->tmp, n, site(ST_DEC, l, 6),
                l + 1 < m->N ? next_blk(&A->dec[l + 1].a, &m->dec[l + 1].ln1)
                             : next_fin(&A->dfin, &m->dfin));
        x = d->f.y;
    }
    if (m->cfg.norm == TFM_NORM_PRE) {
        if (m->N == 0)
            be->layernorm_fwd(be, A->dfin.y, A->dfin.mean, A->dfin.rstd, x, DATA(m->dfin.g),
                              DATA(m->dfin.b), n, D, (float)m->cfg.ln_eps);
        x = A->dfin.y;
    }
    return x;
}

/* ---- backward ------------------------------------------------------------------------------ */

/* Tell the trainer that the gradients from arena offset lo on are final for this batch
 * (backend.h, grads_ready).  The arena holds the embeddings first, then the encoder layers
 * (and its final layer norm), then the decoder's; the backward visits the decoder from its
 * top layer down, then the encoder from its top layer down, then the embeddings, which the
 * output layer (tied), the decoder and the encoder all write.  So after decoder layer l
 * everything from that layer's first parameter on is final, after encoder layer l
 * everything from its first parameter on, and all of it after the source embeddings. */
static void grads_final(struct tfm_model *m, const struct tfm_param *first)
{
    struct tfm_backend *be = m->be;
    if (be->grads_ready)
        be->grads_ready(be->all_reduce_ctx, first ? first->offset : 0);
}

/* Pre-norm: the backward of a stack's final layer norm fin (input x) from A->g, with the
 * dropout of the top block's branch (site next, or the embedding's without blocks) into t2
 * (blk_bwd_begin's dsub); A->g then holds dL/dx. */
static void pre_top(struct tfm_model *m, const struct fwd *f, struct blk *fin,
                    const struct ln_p *ln, const float *x, int n, uint64_t next)
{
    struct tfm_backend *be = m->be;
    struct acts *A = &m->a;
    be->layernorm_bwd_dropout(be, A->t1, A->t2, GRAD(ln->g), GRAD(ln->b), A->g, x, fin->mean,
                              fin->rstd, DATA(ln->g), n, m->D, 0, pdrop(f, m->cfg.dropout),
                              key(m, f, next));
    float *t = A->g;
    A->g = A->t1;
    A->t1 = t;
}

/* The gradient of the embedding sum before its dropout (site s), from A->g = the gradient
 * after it: pre-norm, the last layer-norm backward left it in t2 (blk_bwd_end, pre_top);
 * post-norm, the dropout's backward runs here, in place. */
static const float *emb_grad(struct tfm_model *m, const struct fwd *f, int n, uint64_t s)
{
    struct tfm_backend *be = m->be;
    struct acts *A = &m->a;
    if (m->cfg.norm == TFM_NORM_PRE)
        return A->t2;
    float p = pdrop(f, m->cfg.dropout);
    if (p > 0)
        be->dropout(be, A->g, A->g, (size_t)n * m->D, p, key(m, f, s));
    return A->g;
}

static void dec_backward(struct tfm_model *m, const struct fwd *f, const float *enc)
{
    struct tfm_backend *be = m->be;
    struct acts *A = &m->a;
    int B = f->B, S = f->S, T = f->T, n = B * T, D = m->D;
    float scale = 1.0f / sqrtf((float)m->dk);
    be->zero(be, A->denc, (size_t)B * S * D * be->act_size);
    if (m->cfg.norm == TFM_NORM_PRE)
        pre_top(m, f, &A->dfin, &m->dfin, m->N > 0 ? A->dec[m->N - 1].f.y : A->xd, n,
                m->N > 0 ? site(ST_DEC, m->N - 1, 6) : site(ST_DEC, 255, 0));
    for (int l = m->N - 1; l >= 0; l--) {
        struct dec_a *d = &A->dec[l];
        struct dec_p *P = &m->dec[l];
        const float *x0 = l > 0 ? A->dec[l - 1].f.y : A->xd;
        /* FFN block */
        struct blk_bwd r = blk_bwd_begin(m, f, &d->f, &P->ln3, n, site(ST_DEC, l, 6));
        const float *u = m->cfg.norm == TFM_NORM_PRE ? d->f.r : d->c.y;
        ffn_bwd(m, f, &P->ffn, u, n, d->h, r.dsub, r.du, r.beta);
        blk_bwd_end(m, f, &d->f, &P->ln3, d->c.y, n, site(ST_DEC, l, 4));
        /* cross-attention block */
        r = blk_bwd_begin(m, f, &d->c, &P->ln2, n, site(ST_DEC, l, 4));
        u = m->cfg.norm == TFM_NORM_PRE ? d->c.r : d->a.y;
        linear_bwd(m, A->dO, 0.0f, r.dsub, d->co, n, P->cross.wo, P->cross.bo);
        struct tfm_attn a = {B, m->H, T, S, m->dk, A->src_len, 0, scale,
                             pdrop(f, m->cfg.attn_dropout), key(m, f, site(ST_DEC, l, 3))};
        be->attn_bwd(be, &a, d->q, D, d->kv, 2 * D, ACT(d->kv, D), 2 * D, d->co, D, d->clse,
                     A->dO, D, A->dq, D, A->dkv, 2 * D, ACT(A->dkv, D), 2 * D);
        linear_bwd(m, r.du, r.beta, A->dq, u, n, P->cross.wq, P->cross.bq);
        linear_bwd(m, A->denc, 1.0f, A->dkv, enc, B * S, P->cross.wkv, P->cross.bkv);
        blk_bwd_end(m, f, &d->c, &P->ln2, d->a.y, n, site(ST_DEC, l, 2));
        /* self-attention block */
        r = blk_bwd_begin(m, f, &d->a, &P->ln1, n, site(ST_DEC, l, 2));
        u = m->cfg.norm == TFM_NORM_PRE ? d->a.r : x0;
        self_attn_bwd(m, f, &P->self, u, B, T, NULL, 1, d->qkv, d->o, d->lse, r.dsub, r.du,
                      r.beta, site(ST_DEC, l, 1));
        blk_bwd_end(m, f, &d->a, &P->ln1, x0, n,
                    l > 0 ? site(ST_DEC, l - 1, 6) : site(ST_DEC, 255, 0));
        grads_final(m, P->self.wqkv);
    }
    /* A->g = dL/d(embedding sum after dropout) */
    be->embed_bwd(be, GRAD(m->emb_tgt), m->pos_dec ? GRAD(m->pos_dec) : NULL,
                  emb_grad(m, f, n, site(ST_DEC, 255, 0)), A->tgt_in, n, D, m->V,
                  sqrtf((float)D), T, 0);
}

static void enc_backward(struct tfm_model *m, const struct fwd *f)
{
    struct tfm_backend *be = m->be;
    struct acts *A = &m->a;
    int B = f->B, S = f->S, n = B * S, D = m->D;
    be->copy(be, A->g, A->denc, (size_t)n * D * be->act_size);
    if (m->cfg.norm == TFM_NORM_PRE)
        pre_top(m, f, &A->efin, &m->efin, m->N > 0 ? A->enc[m->N - 1].f.y : A->xe, n,
                m->N > 0 ? site(ST_ENC, m->N - 1, 4) : site(ST_ENC, 255, 0));
    for (int l = m->N - 1; l >= 0; l--) {
        struct enc_a *e = &A->enc[l];
        struct enc_p *P = &m->enc[l];
        const float *x0 = l > 0 ? A->enc[l - 1].f.y : A->xe;
        struct blk_bwd r = blk_bwd_begin(m, f, &e->f, &P->ln2, n, site(ST_ENC, l, 4));
        const float *u = m->cfg.norm == TFM_NORM_PRE ? e->f.r : e->a.y;
        ffn_bwd(m, f, &P->ffn, u, n, e->h, r.dsub, r.du, r.beta);
        blk_bwd_end(m, f, &e->f, &P->ln2, e->a.y, n, site(ST_ENC, l, 2));
        r = blk_bwd_begin(m, f, &e->a, &P->ln1, n, site(ST_ENC, l, 2));
        u = m->cfg.norm == TFM_NORM_PRE ? e->a.r : x0;
        self_attn_bwd(m, f, &P->self, u, B, S, A->src_len, 0, e->qkv, e->o, e->lse, r.dsub,
                      r.du, r.beta, site(ST_ENC, l, 1));
        blk_bwd_end(m, f, &e->a, &P->ln1, x0, n,
                    l > 0 ? site(ST_ENC, l - 1, 4) : site(ST_ENC, 255, 0));
        grads_final(m, P->self.wqkv);
    }
    be->embed_bwd(be, GRAD(m->emb_src), m->pos_enc ? GRAD(m->pos_enc) : NULL,
                  emb_grad(m, f, n, site(ST_ENC, 255, 0)), A->src, n, D, m->V, sqrtf((float)D),
                  S, 0);
    grads_final(m, NULL);
}

/* ---- the batch entry points --------------------------------------------------------------- */

/* Check the batch, stage ids, count tokens. */
static int stage(struct tfm_model *m, int B, int S, int T, const int32_t *src,
                 const int32_t *tgt, struct tfm_loss *out, struct tfm_error *err)
{
    if (check_batch(m, B, S, T, err) < 0)
        return -1;
    int32_t *len = m->host_ints, *tlen = m->host_ints + m->M;
    if (row_lengths(src, B, S, m->V, "src", len, err) < 0 ||
        row_lengths(tgt, B, T, m->V, "tgt", tlen, err) < 0)
        return -1;
    memset(out, 0, sizeof *out);
    for (int b = 0; b < B; b++) {
        out->src_tokens += len[b];
        out->tokens += tlen[b];
    }
    struct tfm_backend *be = m->be;
    be->upload(be, m->a.src_len, len, (size_t)B * sizeof(int32_t));
    be->upload(be, m->a.src, src, (size_t)B * S * sizeof(int32_t));
    be->upload(be, m->a.labels, tgt, (size_t)B * T * sizeof(int32_t));
    int32_t *tin = m->host_ints + 2 * m->M;
    for (int b = 0; b < B; b++) {
        tin[(size_t)b * T] = TFM_BOS;
        for (int t = 1; t < T; t++)
            tin[(size_t)b * T + t] = tgt[(size_t)b * T + t - 1];
    }
    be->upload(be, m->a.tgt_in, tin, (size_t)B * T * sizeof(int32_t));
    return 0;
}

/* Output layer over the decoder output y (n,D) in chunks: each row's loss and nll into
 * A->loss, A->nll (device); with grad, dL/dy into A->g and the output matrix's gradient.
 * Nothing comes to the host: batch_loss sums the rows. */
static void output_layer(struct tfm_model *m, const float *y, int n, int grad)
{
    struct tfm_backend *be = m->be;
    struct acts *A = &m->a;
    int D = m->D, V = m->V;
    const float *E = DATA(m->emb_out);
    for (int r0 = 0; r0 < n; r0 += m->C) {
        int c = n - r0 < m->C ? n - r0 : m->C;
        const float *yc = ACT(y, (int64_t)r0 * D);     /* this chunk's rows */
        be->gemm(be, 0, 1, c, V, D, 1.0f, yc, D, E, D, 0.0f, A->logits, V);
        be->xent(be, A->logits, A->labels + r0, c, V, (float)m->cfg.label_smoothing, TFM_PAD,
                 A->loss + r0, A->nll + r0, grad ? 1.0f : 0.0f);
        if (grad) {
            be->gemm(be, 0, 0, c, D, V, 1.0f, A->logits, V, E, D, 0.0f,
                     ACT(A->g, (int64_t)r0 * D), D);
            be->gemm_grad(be, 1, 0, V, D, c, 1.0f, A->logits, V, yc, D, 1.0f, GRAD(m->emb_out),
                          D);
        }
    }
}

/* The sums of the n rows' loss and nll of output_layer, on the device: added to the step's
 * statistics when step (a training batch), and read into out when out is given (one read
 * of 16 bytes: a GPU waits for its queue there).  The trainer passes no out: its batches'
 * losses stay on the device until the optimizer step reads them all at once. */
static void batch_loss(struct tfm_model *m, int n, int step, struct tfm_loss *out)
{
    struct tfm_backend *be = m->be;
    if (step)
        be->loss_sum(be, &m->stats[STEP_STATS], m->a.loss, m->a.nll, n);
    if (out) {
        struct tfm_step_stats b;
        be->zero(be, &m->stats[BATCH_STATS], sizeof b);
        be->loss_sum(be, &m->stats[BATCH_STATS], m->a.loss, m->a.nll, n);
        be->download(be, &b, &m->stats[BATCH_STATS], sizeof b);
        out->loss = b.loss;
        out->nll = b.nll;
    }
}

static int train_batch(struct tfm_model *m, int B, int S, int T, const int32_t *src,
                       const int32_t *tgt, uint64_t rng_step, struct tfm_loss *out, int read,
                       struct tfm_error *err)
{
    if (m->inference)
        return tfm_fail(err, "internal error: training an inference-only model");
    if (stage(m, B, S, T, src, tgt, out, err) < 0)
        return -1;
    struct fwd f = {1, rng_step, B, S, T, 0};
    const float *enc = enc_forward(m, &f);
    const float *y = dec_forward(m, &f, enc);
    output_layer(m, y, B * T, 1);
    batch_loss(m, B * T, 1, NULL);
    dec_backward(m, &f, enc);
    enc_backward(m, &f);
    if (read)           /* after the backward is queued: the read waits for all of it */
        batch_loss(m, B * T, 0, out);
    return 0;
}

int tfm_model_train_batch(struct tfm_model *m, int B, int S, int T, const int32_t *src,
                          const int32_t *tgt, uint64_t rng_step, struct tfm_loss *out,
                          struct tfm_error *err)
{
    return train_batch(m, B, S, T, src, tgt, rng_step, out, 1, err);
}

int tfm_model_train_batch_dev(struct tfm_model *m, int B, int S, int T, const int32_t *src,
                              const int32_t *tgt, uint64_t rng_step, struct tfm_loss *out,
                              struct tfm_error *err)
{
    return train_batch(m, B, S, T, src, tgt, rng_step, out, 0, err);
}

int tfm_model_eval_batch(struct tfm_model *m, int B, int S, int T, const int32_t *src,
                         const int32_t *tgt, struct tfm_loss *out, struct tfm_error *err)
{
    if (stage(m, B, S, T, src, tgt, out, err) < 0)
        return -1;
    struct fwd f = {0, 0, B, S, T, 0};
    const float *enc = enc_forward(m, &f);
    const float *y = dec_forward(m, &f, enc);
    output_layer(m, y, B * T, 0);
    batch_loss(m, B * T, 0, out);
    return 0;
}

int tfm_model_logprobs(struct tfm_model *m, int B, int S, int T, const int32_t *src,
                       const int32_t *tgt, float *logp, struct tfm_error *err)
{
    struct tfm_loss l;
    if (stage(m, B, S, T, src, tgt, &l, err) < 0)
        return -1;
    struct tfm_backend *be = m->be;
    struct fwd f = {0, 0, B, S, T, 0};
    const float *enc = enc_forward(m, &f);
    const float *y = dec_forward(m, &f, enc);
    int n = B * T, D = m->D, V = m->V;
    for (int r0 = 0; r0 < n; r0 += m->C) {
        int c = n - r0 < m->C ? n - r0 : m->C;
        be->gemm(be, 0, 1, c, V, D, 1.0f, ACT(y, (int64_t)r0 * D), D, DATA(m->emb_out), D,
                 0.0f, m->a.logits, V);
        be->log_softmax(be, m->a.logits, m->a.logits, c, V);
        be->download_act(be, logp + (size_t)r0 * V, m->a.logits, (size_t)c * V);
    }
    return 0;
}

/* ---- attention weights, for inspection ------------------------------------------------------ */

/* p (H,Tq,Tk) = softmax over j of q_hi . k_hj * scale, j > i masked when causal.  q: Tq rows
 * of ldq floats, head h at columns [h*dk, (h+1)*dk); k likewise, ldk. */
static void attn_probs(const float *q, int ldq, const float *k, int ldk, int H, int Tq, int Tk,
                       int dk, int causal, double scale, double *row, float *p)
{
    for (int h = 0; h < H; h++)
        for (int i = 0; i < Tq; i++) {
            const float *qi = q + (size_t)i * ldq + (size_t)h * dk;
            int n = causal && i + 1 < Tk ? i + 1 : Tk;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < n; j++) {
                const float *kj = k + (size_t)j * ldk + (size_t)h * dk;
                double s = 0;
                for (int c = 0; c < dk; c++)
                    s += (double)qi[c] * kj[c];
                row[j] = s * scale;
                mx = row[j] > mx ? row[j] : mx;
            }
            for (int j = 0; j < n; j++)
                sum += row[j] = exp(row[j] - mx);
            float *out = p + ((size_t)h * Tq + i) * Tk;
            for (int j = 0; j < Tk; j++)
                out[j] = j < n ? (float)(row[j] / sum) : 0.0f;
        }
}

int tfm_model_attention(struct tfm_model *m, int S, int T, const int32_t *src,
                        const int32_t *tgt, float *cross, float *enc_self, float *dec_self,
                        struct tfm_error *err)
{
    struct tfm_loss l;
    if (stage(m, 1, S, T, src, tgt, &l, err) < 0)
        return -1;
    if (l.src_tokens != S || l.tokens != T)
        return tfm_fail(err, "attention: padding inside %d source / %d target tokens", S, T);
    struct tfm_backend *be = m->be;
    struct fwd f = {0, 0, 1, S, T, 0};
    /* Layers that share activation sets (an inference model, carve) hold layer k's only
     * after a pass that stops at k: then one such pass per layer and side. */
    int redo = layer_sets(m->N, m->inference) < m->N;
    if (!redo)
        dec_forward(m, &f, enc_forward(m, &f));
    int D = m->D, H = m->H, dk = m->dk, L = S > T ? S : T;
    /* the queries and keys of one layer, (L,3D) each, and one row of scores */
    float *qk = malloc((size_t)2 * L * 3 * D * sizeof *qk);
    double *row = malloc((size_t)L * sizeof *row);
    if (!qk || !row) {
        free(qk);
        free(row);
        return tfm_fail(err, "attention: out of memory for %d x %d tokens", S, T);
    }
    float *a = qk, *b = qk + (size_t)L * 3 * D;
    double scale = 1.0 / sqrt((double)dk);
    for (int k = 0; k < m->N; k++) {
        struct fwd upto = f;
        upto.layers = k + 1;
        if (enc_self) {
            if (redo)
                enc_forward(m, &upto);
            be->download_act(be, a, m->a.enc[k].qkv, (size_t)S * 3 * D);
            attn_probs(a, 3 * D, a + D, 3 * D, H, S, S, dk, 0, scale, row,
                       enc_self + (size_t)k * H * S * S);
        }
        if (redo)
            dec_forward(m, &upto, enc_forward(m, &f));
        const struct dec_a *d = &m->a.dec[k];
        be->download_act(be, a, d->q, (size_t)T * D);
        be->download_act(be, b, d->kv, (size_t)S * 2 * D);
        attn_probs(a, D, b, 2 * D, H, T, S, dk, 0, scale, row, cross + (size_t)k * H * T * S);
        if (dec_self) {
            be->download_act(be, a, d->qkv, (size_t)T * 3 * D);
            attn_probs(a, 3 * D, a + D, 3 * D, H, T, T, dk, 1, scale, row,
                       dec_self + (size_t)k * H * T * T);
        }
    }
    free(qk);
    free(row);
    return 0;
}

/* ---- incremental decoding ------------------------------------------------------------------ */

struct tfm_decoder {
    struct tfm_model *m;
    int max_sent, max_src, max_rows, max_steps;
    int B, S;                   /* sources of this call */
    int rows, t;                /* live rows, steps taken */
    /* Self-attention keys and values, per layer (max_steps, max_rows, 2D): at [j][s] the
     * K|V of position j of the row that was in slot s at step j.  A row's history is the
     * slot of each of its positions, anc (max_rows, max_steps): selecting rows copies
     * these indexes, never the keys and values. */
    float **kvc;
    float **ckv;                /* per layer (B*S, 2D) encoder K|V */
    float *x, *u, *qkv, *o, *tmp, *q, *h, *logits, *mean, *rstd;
    float *wpack;               /* the output embedding laid out by be->out_pack, or NULL */
    int32_t *tok, *self_len, *row_src, *cross_len;   /* device (max_rows) */
    int32_t *anc;               /* device (max_rows, max_steps) */
    int32_t *anc_host, *anc_next;   /* host (max_rows, max_steps): now, and for select */
    int32_t *src_len_host;      /* (max_sent) */
    int32_t *hbuf;              /* host staging (max_rows) */
    float *host_lp;             /* (max_rows, V) host, for tfm_decoder_step_top */
    size_t anc_cap, anc_next_cap, sent_cap, hbuf_cap, host_lp_cap;  /* elements */
    void *mem;
    size_t mem_bytes;
};

void tfm_decoder_free(struct tfm_decoder *d)
{
    if (!d)
        return;
    if (d->mem)
        d->m->be->free(d->m->be, d->mem);
    free(d->kvc);
    free(d->anc_host);
    free(d->anc_next);
    free(d->ckv);
    free(d->src_len_host);
    free(d->hbuf);
    free(d->host_lp);
    free(d);
}

static size_t dec_carve(struct tfm_decoder *d, char *base)
{
    struct tfm_model *m = d->m;
    size_t off = 0;
    int64_t D = m->D, R = d->max_rows;
    size_t act = m->be->act_size;   /* activations: the backend's element size */
    for (int l = 0; l < m->N; l++) {
        TAKEA(d->kvc[l], R * d->max_steps * 2 * D);
        TAKEA(d->ckv[l], (int64_t)d->max_sent * d->max_src * 2 * D);
    }
    TAKEA(d->x, R * D);
    TAKEA(d->u, R * D);
    TAKEA(d->qkv, R * 3 * D);
    TAKEA(d->o, R * D);
    TAKEA(d->tmp, R * D);
    TAKEA(d->q, R * D);
    TAKEA(d->h, R * m->F);
    TAKEA(d->logits, R * m->V);
    if (m->be->out_pack)
        TAKE(d->wpack, float, m->be->out_pack_floats(m->V, m->D));
    TAKE(d->mean, float, R);
    TAKE(d->rstd, float, R);
    TAKE(d->tok, int32_t, R);
    TAKE(d->self_len, int32_t, R);
    TAKE(d->row_src, int32_t, R);
    TAKE(d->cross_len, int32_t, R);
    TAKE(d->anc, int32_t, R * d->max_steps);
    return off;
}

struct tfm_decoder *tfm_decoder_create(struct tfm_model *m, int max_sent, int max_src,
                                       int max_rows, int max_steps, struct tfm_error *err)
{
    struct tfm_decoder *d = calloc(1, sizeof *d);
    if (!d) {
        tfm_fail(err, "out of memory");
        return NULL;
    }
    d->m = m;
    d->kvc = calloc((size_t)m->N + 1, sizeof *d->kvc);
    d->ckv = calloc((size_t)m->N + 1, sizeof *d->ckv);
    if (!d->kvc || !d->ckv) {
        tfm_fail(err, "out of memory");
        tfm_decoder_free(d);
        return NULL;
    }
    if (tfm_decoder_reshape(d, max_sent, max_src, max_rows, max_steps, err)) {
        tfm_decoder_free(d);
        return NULL;
    }
    return d;
}


/* A decoder state that does not fit: its size and what it grows with, the hypotheses in
 * flight (the sentences of a batch times the beam, which a config may set to 4096) and
 * the steps, so that a beam too large for the memory is seen as the cause. */
static int dec_too_big(struct tfm_error *err, size_t bytes, int rows, int steps)
{
    return tfm_error_prefix(err, "decoder state of %.1f MiB for %d hypotheses (sentences x "
                            "beam) of %d steps", bytes / 1048576.0, rows, steps);
}

int tfm_decoder_reshape(struct tfm_decoder *d, int max_sent, int max_src, int max_rows,
                        int max_steps, struct tfm_error *err)
{
    struct tfm_model *m = d->m;
    d->max_sent = d->max_rows = 0;          /* unusable (every call refused) until done */
    if (max_sent < 1 || max_src < 1 || max_rows < 1 || max_steps < 1)
        return tfm_fail(err, "decoder sizes must be positive");
    if (max_steps > m->L || max_src > m->L)
        return tfm_fail(err, "decoder: %d steps / %d source tokens exceed max_len %d",
                        max_steps, max_src, m->L);
    if (max_src > m->M)
        return tfm_fail(err, "decoder: sources of %d tokens exceed the model's token budget %lld",
                        max_src, (long long)m->M);
    d->max_src = max_src;
    d->max_steps = max_steps;
    d->B = d->S = d->rows = d->t = 0;
    size_t cells = (size_t)max_rows * max_steps;
    if (tfm_grow(&d->anc_host, &d->anc_cap, cells, sizeof(int32_t)) ||
        tfm_grow(&d->anc_next, &d->anc_next_cap, cells, sizeof(int32_t)) ||
        tfm_grow(&d->src_len_host, &d->sent_cap, (size_t)max_sent, sizeof(int32_t)) ||
        tfm_grow(&d->hbuf, &d->hbuf_cap, (size_t)max_rows * 2, sizeof(int32_t)))
        return tfm_fail(err, "out of memory for %d rows of %d steps", max_rows, max_steps);
    if (d->host_lp_cap < (size_t)max_rows * m->V) {  /* made again on demand */
        free(d->host_lp);
        d->host_lp = NULL;
        d->host_lp_cap = 0;
    }
    /* the device memory is kept when the new layout fits in it: no allocation, and no
     * fresh pages for the kernel to clear, from one batch to the next */
    d->max_rows = max_rows;                 /* dec_carve's sizes */
    d->max_sent = max_sent;
    size_t bytes = dec_carve(d, NULL);
    d->max_sent = d->max_rows = 0;
    if (bytes > d->mem_bytes) {
        /* by half again at least: batches of more rows, one after another, reallocate
         * only a few times */
        size_t want = d->mem_bytes ? d->mem_bytes / 2 * 3 : 0;
        want = want > bytes ? want : bytes;
        if (d->mem)
            m->be->free(m->be, d->mem);
        d->mem_bytes = 0;
        if (!(d->mem = m->be->alloc(m->be, want, err)) &&
            (want == bytes || !(d->mem = m->be->alloc(m->be, want = bytes, err))))
            return dec_too_big(err, bytes, max_rows, max_steps);
        d->mem_bytes = want;
    }
    if (m->be->reserve(m->be, max_steps, max_steps > max_src ? max_steps : max_src, err) < 0)
        return dec_too_big(err, bytes, max_rows, max_steps);
    d->max_rows = max_rows;
    d->max_sent = max_sent;
    dec_carve(d, d->mem);
    return 0;
}

int tfm_decoder_steps(const struct tfm_decoder *d) { return d->t; }

int tfm_decoder_encode(struct tfm_decoder *d, int B, int S, const int32_t *src,
                       struct tfm_error *err)
{
    struct tfm_model *m = d->m;
    struct tfm_backend *be = m->be;
    if (B < 1 || S < 1 || B > d->max_sent || S > d->max_src)
        return tfm_fail(err, "decoder: %d sources of %d tokens: outside 1..%d sentences, "
                        "1..%d tokens", B, S, d->max_sent, d->max_src);
    if (row_lengths(src, B, S, m->V, "src", d->src_len_host, err) < 0)
        return -1;
    /* Encode in groups that fit the model's activation arena (M >= S tokens). */
    int G = (int)(m->M / S);
    for (int b0 = 0; b0 < B; b0 += G) {
        int Bg = B - b0 < G ? B - b0 : G;
        be->upload(be, m->a.src_len, d->src_len_host + b0, (size_t)Bg * sizeof(int32_t));
        be->upload(be, m->a.src, src + (size_t)b0 * S, (size_t)Bg * S * sizeof(int32_t));
        struct fwd f = {0, 0, Bg, S, 1, 0};
        const float *enc = enc_forward(m, &f);
        for (int l = 0; l < m->N; l++)
            linear(m, ACT(d->ckv[l], (int64_t)b0 * S * 2 * m->D), 2 * m->D, enc, m->D, Bg * S,
                   m->dec[l].cross.wkv, m->dec[l].cross.bkv);
    }
    if (d->wpack)       /* at every batch: the weights may have changed (validation) */
        be->out_pack(be, d->wpack, DATA(m->emb_out), m->V, m->D);
    d->B = B;
    d->S = S;
    d->rows = 0;
    d->t = 0;
    return 0;
}

/* Decoder block with R rows: x (R,D) updated in place; F writes tmp from u. */
static const float *dstep_in(struct tfm_decoder *d, const struct ln_p *ln, int R)
{
    struct tfm_model *m = d->m;
    if (m->cfg.norm == TFM_NORM_PRE) {
        m->be->layernorm_fwd(m->be, d->u, d->mean, d->rstd, d->x, DATA(ln->g), DATA(ln->b), R,
                             m->D, (float)m->cfg.ln_eps);
        return d->u;
    }
    return d->x;
}

static void dstep_out(struct tfm_decoder *d, const struct ln_p *ln, int R)
{
    struct tfm_model *m = d->m;
    struct tfm_backend *be = m->be;
    be->axpy(be, d->x, 1.0f, d->tmp, (size_t)R * m->D);
    if (m->cfg.norm == TFM_NORM_POST)
        be->layernorm_fwd(be, d->x, d->mean, d->rstd, d->x, DATA(ln->g), DATA(ln->b), R, m->D,
                          (float)m->cfg.ln_eps);
}

/* The decoder stack for one step of R rows: the last layer's output (R, D), before the
 * output projection, into *out. */
static int dec_hidden(struct tfm_decoder *d, int nrows, const int32_t *last_tok,
                      const int32_t *row_src, const float **out, struct tfm_error *err)
{
    struct tfm_model *m = d->m;
    struct tfm_backend *be = m->be;
    int D = m->D, R = nrows;
    if (d->B == 0)
        return tfm_fail(err, "decoder: step before encode");
    if (R < 1 || R > d->max_rows)
        return tfm_fail(err, "decoder: %d rows: outside 1..%d", R, d->max_rows);
    if (d->t > 0 && R != d->rows)
        return tfm_fail(err, "decoder: %d rows given, %d live", R, d->rows);
    if (d->t >= d->max_steps)
        return tfm_fail(err, "decoder: more than %d steps", d->max_steps);
    int32_t *h = d->hbuf;
    for (int r = 0; r < R; r++) {
        if (last_tok[r] < 0 || last_tok[r] >= m->V)
            return tfm_fail(err, "decoder: token %d out of the vocabulary", last_tok[r]);
        if (row_src[r] < 0 || row_src[r] >= d->B)
            return tfm_fail(err, "decoder: row %d: source %d out of 0..%d", r, row_src[r],
                            d->B - 1);
    }
    be->upload(be, d->tok, last_tok, (size_t)R * sizeof(int32_t));
    be->upload(be, d->row_src, row_src, (size_t)R * sizeof(int32_t));
    for (int r = 0; r < R; r++)             /* this step's keys go to slot r */
        d->anc_host[(size_t)r * d->max_steps + d->t] = r;
    be->upload(be, d->anc, d->anc_host, (size_t)R * d->max_steps * sizeof(int32_t));
    for (int r = 0; r < R; r++)
        h[r] = d->t + 1;
    be->upload(be, d->self_len, h, (size_t)R * sizeof(int32_t));
    for (int r = 0; r < R; r++)
        h[r] = d->src_len_host[row_src[r]];
    be->upload(be, d->cross_len, h, (size_t)R * sizeof(int32_t));

    be->embed_fwd(be, d->x, DATA(m->emb_tgt), d->tok, R, D, sqrtf((float)D),
                  m->pos_dec ? DATA(m->pos_dec) : m->pe, 1, d->t);
    float scale = 1.0f / sqrtf((float)m->dk);
    int64_t pstride = (int64_t)d->max_rows * 2 * D;   /* one position of the cache */
    for (int l = 0; l < m->N; l++) {
        struct dec_p *P = &m->dec[l];
        /* self-attention: this step's K, V into the cache, then attend to steps 0..t */
        const float *u = dstep_in(d, &P->ln1, R);
        linear(m, d->qkv, 3 * D, u, D, R, P->self.wqkv, P->self.bqkv);
        be->gather(be, ACT(d->kvc[l], d->t * pstride), 2 * D, ACT(d->qkv, D), 3 * D, NULL, R,
                   2 * D);
        be->attn_decode(be, R, m->H, m->dk, scale, d->qkv, 3 * D, d->kvc[l], ACT(d->kvc[l], D),
                        (int)pstride, 2 * D, NULL, d->anc, d->max_steps, d->self_len, d->o, D);
        linear(m, d->tmp, D, d->o, D, R, P->self.wo, P->self.bo);
        dstep_out(d, &P->ln1, R);
        /* encoder-decoder attention */
        u = dstep_in(d, &P->ln2, R);
        linear(m, d->q, D, u, D, R, P->cross.wq, P->cross.bq);
        be->attn_decode(be, R, m->H, m->dk, scale, d->q, D, d->ckv[l], ACT(d->ckv[l], D), 2 * D,
                        (int64_t)d->S * 2 * D, d->row_src, NULL, 0, d->cross_len, d->o, D);
        linear(m, d->tmp, D, d->o, D, R, P->cross.wo, P->cross.bo);
        dstep_out(d, &P->ln2, R);
        /* FFN */
        u = dstep_in(d, &P->ln3, R);
        be->gemm_bias(be, 0, 0, R, m->F, D, u, D, DATA(P->ffn.w1), m->F, DATA(P->ffn.b1), 1,
                      d->h, m->F);
        linear(m, d->tmp, D, d->h, m->F, R, P->ffn.w2, P->ffn.b2);
        dstep_out(d, &P->ln3, R);
    }
    const float *y = d->x;
    if (m->cfg.norm == TFM_NORM_PRE) {
        be->layernorm_fwd(be, d->u, d->mean, d->rstd, d->x, DATA(m->dfin.g), DATA(m->dfin.b), R,
                          D, (float)m->cfg.ln_eps);
        y = d->u;
    }
    *out = y;
    d->rows = R;
    d->t++;
    return 0;
}

/* The logits (R, V) of one step into d->logits. */
static int dec_logits(struct tfm_decoder *d, int nrows, const int32_t *last_tok,
                      const int32_t *row_src, struct tfm_error *err)
{
    struct tfm_model *m = d->m;
    struct tfm_backend *be = m->be;
    const float *y;
    if (dec_hidden(d, nrows, last_tok, row_src, &y, err))
        return -1;
    if (d->wpack)
        be->out_logits(be, d->logits, y, nrows, d->wpack, m->V, m->D);
    else
        be->gemm(be, 0, 1, nrows, m->V, m->D, 1.0f, y, m->D, DATA(m->emb_out), m->D, 0.0f,
                 d->logits, m->V);
    return 0;
}

int tfm_decoder_step(struct tfm_decoder *d, int nrows, const int32_t *last_tok,
                     const int32_t *row_src, float *logp, struct tfm_error *err)
{
    if (dec_logits(d, nrows, last_tok, row_src, err))
        return -1;
    struct tfm_backend *be = d->m->be;
    int V = d->m->V;
    /* straight into the caller's rows where they are the backend's activations */
    if (be->host_memory && be->act_size == sizeof(float)) {
        be->log_softmax(be, logp, d->logits, nrows, V);
    } else {
        be->log_softmax(be, d->logits, d->logits, nrows, V);
        be->download_act(be, logp, d->logits, (size_t)nrows * V);
    }
    return 0;
}

int tfm_decoder_step_top(struct tfm_decoder *d, int nrows, const int32_t *last_tok,
                         const int32_t *row_src, int k, const int32_t *ban, int nban,
                         int32_t also, float *top_lp, int32_t *top_tok, float *also_lp,
                         struct tfm_error *err)
{
    int V = d->m->V;
    if (k < 1 || k > V || also < 0 || also >= V)
        return tfm_fail(err, "decoder: %d best of %d tokens, token %d: out of range", k, V,
                        also);
    struct tfm_backend *be = d->m->be;
    if (d->wpack && be->out_top) {          /* the logits never leave the cache */
        const float *y;
        if (dec_hidden(d, nrows, last_tok, row_src, &y, err))
            return -1;
        be->out_top(be, d->logits, y, nrows, d->wpack, V, d->m->D, k, ban, nban, also,
                    top_lp, top_tok, also_lp);
        return 0;
    }
    if (dec_logits(d, nrows, last_tok, row_src, err))
        return -1;
    if (be->log_softmax_top) {
        be->log_softmax_top(be, d->logits, nrows, V, k, ban, nban, also, top_lp, top_tok,
                            also_lp);
        return 0;
    }
    /* every log-probability to the host, then the same selection there */
    if (!d->host_lp) {
        d->host_lp_cap = (size_t)d->max_rows * V;
        if (!(d->host_lp = malloc(d->host_lp_cap * sizeof(float))))
            return tfm_fail(err, "out of memory for %d rows of %d log-probabilities",
                            d->max_rows, V);
    }
    be->log_softmax(be, d->logits, d->logits, nrows, V);
    be->download_act(be, d->host_lp, d->logits, (size_t)nrows * V);
    for (int r = 0; r < nrows; r++) {
        const float *y = d->host_lp + (size_t)r * V;
        tfm_topk_row(y, 0.0f, V, k, ban, nban, NULL, 0, top_lp + (size_t)r * k, top_tok + (size_t)r * k);
        also_lp[r] = y[also];
    }
    return 0;
}

int tfm_decoder_select(struct tfm_decoder *d, int nrows, const int32_t *keep,
                       struct tfm_error *err)
{
    if (nrows < 0 || nrows > d->max_rows)
        return tfm_fail(err, "decoder: select of %d rows: outside 0..%d", nrows, d->max_rows);
    for (int i = 0; i < nrows; i++)
        if (keep[i] < 0 || keep[i] >= d->rows)
            return tfm_fail(err, "decoder: select: row %d keeps row %d of %d", i, keep[i],
                            d->rows);
    if (nrows > 0 && d->t > 0) {
        size_t len = (size_t)d->t * sizeof(int32_t);
        for (int i = 0; i < nrows; i++)
            memcpy(d->anc_next + (size_t)i * d->max_steps,
                   d->anc_host + (size_t)keep[i] * d->max_steps, len);
        int32_t *t = d->anc_host;
        d->anc_host = d->anc_next;
        d->anc_next = t;
    }
    d->rows = nrows;
    return 0;
}
