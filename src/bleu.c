/* bleu.c: sacreBLEU-compatible tokenization and corpus BLEU (see bleu.h), plus the UTF-8,
 * lowercasing, n-gram counting and interning helpers that chrf.c shares.
 *
 * Our own implementation, written from sacreBLEU's documented behaviour; the tokenizers are
 * re.sub passes over code points, emulated as left-to-right, non-overlapping scans (every
 * pattern matches a fixed number of characters).  At the end, BLEU as a scorer (score.h).
 * Not here: chrF (chrf.c), files and streams (text.c, hypread.c).
 */
#include "bleu.h"
#include "bootstrap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bleu_unicode.h"
#include "json.h"
#include "score.h"
#include "util.h"

/* ---- UTF-8 --------------------------------------------------------------------------- */

int64_t tfm_utf8_decode(const char *s, size_t len, uint32_t **cps, size_t *cap,
                        struct tfm_error *err)
{
    const unsigned char *p = (const unsigned char *)s;
    if (*cap < len + 1) {
        uint32_t *n = realloc(*cps, (len + 1) * sizeof *n);
        if (!n)
            return tfm_fail(err, "out of memory (%zu characters)", len);
        *cps = n;
        *cap = len + 1;
    }
    int64_t n = 0;
    size_t i = 0;
    while (i < len) {
        uint32_t c = p[i];
        int extra;
        uint32_t min;
        if (c < 0x80) {
            (*cps)[n++] = c;
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            extra = 1, min = 0x80, c &= 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            extra = 2, min = 0x800, c &= 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            extra = 3, min = 0x10000, c &= 0x07;
        } else {
            return tfm_fail(err, "invalid UTF-8 at byte %zu", i);
        }
        if (i + extra >= len)
            return tfm_fail(err, "invalid UTF-8 at byte %zu (truncated sequence)", i);
        for (int k = 1; k <= extra; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return tfm_fail(err, "invalid UTF-8 at byte %zu", i);
            c = (c << 6) | (p[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            return tfm_fail(err, "invalid UTF-8 at byte %zu", i);
        (*cps)[n++] = c;
        i += extra + 1;
    }
    return n;
}

int tfm_utf8_put(char *buf, uint32_t c)
{
    unsigned char *b = (unsigned char *)buf;
    if (c < 0x80) {
        b[0] = (unsigned char)c;
        return 1;
    } else if (c < 0x800) {
        b[0] = (unsigned char)(0xC0 | (c >> 6));
        b[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    } else if (c < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (c >> 12));
        b[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | (c >> 18));
    b[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    b[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    b[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

static int grow_cps(uint32_t **buf, size_t *cap, size_t need, struct tfm_error *err)
{
    if (*cap >= need)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 2 / sizeof(uint32_t))
            return tfm_fail(err, "line too long");
        c *= 2;
    }
    uint32_t *n = realloc(*buf, c * sizeof *n);
    if (!n)
        return tfm_fail(err, "out of memory (%zu characters)", c);
    *buf = n;
    *cap = c;
    return 0;
}

/* Python's Final_Sigma condition for U+03A3 at position i. */
static int final_sigma(const uint32_t *c, int64_t n, int64_t i)
{
    int64_t j;
    for (j = i - 1; j >= 0 && tfm_uni_is_case_ignorable(c[j]); j--)
        ;
    if (j < 0 || !tfm_uni_is_cased(c[j]))
        return 0;
    for (j = i + 1; j < n && tfm_uni_is_case_ignorable(c[j]); j++)
        ;
    return j == n || !tfm_uni_is_cased(c[j]);
}

int64_t tfm_text_lower(const uint32_t *cps, int64_t n, uint32_t **out, size_t *cap,
                       struct tfm_error *err)
{
    if (grow_cps(out, cap, (size_t)n * 3 + 1, err) < 0)
        return -1;
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (cps[i] == 0x3A3) {
            (*out)[m++] = final_sigma(cps, n, i) ? 0x3C2 : 0x3C3;
            continue;
        }
        uint32_t l[3];
        int k = tfm_uni_lower(cps[i], l);
        for (int q = 0; q < k; q++)
            (*out)[m++] = l[q];
    }
    return m;
}

int64_t tfm_text_rstrip(const uint32_t *cps, int64_t n)
{
    while (n > 0 && tfm_uni_is_space(cps[n - 1]))
        n--;
    return n;
}

/* ---- n-gram counter and interning ---------------------------------------------------- */

static uint64_t hash_key(const uint32_t *key, int n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) {
        h ^= key[i];
        h *= 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    return h;
}

void tfm_ngrams_clear(struct tfm_ngrams *t)
{
    if (t->used && t->e)
        memset(t->e, 0, t->cap * sizeof *t->e);
    t->used = 0;
}

void tfm_ngrams_free(struct tfm_ngrams *t)
{
    free(t->e);
    memset(t, 0, sizeof *t);
}

static struct tfm_ngram_entry *ngram_slot(struct tfm_ngram_entry *e, size_t cap,
                                          const uint32_t *key, int n)
{
    size_t i = (size_t)hash_key(key, n) & (cap - 1);
    for (;;) {
        if (e[i].n == 0 ||
            (e[i].n == n && memcmp(e[i].key, key, (size_t)n * sizeof *key) == 0))
            return &e[i];
        i = (i + 1) & (cap - 1);
    }
}

int tfm_ngrams_put(struct tfm_ngrams *t, const uint32_t *key, int n, int64_t inc, int mode,
                   struct tfm_error *err)
{
    if (n < 1 || n > TFM_NGRAM_MAX)
        return tfm_fail(err, "n-gram order %d out of range", n);
    if ((t->used + 1) * 2 > t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 256;
        struct tfm_ngram_entry *ne = calloc(nc, sizeof *ne);
        if (!ne)
            return tfm_fail(err, "out of memory (%zu n-grams)", nc);
        for (size_t i = 0; i < t->cap; i++)
            if (t->e[i].n)
                *ngram_slot(ne, nc, t->e[i].key, t->e[i].n) = t->e[i];
        free(t->e);
        t->e = ne;
        t->cap = nc;
    }
    struct tfm_ngram_entry *s = ngram_slot(t->e, t->cap, key, n);
    if (s->n == 0) {
        memset(s->key, 0, sizeof s->key);
        memcpy(s->key, key, (size_t)n * sizeof *key);
        s->n = n;
        s->count = inc;
        t->used++;
    } else if (mode == 0) {
        s->count += inc;
    } else if (inc > s->count) {
        s->count = inc;
    }
    return 0;
}

int64_t tfm_ngrams_get(const struct tfm_ngrams *t, const uint32_t *key, int n)
{
    if (!t->cap)
        return 0;
    const struct tfm_ngram_entry *s = ngram_slot(t->e, t->cap, key, n);
    return s->n ? s->count : 0;
}

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

void tfm_intern_clear(struct tfm_intern *t)
{
    if (t->slot)
        for (size_t i = 0; i < t->cap; i++)
            t->slot[i] = -1;
    t->n = 0;
}

void tfm_intern_free(struct tfm_intern *t)
{
    free(t->slot);
    free(t->str);
    free(t->len);
    memset(t, 0, sizeof *t);
}

static int64_t *intern_slot(int64_t *slot, size_t cap, const struct tfm_intern *t,
                            const char *s, size_t len)
{
    size_t i = (size_t)hash_bytes(s, len) & (cap - 1);
    for (;;) {
        int64_t id = slot[i];
        if (id < 0 || (t->len[id] == len && memcmp(t->str[id], s, len) == 0))
            return &slot[i];
        i = (i + 1) & (cap - 1);
    }
}

int64_t tfm_intern_id(struct tfm_intern *t, const char *s, size_t len, struct tfm_error *err)
{
    if ((size_t)(t->n + 1) * 2 > t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 256;
        int64_t *ns = malloc(nc * sizeof *ns);
        if (!ns)
            return tfm_fail(err, "out of memory (%zu tokens)", nc);
        for (size_t i = 0; i < nc; i++)
            ns[i] = -1;
        for (int64_t id = 0; id < t->n; id++)
            *intern_slot(ns, nc, t, t->str[id], t->len[id]) = id;
        free(t->slot);
        t->slot = ns;
        t->cap = nc;
    }
    if (t->n == t->cap_n) {
        int64_t nc = t->cap_n ? t->cap_n * 2 : 256;
        const char **nstr = realloc((void *)t->str, (size_t)nc * sizeof *nstr);
        if (!nstr)
            return tfm_fail(err, "out of memory (%lld tokens)", (long long)nc);
        t->str = nstr;
        size_t *nlen = realloc(t->len, (size_t)nc * sizeof *nlen);
        if (!nlen)
            return tfm_fail(err, "out of memory (%lld tokens)", (long long)nc);
        t->len = nlen;
        t->cap_n = nc;
    }
    int64_t *sl = intern_slot(t->slot, t->cap, t, s, len);
    if (*sl < 0) {
        t->str[t->n] = s;
        t->len[t->n] = len;
        *sl = t->n++;
    }
    return *sl;
}

/* ---- tokens -------------------------------------------------------------------------- */

void tfm_tokens_free(struct tfm_tokens *t)
{
    free(t->buf);
    free(t->off);
    memset(t, 0, sizeof *t);
}

static int tokens_reserve(struct tfm_tokens *t, size_t bytes, int64_t ntok,
                          struct tfm_error *err)
{
    if (bytes + 1 > t->cap) {
        size_t c = t->cap ? t->cap : 256;
        while (c < bytes + 1)
            c *= 2;
        char *n = realloc(t->buf, c);
        if (!n)
            return tfm_fail(err, "out of memory (%zu bytes)", c);
        t->buf = n;
        t->cap = c;
    }
    if (ntok + 1 > t->cap_n) {
        int64_t c = t->cap_n ? t->cap_n : 64;
        while (c < ntok + 1)
            c *= 2;
        int64_t *n = realloc(t->off, (size_t)c * sizeof *n);
        if (!n)
            return tfm_fail(err, "out of memory (%lld tokens)", (long long)c);
        t->off = n;
        t->cap_n = c;
    }
    return 0;
}

/* Split code points on Unicode whitespace (Python str.split()) into UTF-8 tokens. */
static int split_cps(const uint32_t *c, int64_t n, struct tfm_tokens *out,
                     struct tfm_error *err)
{
    out->len = 0;
    out->n = 0;
    if (tokens_reserve(out, (size_t)n * 4, n / 2 + 1, err) < 0)
        return -1;
    out->off[0] = 0;
    int64_t i = 0;
    while (i < n) {
        while (i < n && tfm_uni_is_space(c[i]))
            i++;
        if (i == n)
            break;
        while (i < n && !tfm_uni_is_space(c[i]))
            out->len += (size_t)tfm_utf8_put(out->buf + out->len, c[i++]);
        out->off[++out->n] = (int64_t)out->len;
    }
    out->buf[out->len] = '\0';
    return 0;
}

static int is_ascii_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* The paper's protocol: optional ##AT## splitting, ASCII lowercasing, ASCII whitespace. */
static int tokenize_pretok(const struct tfm_bleu_opts *o, const char *s, size_t len,
                           struct tfm_tokens *out, struct tfm_error *err)
{
    static const char at[] = " ##AT##-##AT## ";
    char *tmp = NULL;
    if (o->compound_split) {
        /* perl: s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g -- left to right, non-overlapping */
        size_t cap = len + 1 + (len / 3 + 1) * (sizeof at - 2);
        tmp = malloc(cap);
        if (!tmp)
            return tfm_fail(err, "out of memory (%zu bytes)", cap);
        size_t m = 0, i = 0;
        while (i < len) {
            if (i + 2 < len && !is_ascii_ws((unsigned char)s[i]) && s[i + 1] == '-' &&
                !is_ascii_ws((unsigned char)s[i + 2])) {
                tmp[m++] = s[i];
                memcpy(tmp + m, at, sizeof at - 1);
                m += sizeof at - 1;
                tmp[m++] = s[i + 2];
                i += 3;
            } else {
                tmp[m++] = s[i++];
            }
        }
        s = tmp;
        len = m;
    }
    out->len = 0;
    out->n = 0;
    if (tokens_reserve(out, len, (int64_t)len / 2 + 1, err) < 0) {
        free(tmp);
        return -1;
    }
    out->off[0] = 0;
    size_t i = 0;
    while (i < len) {
        while (i < len && is_ascii_ws((unsigned char)s[i]))
            i++;
        if (i == len)
            break;
        while (i < len && !is_ascii_ws((unsigned char)s[i])) {
            char c = s[i++];
            if (o->lowercase && c >= 'A' && c <= 'Z')
                c = (char)(c + 32);
            out->buf[out->len++] = c;
        }
        out->off[++out->n] = (int64_t)out->len;
    }
    out->buf[out->len] = '\0';
    free(tmp);
    return 0;
}

/* Python str.replace(pat, rep) on code points; rep is at most as long as pat, so it works
 * in place.  Returns the new length. */
static int64_t replace_shrink(uint32_t *c, int64_t n, const char *pat, const char *rep)
{
    int64_t pl = (int64_t)strlen(pat), rl = (int64_t)strlen(rep), m = 0, i = 0;
    while (i < n) {
        int64_t k = 0;
        if (i + pl <= n)
            while (k < pl && c[i + k] == (unsigned char)pat[k])
                k++;
        if (k == pl && pl > 0) {
            for (int64_t q = 0; q < rl; q++)
                c[m++] = (unsigned char)rep[q];
            i += pl;
        } else {
            c[m++] = c[i++];
        }
    }
    return m;
}

static int is_13a_split(uint32_t c)
{
    /* [\{-\~\[-\` -\&\(-\+\:-\@\/] */
    return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
           (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == 0x2F;
}

static int is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
static int is_dotcomma(uint32_t c) { return c == '.' || c == ','; }

enum { PAIR_NONDIGIT_DOTCOMMA, PAIR_DOTCOMMA_NONDIGIT, PAIR_DIGIT_DASH,
       PAIR_NONNUM_PUNCT, PAIR_PUNCT_NONNUM };

static int pair_match(int rule, uint32_t a, uint32_t b)
{
    switch (rule) {
    case PAIR_NONDIGIT_DOTCOMMA: return !is_digit(a) && is_dotcomma(b);
    case PAIR_DOTCOMMA_NONDIGIT: return is_dotcomma(a) && !is_digit(b);
    case PAIR_DIGIT_DASH: return is_digit(a) && b == '-';
    case PAIR_NONNUM_PUNCT: return !tfm_uni_is_number(a) && tfm_uni_is_punct(b);
    default: return tfm_uni_is_punct(a) && !tfm_uni_is_number(b);
    }
}

/* re.sub of a two-character pattern (a)(b): "\1 \2 " (space_before 0) or " \1 \2"
 * (space_before 1).  src and dst differ; dst holds 2n characters. */
static int64_t sub_pair(int rule, int space_before, const uint32_t *s, int64_t n,
                        uint32_t *d)
{
    int64_t m = 0, i = 0;
    while (i < n) {
        if (i + 1 < n && pair_match(rule, s[i], s[i + 1])) {
            if (space_before) {
                d[m++] = ' ', d[m++] = s[i], d[m++] = ' ', d[m++] = s[i + 1];
            } else {
                d[m++] = s[i], d[m++] = ' ', d[m++] = s[i + 1], d[m++] = ' ';
            }
            i += 2;
        } else {
            d[m++] = s[i++];
        }
    }
    return m;
}

int tfm_bleu_tokenize(const struct tfm_bleu_opts *o, const char *line, size_t len,
                      struct tfm_tokens *out, struct tfm_error *err)
{
    if (o->tok == TFM_TOK_TOKENIZED)
        return tokenize_pretok(o, line, len, out, err);

    uint32_t *a = NULL, *b = NULL;
    size_t ca = 0, cb = 0;
    int rc = -1;
    int64_t n = tfm_utf8_decode(line, len, &a, &ca, err);
    if (n < 0)
        goto done;
    if (o->lowercase) {
        n = tfm_text_lower(a, n, &b, &cb, err);
        if (n < 0)
            goto done;
        uint32_t *t = a; a = b; b = t;
        size_t tc = ca; ca = cb; cb = tc;
    }
    n = tfm_text_rstrip(a, n);

    if (o->tok == TFM_TOK_13A) {
        n = replace_shrink(a, n, "<skipped>", "");
        n = replace_shrink(a, n, "-\n", "");
        for (int64_t i = 0; i < n; i++)
            if (a[i] == '\n')
                a[i] = ' ';
        int amp = 0;
        for (int64_t i = 0; i < n && !amp; i++)
            amp = a[i] == '&';
        if (amp) {
            n = replace_shrink(a, n, "&quot;", "\"");
            n = replace_shrink(a, n, "&amp;", "&");
            n = replace_shrink(a, n, "&lt;", "<");
            n = replace_shrink(a, n, "&gt;", ">");
        }
        /* f' {line} ', then rule 1: each split character gets a space either side */
        if (grow_cps(&b, &cb, (size_t)(n + 2) * 3, err) < 0)
            goto done;
        int64_t m = 0;
        for (int64_t i = -1; i <= n; i++) {     /* i = -1 and n: the pad spaces */
            uint32_t c = (i < 0 || i == n) ? ' ' : a[i];
            if (is_13a_split(c)) {
                b[m++] = ' ', b[m++] = c, b[m++] = ' ';
            } else {
                b[m++] = c;
            }
        }
        n = m;
        /* rules 2..4: pairs; each pass at most doubles */
        static const int rules[3][2] = {
            {PAIR_NONDIGIT_DOTCOMMA, 0}, {PAIR_DOTCOMMA_NONDIGIT, 1}, {PAIR_DIGIT_DASH, 0}};
        for (int r = 0; r < 3; r++) {
            if (grow_cps(&a, &ca, (size_t)n * 2 + 1, err) < 0)
                goto done;
            n = sub_pair(rules[r][0], rules[r][1], b, n, a);
            uint32_t *t = a; a = b; b = t;
            size_t tc = ca; ca = cb; cb = tc;
        }
        rc = split_cps(b, n, out, err);
    } else if (o->tok == TFM_TOK_INTL) {
        if (grow_cps(&b, &cb, (size_t)n * 2 + 1, err) < 0)
            goto done;
        n = sub_pair(PAIR_NONNUM_PUNCT, 0, a, n, b);
        if (grow_cps(&a, &ca, (size_t)n * 2 + 1, err) < 0)
            goto done;
        n = sub_pair(PAIR_PUNCT_NONNUM, 1, b, n, a);
        if (grow_cps(&b, &cb, (size_t)n * 3 + 1, err) < 0)
            goto done;
        int64_t m = 0;
        for (int64_t i = 0; i < n; i++) {
            if (tfm_uni_is_symbol(a[i])) {
                b[m++] = ' ', b[m++] = a[i], b[m++] = ' ';
            } else {
                b[m++] = a[i];
            }
        }
        rc = split_cps(b, m, out, err);
    } else {
        rc = split_cps(a, n, out, err);
    }
done:
    free(a);
    free(b);
    return rc;
}

/* ---- options, signature -------------------------------------------------------------- */

void tfm_bleu_opts_default(struct tfm_bleu_opts *o)
{
    o->tok = TFM_TOK_13A;
    o->lowercase = 0;
    o->compound_split = 0;
    o->smooth = TFM_SMOOTH_EXP;
    o->smooth_value = -1;
}

int tfm_bleu_tok_parse(const char *s)
{
    if (strcmp(s, "13a") == 0)
        return TFM_TOK_13A;
    if (strcmp(s, "intl") == 0)
        return TFM_TOK_INTL;
    if (strcmp(s, "none") == 0)
        return TFM_TOK_NONE;
    if (strcmp(s, "tokenized") == 0)
        return TFM_TOK_TOKENIZED;
    return 0;
}

int tfm_bleu_smooth_parse(const char *s)
{
    if (strcmp(s, "exp") == 0)
        return TFM_SMOOTH_EXP;
    if (strcmp(s, "none") == 0)
        return TFM_SMOOTH_NONE;
    if (strcmp(s, "floor") == 0)
        return TFM_SMOOTH_FLOOR;
    if (strcmp(s, "add-k") == 0)
        return TFM_SMOOTH_ADDK;
    return 0;
}

static double smooth_value(const struct tfm_bleu_opts *o)
{
    if (o->smooth_value >= 0)
        return o->smooth_value;
    return o->smooth == TFM_SMOOTH_FLOOR ? 0.1 : 1.0;
}

int tfm_bleu_signature(const struct tfm_bleu_opts *o, int nrefs, const char *version,
                       char *buf, size_t n)
{
    const char *tok = o->tok == TFM_TOK_13A    ? "13a"
                      : o->tok == TFM_TOK_INTL ? "intl"
                      : o->tok == TFM_TOK_NONE ? "none"
                      : o->compound_split      ? "tokenized+atat"
                                               : "tokenized";
    char smooth[32], refs[16];
    switch (o->smooth) {
    case TFM_SMOOTH_NONE: snprintf(smooth, sizeof smooth, "none"); break;
    case TFM_SMOOTH_FLOOR: snprintf(smooth, sizeof smooth, "floor[%.2f]", smooth_value(o)); break;
    case TFM_SMOOTH_ADDK: snprintf(smooth, sizeof smooth, "add-k[%.2f]", smooth_value(o)); break;
    default: snprintf(smooth, sizeof smooth, "exp"); break;
    }
    if (nrefs < 0)
        snprintf(refs, sizeof refs, "var");
    else
        snprintf(refs, sizeof refs, "%d", nrefs);
    return snprintf(buf, n, "nrefs:%s|case:%s|eff:no|tok:%s|smooth:%s|version:%s", refs,
                    o->lowercase ? "lc" : "mixed", tok, smooth, version);
}

/* ---- BLEU ---------------------------------------------------------------------------- */

struct tfm_bleu {
    struct tfm_bleu_opts o;
    struct tfm_bleu_stats st;
    struct tfm_tokens hyp;
    struct tfm_tokens *refs;
    int cap_refs;
    struct tfm_intern in;
    struct tfm_ngrams refmax, tmp, hypc;
    uint32_t *ids;
    size_t cap_ids;
    float *sent;                /* with a bootstrap: each sentence's statistics, STAT_WIDTH */
    size_t cap_sent;            /* floats */
};

/* A sentence's statistics as sacreBLEU lists them: hyp_len, ref_len, correct[], total[]. */
enum { STAT_WIDTH = 2 + 2 * TFM_BLEU_ORDER };

struct tfm_bleu *tfm_bleu_new(const struct tfm_bleu_opts *o, struct tfm_error *err)
{
    struct tfm_bleu *b = calloc(1, sizeof *b);
    if (!b) {
        tfm_fail(err, "out of memory");
        return NULL;
    }
    b->o = *o;
    return b;
}

void tfm_bleu_free(struct tfm_bleu *b)
{
    if (!b)
        return;
    tfm_tokens_free(&b->hyp);
    free(b->sent);
    for (int i = 0; i < b->cap_refs; i++)
        tfm_tokens_free(&b->refs[i]);
    free(b->refs);
    tfm_intern_free(&b->in);
    tfm_ngrams_free(&b->refmax);
    tfm_ngrams_free(&b->tmp);
    tfm_ngrams_free(&b->hypc);
    free(b->ids);
    free(b);
}

const struct tfm_bleu_stats *tfm_bleu_stats(const struct tfm_bleu *b) { return &b->st; }

/* Intern the tokens of t into b->ids (ids[0..t->n)). */
static int intern_tokens(struct tfm_bleu *b, const struct tfm_tokens *t, struct tfm_error *err)
{
    if (grow_cps(&b->ids, &b->cap_ids, (size_t)t->n + 1, err) < 0)
        return -1;
    for (int64_t i = 0; i < t->n; i++) {
        int64_t id = tfm_intern_id(&b->in, t->buf + t->off[i],
                                   (size_t)(t->off[i + 1] - t->off[i]), err);
        if (id < 0)
            return -1;
        b->ids[i] = (uint32_t)id;
    }
    return 0;
}

static int count_ngrams(struct tfm_ngrams *c, const uint32_t *ids, int64_t n,
                        struct tfm_error *err)
{
    for (int k = 1; k <= TFM_BLEU_ORDER; k++)
        for (int64_t i = 0; i + k <= n; i++)
            if (tfm_ngrams_put(c, ids + i, k, 1, 0, err) < 0)
                return -1;
    return 0;
}

int tfm_bleu_add(struct tfm_bleu *b, const char *hyp, size_t hyp_len, int nrefs,
                 const char *const *refs, const size_t *ref_lens, struct tfm_error *err)
{
    if (nrefs < 1)
        return tfm_fail(err, "no reference");
    if (nrefs > b->cap_refs) {
        struct tfm_tokens *n = realloc(b->refs, (size_t)nrefs * sizeof *n);
        if (!n)
            return tfm_fail(err, "out of memory");
        memset(n + b->cap_refs, 0, (size_t)(nrefs - b->cap_refs) * sizeof *n);
        b->refs = n;
        b->cap_refs = nrefs;
    }
    if (tfm_bleu_tokenize(&b->o, hyp, hyp_len, &b->hyp, err) < 0)
        return tfm_error_prefix(err, "hypothesis");
    for (int r = 0; r < nrefs; r++)
        if (tfm_bleu_tokenize(&b->o, refs[r], ref_lens[r], &b->refs[r], err) < 0)
            return tfm_error_prefix(err, "reference %d", r + 1);

    tfm_intern_clear(&b->in);
    tfm_ngrams_clear(&b->refmax);
    int64_t hl = b->hyp.n, closest_diff = -1, closest_len = -1;
    for (int r = 0; r < nrefs; r++) {
        const struct tfm_tokens *t = &b->refs[r];
        if (intern_tokens(b, t, err) < 0)
            return -1;
        tfm_ngrams_clear(&b->tmp);
        if (count_ngrams(&b->tmp, b->ids, t->n, err) < 0)
            return -1;
        for (size_t i = 0; i < b->tmp.cap; i++) {
            const struct tfm_ngram_entry *e = &b->tmp.e[i];
            if (e->n && tfm_ngrams_put(&b->refmax, e->key, e->n, e->count, 1, err) < 0)
                return -1;
        }
        int64_t diff = t->n > hl ? t->n - hl : hl - t->n;
        if (closest_diff == -1 || diff < closest_diff) {
            closest_diff = diff;
            closest_len = t->n;
        } else if (diff == closest_diff && t->n < closest_len) {
            closest_len = t->n;
        }
    }
    if (intern_tokens(b, &b->hyp, err) < 0)
        return -1;
    tfm_ngrams_clear(&b->hypc);
    if (count_ngrams(&b->hypc, b->ids, hl, err) < 0)
        return -1;
    for (size_t i = 0; i < b->hypc.cap; i++) {
        const struct tfm_ngram_entry *e = &b->hypc.e[i];
        if (!e->n)
            continue;
        b->st.total[e->n - 1] += e->count;
        int64_t r = tfm_ngrams_get(&b->refmax, e->key, e->n);
        b->st.correct[e->n - 1] += r < e->count ? r : e->count;
    }
    b->st.hyp_len += hl;
    b->st.ref_len += closest_len;
    b->st.sentences++;
    return 0;
}

static double my_log(double x) { return x == 0.0 ? -9999999999.0 : log(x); }

void tfm_bleu_compute(const struct tfm_bleu_stats *st, const struct tfm_bleu_opts *o,
                      struct tfm_bleu_score *s)
{
    memset(s, 0, sizeof *s);
    s->hyp_len = st->hyp_len;
    s->ref_len = st->ref_len;
    double correct[TFM_BLEU_ORDER], total[TFM_BLEU_ORDER];
    int any = 0;
    for (int n = 0; n < TFM_BLEU_ORDER; n++) {
        s->correct[n] = st->correct[n];
        s->total[n] = st->total[n];
        correct[n] = (double)st->correct[n];
        total[n] = (double)st->total[n];
        any |= st->correct[n] != 0;
    }
    s->bp = 1.0;
    if (st->hyp_len < st->ref_len)
        s->bp = st->hyp_len > 0 ? exp(1.0 - (double)st->ref_len / (double)st->hyp_len) : 0.0;
    s->ratio = st->ref_len ? (double)st->hyp_len / (double)st->ref_len : 0.0;
    if (!any)
        return;
    double sv = smooth_value(o), smooth_mteval = 1.0;
    for (int n = 0; n < TFM_BLEU_ORDER; n++) {
        if (o->smooth == TFM_SMOOTH_ADDK && n > 0) {
            correct[n] += sv;
            total[n] += sv;
        }
        if (total[n] == 0)
            break;
        if (correct[n] == 0) {
            if (o->smooth == TFM_SMOOTH_EXP) {
                smooth_mteval *= 2;
                s->precisions[n] = 100. / (smooth_mteval * total[n]);
            } else if (o->smooth == TFM_SMOOTH_FLOOR) {
                s->precisions[n] = 100. * sv / total[n];
            }
        } else {
            s->precisions[n] = 100. * correct[n] / total[n];
        }
    }
    double sum = 0;
    for (int n = 0; n < TFM_BLEU_ORDER; n++)
        sum += my_log(s->precisions[n]);
    s->score = s->bp * exp(sum / TFM_BLEU_ORDER);
}

double tfm_bleu_score_f32(const float *st, const struct tfm_bleu_opts *o)
{
    /* sacreBLEU's compute_bleu on float32 statistics: numpy keeps float32 where a float32
     * meets a Python number, so the precisions are float32; the logs, their sum, the
     * brevity penalty and the score are Python floats */
    int64_t hyp_len = (int64_t)st[0], ref_len = (int64_t)st[1];
    float correct[TFM_BLEU_ORDER], total[TFM_BLEU_ORDER];
    int any = 0;
    for (int n = 0; n < TFM_BLEU_ORDER; n++) {
        correct[n] = st[2 + n];
        total[n] = st[2 + TFM_BLEU_ORDER + n];
        any |= correct[n] != 0;
    }
    double bp = 1.0;
    if (hyp_len < ref_len)
        bp = hyp_len > 0 ? exp(1.0 - (double)ref_len / (double)hyp_len) : 0.0;
    if (!any)
        return 0.0;
    double sv = smooth_value(o), smooth_mteval = 1.0;
    float prec[TFM_BLEU_ORDER] = {0};
    for (int n = 0; n < TFM_BLEU_ORDER; n++) {
        if (o->smooth == TFM_SMOOTH_ADDK && n > 0) {
            correct[n] += (float)sv;
            total[n] += (float)sv;
        }
        if (total[n] == 0)
            break;
        if (correct[n] == 0) {
            if (o->smooth == TFM_SMOOTH_EXP) {
                smooth_mteval *= 2;
                prec[n] = 100.0f / ((float)smooth_mteval * total[n]);
            } else if (o->smooth == TFM_SMOOTH_FLOOR) {
                prec[n] = (float)(100. * sv) / total[n];
            }
        } else {
            prec[n] = 100.0f * correct[n] / total[n];
        }
    }
    double sum = 0;
    for (int n = 0; n < TFM_BLEU_ORDER; n++)
        sum += my_log(prec[n]);
    return bp * exp(sum / TFM_BLEU_ORDER);
}

int tfm_bleu_format_verbose(const struct tfm_bleu_score *s, char *buf, size_t n)
{
    return snprintf(buf, n,
                    "%.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)",
                    s->precisions[0], s->precisions[1], s->precisions[2], s->precisions[3],
                    s->bp, s->ratio, (long long)s->hyp_len, (long long)s->ref_len);
}

int tfm_bleu_format(const struct tfm_bleu_score *s, char *buf, size_t n)
{
    char v[256];
    tfm_bleu_format_verbose(s, v, sizeof v);
    return snprintf(buf, n, "BLEU = %.2f %s", s->score, v);
}

/* ---- the scorer (score.h) ------------------------------------------------------------ */

/* The statistics of the sentence that took b->st from was to what it is now, into row. */
static void sentence_stats(const struct tfm_bleu *b, const struct tfm_bleu_stats *was,
                           float *row)
{
    row[0] = (float)(b->st.hyp_len - was->hyp_len);
    row[1] = (float)(b->st.ref_len - was->ref_len);
    for (int n = 0; n < TFM_BLEU_ORDER; n++) {
        row[2 + n] = (float)(b->st.correct[n] - was->correct[n]);
        row[2 + TFM_BLEU_ORDER + n] = (float)(b->st.total[n] - was->total[n]);
    }
}

static int bleu_add(struct tfm_scorer *s, int64_t i, const char *hyp, size_t hyp_len,
                    const char *const *refs, const size_t *ref_lens, struct tfm_error *err)
{
    struct tfm_bleu *b = s->metric;
    struct tfm_bleu_stats was = b->st;
    if (tfm_bleu_add(b, hyp, hyp_len, s->nrefs, refs, ref_lens, err) < 0)
        return tfm_error_prefix(err, "line %lld", (long long)i + 1);
    if (s->o.bootstrap || s->o.keep_rows) {
        if (tfm_grow(&b->sent, &b->cap_sent, (size_t)(s->added + 1) * STAT_WIDTH, sizeof *b->sent))
            return tfm_fail(err, "out of memory");
        sentence_stats(b, &was, b->sent + s->added * STAT_WIDTH);
    }
    return 0;
}

static double bootstrap_score(const float *sum, const void *opts)
{
    return tfm_bleu_score_f32(sum, opts);
}

/* The score of int64 sums as sacreBLEU scores an approximate randomization trial: its
 * statistics are then a numpy int64 array, and compute_bleu adds add-k's value to its
 * counts in place, in int64: a fractional value loses its fraction there. */
static double trial_score(const int64_t *sum, const void *opts)
{
    struct tfm_bleu_opts o = *(const struct tfm_bleu_opts *)opts;
    if (o.smooth == TFM_SMOOTH_ADDK)
        o.smooth_value = floor(smooth_value(&o));
    struct tfm_bleu_stats st = {0, sum[0], sum[1], {0}, {0}};
    for (int n = 0; n < TFM_BLEU_ORDER; n++) {
        st.correct[n] = sum[2 + n];
        st.total[n] = sum[2 + TFM_BLEU_ORDER + n];
    }
    struct tfm_bleu_score sc;
    tfm_bleu_compute(&st, &o, &sc);
    return sc.score;
}

static int bleu_paired(const struct tfm_scorer *s, struct tfm_score_rows *out,
                       struct tfm_error *err)
{
    const struct tfm_bleu *b = s->metric;
    if (!b->sent && s->added)
        return tfm_fail(err, "BLEU: the sentences' statistics were not kept");
    struct tfm_bleu_score sc;
    tfm_bleu_compute(&b->st, &b->o, &sc);
    *out = (struct tfm_score_rows){.rows = b->sent, .width = STAT_WIDTH, .score = sc.score,
                                   .score_f32 = bootstrap_score, .score_i64 = trial_score,
                                   .ctx = &b->o, .name = "BLEU"};
    tfm_bleu_signature(&b->o, s->nrefs, s->o.version, out->sig, sizeof out->sig);
    return 0;
}

static int bleu_report(struct tfm_scorer *s, struct tfm_error *err)
{
    const struct tfm_bleu *b = s->metric;
    struct tfm_bleu_score sc;
    tfm_bleu_compute(&b->st, &b->o, &sc);
    char line[512], sig[256], verbose[256];
    tfm_bleu_format(&sc, line, sizeof line);
    tfm_bleu_format_verbose(&sc, verbose, sizeof verbose);
    tfm_bleu_signature(&b->o, s->nrefs, s->o.version, sig, sizeof sig);
    double conf[2];
    int with_ci = 0;
    if (s->o.bootstrap)
        tfm_score_signature_seeded(sig, sizeof sig, "bs", s->o.bootstrap, s->o.seed);
    if (s->o.bootstrap && s->added > 0) {   /* no sentence: nothing to resample */
        if (tfm_bootstrap_ci(b->sent, s->added, STAT_WIDTH, s->o.bootstrap, s->o.seed,
                             bootstrap_score, &b->o, &conf[0], &conf[1], err))
            return -1;
        /* sacreBLEU reports the interval only about a mean above 0 */
        with_ci = conf[0] > 0;
        if (with_ci)
            snprintf(line, sizeof line, "BLEU = %.2f (\u03bc = %.2f \u00b1 %.2f) %s", sc.score,
                     conf[0], conf[1], verbose);
    }
    struct tfm_json j;
    if (!tfm_score_sacrebleu_report_ci(s, &j, line, "BLEU", sc.score, sig, verbose,
                                       with_ci ? conf : NULL))
        return 0;
    tfm_json_member_nums(&j, "precisions", sc.precisions, TFM_BLEU_ORDER);
    tfm_json_member_ints(&j, "counts", sc.correct, TFM_BLEU_ORDER);
    tfm_json_member_ints(&j, "totals", sc.total, TFM_BLEU_ORDER);
    tfm_json_member_num(&j, "bp", sc.bp);
    tfm_json_member_num(&j, "ratio", sc.ratio);
    tfm_json_member_int(&j, "hyp_len", sc.hyp_len);
    tfm_json_member_int(&j, "ref_len", sc.ref_len);
    tfm_json_member_int(&j, "sentences", s->added);
    tfm_json_end(&j);
    return 0;
}

static void bleu_metric_free(void *b)
{
    tfm_bleu_free(b);
}

static const struct tfm_scorer_ops BLEU_OPS = {
    .add = bleu_add, .report = bleu_report, .free = bleu_metric_free, .paired = bleu_paired,
};

struct tfm_scorer *tfm_bleu_scorer(const struct tfm_bleu_opts *o, int nrefs,
                                   const struct tfm_score_opts *so, struct tfm_error *err)
{
    struct tfm_bleu *b = tfm_bleu_new(o, err);
    return b ? tfm_scorer_new(&BLEU_OPS, b, so, nrefs, err) : NULL;
}
