/* config.c: the table of config keys and the "key = value" parser and formatter (config.h).
 * Each key is defined once, in `keys` below; man/tfm-config.5 documents the same keys.
 * Not here: what the keys mean to the model (model.c) or the trainer (train.c).
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lines.h"
#include "util.h"

#define KEY_INT(n, def, lo, hi, doc) \
    { #n, TFM_CFG_INT, offsetof(struct tfm_config, n), def, lo, hi, NULL, doc }
#define KEY_NUM(n, def, lo, hi, doc) \
    { #n, TFM_CFG_NUM, offsetof(struct tfm_config, n), def, lo, hi, NULL, doc }
#define KEY_ENUM(n, def, choices, doc) \
    { #n, TFM_CFG_ENUM, offsetof(struct tfm_config, n), def, 0, 0, choices, doc }

static const struct tfm_config_key keys[] = {
    /* model shape */
    KEY_INT(layers, "6", 1, 64, "encoder layers = decoder layers (N)"),
    KEY_INT(d_model, "512", 2, 16384, "model width"),
    KEY_INT(d_ff, "2048", 1, 65536, "FFN inner width"),
    KEY_INT(heads, "8", 1, 256, "attention heads; d_k = d_v = d_model/heads"),
    KEY_INT(vocab, "0", 0, 1 << 24, "shared vocabulary size; 0: taken from the data"),
    KEY_INT(max_len, "256", 2, 65536, "longest sentence in tokens, eos/bos included"),
    KEY_ENUM(norm, "post", "post|pre", "layer norm after the residual add (post) or before the sub-layer (pre)"),
    KEY_ENUM(pos, "sinusoid", "sinusoid|learned", "position encodings"),
    KEY_INT(tie, "1", 0, 1, "1: one matrix for source, target embeddings and output; 0: three"),
    KEY_NUM(ln_eps, "1e-05", 1e-12, 1, "layer norm epsilon"),
    /* regularization */
    KEY_NUM(dropout, "0.1", 0, 0.99, "dropout on sub-layer outputs and embedding sums"),
    KEY_NUM(attn_dropout, "0", 0, 0.99, "dropout on attention weights"),
    KEY_NUM(relu_dropout, "0", 0, 0.99, "dropout on the FFN ReLU output"),
    KEY_NUM(label_smoothing, "0.1", 0, 0.99, "label smoothing epsilon (eps/V on every class)"),
    /* optimization */
    KEY_NUM(lr_scale, "1", 0, 1e6, "factor on the learning-rate schedule"),
    KEY_INT(warmup, "4000", 1, 100000000, "warmup steps of the schedule"),
    KEY_NUM(adam_beta1, "0.9", 0, 0.999999, "Adam beta1"),
    /* The optimizer computes in fp32: a beta2 above 0.9999999 is 1 there (its bias
     * correction then divides by 0), and an epsilon of 0, or below fp32's range, divides
     * 0 by 0 for every parameter whose gradient is 0 (an unused embedding row). */
    KEY_NUM(adam_beta2, "0.98", 0, 0.9999999, "Adam beta2"),
    KEY_NUM(adam_eps, "1e-09", 1e-30, 1, "Adam epsilon"),
    KEY_NUM(clip_norm, "0", 0, 1e9, "clip the gradient L2 norm to this; 0: off"),
    KEY_INT(tokens, "4096", 1, 1 << 30, "batch budget: padded tokens per side per batch"),
    KEY_INT(seed, "1", 0, 2147483647, "random seed (initialization, dropout)"),
    /* arithmetic */
    KEY_ENUM(precision, "auto", "auto|fp32|bf16", "fp32, or bf16 products and activations with fp32 statistics, master weights and Adam; auto: bf16 on CUDA, fp32 on the CPU"),
    /* decoding defaults: tfm-decode's --beam, --alpha, --max-len-b and --min-len take
     * these ranges too */
    KEY_INT(beam, "4", 1, 4096, "beam size"),
    KEY_NUM(alpha, "0.6", 0, 10, "length penalty exponent"),
    KEY_INT(max_len_b, "50", 0, 1 << 20, "output length limit: source length + max_len_b"),
    KEY_INT(min_len, "1", 0, 1 << 20, "shortest output: tokens before eos (1: never empty)"),
    /* training loop */
    KEY_INT(max_steps, "0", 0, 2147483647, "stop after this many updates; 0: no limit"),
    KEY_INT(save_every, "0", 0, 2147483647, "updates between checkpoints; 0: at the end only"),
    KEY_INT(keep, "0", 0, 1000000, "checkpoints kept; 0: all"),
};
#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

const struct tfm_config_key *tfm_config_keys(int *n)
{
    if (n)
        *n = NKEYS;
    return keys;
}

static const struct tfm_config_key *find_key(const char *name, size_t len)
{
    for (int i = 0; i < NKEYS; i++)
        if (strlen(keys[i].name) == len && memcmp(keys[i].name, name, len) == 0)
            return &keys[i];
    return NULL;
}

/* The choice index of value in "a|b|c", or -1. */
static int enum_index(const char *choices, const char *v)
{
    size_t vl = strlen(v);
    int i = 0;
    for (const char *p = choices;; i++) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == vl && memcmp(p, v, l) == 0)
            return i;
        if (!bar)
            return -1;
        p = bar + 1;
    }
}

/* Choice number i of "a|b|c" into buf. */
static void enum_name(const char *choices, int i, char *buf, size_t n)
{
    const char *p = choices;
    for (; i > 0 && p; i--) {
        p = strchr(p, '|');
        if (p)
            p++;
    }
    if (!p) {
        snprintf(buf, n, "?");
        return;
    }
    const char *bar = strchr(p, '|');
    size_t l = bar ? (size_t)(bar - p) : strlen(p);
    snprintf(buf, n, "%.*s", (int)l, p);
}

static void format_num(double x, char *buf, size_t n);

/* "key 'K': V is out of range [MIN, MAX]", the bounds as the table has them. */
static int out_of_range(const struct tfm_config_key *k, const char *v, struct tfm_error *err)
{
    char lo[32], hi[32];
    format_num(k->min, lo, sizeof lo);
    format_num(k->max, hi, sizeof hi);
    return tfm_fail(err, "key '%s': %s is out of range [%s, %s]", k->name, v, lo, hi);
}

/* Set key k from the NUL-terminated value v; message without place on failure. */
static int set_value(struct tfm_config *c, const struct tfm_config_key *k, const char *v,
                     struct tfm_error *err)
{
    char *field = (char *)c + k->offset;
    if (k->type == TFM_CFG_ENUM) {
        int i = enum_index(k->choices, v);
        if (i < 0)
            return tfm_fail(err, "key '%s': '%s' is not one of %s", k->name, v, k->choices);
        *(int *)field = i;
        return 0;
    }
    if (*v == '\0')
        return tfm_fail(err, "key '%s': empty value", k->name);
    if (k->type == TFM_CFG_INT) {
        long long n;
        int rc = tfm_parse_int(v, &n);
        if (rc == -1)
            return tfm_fail(err, "key '%s': '%s' is not an integer", k->name, v);
        if (rc || n < (long long)k->min || n > (long long)k->max)
            return out_of_range(k, v, err);
        *(int *)field = (int)n;
        return 0;
    }
    double x;
    int rc = tfm_parse_double(v, &x);
    if (rc == -1)
        return tfm_fail(err, "key '%s': '%s' is not a number", k->name, v);
    if (rc || x < k->min || x > k->max)
        return out_of_range(k, v, err);
    *(double *)field = x;
    return 0;
}

void tfm_config_defaults(struct tfm_config *c)
{
    struct tfm_error err;
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NKEYS; i++)
        set_value(c, &keys[i], keys[i].def, &err);   /* defaults are valid (tested) */
}

/* Trim spaces and tabs from both ends of [*b, *e). */
static void trim(const char **b, const char **e)
{
    while (*b < *e && (**b == ' ' || **b == '\t' || **b == '\r'))
        (*b)++;
    while (*e > *b && ((*e)[-1] == ' ' || (*e)[-1] == '\t' || (*e)[-1] == '\r'))
        (*e)--;
}

/* Apply one "key = value" in [b, e) (no newline).  Message without place. */
static int apply_line(struct tfm_config *c, const char *b, const char *e, struct tfm_error *err)
{
    const char *eq = memchr(b, '=', (size_t)(e - b));
    char q[80];     /* input quoted in a message: escaped, a binary file's bytes too */
    if (!eq)
        return tfm_fail(err, "expected 'key = value', got '%s'",
                        tfm_quote(q, sizeof q, b, (size_t)(e - b)));
    const char *kb = b, *ke = eq, *vb = eq + 1, *ve = e;
    trim(&kb, &ke);
    trim(&vb, &ve);
    if (kb == ke)
        return tfm_fail(err, "missing key before '='");
    const struct tfm_config_key *k = find_key(kb, (size_t)(ke - kb));
    if (!k)
        return tfm_fail(err, "key '%s': unknown key", tfm_quote(q, sizeof q, kb, (size_t)(ke - kb)));
    /* a NUL byte in a key makes it unknown, quoted as \x00; in a value it would end the
     * value early (set_value reads a C string), and the message names the key */
    if (memchr(vb, '\0', (size_t)(ve - vb)))
        return tfm_fail(err, "key '%s': NUL byte in value", k->name);
    char v[256];
    if ((size_t)(ve - vb) >= sizeof v)
        return tfm_fail(err, "key '%s': value too long", k->name);
    memcpy(v, vb, (size_t)(ve - vb));
    v[ve - vb] = '\0';
    return set_value(c, k, v, err);
}

int tfm_config_parse(struct tfm_config *c, const char *text, size_t n, const char *name,
                     struct tfm_error *err)
{
    const char *p = text, *end = text + n;
    /* a UTF-8 byte order mark, which some editors put first: invisible in the message
     * about the first key it would otherwise be part of ("key 'layers': unknown key") */
    if (n >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
        p += 3;
    for (int line = 1; p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *hash = memchr(p, '#', (size_t)(le - p));
        const char *b = p, *e = hash ? hash : le;
        trim(&b, &e);
        if (b < e) {
            if (apply_line(c, b, e, err) < 0)
                return tfm_error_prefix(err, "%s:%d", name, line);
        }
        p = nl ? nl + 1 : end;
    }
    return 0;
}

int tfm_config_load(struct tfm_config *c, const char *path, struct tfm_error *err)
{
    /* "-": standard input, named as the stream reader names it */
    int in = strcmp(path, "-") == 0;
    if (in)
        path = "<stdin>";
    FILE *f = in ? stdin : fopen(path, "rb");
    if (!f)
        return tfm_fail(err, "%s: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        if (!in)
            fclose(f);
        return tfm_fail(err, "%s: out of memory", path);
    }
    int e = 0;          /* errno of a failed read (EISDIR for a directory) */
    for (;;) {
        if (n == cap) {
            if (cap >= (1u << 20)) {
                free(buf);
                if (!in)
                    fclose(f);
                return tfm_fail(err, "%s: 1 MiB or more: not a config file", path);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                if (!in)
                    fclose(f);
                return tfm_fail(err, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        errno = 0;
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            e = errno;
            break;
        }
    }
    int bad = ferror(f);
    if (!in)
        fclose(f);
    if (bad) {
        free(buf);
        return tfm_fail(err, "%s: %s", path, e ? strerror(e) : "read error");
    }
    int rc = tfm_config_parse(c, buf, n, path, err);
    free(buf);
    return rc;
}

int tfm_config_set(struct tfm_config *c, const char *kv, const char *where,
                   struct tfm_error *err)
{
    const char *e = kv + strlen(kv);
    if (memchr(kv, '\n', (size_t)(e - kv)))
        return tfm_fail(err, "%s %s: newline in value", where, kv);
    if (apply_line(c, kv, e, err) < 0)
        return tfm_error_prefix(err, "%s %s", where, kv);
    return 0;
}

int tfm_config_check(const struct tfm_config *c, int need_vocab, struct tfm_error *err)
{
    if (c->d_model % c->heads != 0)
        return tfm_fail(err, "d_model %d is not divisible by heads %d", c->d_model, c->heads);
    if (c->pos == TFM_POS_SINUSOID && c->d_model % 2 != 0)
        return tfm_fail(err, "d_model %d must be even for sinusoidal positions", c->d_model);
    if (need_vocab && c->vocab < 4)
        return tfm_fail(err, "vocab %d: need at least 4 ids (pad, unk, bos, eos)", c->vocab);
    if (c->tokens < c->max_len)
        return tfm_fail(err, "tokens %d is less than max_len %d: a longest sentence would not fit",
                        c->tokens, c->max_len);
    return 0;
}

/* The shortest of %.15g..%.17g that reads back as x. */
static void format_num(double x, char *buf, size_t n)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

static void format_value(const struct tfm_config *c, const struct tfm_config_key *k, char *buf,
                         size_t n)
{
    const char *field = (const char *)c + k->offset;
    if (k->type == TFM_CFG_INT)
        snprintf(buf, n, "%d", *(const int *)field);
    else if (k->type == TFM_CFG_NUM)
        format_num(*(const double *)field, buf, n);
    else
        enum_name(k->choices, *(const int *)field, buf, n);
}

int tfm_config_get(const struct tfm_config *c, const char *key, char *buf, size_t n)
{
    const struct tfm_config_key *k = find_key(key, strlen(key));
    if (!k)
        return -1;
    format_value(c, k, buf, n);
    return 0;
}

char *tfm_config_format(const struct tfm_config *c)
{
    size_t cap = (size_t)NKEYS * 96 + 1, len = 0;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    for (int i = 0; i < NKEYS; i++) {
        char v[64];
        format_value(c, &keys[i], v, sizeof v);
        int w = snprintf(out + len, cap - len, "%s = %s\n", keys[i].name, v);
        if (w < 0 || (size_t)w >= cap - len) {
            free(out);
            return NULL;
        }
        len += (size_t)w;
    }
    return out;
}
