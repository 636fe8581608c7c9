/* evalb.c: EVALB bracket scoring (see evalb.h).  Written from EVALB's README and the
 * behaviour of its reference outputs; no EVALB code.  At the end, bracket F1 as a scorer
 * (score.h), with the restoration of linearized trees that tfm-score --metric f1 offers.
 */
#include "evalb.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "lines.h"
#include "score.h"
#include "text.h"

/* ---- parameters ---------------------------------------------------------------------- */

void tfm_evalb_params_init(struct tfm_evalb_params *p)
{
    memset(p, 0, sizeof *p);
    p->labeled = 1;
    p->cutoff_len = 40;
    p->max_error = 10;
    snprintf(p->name, sizeof p->name, "default");
}

void tfm_evalb_params_free(struct tfm_evalb_params *p)
{
    char **lists[] = {p->delete_label, p->delete_len, p->quote_label, p->eq_label, p->eq_word};
    int counts[] = {p->ndelete, p->ndelete_len, p->nquote, 2 * p->neq_label, 2 * p->neq_word};
    for (int k = 0; k < 5; k++) {
        for (int i = 0; i < counts[k]; i++)
            free(lists[k][i]);
        free(lists[k]);
    }
    tfm_evalb_params_init(p);
}

static int list_add(char ***list, int *n, const char *s, size_t len, struct tfm_error *err)
{
    char **nl = realloc(*list, (size_t)(*n + 1) * sizeof *nl);
    if (!nl)
        return tfm_fail(err, "out of memory");
    *list = nl;
    char *c = malloc(len + 1);
    if (!c)
        return tfm_fail(err, "out of memory");
    memcpy(c, s, len);
    c[len] = '\0';
    nl[(*n)++] = c;
    return 0;
}

/* Apply one "KEY value" setting.  Returns 0, or -1 with a reason. */
static int set_param(struct tfm_evalb_params *p, const char *key, size_t klen, const char *val,
                     struct tfm_error *err)
{
#define IS(k) (klen == strlen(k) && memcmp(key, k, klen) == 0)
    const char *v = val;
    size_t vlen = strlen(val);
    if (IS("DEBUG") || IS("MAX_ERROR") || IS("CUTOFF_LEN") || IS("LABELED")) {
        char *end;
        long x = strtol(v, &end, 10);
        while (*end && isspace((unsigned char)*end))
            end++;
        if (end == v || *end || x < 0 || x > 1000000) {
            char q[80];
            return tfm_fail(err, "%.*s: '%s' is not a number in 0..1000000", (int)klen, key,
                            tfm_quote(q, sizeof q, v, vlen));
        }
        if (IS("MAX_ERROR"))
            p->max_error = (int)x;
        else if (IS("CUTOFF_LEN"))
            p->cutoff_len = (int)x;
        else if (IS("LABELED"))
            p->labeled = x != 0;
        return 0;
    }
    if (IS("DELETE_LABEL"))
        return list_add(&p->delete_label, &p->ndelete, v, vlen, err);
    if (IS("DELETE_LABEL_FOR_LENGTH"))
        return list_add(&p->delete_len, &p->ndelete_len, v, vlen, err);
    if (IS("QUOTE_LABEL"))
        return list_add(&p->quote_label, &p->nquote, v, vlen, err);
    if (IS("EQ_LABEL") || IS("EQ_WORD")) {
        const char *a = v, *ae = a;
        while (*ae && !isspace((unsigned char)*ae))
            ae++;
        const char *b = ae;
        while (*b && isspace((unsigned char)*b))
            b++;
        const char *be = b;
        while (*be && !isspace((unsigned char)*be))
            be++;
        const char *rest = be;
        while (*rest && isspace((unsigned char)*rest))
            rest++;
        if (b == be || *rest)
            return tfm_fail(err, "%.*s requires two values", (int)klen, key);
        char ***list = IS("EQ_LABEL") ? &p->eq_label : &p->eq_word;
        int *n = IS("EQ_LABEL") ? &p->neq_label : &p->neq_word;
        int n2 = 2 * *n;
        if (list_add(list, &n2, a, (size_t)(ae - a), err) < 0 ||
            list_add(list, &n2, b, (size_t)(be - b), err) < 0)
            return -1;
        (*n)++;
        return 0;
    }
    char q[80];
    return tfm_fail(err, "unknown keyword '%s'", tfm_quote(q, sizeof q, key, klen));
#undef IS
}

int tfm_evalb_params_collins(struct tfm_evalb_params *p, struct tfm_error *err)
{
    static const char *const settings[][2] = {
        {"MAX_ERROR", "10"},      {"CUTOFF_LEN", "40"},    {"LABELED", "1"},
        {"DELETE_LABEL", "TOP"},  {"DELETE_LABEL", "-NONE-"}, {"DELETE_LABEL", ","},
        {"DELETE_LABEL", ":"},    {"DELETE_LABEL", "``"},  {"DELETE_LABEL", "''"},
        {"DELETE_LABEL", "."},    {"DELETE_LABEL_FOR_LENGTH", "-NONE-"},
        {"EQ_LABEL", "ADVP PRT"},
    };
    tfm_evalb_params_init(p);
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
        if (set_param(p, settings[i][0], strlen(settings[i][0]), settings[i][1], err) < 0)
            return -1;
    snprintf(p->name, sizeof p->name, "COLLINS");
    return 0;
}

int tfm_evalb_params_parse(struct tfm_evalb_params *p, const char *text, size_t len,
                           const char *name, struct tfm_error *err)
{
    char line[4096];
    int ln = 0;
    const char *s = text, *end = text + len;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t n = (size_t)((nl ? nl : end) - s);
        ln++;
        if (n > sizeof line - 2)
            return tfm_fail(err, "%s: line %d: longer than %zu bytes", name, ln, sizeof line - 2);
        if (memchr(s, '\0', n))
            return tfm_fail(err, "%s: line %d: a NUL byte (not a parameter file)", name, ln);
        memcpy(line, s, n);
        line[n] = '\0';
        s = nl ? nl + 1 : end;
        while (n > 0 && isspace((unsigned char)line[n - 1]))
            line[--n] = '\0';
        if (line[0] == '#' || n < 3)
            continue;
        size_t k = 0;
        while (line[k] && !isspace((unsigned char)line[k]))
            k++;
        size_t v = k;
        while (line[v] && isspace((unsigned char)line[v]))
            v++;
        if (!line[v]) {
            char q[80];
            return tfm_fail(err, "%s: line %d: '%s' has no value", name, ln,
                            tfm_quote(q, sizeof q, line, n));
        }
        if (set_param(p, line, k, line + v, err) < 0)
            return tfm_error_prefix(err, "%s: line %d", name, ln);
    }
    return 0;
}

int tfm_evalb_params_load(struct tfm_evalb_params *p, const char *path, struct tfm_error *err)
{
    /* "-": standard input, named as the stream reader names it */
    int in = strcmp(path, "-") == 0;
    if (in)
        path = "<stdin>";
    FILE *f = in ? stdin : fopen(path, "rb");
    if (!f)
        return tfm_fail(err, "%s: %s", path, strerror(errno));
    /* the whole file, up to 1 MiB: a parameter file is a few lines */
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        if (!in)
            fclose(f);
        return tfm_fail(err, "%s: out of memory", path);
    }
    size_t k;
    while (n < cap + 1 && (k = fread(buf + n, 1, cap + 1 - n, f)) > 0)
        n += k;
    int bad = ferror(f);
    if (!in)
        fclose(f);
    int rc;
    if (bad)
        rc = tfm_fail(err, "%s: read error", path);
    else if (n > cap)
        rc = tfm_fail(err, "%s: larger than 1 MiB: not a parameter file", path);
    else
        rc = tfm_evalb_params_parse(p, buf, n, path, err);
    free(buf);
    if (rc == 0) {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        size_t bl = strlen(base);
        if (bl > 4 && strcmp(base + bl - 4, ".prm") == 0)
            bl -= 4;
        /* printed in the signature and the JSON: whole characters, controls escaped */
        tfm_quote(p->name, sizeof p->name, base, bl);
    }
    return rc;
}

/* ---- one sentence as EVALB sees it --------------------------------------------------- */

struct term {
    const char *word, *label;
};

struct bracket {
    int start, end;
    const char *label;  /* the tree's label, of any length; only its first len bytes count */
    size_t len;         /* the whole label, then up to its first '-' or '=' (massage) */
    int result;         /* 0 unmatched, 1 matched, 5 not counted */
};

struct quote {
    struct term term;
    int index, bracket;
    int *ends;          /* brackets open at the quote */
    int nends;
};

struct side {
    struct term *terms;
    int nterm, capterm;
    struct bracket *br;
    int nbr, capbr;
    struct quote *q;
    int nq, capq;
    int *stack;
    int depth, capstack;
    int len;            /* length for the cutoff (DELETE_LABEL_FOR_LENGTH) */
};

static void side_free(struct side *s)
{
    for (int i = 0; i < s->nq; i++)
        free(s->q[i].ends);
    free(s->terms);
    free(s->br);
    free(s->q);
    free(s->stack);
}

static int in_list(char *const *l, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (strcmp(l[i], s) == 0)
            return 1;
    return 0;
}

static int pair_eq(char *const *pairs, int n, const char *a, const char *b)
{
    if (strcmp(a, b) == 0)
        return 1;
    for (int i = 0; i < n; i++)
        if ((strcmp(a, pairs[2 * i]) == 0 && strcmp(b, pairs[2 * i + 1]) == 0) ||
            (strcmp(a, pairs[2 * i + 1]) == 0 && strcmp(b, pairs[2 * i]) == 0))
            return 1;
    return 0;
}

/* Is s the string a[0..alen)? */
static int is_n(const char *s, const char *a, size_t alen)
{
    return strncmp(s, a, alen) == 0 && s[alen] == '\0';
}

/* pair_eq for labels given as their first alen and blen bytes. */
static int pair_eq_n(char *const *pairs, int n, const char *a, size_t alen, const char *b,
                     size_t blen)
{
    if (alen == blen && memcmp(a, b, alen) == 0)
        return 1;
    for (int i = 0; i < n; i++)
        if ((is_n(pairs[2 * i], a, alen) && is_n(pairs[2 * i + 1], b, blen)) ||
            (is_n(pairs[2 * i + 1], a, alen) && is_n(pairs[2 * i], b, blen)))
            return 1;
    return 0;
}

static int is_quote_term(const struct tfm_evalb_params *p, const char *label, const char *w)
{
    return in_list(p->quote_label, p->nquote, label) &&
           (strcmp(w, "'") == 0 || strcmp(w, "\"") == 0 || strcmp(w, "/") == 0);
}

#define GROW(arr, n, cap)                                                              \
    do {                                                                               \
        if ((n) == (cap)) {                                                            \
            int c_ = (cap) ? (cap) * 2 : 64;                                           \
            void *p_ = realloc((arr), (size_t)c_ * sizeof *(arr));                     \
            if (!p_)                                                                   \
                return tfm_fail(err, "out of memory");                                 \
            (arr) = p_;                                                                \
            (cap) = c_;                                                                \
        }                                                                              \
    } while (0)

static int read_node(const struct tfm_evalb_params *p, const struct tfm_tree *t, int32_t i,
                     struct side *s, struct tfm_error *err)
{
    const char *label = tfm_tree_label(t, i), *word = tfm_tree_word(t, i);
    if (word) {
        if (!in_list(p->delete_len, p->ndelete_len, label))
            s->len++;
        if (is_quote_term(p, label, word)) {
            GROW(s->q, s->nq, s->capq);
            struct quote *q = &s->q[s->nq++];
            q->term.word = word;
            q->term.label = label;
            q->index = s->nterm;
            q->bracket = s->nbr;
            q->nends = s->depth;
            q->ends = malloc(((size_t)s->depth + 1) * sizeof *q->ends);
            if (!q->ends)
                return tfm_fail(err, "out of memory");
            memcpy(q->ends, s->stack, (size_t)s->depth * sizeof *q->ends);
        }
        if (in_list(p->delete_label, p->ndelete, label))
            return 0;
        GROW(s->terms, s->nterm, s->capterm);
        s->terms[s->nterm].word = word;
        s->terms[s->nterm].label = label;
        s->nterm++;
        return 0;
    }
    GROW(s->br, s->nbr, s->capbr);
    int b = s->nbr++;
    s->br[b].start = s->nterm;
    s->br[b].end = -1;
    s->br[b].label = label;
    s->br[b].len = strlen(label);
    s->br[b].result = 0;
    GROW(s->stack, s->depth, s->capstack);
    s->stack[s->depth++] = b;
    for (int32_t c = t->nodes[i].first; c >= 0; c = t->nodes[c].next)
        if (read_node(p, t, c, s, err) < 0)
            return -1;
    s->depth--;
    s->br[b].end = s->nterm;
    return 0;
}

static int read_tree(const struct tfm_evalb_params *p, const struct tfm_tree *t, struct side *s,
                     struct tfm_error *err)
{
    for (int32_t i = t->first; i >= 0; i = t->nodes[i].next)
        if (read_node(p, t, i, s, err) < 0)
            return -1;
    return 0;
}

/* Put quote q back into side s's terminals (the 2006 fix). */
static int reinsert(struct side *s, const struct quote *q, struct tfm_error *err)
{
    GROW(s->terms, s->nterm, s->capterm);
    int ind = q->index;
    if (ind > s->nterm)
        ind = s->nterm;
    memmove(&s->terms[ind + 1], &s->terms[ind], (size_t)(s->nterm - ind) * sizeof *s->terms);
    s->terms[ind] = q->term;
    s->nterm++;
    for (int k = q->bracket; k < s->nbr; k++) {
        s->br[k].start++;
        s->br[k].end++;
    }
    for (int k = 0; k < q->nends; k++)
        s->br[q->ends[k]].end++;
    return 0;
}

static int fix_quotes(const struct tfm_evalb_params *p, struct side *g, struct side *t,
                      struct tfm_error *err)
{
    for (int i = 0; i < t->nq; i++) {
        int ind = t->q[i].index;
        for (int j = 0; j < g->nq; j++) {
            if (g->q[j].index != ind || strcmp(g->q[j].term.label, t->q[i].term.label) == 0)
                continue;
            int gdel = in_list(p->delete_label, p->ndelete, g->q[j].term.label);
            int tdel = in_list(p->delete_label, p->ndelete, t->q[i].term.label);
            if (gdel && !tdel) {
                if (reinsert(g, &g->q[j], err) < 0)
                    return -1;
                for (int k = j; k < g->nq; k++)
                    g->q[k].index++;
            } else if (tdel && !gdel) {
                if (reinsert(t, &t->q[i], err) < 0)
                    return -1;
                for (int k = i; k < t->nq; k++)
                    t->q[k].index++;
            }
        }
    }
    return 0;
}

static void massage(const struct tfm_evalb_params *p, struct side *s)
{
    for (int i = 0; i < s->nbr; i++) {
        struct bracket *b = &s->br[i];
        b->result = 0;
        if (b->start == b->end) {
            b->result = 5;
            continue;
        }
        b->len = strcspn(b->label, "-=");
        for (int j = 0; j < p->ndelete; j++)
            if (pair_eq_n(p->eq_label, p->neq_label, b->label, b->len, p->delete_label[j],
                          strlen(p->delete_label[j])))
                b->result = 5;
    }
}

/* ---- scoring ------------------------------------------------------------------------- */

int tfm_evalb_init(struct tfm_evalb *e, const struct tfm_evalb_params *p, struct tfm_error *err)
{
    memset(e, 0, sizeof *e);
    tfm_evalb_params_init(&e->p);
    struct tfm_evalb_params *q = &e->p;
    q->labeled = p->labeled;
    q->cutoff_len = p->cutoff_len;
    q->max_error = p->max_error;
    memcpy(q->name, p->name, sizeof q->name);
    for (int i = 0; i < p->ndelete; i++)
        if (list_add(&q->delete_label, &q->ndelete, p->delete_label[i],
                     strlen(p->delete_label[i]), err) < 0)
            return -1;
    for (int i = 0; i < p->ndelete_len; i++)
        if (list_add(&q->delete_len, &q->ndelete_len, p->delete_len[i],
                     strlen(p->delete_len[i]), err) < 0)
            return -1;
    for (int i = 0; i < p->nquote; i++)
        if (list_add(&q->quote_label, &q->nquote, p->quote_label[i],
                     strlen(p->quote_label[i]), err) < 0)
            return -1;
    int n2 = 0;
    for (int i = 0; i < 2 * p->neq_label; i++)
        if (list_add(&q->eq_label, &n2, p->eq_label[i], strlen(p->eq_label[i]), err) < 0)
            return -1;
    q->neq_label = p->neq_label;
    n2 = 0;
    for (int i = 0; i < 2 * p->neq_word; i++)
        if (list_add(&q->eq_word, &n2, p->eq_word[i], strlen(p->eq_word[i]), err) < 0)
            return -1;
    q->neq_word = p->neq_word;
    return 0;
}

void tfm_evalb_free(struct tfm_evalb *e) { tfm_evalb_params_free(&e->p); }

static void add_totals(struct tfm_evalb_totals *t, const struct tfm_evalb_sent *s)
{
    t->sentences++;
    if (s->status == TFM_EVALB_ERROR) {
        t->errors++;
        return;
    }
    if (s->status == TFM_EVALB_SKIP) {
        t->skipped++;
        return;
    }
    t->gold += s->gold;
    t->test += s->test;
    t->matched += s->matched;
    if (s->gold == s->test && s->test == s->matched)
        t->complete++;
    t->words += s->words;
    t->crossing += s->crossing;
    if (s->crossing == 0)
        t->no_crossing++;
    if (s->crossing <= 2)
        t->two_or_less++;
    t->correct_tags += s->correct_tags;
}

/* A test bracket by its span, for matching. */
struct span_ref {
    int start, end, j;
};

/* In order of span, and in the test's order within one span. */
static int by_span(const void *a, const void *b)
{
    const struct span_ref *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return (x->j > y->j) - (x->j < y->j);
}

/* Each counted gold bracket, in order, takes the first test bracket (in the test's order)
 * of its span and label not taken yet, as EVALB matches them; the count of pairs.  Test
 * brackets are looked up by span, so a sentence's cost grows as n log n, not n^2. */
static int match_brackets(const struct tfm_evalb_params *p, struct side *g, struct side *t,
                          int *matched, struct tfm_error *err)
{
    *matched = 0;
    struct span_ref *order = malloc(((size_t)(unsigned)t->nbr + 1) * sizeof *order);
    if (!order)
        return tfm_fail(err, "out of memory");
    for (int j = 0; j < t->nbr; j++)
        order[j] = (struct span_ref){t->br[j].start, t->br[j].end, j};
    qsort(order, (size_t)t->nbr, sizeof *order, by_span);
    for (int i = 0; i < g->nbr; i++) {
        struct bracket *a = &g->br[i];
        if (a->result == 5)
            continue;
        int lo = 0, hi = t->nbr;            /* the first test bracket of a's span or after */
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (order[mid].start < a->start ||
                (order[mid].start == a->start && order[mid].end < a->end))
                lo = mid + 1;
            else
                hi = mid;
        }
        for (int k = lo; k < t->nbr && order[k].start == a->start && order[k].end == a->end;
             k++) {
            struct bracket *b = &t->br[order[k].j];
            if (b->result == 0 &&
                (!p->labeled || pair_eq_n(p->eq_label, p->neq_label, a->label, a->len,
                                          b->label, b->len))) {
                a->result = b->result = 1;
                ++*matched;
                break;
            }
        }
    }
    free(order);
    return 0;
}

/* Range maxima over v[0..n) in O(1) a query after n log n: level k holds the maximum of
 * each run of 2^k. */
struct range_max {
    int n, levels;
    int *m;             /* [levels][n] */
};

static int range_max_init(struct range_max *r, const int *v, int n)
{
    r->n = n;
    r->levels = 1;
    while ((1 << r->levels) <= n)
        r->levels++;
    r->m = malloc((size_t)r->levels * (size_t)(n ? n : 1) * sizeof *r->m);
    if (!r->m)
        return -1;
    memcpy(r->m, v, (size_t)n * sizeof *v);
    for (int k = 1; k < r->levels; k++) {
        int *lo = r->m + (size_t)(k - 1) * n, *up = r->m + (size_t)k * n;
        for (int i = 0; i + (1 << k) <= n; i++)
            up[i] = lo[i] > lo[i + (1 << (k - 1))] ? lo[i] : lo[i + (1 << (k - 1))];
    }
    return 0;
}

/* The maximum of v[a..b], a <= b. */
static int range_max(const struct range_max *r, int a, int b)
{
    int k = 0;
    while ((2 << k) <= b - a + 1)
        k++;
    const int *lv = r->m + (size_t)k * r->n;
    int x = lv[a], y = lv[b - (1 << k) + 1];
    return x > y ? x : y;
}

/* How many counted test brackets cross a counted gold bracket: a gold (s', e') crosses a
 * test (s, e) when s < s' < e < e' or s' < s < e' < e.  For each test bracket the gold
 * brackets that start inside it are asked for the largest end, and those that end inside
 * it for the smallest start (negated to be a maximum), each a range maximum over
 * positions. */
static int count_crossing(const struct side *g, const struct side *t, int *crossing,
                          struct tfm_error *err)
{
    *crossing = 0;
    int n = 1;
    for (int i = 0; i < g->nbr; i++)
        if (g->br[i].end + 1 > n)
            n = g->br[i].end + 1;
    for (int j = 0; j < t->nbr; j++)
        if (t->br[j].end + 1 > n)
            n = t->br[j].end + 1;
    int *end_of = malloc((size_t)n * sizeof *end_of), *start_of = malloc((size_t)n * sizeof *start_of);
    struct range_max ends = {0}, starts = {0};
    int rc = -1;
    if (!end_of || !start_of)
        goto out;
    for (int x = 0; x < n; x++)
        end_of[x] = start_of[x] = INT_MIN;
    for (int i = 0; i < g->nbr; i++) {
        const struct bracket *a = &g->br[i];
        if (a->result == 5)
            continue;
        if (a->end > end_of[a->start])
            end_of[a->start] = a->end;
        if (-a->start > start_of[a->end])
            start_of[a->end] = -a->start;
    }
    if (range_max_init(&ends, end_of, n) < 0 || range_max_init(&starts, start_of, n) < 0)
        goto out;
    for (int j = 0; j < t->nbr; j++) {
        const struct bracket *b = &t->br[j];
        if (b->result == 5 || b->end - b->start < 2)    /* no position strictly inside */
            continue;
        if (range_max(&ends, b->start + 1, b->end - 1) > b->end ||
            range_max(&starts, b->start + 1, b->end - 1) > -b->start)
            ++*crossing;
    }
    rc = 0;
out:
    free(end_of);
    free(start_of);
    free(ends.m);
    free(starts.m);
    return rc < 0 ? tfm_fail(err, "out of memory") : 0;
}

int tfm_evalb_add(struct tfm_evalb *e, int64_t id, const struct tfm_tree *gold,
                  const struct tfm_tree *test, const char *reason, struct tfm_evalb_sent *s,
                  struct tfm_error *err)
{
    const struct tfm_evalb_params *p = &e->p;
    struct side g, t;
    memset(&g, 0, sizeof g);
    memset(&t, 0, sizeof t);
    memset(s, 0, sizeof *s);
    s->id = id;
    int rc = -1;
    if (read_tree(p, gold, &g, err) < 0)
        goto done;
    s->len = g.len;
    s->words = g.nterm;     /* what an error or skip row shows (see evalb.h) */
    if (!test) {
        s->status = TFM_EVALB_ERROR;
        snprintf(s->reason, sizeof s->reason, "%s", reason ? reason : "unreadable test tree");
        goto count;
    }
    if (read_tree(p, test, &t, err) < 0)
        goto done;
    if (t.nterm == 0) {
        s->status = TFM_EVALB_SKIP;
        goto count;
    }
    if (g.nterm != t.nterm) {
        if (fix_quotes(p, &g, &t, err) < 0)
            goto done;
        if (g.nterm != t.nterm) {
            s->status = TFM_EVALB_ERROR;
            snprintf(s->reason, sizeof s->reason, "length mismatch (%d|%d)", g.nterm, t.nterm);
            goto count;
        }
    }
    for (int i = 0; i < g.nterm; i++)
        if (!pair_eq(p->eq_word, p->neq_word, g.terms[i].word, t.terms[i].word)) {
            /* quoted: whole characters (valid UTF-8 in the JSON report too), control
             * characters escaped; both fit in reason */
            char qg[112], qt[112];
            s->status = TFM_EVALB_ERROR;
            snprintf(s->reason, sizeof s->reason, "word mismatch (%s|%s)",
                     tfm_quote(qg, sizeof qg, g.terms[i].word, strlen(g.terms[i].word)),
                     tfm_quote(qt, sizeof qt, t.terms[i].word, strlen(t.terms[i].word)));
            goto count;
        }
    massage(p, &g);
    massage(p, &t);
    for (int i = 0; i < g.nbr; i++)
        if (g.br[i].result != 5)
            s->gold++;
    for (int j = 0; j < t.nbr; j++)
        if (t.br[j].result != 5)
            s->test++;
    if (match_brackets(p, &g, &t, &s->matched, err) < 0 ||
        count_crossing(&g, &t, &s->crossing, err) < 0)
        goto done;
    s->words = g.nterm;
    for (int i = 0; i < g.nterm; i++)
        if (pair_eq(p->eq_label, p->neq_label, g.terms[i].label, t.terms[i].label))
            s->correct_tags++;
count:
    if (s->status != TFM_EVALB_OK)
        s->matched = s->gold = s->test = s->crossing = s->correct_tags = 0;
    add_totals(&e->all, s);
    if (s->len <= p->cutoff_len)
        add_totals(&e->cut, s);
    rc = 0;
done:
    side_free(&g);
    side_free(&t);
    return rc;
}

int tfm_evalb_too_many_errors(const struct tfm_evalb *e)
{
    /* evalb gives up at the error that finds more than MAX_ERROR errors before it */
    return e->all.errors > (int64_t)e->p.max_error + 1;
}

void tfm_evalb_prf(const struct tfm_evalb_totals *t, double *r, double *p, double *f)
{
    *r = t->gold > 0 ? 100.0 * (double)t->matched / (double)t->gold : 0.0;
    *p = t->test > 0 ? 100.0 * (double)t->matched / (double)t->test : 0.0;
    *f = (*p + *r) != 0 ? 2 * *p * *r / (*p + *r) : NAN;
}

/* ---- the report ---------------------------------------------------------------------- */

void tfm_evalb_print_header(FILE *f)
{
    fputs("  Sent.                        Matched  Bracket   Cross        Correct Tag\n"
          " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n"
          "============================================================================\n",
          f);
}

void tfm_evalb_print_row(FILE *f, const struct tfm_evalb_sent *s)
{
    fprintf(f, "%4lld  %3d    %d  ", (long long)s->id, s->len, s->status);
    fprintf(f, "%6.2f %6.2f   %3d    %3d  %3d    %3d",
            s->gold == 0 ? 0.0 : 100.0 * s->matched / s->gold,
            s->test == 0 ? 0.0 : 100.0 * s->matched / s->test, s->matched, s->gold, s->test,
            s->crossing);
    int words = s->words;
    fprintf(f, "   %4d  %4d   %6.2f\n", words, s->correct_tags,
            (s->status != TFM_EVALB_OK || words == 0) ? 0.0
                                                      : 100.0 * s->correct_tags / words);
}

static void print_block(FILE *f, const struct tfm_evalb_totals *t)
{
    int64_t valid = t->sentences - t->errors - t->skipped;
    double r, p, fm;
    tfm_evalb_prf(t, &r, &p, &fm);
    fprintf(f, "Number of sentence        = %6lld\n", (long long)t->sentences);
    fprintf(f, "Number of Error sentence  = %6lld\n", (long long)t->errors);
    fprintf(f, "Number of Skip  sentence  = %6lld\n", (long long)t->skipped);
    fprintf(f, "Number of Valid sentence  = %6lld\n", (long long)valid);
    fprintf(f, "Bracketing Recall         = %6.2f\n", r);
    fprintf(f, "Bracketing Precision      = %6.2f\n", p);
    if (isnan(fm))
        fprintf(f, "Bracketing FMeasure       = %6s\n", "nan");
    else
        fprintf(f, "Bracketing FMeasure       = %6.2f\n", fm);
    fprintf(f, "Complete match            = %6.2f\n",
            valid > 0 ? 100.0 * (double)t->complete / (double)valid : 0.0);
    fprintf(f, "Average crossing          = %6.2f\n",
            valid > 0 ? (double)t->crossing / (double)valid : 0.0);
    fprintf(f, "No crossing               = %6.2f\n",
            valid > 0 ? 100.0 * (double)t->no_crossing / (double)valid : 0.0);
    fprintf(f, "2 or less crossing        = %6.2f\n",
            valid > 0 ? 100.0 * (double)t->two_or_less / (double)valid : 0.0);
    fprintf(f, "Tagging accuracy          = %6.2f\n",
            t->words > 0 ? 100.0 * (double)t->correct_tags / (double)t->words : 0.0);
}

void tfm_evalb_print_summary(FILE *f, const struct tfm_evalb *e)
{
    const struct tfm_evalb_totals *t = &e->all;
    fputs("============================================================================\n", f);
    if (t->gold > 0 && t->test > 0)
        fprintf(f, "                %6.2f %6.2f %6lld %5lld %5lld  %5lld",
                100.0 * (double)t->matched / (double)t->gold,
                100.0 * (double)t->matched / (double)t->test, (long long)t->matched,
                (long long)t->gold, (long long)t->test, (long long)t->no_crossing);
    fprintf(f, "  %5lld %5lld   %6.2f\n", (long long)t->words, (long long)t->correct_tags,
            t->words > 0 ? 100.0 * (double)t->correct_tags / (double)t->words : 0.0);
    fputs("=== Summary ===\n\n-- All --\n", f);
    print_block(f, &e->all);
    fprintf(f, "\n-- len<=%d --\n", e->p.cutoff_len);
    print_block(f, &e->cut);
}

/* ---- the scorer (score.h) ------------------------------------------------------------ */

struct f1_scorer {
    struct tfm_f1_opts fo;
    struct tfm_evalb_params prm;
    struct tfm_evalb e;
    int have_e;
    struct tfm_text src;            /* --source: the words of each sentence */
    struct tfm_tree gold, test;
    char *words, *lin;              /* the gold's words (--linearized) */
    size_t wcap, lcap;
    struct tfm_evalb_sent *rows;    /* per-sentence rows for the JSON report */
};

static int f1_start(struct tfm_scorer *s, struct tfm_error *err)
{
    struct f1_scorer *fs = s->metric;
    const struct tfm_f1_opts *fo = &fs->fo;
    if (fo->param ? tfm_evalb_params_load(&fs->prm, fo->param, err)
                  : tfm_evalb_params_collins(&fs->prm, err))
        return -1;
    if (fo->max_error >= 0)
        fs->prm.max_error = fo->max_error;
    if (fo->source) {
        if (tfm_text_read(&fs->src, fo->source, err) < 0)
            return -1;
        if (fs->src.n != s->sentences)
            return tfm_fail(err, "%s: %lld lines, hypotheses have %lld", fo->source,
                            (long long)fs->src.n, (long long)s->sentences);
    }
    if (tfm_evalb_init(&fs->e, &fs->prm, err) < 0)
        return -1;
    fs->have_e = 1;
    if (fo->per_sentence && !s->o.json)
        tfm_evalb_print_header(s->o.out);
    if (s->o.json && fo->per_sentence &&
        !(fs->rows = calloc((size_t)(s->sentences ? s->sentences : 1), sizeof *fs->rows)))
        return tfm_fail(err, "out of memory");
    return 0;
}

static int f1_add(struct tfm_scorer *s, int64_t i, const char *hyp, size_t hyp_len,
                  const char *const *refs, const size_t *ref_lens, struct tfm_error *err)
{
    struct f1_scorer *fs = s->metric;
    const struct tfm_f1_opts *fo = &fs->fo;
    size_t pos = 0;
    /* bracketed test trees and their gold are read as EVALB reads them, "(X )" a word;
     * restoration needs the gold's real words */
    int flags = fo->source || fo->linearized ? 0 : TFM_TREE_EMPTY_WORDS;
    if (tfm_tree_parse(&fs->gold, refs[0], ref_lens[0], &pos, flags, err) < 0)
        return tfm_error_prefix(err, "%s: line %lld", s->ref_name, (long long)i + 1);
    const struct tfm_tree *tp = &fs->test;
    char reason[300] = "";
    if (fo->source || fo->linearized) {
        const char *w;
        size_t wl;
        if (fo->source) {
            w = tfm_text_line(&fs->src, i);
            wl = tfm_text_len(&fs->src, i);
        } else {
            struct tfm_linearize_opts lo = {0, 0, 0};
            if (tfm_tree_linearize(&fs->gold, &lo, &fs->words, &fs->wcap, &fs->lin, &fs->lcap,
                                   err) < 0)
                return tfm_error_prefix(err, "%s: line %lld", s->ref_name, (long long)i + 1);
            w = fs->words;
            wl = strlen(w);
        }
        /* every preterminal takes the gold tag, so that EVALB deletes the same
         * punctuation on both sides: a model without tags writes XX, or, when
         * imperfect, a word or a stray label in its place */
        if (tfm_tree_restore_like(&fs->test, hyp, hyp_len, w, wl, fo->root, &fs->gold,
                                  fo->keep_tags ? "XX" : NULL, err) < 0)
            return -1;
    } else {
        pos = 0;
        if (tfm_tree_parse(&fs->test, hyp, hyp_len, &pos, flags, err) < 0) {
            snprintf(reason, sizeof reason, "malformed tree: %.250s", err->msg);
            tp = NULL;
        }
    }
    struct tfm_evalb_sent st;
    if (tfm_evalb_add(&fs->e, i + 1, &fs->gold, tp, reason, &st, err) < 0)
        return -1;
    if (st.status == TFM_EVALB_ERROR && s->o.warn) {
        char msg[sizeof st.reason + 600];
        snprintf(msg, sizeof msg, "%s: line %lld: %s", s->hyp_name, (long long)i + 1,
                 st.reason);
        s->o.warn(s->o.warn_ctx, msg);
    }
    if (fs->rows)
        fs->rows[i] = st;
    else if (fo->per_sentence && !s->o.json)
        tfm_evalb_print_row(s->o.out, &st);
    if (tfm_evalb_too_many_errors(&fs->e)) {
        fflush(s->o.out);   /* the rows so far come before the message */
        return tfm_fail(err, "%s: line %lld: more than MAX_ERROR %d errors, giving up",
                        s->hyp_name, (long long)i + 1, fs->e.p.max_error);
    }
    return 0;
}

static void f1_line(FILE *f, const char *prefix, const struct tfm_evalb_totals *t)
{
    double r, p, fm;
    tfm_evalb_prf(t, &r, &p, &fm);
    fprintf(f, "%sF1 = %.2f P = %.2f R = %.2f (sentences = %lld valid = %lld errors = %lld "
            "skipped = %lld matched = %lld gold = %lld test = %lld)\n",
            prefix, isnan(fm) ? 0.0 : fm, p, r, (long long)t->sentences,
            (long long)(t->sentences - t->errors - t->skipped), (long long)t->errors,
            (long long)t->skipped, (long long)t->matched, (long long)t->gold,
            (long long)t->test);
}

static void f1_json_totals(struct tfm_json *j, const char *key, const struct tfm_evalb_totals *t)
{
    double r, p, fm;
    tfm_evalb_prf(t, &r, &p, &fm);
    int64_t valid = t->sentences - t->errors - t->skipped;
    tfm_json_key(j, key);
    tfm_json_object(j, 0);
    tfm_json_member_num(j, "f1", isnan(fm) ? 0.0 : fm);
    tfm_json_member_num(j, "precision", p);
    tfm_json_member_num(j, "recall", r);
    tfm_json_member_int(j, "matched", t->matched);
    tfm_json_member_int(j, "gold", t->gold);
    tfm_json_member_int(j, "test", t->test);
    tfm_json_member_int(j, "sentences", t->sentences);
    tfm_json_member_int(j, "valid", valid);
    tfm_json_member_int(j, "errors", t->errors);
    tfm_json_member_int(j, "skipped", t->skipped);
    tfm_json_member_num(j, "complete_match",
                        valid > 0 ? 100.0 * (double)t->complete / (double)valid : 0.0);
    tfm_json_member_num(j, "average_crossing",
                        valid > 0 ? (double)t->crossing / (double)valid : 0.0);
    tfm_json_member_num(j, "tagging_accuracy",
                        t->words > 0 ? 100.0 * (double)t->correct_tags / (double)t->words : 0.0);
    tfm_json_end(j);
}

static void f1_json_row(struct tfm_json *j, const struct tfm_evalb_sent *s)
{
    tfm_json_object(j, 0);
    tfm_json_member_int(j, "id", s->id);
    tfm_json_member_int(j, "length", s->len);
    tfm_json_member_int(j, "status", s->status);
    tfm_json_member_int(j, "matched", s->matched);
    tfm_json_member_int(j, "gold", s->gold);
    tfm_json_member_int(j, "test", s->test);
    tfm_json_member_int(j, "crossing", s->crossing);
    tfm_json_member_int(j, "words", s->words);
    tfm_json_member_int(j, "correct_tags", s->correct_tags);
    if (s->status == TFM_EVALB_ERROR)
        tfm_json_member_str(j, "reason", s->reason);
    tfm_json_end(j);
}

static int f1_report(struct tfm_scorer *s, struct tfm_error *err)
{
    (void)err;
    struct f1_scorer *fs = s->metric;
    const struct tfm_evalb *e = &fs->e;
    FILE *f = s->o.out;
    char key[32];
    if (!s->o.json && fs->fo.per_sentence) {
        tfm_evalb_print_summary(f, e);
    } else if (!s->o.json) {
        f1_line(f, "", &e->all);
        snprintf(key, sizeof key, "len<=%d: ", e->p.cutoff_len);
        f1_line(f, key, &e->cut);
        fprintf(f, "evalb:%s|labeled:%s|cutoff:%d|version:%s\n", e->p.name,
                e->p.labeled ? "yes" : "no", e->p.cutoff_len, s->o.version);
    } else {
        double r, p, fm;
        tfm_evalb_prf(&e->all, &r, &p, &fm);
        struct tfm_json j;
        tfm_json_init(&j, f);
        tfm_json_object(&j, 1);
        tfm_json_member_str(&j, "name", "F1");
        tfm_json_member_num(&j, "score", isnan(fm) ? 0.0 : fm);
        tfm_json_member_str(&j, "param", e->p.name);
        tfm_json_member_bool(&j, "labeled", e->p.labeled);
        tfm_json_member_int(&j, "cutoff_len", e->p.cutoff_len);
        tfm_json_member_str(&j, "version", s->o.version);
        f1_json_totals(&j, "all", &e->all);
        snprintf(key, sizeof key, "len<=%d", e->p.cutoff_len);
        f1_json_totals(&j, key, &e->cut);
        if (fs->rows) {
            tfm_json_key(&j, "per_sentence");
            tfm_json_array(&j, 1);
            for (int64_t k = 0; k < s->added; k++)
                f1_json_row(&j, &fs->rows[k]);
            tfm_json_end(&j);
        }
        tfm_json_end(&j);
    }
    return 0;
}

static void f1_free(void *metric)
{
    struct f1_scorer *fs = metric;
    if (!fs)
        return;
    if (fs->have_e)
        tfm_evalb_free(&fs->e);
    tfm_evalb_params_free(&fs->prm);
    tfm_text_free(&fs->src);
    tfm_tree_free(&fs->gold);
    tfm_tree_free(&fs->test);
    free(fs->words);
    free(fs->lin);
    free(fs->rows);
    free(fs);
}

static const struct tfm_scorer_ops F1_OPS = {
    .start = f1_start, .add = f1_add, .report = f1_report, .free = f1_free,
};

struct tfm_scorer *tfm_evalb_scorer(const struct tfm_f1_opts *fo, const struct tfm_score_opts *so,
                                    struct tfm_error *err)
{
    struct f1_scorer *fs = calloc(1, sizeof *fs);
    if (!fs) {
        tfm_fail(err, "out of memory");
        return NULL;
    }
    fs->fo = *fo;
    tfm_evalb_params_init(&fs->prm);
    tfm_text_init(&fs->src);
    tfm_tree_init(&fs->gold);
    tfm_tree_init(&fs->test);
    return tfm_scorer_new(&F1_OPS, fs, so, 1, err);
}
