/* tokenize.c: train, encode and decode as library calls (see tokenize.h).
 *
 * Encode reads a batch of lines (about BATCH_BYTES of text), encodes it on T threads,
 * each a contiguous range of lines, then appends the results in input order to the
 * current chunk and writes a chunk whenever it is full.  Chunk boundaries depend only on
 * the sentences, never on batches or threads, so every thread count writes the same bytes.
 */
#include "tokenize.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "corpus.h"
#include "hypread.h"
#include "lines.h"
#include "output.h"
#include "stream.h"

enum {
    BATCH_BYTES = 1 << 20,      /* text per batch */
    BATCH_LINES = 16384,
    MAX_THREADS = 256,
};

/* ---- train -------------------------------------------------------------------------- */

struct train_input {
    const char *const *files;
    int nfiles, next;
    struct tfm_lines *cur;
    int64_t *text;          /* [nfiles] lines that are not empty, per file */
    int64_t *kept;          /* [nfiles] of those, lines not too long for the trainer */
    size_t max_line;        /* tfm_spm_train_max_line */
};

/* Every file read: an error naming the files that gave the trainer nothing (man page:
 * each file with no text is an error, not only all of them), before it trains. */
static int train_ended(const struct train_input *in, struct tfm_error *err)
{
    char names[512];
    size_t len = 0;
    int64_t text = 0;
    int named = 0;
    names[0] = 0;
    for (int i = 0; i < in->nfiles; i++) {
        if (in->kept[i] > 0)
            continue;
        text += in->text[i];
        if (len < sizeof names - 1)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", named ? ", " : "",
                                    strcmp(in->files[i], "-") == 0 ? "<stdin>" : in->files[i]);
        named++;
    }
    if (named == 0)
        return 0;
    if (text > 0)
        return tfm_fail(err, "%s: no text to train on (every line is empty or longer than "
                        "max_sentence_length, %zu bytes, which the trainer leaves out; "
                        "--trainer-option max_sentence_length=N raises it)", names,
                        in->max_line);
    return tfm_fail(err, "%s: no text to train on (%s)", names,
                    named == 1 ? "the file is empty or has only empty lines"
                    : named == in->nfiles ? "every file is empty or has only empty lines"
                                          : "each of them is empty or has only empty lines");
}

static int train_next(void *ctx, const char **line, size_t *len, struct tfm_error *err)
{
    struct train_input *in = ctx;
    for (;;) {
        if (!in->cur) {
            if (in->next == in->nfiles)
                return train_ended(in, err) ? -1 : 0;
            if (!(in->cur = tfm_lines_open(in->files[in->next++], err)))
                return -1;
        }
        int k = tfm_lines_next(in->cur, line, len, err);
        if (k == 1 && *len > 0) {
            in->text[in->next - 1]++;
            in->kept[in->next - 1] += *len <= in->max_line;
        }
        if (k != 0)
            return k;
        tfm_lines_close(in->cur);
        in->cur = NULL;
    }
}

/* Write n bytes to path, whole or not at all (output.h). */
static int write_atomic(const char *path, const void *data, size_t n, struct tfm_error *err)
{
    struct tfm_output o;
    if (tfm_output_open(&o, path, err))
        return -1;
    if (tfm_output_write(&o, data, n, err)) {
        tfm_output_abort(&o);
        return -1;
    }
    return tfm_output_commit(&o, err);
}

int tfm_tokenize_train(const char *const *files, int nfiles, const struct tfm_spm_train_opts *o,
                       const char *model_path, int *vocab, struct tfm_error *err)
{
    int stdin_used = 0;
    for (int i = 0; i < nfiles; i++) {     /* a missing file is found before training */
        if (strcmp(files[i], "-") == 0) {
            if (stdin_used++)
                return tfm_fail(err, "-: standard input named twice");
            continue;
        }
        int fd = open(files[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return tfm_fail(err, "%s: %s", files[i], strerror(errno));
        close(fd);
    }
    struct train_input in = {files, nfiles, 0, NULL, calloc((size_t)nfiles, sizeof *in.text),
                             calloc((size_t)nfiles, sizeof *in.kept),
                             tfm_spm_train_max_line(o)};
    if (!in.text || !in.kept) {
        free(in.text);
        free(in.kept);
        return tfm_fail(err, "out of memory");
    }
    void *proto = NULL;
    size_t n = 0;
    int rc = tfm_spm_train(o, train_next, &in, &proto, &n, err);
    tfm_lines_close(in.cur);
    free(in.text);
    free(in.kept);
    if (rc)
        return -1;
    struct tfm_spm *s = tfm_spm_load(proto, n, err);  /* what we write must load */
    if (!s) {
        free(proto);
        return tfm_error_prefix(err, "trained model");
    }
    *vocab = tfm_spm_vocab_size(s);
    tfm_spm_free(s);
    rc = write_atomic(model_path, proto, n, err);
    free(proto);
    return rc;
}

/* ---- encode ------------------------------------------------------------------------- */

/* Lines of one batch, copied out of the reader. */
struct batch {
    char *text;
    size_t used, cap;
    size_t *start, *len;        /* [n] */
    int64_t n;
    int64_t first_line;         /* line number of line 0 */
};

/* One thread's share of a batch: lines [from, to) and their ids. */
struct worker {
    const struct tfm_spm *spm;
    const struct batch *b;
    int64_t from, to;
    int bos, eos;
    int32_t *ids;               /* all ids of the range, bos/eos included */
    int64_t nids, cap_ids;
    int64_t *lens;              /* [to - from] ids per line */
    int64_t cap_lens;
    int32_t *tmp;               /* one line's ids from SentencePiece */
    int64_t cap_tmp;
    int64_t unknown;
    int64_t bad;                /* line (index in batch) that failed, or -1 */
    struct tfm_error err;
    pthread_t thread;
};

static int grow(void **p, int64_t *cap, int64_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    int64_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static void *work(void *arg)
{
    struct worker *w = arg;
    const struct batch *b = w->b;
    w->nids = 0;
    w->unknown = 0;
    w->bad = -1;
    if (grow((void **)&w->lens, &w->cap_lens, w->to - w->from, sizeof *w->lens)) {
        w->bad = w->from;
        tfm_fail(&w->err, "out of memory");
        return NULL;
    }
    for (int64_t i = w->from; i < w->to; i++) {
        int64_t n = tfm_spm_encode(w->spm, b->text + b->start[i], b->len[i], &w->tmp,
                                   &w->cap_tmp, &w->err);
        if (n < 0 || grow((void **)&w->ids, &w->cap_ids, w->nids + n + 2, sizeof *w->ids)) {
            if (n >= 0)
                tfm_fail(&w->err, "out of memory");
            w->bad = i;
            return NULL;
        }
        int32_t *dst = w->ids + w->nids;
        int64_t k = 0;
        if (w->bos)
            dst[k++] = TFM_BOS_ID;
        for (int64_t j = 0; j < n; j++) {
            w->unknown += w->tmp[j] == TFM_UNK_ID;
            dst[k++] = w->tmp[j];
        }
        if (w->eos)
            dst[k++] = TFM_EOS_ID;
        w->nids += k;
        w->lens[i - w->from] = k;
    }
    return NULL;
}

/* Read up to BATCH_BYTES / BATCH_LINES of lines into b; 0 lines at the end of input. */
static int read_batch(struct tfm_lines *in, struct batch *b, struct tfm_error *err)
{
    b->n = 0;
    b->used = 0;
    b->first_line = tfm_lines_number(in) + 1;
    int64_t cap_lines = b->start ? BATCH_LINES : 0;
    if (!b->start) {
        b->start = malloc(BATCH_LINES * sizeof *b->start);
        b->len = malloc(BATCH_LINES * sizeof *b->len);
        if (!b->start || !b->len)
            return tfm_fail(err, "out of memory");
        cap_lines = BATCH_LINES;
    }
    while (b->n < cap_lines && b->used < BATCH_BYTES) {
        const char *line;
        size_t len;
        int k = tfm_lines_next(in, &line, &len, err);
        if (k < 0)
            return -1;
        if (k == 0)
            break;
        if (b->used + len > b->cap) {
            size_t c = b->cap ? b->cap : BATCH_BYTES + 4096;
            while (c < b->used + len)
                c *= 2;
            char *t = realloc(b->text, c);
            if (!t)
                return tfm_fail(err, "out of memory");
            b->text = t;
            b->cap = c;
        }
        memcpy(b->text + b->used, line, len);
        b->start[b->n] = b->used;
        b->len[b->n] = len;
        b->used += len;
        b->n++;
    }
    return 0;
}

/* Split b over nw workers by bytes, run them (worker 0 on this thread), wait. */
static int encode_batch(struct worker *ws, int nw, const struct batch *b, struct tfm_error *err)
{
    if (nw > b->n)
        nw = b->n > 0 ? (int)b->n : 1;
    int64_t line = 0;
    size_t done = 0;
    for (int t = 0; t < nw; t++) {
        ws[t].b = b;
        ws[t].from = line;
        if (t == nw - 1) {
            ws[t].to = b->n;
            break;
        }
        size_t target = (size_t)((double)b->used * (t + 1) / nw);
        /* at least one line each, and one left for every worker after this one */
        while (line < b->n - (nw - 1 - t) && (line == ws[t].from || done < target))
            done += b->len[line++];
        ws[t].to = line;
    }
    int started = 1;
    for (int t = 1; t < nw; t++, started++)
        if (pthread_create(&ws[t].thread, NULL, work, &ws[t]) != 0)
            break;
    for (int t = started; t < nw; t++)     /* could not start a thread: do it here */
        work(&ws[t]);
    work(&ws[0]);
    for (int t = 1; t < started; t++)
        pthread_join(ws[t].thread, NULL);
    for (int t = 0; t < nw; t++)
        if (ws[t].bad >= 0)
            return tfm_fail(err, "line %lld: %s", (long long)(b->first_line + ws[t].bad),
                            ws[t].err.msg);
    return nw;
}

static int flush_chunk(struct tfm_writer *w, struct tfm_corpus *c, struct tfm_error *err)
{
    if (c->n == 0)
        return 0;
    if (tfm_corpus_write_chunk(w, c, 0, c->n, err))
        return -1;
    c->n = 0;
    return 0;
}

int tfm_tokenize_encode(const struct tfm_spm *s, const char *in_path, const char *out_path,
                        struct tfm_encode_opts *o, struct tfm_error *err)
{
    int nt = o->threads < 1 ? 1 : o->threads > MAX_THREADS ? MAX_THREADS : o->threads;
    o->sentences = o->tokens = o->unknown = 0;
    struct tfm_lines *in = tfm_lines_open(in_path, err);
    if (!in)
        return -1;

    struct tfm_header h;
    tfm_header_init(&h, TFM_KIND_TOKENS);
    size_t nproto;
    const void *proto = tfm_spm_proto(s, &nproto);
    struct tfm_writer *w = NULL;
    if (tfm_header_set_spm(&h, proto, nproto, err) ||
        tfm_header_setf(&h, err, "vocab.size", "%d", tfm_spm_vocab_size(s)) ||
        (o->bos && tfm_header_set(&h, "bos", "1", err)) ||
        (o->eos && tfm_header_set(&h, "eos", "1", err)) ||
        (o->producer && tfm_header_set(&h, "producer", o->producer, err)) ||
        !(w = tfm_writer_open(out_path, &h, o->flags, err))) {
        tfm_header_free(&h);
        tfm_lines_close(in);
        return -1;
    }
    tfm_header_free(&h);

    struct worker *ws = calloc((size_t)nt, sizeof *ws);
    struct batch b = {0};
    struct tfm_corpus c;
    tfm_corpus_init(&c);
    int rc = ws ? 0 : tfm_fail(err, "out of memory");
    for (int t = 0; t < nt && ws; t++) {
        ws[t].spm = s;
        ws[t].bos = o->bos;
        ws[t].eos = o->eos;
    }
    while (rc == 0) {
        if (read_batch(in, &b, err)) {
            rc = -1;
            break;
        }
        if (b.n == 0)
            break;
        int nw = encode_batch(ws, nt, &b, err);
        if (nw < 0) {
            rc = tfm_error_prefix(err, "%s", tfm_lines_name(in));
            break;
        }
        for (int t = 0; t < nw && rc == 0; t++) {
            const int32_t *ids = ws[t].ids;
            for (int64_t i = 0; i < ws[t].to - ws[t].from; i++) {
                int64_t len = ws[t].lens[i];
                int64_t held = c.n ? c.offsets[c.n] : 0;
                if ((c.n == TFM_CHUNK_SENTS || (c.n > 0 && held + len > TFM_CHUNK_IDS)) &&
                    flush_chunk(w, &c, err)) {
                    rc = -1;
                    break;
                }
                if (tfm_corpus_push(&c, ids, len, err)) {
                    rc = -1;
                    break;
                }
                ids += len;
                o->sentences++;
                o->tokens += len;
            }
            o->unknown += ws[t].unknown;
        }
    }
    if (rc == 0)
        rc = flush_chunk(w, &c, err);
    if (rc == 0)
        rc = tfm_writer_close(w, err);
    else
        tfm_writer_abort(w);

    for (int t = 0; ws && t < nt; t++) {
        free(ws[t].ids);
        free(ws[t].lens);
        free(ws[t].tmp);
    }
    free(ws);
    free(b.text);
    free(b.start);
    free(b.len);
    tfm_corpus_free(&c);
    tfm_lines_close(in);
    return rc;
}

/* ---- decode ------------------------------------------------------------------------- */

/* Where decoded sentences go, and the counts of what went. */
struct detok_out {
    FILE *out;
    struct tfm_detok_opts *o;
};

/* One sentence to the output: its text, or its ids with TFM_HYP_IDS. */
static int put_sentence(void *ctx, const struct tfm_hyp *h, struct tfm_error *err)
{
    struct detok_out *d = ctx;
    FILE *out = d->out;
    int bad = 0;
    if (h->text) {
        bad = fwrite(h->text, 1, h->len, out) != h->len;
    } else {
        for (int64_t i = 0; i < h->nids && !bad; i++)
            bad = fprintf(out, i ? " %d" : "%d", h->ids[i]) < 0;
    }
    if (bad || putc('\n', out) == EOF)
        return tfm_fail(err, "write error: %s", strerror(errno));
    d->o->sentences++;
    d->o->tokens += h->nids;
    for (int64_t i = 0; i < h->nids; i++)
        d->o->unknown += h->ids[i] == TFM_UNK_ID;
    return 0;
}

int tfm_tokenize_decode(const char *in_path, FILE *out, struct tfm_detok_opts *o,
                        struct tfm_error *err)
{
    struct tfm_hyp_opts ho = {
        .flags = TFM_HYP_TEXT_IDS | (o->ids ? TFM_HYP_IDS : 0),
        .model = o->model,
        .model_name = o->model_name,
        .model_option = "-m MODEL",
    };
    struct detok_out d = {out, o};
    o->sentences = o->tokens = o->unknown = 0;
    return tfm_hypread(in_path, &ho, put_sentence, &d, err);
}
