/* tree.c: PTB trees -- parsing, printing, linearization and restoration (see tree.h).
 */
#include "tree.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tfm_tree_init(struct tfm_tree *t)
{
    memset(t, 0, sizeof *t);
    t->first = -1;
}

void tfm_tree_clear(struct tfm_tree *t)
{
    t->n = 0;
    t->slen = 0;
    t->first = -1;
}

void tfm_tree_free(struct tfm_tree *t)
{
    free(t->nodes);
    free(t->str);
    tfm_tree_init(t);
}

static int32_t add_str(struct tfm_tree *t, const char *s, size_t len, struct tfm_error *err)
{
    if (t->slen + len + 1 > t->scap) {
        size_t c = t->scap ? t->scap : 256;
        while (c < t->slen + len + 1)
            c *= 2;
        if (c > INT32_MAX)
            return tfm_fail(err, "tree too large");
        char *n = realloc(t->str, c);
        if (!n)
            return tfm_fail(err, "out of memory");
        t->str = n;
        t->scap = c;
    }
    int32_t off = (int32_t)t->slen;
    memcpy(t->str + t->slen, s, len);
    t->str[t->slen + len] = '\0';
    t->slen += len + 1;
    return off;
}

/* A new node (label, word or -1), unlinked.  Returns its index or -1. */
static int32_t add_node(struct tfm_tree *t, int32_t label, int32_t word, struct tfm_error *err)
{
    if (t->n == t->cap) {
        int32_t c = t->cap ? t->cap * 2 : 64;
        if (c <= t->cap)
            return tfm_fail(err, "tree too large");
        struct tfm_tree_node *n = realloc(t->nodes, (size_t)c * sizeof *n);
        if (!n)
            return tfm_fail(err, "out of memory");
        t->nodes = n;
        t->cap = c;
    }
    struct tfm_tree_node *nd = &t->nodes[t->n];
    nd->label = label;
    nd->word = word;
    nd->first = nd->next = -1;
    return t->n++;
}

static int is_sep(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* ---- parsing ------------------------------------------------------------------------- */

#define MAX_DEPTH 4096

/* "column C: reason" for a problem at text[off], C counted from 1 on off's own line (from
 * the last newline before it, else from the start of text); *pos = off.  Returns -1. */
static int parse_fail(struct tfm_error *err, const char *text, size_t off, size_t *pos,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int parse_fail(struct tfm_error *err, const char *text, size_t off, size_t *pos,
                      const char *fmt, ...)
{
    char reason[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    size_t line = off;
    while (line > 0 && text[line - 1] != '\n')
        line--;
    *pos = off;
    return tfm_fail(err, "column %zu: %s", off - line + 1, reason);
}

int tfm_tree_parse(struct tfm_tree *t, const char *text, size_t len, size_t *pos, int flags,
                   struct tfm_error *err)
{
    int one = flags & TFM_TREE_ONE;
    tfm_tree_clear(t);
    size_t start = *pos, i = *pos;
    /* the stack of open brackets: node index, last child, and whether a word was seen */
    static const int32_t none = -1;
    int32_t stack[MAX_DEPTH], last[MAX_DEPTH], word_pos[MAX_DEPTH];
    int depth = 0;
    int32_t top_last = -1;
    int ntop = 0;
    for (;;) {
        while (i < len && is_sep(text[i]))
            i++;
        if (i == len) {
            if (depth > 0) {    /* at the end of the last token */
                size_t e = len;
                while (e > start && is_sep(text[e - 1]))
                    e--;
                return parse_fail(err, text, e, pos,
                                  "unbalanced brackets: %d left open at the end", depth);
            }
            *pos = i;
            return one ? (ntop > 0) : 0;
        }
        if (one && depth == 0 && ntop == 1) {
            *pos = i;
            return 1;
        }
        char c = text[i];
        if (c == '\0')     /* labels and words are C strings: one would end there */
            return parse_fail(err, text, i, pos, "a NUL byte");
        if (c == '(') {
            if (depth == MAX_DEPTH)
                return parse_fail(err, text, i, pos, "brackets nested deeper than %d",
                                  MAX_DEPTH);
            if (depth > 0 && word_pos[depth - 1] >= 0)
                return parse_fail(err, text, i, pos,
                                  "a bracket after the word of a preterminal");
            size_t b = ++i;
            while (i < len && !is_sep(text[i]) && text[i] != '(' && text[i] != ')' && text[i])
                i++;
            int32_t lab = add_str(t, text + b, i - b, err);
            if (lab < 0)
                return -1;
            int32_t nd = add_node(t, lab, -1, err);
            if (nd < 0)
                return -1;
            if (depth > 0) {
                if (last[depth - 1] < 0)
                    t->nodes[stack[depth - 1]].first = nd;
                else
                    t->nodes[last[depth - 1]].next = nd;
                last[depth - 1] = nd;
            } else {
                if (top_last < 0)
                    t->first = nd;
                else
                    t->nodes[top_last].next = nd;
                top_last = nd;
                ntop++;
            }
            stack[depth] = nd;
            last[depth] = none;
            word_pos[depth] = -1;
            depth++;
            if ((flags & TFM_TREE_EMPTY_WORDS) && i < len && is_sep(text[i])) {
                /* EVALB reads the word after the label's whitespace up to the next
                 * separator or bracket; when a ')' follows, the bracket is a
                 * preterminal, even with nothing read */
                size_t j = i;
                while (j < len && is_sep(text[j]))
                    j++;
                if (j < len && text[j] == ')') {
                    int32_t w = add_str(t, "", 0, err);
                    if (w < 0)
                        return -1;
                    t->nodes[nd].word = w;
                    word_pos[depth - 1] = (int32_t)j;
                    i = j;
                }
            }
        } else if (c == ')') {
            if (depth == 0)
                return parse_fail(err, text, i, pos,
                                  "unbalanced brackets: ')' with no '(' open");
            depth--;
            i++;
        } else {
            size_t b = i;
            while (i < len && !is_sep(text[i]) && text[i] != '(' && text[i] != ')' && text[i])
                i++;
            if (depth == 0)
                return parse_fail(err, text, b, pos, "a word outside brackets");
            struct tfm_tree_node *nd = &t->nodes[stack[depth - 1]];
            if (word_pos[depth - 1] >= 0)
                return parse_fail(err, text, b, pos, "more than one word in a bracket");
            if (nd->first >= 0)
                return parse_fail(err, text, b, pos, "a word beside brackets");
            int32_t w = add_str(t, text + b, i - b, err);
            if (w < 0)
                return -1;
            t->nodes[stack[depth - 1]].word = w;
            word_pos[depth - 1] = (int32_t)b;
        }
    }
}

/* The line (from 0) of offset off in text: the newlines before it, where the end of a
 * text that ends in a newline counts as its last line. */
static int64_t line_of(const char *text, size_t len, size_t off)
{
    int64_t ln = 0;
    for (size_t i = 0; i < off && i < len; i++)
        ln += text[i] == '\n';
    if (off >= len && len > 0 && text[len - 1] == '\n')
        ln--;
    return ln;
}

int tfm_tree_parse_next(struct tfm_tree *t, const char *text, size_t len, size_t *pos,
                        struct tfm_error *err)
{
    size_t at = *pos;
    int k = tfm_tree_parse(t, text, len, pos, TFM_TREE_ONE, err);
    if (k >= 0)
        return k;
    while (at < len && (text[at] == ' ' || text[at] == '\n' || text[at] == '\t'))
        at++;
    int64_t first = line_of(text, len, at), bad = line_of(text, len, *pos);
    if (bad == first)
        return tfm_error_prefix(err, "tree starting on line %lld", (long long)first + 1);
    char reason[sizeof err->msg];
    snprintf(reason, sizeof reason, "%s", err->msg);
    return tfm_fail(err, "tree starting on line %lld: line %lld, %s", (long long)first + 1,
                    (long long)bad + 1, reason);
}

/* ---- printing ------------------------------------------------------------------------ */

struct sbuf {
    char **p;
    size_t *cap;
    size_t len;
};

static int sb_put(struct sbuf *b, const char *s, size_t n, struct tfm_error *err)
{
    if (b->len + n + 1 > *b->cap) {
        size_t c = *b->cap ? *b->cap : 256;
        while (c < b->len + n + 1)
            c *= 2;
        char *np = realloc(*b->p, c);
        if (!np)
            return tfm_fail(err, "out of memory");
        *b->p = np;
        *b->cap = c;
    }
    memcpy(*b->p + b->len, s, n);
    b->len += n;
    (*b->p)[b->len] = '\0';
    return 0;
}

static int sb_str(struct sbuf *b, const char *s, struct tfm_error *err)
{
    return sb_put(b, s, strlen(s), err);
}

static int format_node(const struct tfm_tree *t, int32_t i, struct sbuf *b, int depth,
                       struct tfm_error *err)
{
    if (depth > MAX_DEPTH)
        return tfm_fail(err, "tree nested deeper than %d", MAX_DEPTH);
    if (sb_str(b, "(", err) < 0 || sb_str(b, tfm_tree_label(t, i), err) < 0)
        return -1;
    if (t->nodes[i].word >= 0) {
        if (sb_str(b, " ", err) < 0 || sb_str(b, tfm_tree_word(t, i), err) < 0)
            return -1;
    }
    for (int32_t c = t->nodes[i].first; c >= 0; c = t->nodes[c].next)
        if (sb_str(b, " ", err) < 0 || format_node(t, c, b, depth + 1, err) < 0)
            return -1;
    return sb_str(b, ")", err);
}

int64_t tfm_tree_format(const struct tfm_tree *t, char **out, size_t *cap,
                        struct tfm_error *err)
{
    struct sbuf b = {out, cap, 0};
    if (sb_put(&b, "", 0, err) < 0)
        return -1;
    for (int32_t i = t->first; i >= 0; i = t->nodes[i].next) {
        if (i != t->first && sb_str(&b, " ", err) < 0)
            return -1;
        if (format_node(t, i, &b, 0, err) < 0)
            return -1;
    }
    return (int64_t)b.len;
}

static int is_wrapper_label(const char *l)
{
    return l[0] == '\0' || strcmp(l, "TOP") == 0 || strcmp(l, "ROOT") == 0;
}

int32_t tfm_tree_wrapper(const struct tfm_tree *t, const char **label)
{
    int32_t r = t->first;
    if (r < 0 || t->nodes[r].next >= 0 || t->nodes[r].word >= 0 ||
        !is_wrapper_label(tfm_tree_label(t, r)))
        return -1;
    if (label)
        *label = tfm_tree_label(t, r);
    return r;
}

int tfm_tree_wrap(struct tfm_tree *t, const char *label, struct tfm_error *err)
{
    int32_t lab = add_str(t, label, strlen(label), err);
    if (lab < 0)
        return -1;
    int32_t w = add_node(t, lab, -1, err);
    if (w < 0)
        return -1;
    t->nodes[w].first = t->first;
    t->first = w;
    return 0;
}

/* ---- linearization ------------------------------------------------------------------- */

static int is_trace(const struct tfm_tree *t, int32_t i)
{
    return t->nodes[i].word >= 0 && strcmp(tfm_tree_label(t, i), "-NONE-") == 0;
}

/* Does node i dominate a word that is not a trace? */
static int has_words(const struct tfm_tree *t, int32_t i, int depth)
{
    if (t->nodes[i].word >= 0)
        return !is_trace(t, i);
    if (depth > MAX_DEPTH)
        return 0;
    for (int32_t c = t->nodes[i].first; c >= 0; c = t->nodes[c].next)
        if (has_words(t, c, depth + 1))
            return 1;
    return 0;
}

static size_t phrase_label_len(const char *l, int keep_function_tags)
{
    size_t n = strlen(l);
    if (keep_function_tags)
        return n;
    for (size_t k = 1; k < n; k++)
        if (l[k] == '-' || l[k] == '=')
            return k;
    return n;
}

static int linearize_node(const struct tfm_tree *t, int32_t i,
                          const struct tfm_linearize_opts *o, struct sbuf *w, struct sbuf *l,
                          int depth, struct tfm_error *err)
{
    if (!has_words(t, i, depth))
        return 0;
    const char *lab = tfm_tree_label(t, i);
    if (t->nodes[i].word >= 0) {
        if (w->len && sb_str(w, " ", err) < 0)
            return -1;
        if (sb_str(w, tfm_tree_word(t, i), err) < 0)
            return -1;
        if (l->len && sb_str(l, " ", err) < 0)
            return -1;
        return sb_str(l, o->keep_words ? tfm_tree_word(t, i) : o->keep_tags ? lab : "XX", err);
    }
    size_t ll = phrase_label_len(lab, o->keep_function_tags);
    if ((l->len && sb_str(l, " ", err) < 0) || sb_str(l, "(", err) < 0 ||
        sb_put(l, lab, ll, err) < 0)
        return -1;
    for (int32_t c = t->nodes[i].first; c >= 0; c = t->nodes[c].next)
        if (linearize_node(t, c, o, w, l, depth + 1, err) < 0)
            return -1;
    if (sb_str(l, " )", err) < 0 || sb_put(l, lab, ll, err) < 0)
        return -1;
    return 0;
}

int tfm_tree_linearize(const struct tfm_tree *t, const struct tfm_linearize_opts *o,
                       char **words, size_t *wcap, char **lin, size_t *lcap,
                       struct tfm_error *err)
{
    struct sbuf w = {words, wcap, 0}, l = {lin, lcap, 0};
    if (sb_put(&w, "", 0, err) < 0 || sb_put(&l, "", 0, err) < 0)
        return -1;
    int32_t first = t->first;
    /* skip outer wrappers: ( (S ...) ), (TOP (S ...)), (ROOT ...) */
    while (first >= 0 && t->nodes[first].next < 0 && t->nodes[first].word < 0 &&
           is_wrapper_label(tfm_tree_label(t, first)) && t->nodes[first].first >= 0)
        first = t->nodes[first].first;
    for (int32_t i = first; i >= 0; i = t->nodes[i].next)
        if (linearize_node(t, i, o, &w, &l, 0, err) < 0)
            return -1;
    return 0;
}

/* ---- restoration --------------------------------------------------------------------- */

static void link_child(struct tfm_tree *t, int32_t parent, int32_t *last, int32_t child)
{
    if (*last >= 0)
        t->nodes[*last].next = child;
    else if (parent >= 0)
        t->nodes[parent].first = child;
    else
        t->first = child;
    *last = child;
}

/* Remove phrases without words below first-sibling chain starting at *head. */
static int64_t prune(struct tfm_tree *t, int32_t *head, int depth)
{
    int64_t removed = 0;
    int32_t *link = head;
    while (*link >= 0) {
        int32_t i = *link;
        if (t->nodes[i].word < 0 && depth < MAX_DEPTH)
            removed += prune(t, &t->nodes[i].first, depth + 1);
        if (t->nodes[i].word < 0 && t->nodes[i].first < 0) {
            *link = t->nodes[i].next;
            removed++;
        } else {
            link = &t->nodes[i].next;
        }
    }
    return removed;
}

static const char *next_tok(const char *s, size_t len, size_t *i, size_t *tl)
{
    while (*i < len && is_sep(s[*i]))
        (*i)++;
    if (*i == len)
        return NULL;
    size_t b = *i;
    while (*i < len && !is_sep(s[*i]))
        (*i)++;
    *tl = *i - b;
    return s + b;
}

/* The length of s[0..n) up to its first bracket: a label or tag of a restored tree stops
 * there, so that the printed tree reads back as the same tree. */
static size_t before_bracket(const char *s, size_t n)
{
    size_t k = 0;
    while (k < n && s[k] != '(' && s[k] != ')')
        k++;
    return k;
}

/* An opening token "(X" or a preterminal: a token that adds to the tree. */
static int adds_content(const char *tok, size_t tl)
{
    return tok[0] == '(' ? tl > 1 : tok[0] != ')';
}

/* The constituents open during restoration: node and last child per level, and the last
 * top-level node. */
struct open_stack {
    int32_t *node, *last;
    size_t depth, cap;
    int32_t top_last;
};

/* Link nd as the last child of the innermost open constituent, or at top level. */
static void add_child(struct tfm_tree *t, struct open_stack *s, int32_t nd)
{
    if (s->depth)
        link_child(t, s->node[s->depth - 1], &s->last[s->depth - 1], nd);
    else
        link_child(t, -1, &s->top_last, nd);
}

/* Make node nd, whose last child is last, the innermost open constituent. */
static int push_open(struct open_stack *s, int32_t nd, int32_t last, struct tfm_error *err)
{
    if (s->depth == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 64;
        int32_t *nn = realloc(s->node, c * sizeof *nn);
        if (!nn)
            return tfm_fail(err, "out of memory");
        s->node = nn;
        int32_t *nl = realloc(s->last, c * sizeof *nl);
        if (!nl)
            return tfm_fail(err, "out of memory");
        s->last = nl;
        s->cap = c;
    }
    s->node[s->depth] = nd;
    s->last[s->depth] = last;
    s->depth++;
    return 0;
}

/* Open a constituent labelled lab[0..len) inside the innermost open one. */
static int open_phrase(struct tfm_tree *t, struct open_stack *s, const char *lab, size_t len,
                       struct tfm_error *err)
{
    int32_t l = add_str(t, lab, len, err);
    int32_t nd = l < 0 ? -1 : add_node(t, l, -1, err);
    if (nd < 0)
        return -1;
    add_child(t, s, nd);
    return push_open(s, nd, -1, err);
}

int tfm_tree_restore(struct tfm_tree *t, const char *lin, size_t lin_len, const char *words,
                     size_t words_len, const char *root, struct tfm_restore_stats *st,
                     struct tfm_error *err)
{
    struct tfm_restore_stats dummy;
    if (!st) {
        memset(&dummy, 0, sizeof dummy);
        st = &dummy;
    }
    if (!root)
        root = TFM_TREE_ROOT;
    tfm_tree_clear(t);
    struct open_stack s = {NULL, NULL, 0, 0, -1};
    size_t li = 0, wi = 0, tl, wl;
    int rc = -1;
    int32_t xx = add_str(t, "XX", 2, err);
    if (xx < 0)
        return -1;
    /* where the last token that adds to the tree ends: a close of the outermost
     * constituent before it is deferred */
    size_t content_end = 0;
    const char *tok;
    while ((tok = next_tok(lin, lin_len, &li, &tl)) != NULL)
        if (adds_content(tok, tl))
            content_end = li;
    li = 0;
    /* openings dropped for being too deep, and with them as many closes: a restored
     * tree, with its preterminals and an outer wrapper, stays within MAX_DEPTH brackets,
     * so that the parser reads it back and the scorer's recursion is bounded */
    int64_t too_deep = 0;
    while ((tok = next_tok(lin, lin_len, &li, &tl)) != NULL) {
        if (tok[0] == '(') {
            if (tl == 1) {
                st->dropped_open++;
            } else if (s.depth >= MAX_DEPTH - 2) {
                st->dropped_open++;
                too_deep++;
            } else if (open_phrase(t, &s, tok + 1, before_bracket(tok + 1, tl - 1), err) < 0) {
                goto done;
            }
        } else if (tok[0] == ')') {
            if (too_deep > 0) {
                too_deep--;
                st->dropped_close++;
            } else if (s.depth == 0) {
                st->dropped_close++;
            } else if (s.depth == 1 && li < content_end) {
                st->deferred_close++;
            } else {
                s.depth--;
            }
        } else {
            const char *w = next_tok(words, words_len, &wi, &wl);
            if (!w) {
                st->dropped_tags++;
                continue;
            }
            if (s.depth == 0) {
                if (open_phrase(t, &s, root, strlen(root), err) < 0)
                    goto done;
                st->opened_root++;
            }
            int32_t lab = add_str(t, tok, before_bracket(tok, tl), err);
            int32_t wo = lab < 0 ? -1 : add_str(t, w, wl, err);
            int32_t nd = wo < 0 ? -1 : add_node(t, lab, wo, err);
            if (nd < 0)
                goto done;
            add_child(t, &s, nd);
        }
    }
    st->closed_at_end += (int64_t)s.depth;
    /* unused source words: into the innermost open constituent, else the top-level one
     * (preterminals never stand at top level), else a root opened for them */
    size_t wpeek = wi;
    if (s.depth == 0 && next_tok(words, words_len, &wpeek, &wl) != NULL) {
        if (s.top_last >= 0) {
            int32_t tail = -1;
            for (int32_t c = t->nodes[s.top_last].first; c >= 0; c = t->nodes[c].next)
                tail = c;
            if (push_open(&s, s.top_last, tail, err) < 0)
                goto done;
        } else {
            if (open_phrase(t, &s, root, strlen(root), err) < 0)
                goto done;
            st->opened_root++;
        }
    }
    const char *w;
    while ((w = next_tok(words, words_len, &wi, &wl)) != NULL) {
        int32_t wo = add_str(t, w, wl, err);
        int32_t nd = wo < 0 ? -1 : add_node(t, xx, wo, err);
        if (nd < 0)
            goto done;
        add_child(t, &s, nd);
        st->added_words++;
    }
    st->removed_empty += prune(t, &t->first, 0);
    rc = 0;
done:
    free(s.node);
    free(s.last);
    return rc;
}

/* Preterminals in order (non-trace ones when skip_traces) into (*out, *n). */
static int collect_pre(const struct tfm_tree *t, int32_t head, int skip_traces, int32_t **out,
                       int64_t *n, int64_t *cap, int depth, struct tfm_error *err)
{
    for (int32_t i = head; i >= 0; i = t->nodes[i].next) {
        if (t->nodes[i].word >= 0) {
            if (skip_traces && is_trace(t, i))
                continue;
            if (*n == *cap) {
                int64_t c = *cap ? *cap * 2 : 64;
                int32_t *p = realloc(*out, (size_t)c * sizeof *p);
                if (!p)
                    return tfm_fail(err, "out of memory");
                *out = p;
                *cap = c;
            }
            (*out)[(*n)++] = i;
        } else if (depth < MAX_DEPTH &&
                   collect_pre(t, t->nodes[i].first, skip_traces, out, n, cap, depth + 1,
                               err) < 0) {
            return -1;
        }
    }
    return 0;
}

int tfm_tree_retag(struct tfm_tree *t, const struct tfm_tree *from, const char *only_tag,
                   struct tfm_error *err)
{
    int32_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0, ca = 0, cb = 0;
    int rc = -1;
    if (collect_pre(t, t->first, 0, &a, &na, &ca, 0, err) < 0 ||
        collect_pre(from, from->first, 1, &b, &nb, &cb, 0, err) < 0)
        goto done;
    rc = 0;
    if (na != nb)
        goto done;
    for (int64_t k = 0; k < na; k++) {
        if (only_tag && strcmp(tfm_tree_label(t, a[k]), only_tag) != 0)
            continue;
        const char *tag = tfm_tree_label(from, b[k]);
        int32_t off = add_str(t, tag, strlen(tag), err);
        if (off < 0) {
            rc = -1;
            goto done;
        }
        t->nodes[a[k]].label = off;
    }
    rc = 1;
done:
    free(a);
    free(b);
    return rc;
}

int tfm_tree_restore_like(struct tfm_tree *t, const char *lin, size_t lin_len,
                          const char *words, size_t words_len, const char *root,
                          const struct tfm_tree *gold, const char *only_tag,
                          struct tfm_error *err)
{
    const char *wrap = NULL;
    if (tfm_tree_restore(t, lin, lin_len, words, words_len, root, NULL, err) < 0 ||
        tfm_tree_retag(t, gold, only_tag, err) < 0)
        return -1;
    if (tfm_tree_wrapper(gold, &wrap) >= 0 && t->first >= 0 && tfm_tree_wrap(t, wrap, err) < 0)
        return -1;
    return 0;
}
