/* config.h: the configuration of a model and its training, as plain "key = value" text.
 *
 * Every key is defined once, in the table in config.c (name, type, default, range, doc),
 * and used by tfm-train and tfm-decode alike; man/tfm-config.5 documents each one.
 * A config is built from the defaults, then a file (configs/base.conf ...), then
 * "key=value" overrides (--set); tfm_config_format gives the effective config as text,
 * which a checkpoint stores and tfm_config_parse reads back, so nothing else is needed
 * to rebuild the model.
 * Text syntax: one "key = value" per line; '#' starts a comment; blank lines are ignored;
 * spaces, tabs and carriage returns around key and value are ignored, and so is a UTF-8
 * byte order mark at the start.  A key given twice: the last one wins.
 *
 * Adding a key (trainer and others): add a field to struct tfm_config below, in the
 * section where it belongs, and one row to the table `keys` in config.c (the macros
 * there: KEY_INT, KEY_NUM, KEY_ENUM), with its default, range and one-line doc; add it
 * to man/tfm-config.5.  Nothing else needs to change: parse, --set, format and
 * --print-config pick it up.
 */
#ifndef TFM_CONFIG_H
#define TFM_CONFIG_H

#include <stddef.h>

#include "error.h"

enum tfm_norm { TFM_NORM_POST = 0, TFM_NORM_PRE = 1 };
enum tfm_pos { TFM_POS_SINUSOID = 0, TFM_POS_LEARNED = 1 };
/* The arithmetic of the backend (tfm-config(5), precision): AUTO is the backend's own
 * choice (backend.h, tfm_backend_set_precision). */
enum tfm_precision { TFM_PRECISION_AUTO = 0, TFM_PRECISION_FP32 = 1, TFM_PRECISION_BF16 = 2 };

struct tfm_config {
    /* model shape */
    int layers;             /* N: encoder layers = decoder layers */
    int d_model;
    int d_ff;
    int heads;              /* d_k = d_v = d_model / heads */
    int vocab;              /* shared vocabulary size; 0 = taken from the data */
    int max_len;            /* longest sentence in tokens (eos/bos included); positions */
    int norm;               /* enum tfm_norm */
    int pos;                /* enum tfm_pos */
    int tie;                /* 1: src emb = tgt emb = output projection; 0: three matrices */
    double ln_eps;
    /* regularization */
    double dropout;         /* residual (sub-layer outputs) and embedding+position sums */
    double attn_dropout;    /* on attention weights */
    double relu_dropout;    /* on the FFN's ReLU output */
    double label_smoothing;
    /* optimization */
    double lr_scale;        /* factor on the paper's schedule */
    int warmup;             /* warmup steps */
    double adam_beta1, adam_beta2, adam_eps;
    double clip_norm;       /* clip the gradient's global L2 norm to this; 0: off */
    int tokens;             /* batch budget: padded source (and target) tokens per batch */
    int seed;               /* initialization and dropout */
    /* arithmetic */
    int precision;          /* enum tfm_precision */
    /* decoding defaults */
    int beam;
    double alpha;
    int max_len_b;          /* output length limit: source length + max_len_b */
    int min_len;            /* shortest output: tokens before eos */
    /* training loop (the trainer's keys go here) */
    int max_steps;          /* 0: no limit */
    int save_every;         /* steps between checkpoints; 0: only at the end */
    int keep;               /* checkpoints kept; 0: all */
};

enum tfm_config_type { TFM_CFG_INT = 1, TFM_CFG_NUM = 2, TFM_CFG_ENUM = 3 };

/* One row of the key table. */
struct tfm_config_key {
    const char *name;
    enum tfm_config_type type;
    size_t offset;          /* of the field in struct tfm_config (int or double) */
    const char *def;        /* default, as text */
    double min, max;        /* inclusive range (INT, NUM) */
    const char *choices;    /* ENUM: "post|pre" (the value stored is the index) */
    const char *doc;        /* one line */
};

/* The table: n keys in the order they are formatted. */
const struct tfm_config_key *tfm_config_keys(int *n);

/* Fill c with the defaults of every key. */
void tfm_config_defaults(struct tfm_config *c);
/* Apply "key = value" lines of text (n bytes) on top of c.  name is used in messages:
 * "NAME:LINE: key 'drpout': unknown key".  0 or -1 with err; c may be half-updated. */
int tfm_config_parse(struct tfm_config *c, const char *text, size_t n, const char *name,
                     struct tfm_error *err);
/* Read and apply a file (tfm_config_parse with the path as name; "-": standard input,
 * named "<stdin>"). */
int tfm_config_load(struct tfm_config *c, const char *path, struct tfm_error *err);
/* Apply one "key=value" override.  where names its origin in messages ("--set"). */
int tfm_config_set(struct tfm_config *c, const char *kv, const char *where,
                   struct tfm_error *err);
/* Check relations between keys (d_model divisible by heads, vocab > 0 when need_vocab,
 * ...).  0 or -1 with a message naming the keys. */
int tfm_config_check(const struct tfm_config *c, int need_vocab, struct tfm_error *err);
/* The effective config as "key = value\n" lines, every key, in table order; numbers are
 * printed so that parsing them back gives the same value.  malloc'd, NULL if out of memory. */
char *tfm_config_format(const struct tfm_config *c);
/* The value of one key as text into buf (n bytes).  -1 for an unknown key. */
int tfm_config_get(const struct tfm_config *c, const char *key, char *buf, size_t n);

#endif
