/* hypread.c: the one reader of hypotheses and token streams as text (hypread.h).
 *
 * An input is sniffed by its first 8 bytes (read here, then handed to the stream or the
 * line reader, so a pipe works as well as a file).  A stream is read whole (corpus.h),
 * then walked sentence by sentence; text is streamed a line at a time.
 */
#include "hypread.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "corpus.h"
#include "lines.h"
#include "spm.h"
#include "stream.h"
#include "text.h"

/* The replacement of a control character in decoded text: U+FFFD, what SentencePiece
 * itself gives for bytes that are not UTF-8. */
static const char REPLACEMENT[] = "\xef\xbf\xbd";

/* The length of the character at t[0..left) if it must not reach a line of text, else 0:
 * a C0 control but tab, DEL, a C1 control (U+0080-U+009F, NEL among them), and the line
 * and paragraph separators U+2028 and U+2029, which editors and Python's str.splitlines
 * take for line ends. */
static size_t control_len(const unsigned char *t, size_t left)
{
    if ((t[0] < 0x20 && t[0] != '\t') || t[0] == 0x7f)
        return 1;
    if (t[0] == 0xc2 && left >= 2 && t[1] >= 0x80 && t[1] <= 0x9f)
        return 2;
    if (t[0] == 0xe2 && left >= 3 && t[1] == 0x80 && (t[2] == 0xa8 || t[2] == 0xa9))
        return 3;
    return 0;
}

int64_t tfm_hyp_decode_line(const struct tfm_spm *s, const int32_t *ids, int64_t n, char **text,
                            size_t *cap, struct tfm_error *err)
{
    int64_t len = tfm_spm_decode(s, ids, n, text, cap, err);
    if (len <= 0)
        return len;
    const unsigned char *in = (const unsigned char *)*text;
    size_t need = 1, bad = 0, k;
    for (size_t i = 0; i < (size_t)len; i += k ? k : 1) {
        k = control_len(in + i, (size_t)len - i);
        need += k ? sizeof REPLACEMENT - 1 : 1;
        bad += k != 0;
    }
    /* by the count, not the length: U+2028 and U+2029 are as long as U+FFFD */
    if (bad == 0)
        return len;
    char *out = malloc(need);
    if (!out)
        return tfm_fail(err, "out of memory for %zu bytes of text", need);
    size_t to = 0;
    for (size_t i = 0; i < (size_t)len; i += k ? k : 1) {
        k = control_len(in + i, (size_t)len - i);
        if (k) {
            memcpy(out + to, REPLACEMENT, sizeof REPLACEMENT - 1);
            to += sizeof REPLACEMENT - 1;
        } else {
            out[to++] = (char)in[i];
        }
    }
    out[to] = 0;
    free(*text);
    *text = out;
    *cap = need;
    return (int64_t)to;
}

/* For TFM_HYP_BEST: pick[k] is the entry of c that is the best hypothesis of input
 * sentence k, for k in [0, *n), *n one past the largest hyp.index.  Every sentence up to
 * it must have one: the k-th goes with line k of the references.  A hyp.index at or past
 * the number of entries always leaves some sentence below it without one (pigeonhole), so
 * pick needs no more than c->n slots, whatever the numbers. */
static int pick_best(const struct tfm_corpus *c, const char *name, int64_t **pick, int64_t *n,
                     struct tfm_error *err)
{
    int64_t last = -1;      /* the entry of the largest hyp.index */
    *n = 0;
    for (int64_t i = 0; i < c->n; i++) {
        if (c->index[i] < 0 || c->index[i] == INT64_MAX)
            return tfm_fail(err, "%s: hypothesis %lld: hyp.index %lld is not a sentence number",
                            name, (long long)i, (long long)c->index[i]);
        if (c->index[i] >= *n) {
            *n = c->index[i] + 1;
            last = i;
        }
    }
    int64_t slots = *n < c->n ? *n : c->n;
    int64_t *p = malloc((size_t)(slots ? slots : 1) * sizeof *p);
    if (!p)
        return tfm_fail(err, "out of memory");
    for (int64_t k = 0; k < slots; k++)
        p[k] = -1;
    for (int64_t i = 0; i < c->n; i++)     /* n-best lists: best first */
        if (c->index[i] < slots && p[c->index[i]] < 0)
            p[c->index[i]] = i;
    int64_t k = 0;                          /* the first sentence without one */
    while (k < slots && p[k] >= 0)
        k++;
    if (k < *n) {
        free(p);
        return tfm_fail(err, "%s: no hypothesis for sentence %lld, though hyp.index goes up "
                        "to %lld (hypothesis %lld): every sentence from 0 to the last must "
                        "have one", name, (long long)k, (long long)c->index[last],
                        (long long)last);
    }
    *pick = p;
    return 0;
}

/* tfm_hypread_corpus for a corpus whose entry 0 is entry base of its input (a chunk of a
 * stream read a chunk at a time): numbers in hypotheses and messages are the input's. */
static int each_sentence(const struct tfm_corpus *c, int64_t base, const struct tfm_spm *s,
                         int flags, const char *name, tfm_hyp_fn fn, void *ctx,
                         struct tfm_error *err)
{
    int64_t *pick = NULL, n = c->n;
    if ((flags & TFM_HYP_BEST) && c->index &&
        pick_best(c, name ? name : "<input>", &pick, &n, err) < 0)
        return -1;
    char *text = NULL;
    size_t cap = 0;
    int rc = 0;
    for (int64_t k = 0; k < n && rc == 0; k++) {
        int64_t i = pick ? pick[k] : k;
        struct tfm_hyp h = {
            .n = base + i,
            .index = c->index ? c->index[i] : base + i,
            .score = c->score ? c->score[i] : 0.0f,
            .ids = tfm_corpus_sent(c, i),
            .nids = tfm_corpus_len(c, i),
        };
        if (!(flags & TFM_HYP_IDS)) {
            int64_t len = tfm_hyp_decode_line(s, h.ids, h.nids, &text, &cap, err);
            if (len < 0) {
                rc = name ? tfm_error_prefix(err, "%s: hypothesis %lld", name,
                                             (long long)(base + i))
                          : -1;
                break;
            }
            h.text = text;
            h.len = (size_t)len;
        }
        rc = fn(ctx, &h, err);
    }
    free(text);
    free(pick);
    return rc;
}

int tfm_hypread_corpus(const struct tfm_corpus *c, const struct tfm_spm *s, int flags,
                       const char *name, tfm_hyp_fn fn, void *ctx, struct tfm_error *err)
{
    return each_sentence(c, 0, s, flags, name, fn, ctx, err);
}

static int read_stream(struct tfm_reader *r, const struct tfm_hyp_opts *o, tfm_hyp_fn fn,
                       void *ctx, struct tfm_error *err)
{
    const struct tfm_header *h = tfm_reader_header(r);
    const char *name = tfm_reader_name(r);
    if (strcmp(h->kind, TFM_KIND_HYPOTHESES) != 0 && strcmp(h->kind, TFM_KIND_TOKENS) != 0)
        return tfm_fail(err, "%s: a '%s' stream, expected tokens or hypotheses", name, h->kind);
    const struct tfm_spm *s = o->model;
    struct tfm_spm *own = NULL;
    if (s && h->spm) {      /* data is never decoded with another vocabulary */
        size_t n;
        const void *proto = tfm_spm_proto(s, &n);
        const char *opt = o->model_option ? o->model_option : "the model";
        if (n != h->spm_size || memcmp(proto, h->spm, n) != 0)
            return tfm_fail(err, "%s: the stream's vocabulary (%08x) is not %s's (%08x): "
                            "not decoded with another (leave out %.*s: the stream's own is "
                            "used)", name, (unsigned)tfm_header_vocab_id(h),
                            o->model_name ? o->model_name : "the model",
                            (unsigned)tfm_crc32(0, proto, n),
                            o->model_option ? (int)strcspn(opt, " ") : (int)strlen(opt), opt);
    }
    if (!s && h->spm) {
        if (!(own = tfm_spm_load(h->spm, h->spm_size, err)))
            return tfm_error_prefix(err, "%s: embedded model", name);
        s = own;
    }
    if (!s && !(o->flags & TFM_HYP_IDS)) {
        if (o->model_option)
            return tfm_fail(err, "%s: no embedded SentencePiece model; give one with %s", name,
                            o->model_option);
        return tfm_fail(err, "%s: the stream has no embedded SentencePiece model to "
                        "detokenize with", name);
    }
    struct tfm_corpus c;
    tfm_corpus_init(&c);
    int64_t vocab = s ? tfm_spm_vocab_size(s) : 0;
    int rc;
    if (o->flags & TFM_HYP_BEST) {  /* the best of each sentence may come last: all of it */
        rc = tfm_corpus_read(r, &c, vocab, err);
        if (rc == 0)
            rc = tfm_hypread_corpus(&c, s, o->flags, name, fn, ctx, err);
    } else {                        /* in bounded memory: a chunk at a time */
        int64_t base = 0;
        while ((rc = tfm_corpus_read_chunk(r, &c, vocab, err)) == 1) {
            if ((rc = each_sentence(&c, base, s, o->flags, name, fn, ctx, err)) != 0)
                break;
            base += c.n;
        }
    }
    tfm_corpus_free(&c);
    tfm_spm_free(own);
    return rc;
}

/* One line of space-separated ids ("12 7 3", len bytes) into (*ids, *cap); the count, or
 * -1.  The line is read to its length: a NUL inside it is a bad id, not its end. */
static int64_t parse_ids(const char *line, size_t len, int vocab, int32_t **ids, int64_t *cap,
                         struct tfm_error *err)
{
    int64_t n = 0;
    const char *p = line, *end_line = line + len;
    for (;;) {
        while (p < end_line && (*p == ' ' || *p == '\t'))
            p++;
        if (p == end_line)
            return n;
        size_t k = 0;       /* the token: up to a space, a tab or the end */
        while (p + k < end_line && p[k] != ' ' && p[k] != '\t')
            k++;
        char *end;
        errno = 0;
        /* a sign or a digit first: strtol would pass over other white space and stop at NUL */
        int number = (p[0] >= '0' && p[0] <= '9') || p[0] == '+' || p[0] == '-';
        long v = number ? strtol(p, &end, 10) : 0;
        if (!number || end != p + k || errno || v < 0 || v >= vocab) {
            char q[64];
            tfm_fail(err, "'%s' is not a token id of this model (0 to %d)",
                     tfm_quote(q, sizeof q, p, k), vocab - 1);
            return -1;
        }
        if (n == *cap) {
            int64_t c = *cap ? *cap * 2 : 256;
            int32_t *q = realloc(*ids, (size_t)c * sizeof *q);
            if (!q) {
                tfm_fail(err, "out of memory");
                return -1;
            }
            *ids = q;
            *cap = c;
        }
        (*ids)[n++] = (int32_t)v;
        p += k;
    }
}

static int read_text(struct tfm_lines *in, const struct tfm_hyp_opts *o, tfm_hyp_fn fn,
                     void *ctx, struct tfm_error *err)
{
    const char *name = tfm_lines_name(in);
    int as_ids = (o->flags & TFM_HYP_TEXT_IDS) != 0;
    if (as_ids && !o->model)
        return tfm_fail(err, "%s: plain text input (token ids) needs %s", name,
                        o->model_option ? o->model_option : "a model");
    int vocab = as_ids ? tfm_spm_vocab_size(o->model) : 0;
    int32_t *ids = NULL;
    int64_t cap_ids = 0;
    char *text = NULL;
    size_t cap = 0;
    const char *line;
    size_t len;
    int k, rc = 0;
    while (rc == 0 && (k = tfm_lines_next(in, &line, &len, err)) == 1) {
        int64_t no = tfm_lines_number(in);
        struct tfm_hyp h = {.n = no - 1, .index = no - 1, .text = line, .len = len};
        if (as_ids) {
            if ((h.nids = parse_ids(line, len, vocab, &ids, &cap_ids, err)) < 0) {
                rc = tfm_error_prefix(err, "%s: line %lld", name, (long long)no);
                break;
            }
            h.ids = ids;
            h.text = NULL;
            h.len = 0;
            if (!(o->flags & TFM_HYP_IDS)) {
                int64_t n = tfm_hyp_decode_line(o->model, ids, h.nids, &text, &cap, err);
                if (n < 0) {
                    rc = tfm_error_prefix(err, "%s: line %lld", name, (long long)no);
                    break;
                }
                h.text = text;
                h.len = (size_t)n;
            }
        }
        rc = fn(ctx, &h, err);
    }
    if (rc == 0 && k < 0)
        rc = -1;
    free(ids);
    free(text);
    return rc;
}

int tfm_hypread(const char *path, const struct tfm_hyp_opts *o, tfm_hyp_fn fn, void *ctx,
                struct tfm_error *err)
{
    const char *name = "<stdin>";
    int fd = 0;
    if (path && strcmp(path, "-") != 0) {
        name = path;
        if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            return tfm_fail(err, "%s: %s", path, strerror(errno));
    }
    unsigned char peek[8];
    size_t npeek = 0;
    int rc = 0;
    while (npeek < sizeof peek) {   /* a pipe may deliver fewer bytes per read */
        ssize_t k = read(fd, peek + npeek, sizeof peek - npeek);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = tfm_fail(err, "%s: %s", name, strerror(errno));
            break;
        }
        if (k == 0)
            break;
        npeek += (size_t)k;
    }
    if (rc == 0 && tfm_is_stream_magic(peek, npeek)) {
        struct tfm_reader *r = tfm_reader_open_peeked(fd, name, peek, npeek, err);
        rc = r ? read_stream(r, o, fn, ctx, err) : -1;
        tfm_reader_close(r);
    } else if (rc == 0) {
        struct tfm_lines *in = tfm_lines_open_fd(fd, name, peek, npeek, err);
        rc = in ? read_text(in, o, fn, ctx, err) : -1;
        tfm_lines_close(in);
    }
    if (fd != 0)
        close(fd);
    return rc;
}

static int push_text(void *ctx, const struct tfm_hyp *h, struct tfm_error *err)
{
    return tfm_text_push(ctx, h->text, h->len, err);
}

int tfm_hypread_text(const char *path, struct tfm_text *t, struct tfm_error *err)
{
    tfm_text_set_name(t, !path || strcmp(path, "-") == 0 ? "<stdin>" : path);
    struct tfm_hyp_opts o = {.flags = TFM_HYP_BEST};
    return tfm_hypread(path, &o, push_text, t, err);
}
