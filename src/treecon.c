/* treecon.c: the tree constraint on a search (treecon.h). */
#include "treecon.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum cls { C_NONE, C_OPEN, C_CLOSE, C_LEAF, C_CONT };

/* What a leaf or continuation piece gives in the text that restoration reads (tfm-score
 * --restore: a token starting with a bracket is a bracket, and an empty one is none):
 * T_BRACKET, it starts with '(' or ')' (after the "▁" of a leaf), T_BARE, a leaf piece
 * that is "▁" alone, which needs a continuation to be a token at all. */
enum { T_BRACKET = 1, T_BARE = 2 };

/* One row (a partial hypothesis): what it has written so far, as far as trees go. */
struct row {
    int32_t sent;           /* sentence of the call */
    int32_t j;              /* COPY: source pieces written; COUNT: words written */
    int32_t t;              /* tokens written */
    int16_t depth;          /* open constituents */
    int16_t run;            /* brackets opened since the last leaf or closing */
    uint8_t root_done;      /* the root has closed */
    uint8_t in_leaf;        /* the last token was part of a leaf (COUNT: may continue) */
    uint8_t bare;           /* COUNT: the leaf so far is "▁" alone */
    uint8_t dead;           /* wrote a token the constraint forbids (never chosen: -inf) */
};

struct tfm_treecon {
    enum tfm_tree_mode mode;
    int vocab;
    uint8_t *cls;           /* [vocab] enum cls */
    uint8_t *text;          /* [vocab] T_BRACKET | T_BARE */
    int32_t *close_of;      /* [vocab] the closing piece of an opening one, else -1 */
    int32_t *opens;         /* the opening pieces */
    int nopens;
    /* the search under way */
    struct tfm_step_model inner;
    int32_t *src;           /* [B * S] copy of the sources */
    int S;
    int32_t *n;             /* [B] source pieces (COPY) or words (COUNT) */
    int *max_len;           /* [B] */
    struct row *rows, *spare;
    int32_t *stack, *spare_stack;   /* [rows * MAX_DEPTH]: open piece, | LEAF_BIT once it
                                     * holds a leaf */
    int cap;
};

#define LEAF_BIT 0x40000000

static const char *const WORD_START = "\xe2\x96\x81";   /* U+2581, SentencePiece's "▁" */

static int starts_word(const char *p) { return strncmp(p, WORD_START, 3) == 0; }

const char *tfm_tree_mode_name(enum tfm_tree_mode m)
{
    return m == TFM_TREE_COPY ? "copy" : m == TFM_TREE_COUNT ? "count" : "off";
}

int tfm_tree_mode_parse(const char *s)
{
    if (!strcmp(s, "copy"))
        return TFM_TREE_COPY;
    if (!strcmp(s, "count"))
        return TFM_TREE_COUNT;
    if (!strcmp(s, "off"))
        return TFM_TREE_OFF;
    return -1;
}

void tfm_treecon_free(struct tfm_treecon *tc)
{
    if (!tc)
        return;
    free(tc->cls);
    free(tc->text);
    free(tc->close_of);
    free(tc->opens);
    free(tc->src);
    free(tc->n);
    free(tc->max_len);
    free(tc->rows);
    free(tc->spare);
    free(tc->stack);
    free(tc->spare_stack);
    free(tc);
}

struct tfm_treecon *tfm_treecon_create(const char *const *pieces, int vocab,
                                       enum tfm_tree_mode mode, struct tfm_error *err)
{
    if (mode != TFM_TREE_COPY && mode != TFM_TREE_COUNT) {
        tfm_fail(err, "tree constraint: no such mode");
        return NULL;
    }
    struct tfm_treecon *tc = calloc(1, sizeof *tc);
    if (!tc || !(tc->cls = calloc((size_t)vocab, 1)) || !(tc->text = calloc((size_t)vocab, 1)) ||
        !(tc->close_of = malloc((size_t)vocab * sizeof *tc->close_of)) ||
        !(tc->opens = malloc((size_t)vocab * sizeof *tc->opens))) {
        tfm_treecon_free(tc);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    tc->mode = mode;
    tc->vocab = vocab;
    for (int v = 0; v < vocab; v++) {
        tc->close_of[v] = -1;
        const char *p = pieces[v];
        if (!p || v == TFM_PAD_ID || v == TFM_UNK_ID || v == TFM_BOS_ID || v == TFM_EOS_ID)
            continue;
        if (starts_word(p) && p[3] == '(' && p[4])
            tc->cls[v] = C_OPEN;                /* its close is looked up below */
        else if (starts_word(p) && p[3] == ')' && p[4])
            tc->cls[v] = C_CLOSE;
        else
            tc->cls[v] = starts_word(p) ? C_LEAF : C_CONT;
        const char *body = starts_word(p) ? p + 3 : p;
        if (body[0] == '(' || body[0] == ')')
            tc->text[v] |= T_BRACKET;
        if (starts_word(p) && !body[0])
            tc->text[v] |= T_BARE;
    }
    /* pair each opening piece with the closing piece of its label: few brackets, so a
     * scan of the closing ones for each is cheap */
    for (int v = 0; v < vocab; v++) {
        if (tc->cls[v] != C_OPEN)
            continue;
        const char *label = pieces[v] + 4;
        for (int w = 0; w < vocab && tc->close_of[v] < 0; w++)
            if (tc->cls[w] == C_CLOSE && !strcmp(pieces[w] + 4, label))
                tc->close_of[v] = w;
        if (tc->close_of[v] >= 0)
            tc->opens[tc->nopens++] = v;
        else
            tc->cls[v] = C_NONE;                /* an opening with no closing: never */
    }
    if (!tc->nopens) {
        tfm_treecon_free(tc);
        tfm_fail(err, "tree constraint: the vocabulary has no bracket pieces (\"(X\" with "
                      "\")X\"): its targets are not linearized trees");
        return NULL;
    }
    return tc;
}

static int grow(struct tfm_treecon *tc, int rows, struct tfm_error *err)
{
    if (rows <= tc->cap)
        return 0;
    int cap = tc->cap ? tc->cap : 64;
    while (cap < rows)
        cap *= 2;
    size_t d = TFM_TREE_MAX_DEPTH;
    struct row *r = realloc(tc->rows, (size_t)cap * sizeof *r);
    if (r)
        tc->rows = r;
    struct row *s = realloc(tc->spare, (size_t)cap * sizeof *s);
    if (s)
        tc->spare = s;
    int32_t *k = realloc(tc->stack, (size_t)cap * d * sizeof *k);
    if (k)
        tc->stack = k;
    int32_t *q = realloc(tc->spare_stack, (size_t)cap * d * sizeof *q);
    if (q)
        tc->spare_stack = q;
    if (!r || !s || !k || !q)
        return tfm_fail(err, "out of memory for %d hypotheses", rows);
    tc->cap = cap;
    return 0;
}

/* The piece the row must copy next (COPY), or -1 when the source is all written. */
static int32_t next_piece(const struct tfm_treecon *tc, const struct row *r)
{
    return r->j < tc->n[r->sent] ? tc->src[(size_t)r->sent * tc->S + r->j] : -1;
}

/* Would the row, after one more token that leaves the pieces (or words) still to write
 * as they are and makes it `deeper` (0 or 1) constituents deeper, still have room before its maximum length for the least that completes a tree: one
 * token for each piece or word left and one to close each open constituent?  Keeping
 * this true at every step means that a row never runs into the forced eos unfinished
 * (t + least <= max_len holds from the first token to the last). */
static int fits(const struct tfm_treecon *tc, const struct row *r, int deeper)
{
    int64_t left = tc->n[r->sent] - r->j;
    return r->t + 1 + left + r->depth + deeper <= tc->max_len[r->sent];
}

/* The row's state after token x. */
static void advance(struct tfm_treecon *tc, struct row *r, int32_t *stk, int32_t x)
{
    if (r->dead)
        return;
    r->t++;
    int c = x >= 0 && x < tc->vocab ? tc->cls[x] : C_NONE;
    /* inside the root, the source's next piece is a leaf, whatever it looks like: mask
     * offers it as the copy even when it is a bracket piece ("(NP" as a word), which as
     * a bracket would be offered again and again, past every limit on brackets */
    if (tc->mode == TFM_TREE_COPY && r->depth > 0 && x == next_piece(tc, r))
        c = C_LEAF;
    r->bare = c == C_LEAF && x >= 0 && x < tc->vocab && (tc->text[x] & T_BARE);
    if (c == C_OPEN) {
        stk[r->depth++] = x;
        r->run++;
        r->in_leaf = 0;
    } else if (c == C_CLOSE) {
        r->run = 0;
        r->depth--;
        if (r->depth > 0)
            stk[r->depth - 1] |= LEAF_BIT;      /* the parent holds this child's leaves */
        else
            r->root_done = 1;
        r->in_leaf = 0;
    } else if ((c == C_LEAF || c == C_CONT) && r->depth > 0) {
        if (tc->mode == TFM_TREE_COPY || c == C_LEAF)
            r->j++;
        stk[r->depth - 1] |= LEAF_BIT;
        r->run = 0;
        r->in_leaf = 1;
    } else {
        r->dead = 1;
    }
}

/* Set logp[v] = -inf for every token v the row may not write next. */
static void mask(const struct tfm_treecon *tc, const struct row *r, const int32_t *stk,
                 float *logp)
{
    int V = tc->vocab;
    /* allowed tokens are one or two single ones and whole classes: decide per class,
     * then per token */
    int n = tc->n[r->sent];
    int leaf_ok = 0, cont_ok = 0, open_ok = 0, eos_ok = 0, gather = 0;
    int32_t copy_tok = -1, close_tok = -1;
    if (r->dead) {
        /* nothing */
    } else if (r->root_done) {
        eos_ok = r->j == n;
    } else {
        int left = r->j < n;                    /* pieces (COPY) or words (COUNT) to write */
        open_ok = left && r->depth < TFM_TREE_MAX_DEPTH && r->run < TFM_TREE_MAX_RUN &&
                  fits(tc, r, 1);
        if (r->depth > 0 && (stk[r->depth - 1] & LEAF_BIT) && (r->depth > 1 || !left))
            close_tok = tc->close_of[stk[r->depth - 1] & ~LEAF_BIT];
        if (tc->mode == TFM_TREE_COPY) {
            int32_t p = next_piece(tc, r);
            if (p >= 0 && tc->cls[p] == C_CONT && r->in_leaf) {
                copy_tok = p;                   /* a word is finished before anything else */
                open_ok = 0;
                close_tok = -1;
            } else if (p >= 0 && r->depth > 0) {
                copy_tok = p;                   /* a word starts: it gathers the mass below */
                gather = 1;
            }
        } else if (r->bare) {
            /* "▁" alone is no token yet: a continuation that makes one, and nothing
             * else (room for it was checked when the "▁" came) */
            open_ok = 0;
            close_tok = -1;
            cont_ok = 2;
        } else {
            /* a leaf that restoration reads as a preterminal: not starting with a
             * bracket; "▁" alone only with room for its continuation */
            leaf_ok = r->depth > 0 && left ? 1 + fits(tc, r, 0) : 0;
            cont_ok = r->in_leaf && fits(tc, r, 0);     /* a longer leaf, no progress */
        }
    }
    /* COPY: which word comes is given, so the model's choice at a word boundary is
     * between a leaf (any leaf: the mass of every word start), an opening and a closing;
     * and the rest of a word, once begun, is certain (log-probability 0). */
    float copy_lp = 0;
    if (gather) {
        float mx = logp[copy_tok];
        for (int v = 0; v < V; v++)
            if (tc->cls[v] == C_LEAF && logp[v] > mx)
                mx = logp[v];
        double sum = 0;
        for (int v = 0; v < V; v++)
            if (tc->cls[v] == C_LEAF || v == copy_tok)
                sum += exp((double)logp[v] - mx);
        copy_lp = mx > -INFINITY ? mx + (float)log(sum) : -INFINITY;   /* no NaN */
    }
    for (int v = 0; v < V; v++) {
        int c = tc->cls[v], yes;
        if (v == TFM_EOS_ID)
            yes = eos_ok;
        else if (v == copy_tok || v == close_tok)
            yes = 1;
        else if (c == C_OPEN)
            yes = open_ok;
        else if (c == C_LEAF)     /* COUNT: 1, a leaf that is a token; 2, "▁" alone too */
            yes = leaf_ok && !(tc->text[v] & T_BRACKET) &&
                  (leaf_ok == 2 || !(tc->text[v] & T_BARE));
        else if (c == C_CONT)     /* 2: a continuation that makes "▁" a token */
            yes = cont_ok == 1 || (cont_ok == 2 && !(tc->text[v] & T_BRACKET));
        else
            yes = 0;
        if (!yes)
            logp[v] = -INFINITY;
    }
    if (copy_tok >= 0)
        logp[copy_tok] = copy_lp;
}

static int tc_step(void *ctx, int nrows, const int32_t *last, const int32_t *row_src,
                   float *logp, struct tfm_error *err)
{
    struct tfm_treecon *tc = ctx;
    if (grow(tc, nrows, err))
        return -1;
    for (int i = 0; i < nrows; i++) {
        struct row *r = &tc->rows[i];
        int32_t *stk = tc->stack + (size_t)i * TFM_TREE_MAX_DEPTH;
        if (last[i] == TFM_BOS_ID) {            /* the first step: a new row */
            memset(r, 0, sizeof *r);
            r->sent = row_src[i];
        } else {
            advance(tc, r, stk, last[i]);
        }
    }
    if (tc->inner.step(tc->inner.ctx, nrows, last, row_src, logp, err))
        return -1;
    for (int i = 0; i < nrows; i++)
        mask(tc, &tc->rows[i], tc->stack + (size_t)i * TFM_TREE_MAX_DEPTH,
             logp + (size_t)i * tc->vocab);
    return 0;
}

static int tc_select(void *ctx, int nrows, const int32_t *keep, struct tfm_error *err)
{
    struct tfm_treecon *tc = ctx;
    if (grow(tc, nrows, err))
        return -1;
    size_t d = TFM_TREE_MAX_DEPTH;
    for (int i = 0; i < nrows; i++) {
        tc->spare[i] = tc->rows[keep[i]];
        memcpy(tc->spare_stack + i * d, tc->stack + (size_t)keep[i] * d, d * sizeof(int32_t));
    }
    struct row *r = tc->rows;
    tc->rows = tc->spare;
    tc->spare = r;
    int32_t *s = tc->stack;
    tc->stack = tc->spare_stack;
    tc->spare_stack = s;
    return tc->inner.select(tc->inner.ctx, nrows, keep, err);
}

int tfm_treecon_begin(struct tfm_treecon *tc, const struct tfm_step_model *inner, int B, int S,
                      const int32_t *src, const int *max_len, struct tfm_step_model *out,
                      struct tfm_error *err)
{
    int32_t *s = realloc(tc->src, (size_t)B * S * sizeof *s);
    if (s)
        tc->src = s;
    int32_t *n = realloc(tc->n, (size_t)B * sizeof *n);
    if (n)
        tc->n = n;
    int *m = realloc(tc->max_len, (size_t)B * sizeof *m);
    if (m)
        tc->max_len = m;
    if (!s || !n || !m)
        return tfm_fail(err, "out of memory for a batch of %d sentences", B);
    memcpy(tc->src, src, (size_t)B * S * sizeof *s);
    memcpy(tc->max_len, max_len, (size_t)B * sizeof *m);
    tc->S = S;
    for (int b = 0; b < B; b++) {
        const int32_t *x = src + (size_t)b * S;
        int len = 0, words = 0;
        while (len < S && x[len] != TFM_EOS_ID && x[len] != TFM_PAD_ID) {
            /* unknown characters are pieces of their own inside a word (unk) */
            words += x[len] < tc->vocab && tc->cls[x[len]] != C_CONT && x[len] != TFM_UNK_ID;
            len++;
        }
        tc->n[b] = tc->mode == TFM_TREE_COPY ? len : words;
    }
    tc->inner = *inner;
    *out = (struct tfm_step_model){tc, inner->vocab, tc_step, tc_select, NULL};
    return 0;
}
