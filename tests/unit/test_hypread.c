/* test_hypread: the one reader of sentences as text (hypread.h) -- streams detokenized
 * with their own model or a matching given one, n-best lists to their best entry, text
 * lines and lines of ids, and the errors -- and the text in memory (text.h). */
#include <stdlib.h>

#include "check.h"
#include "corpus.h"
#include "hypread.h"
#include "spm.h"
#include "stream.h"
#include "text.h"

static struct tfm_spm *model, *other;

static const char *WORDS[] = {"the", "cat", "sat", "on", "mat", "a", "dog", "ran", "far",
                              "away", "big", "red", "sun", "rose", "early"};

struct gen {
    int i, n;
    unsigned s;
    char line[128];
};

static int next_line(void *ctx, const char **line, size_t *len, struct tfm_error *err)
{
    (void)err;
    struct gen *g = ctx;
    if (g->i++ == g->n)
        return 0;
    size_t k = 0;
    int words = 2 + g->i % 5;
    for (int w = 0; w < words; w++) {
        g->s = g->s * 1103515245u + 12345u;
        k += (size_t)snprintf(g->line + k, sizeof g->line - k, "%s%s", w ? " " : "",
                              WORDS[(g->s >> 16) % 15]);
    }
    *line = g->line;
    *len = k;
    return 1;
}

/* A model of vocab pieces (fewer if the text has fewer) from 400 generated lines, with one
 * more trainer option when option is not NULL. */
static struct tfm_spm *train(int vocab, unsigned seed, const char *option)
{
    struct tfm_spm_train_opts o;
    tfm_spm_train_defaults(&o);
    o.vocab_size = vocab;
    o.coverage = 1.0;
    const char *opts[] = {"hard_vocab_limit=false", option};
    o.options = opts;
    o.noptions = option ? 2 : 1;
    struct gen g = {0, 400, seed, ""};
    struct tfm_error err;
    void *proto = NULL;
    size_t n;
    if (tfm_spm_train(&o, next_line, &g, &proto, &n, &err)) {
        printf("# train: %s\n", err.msg);
        return NULL;
    }
    struct tfm_spm *s = tfm_spm_load(proto, n, &err);
    free(proto);
    return s;
}

/* A stream of kind with sentences sent[0..n) (encoded with s; NULL: ids 5, 6 each), with
 * hyp.index when index is not NULL; the model embedded when embed. */
static int write_stream(const char *p, const char *kind, const struct tfm_spm *s, int embed,
                        const char *const *sent, int n, const int64_t *index)
{
    struct tfm_error err;
    struct tfm_header h;
    tfm_header_init(&h, kind);
    size_t m = 0;
    const void *proto = embed ? tfm_spm_proto(s, &m) : NULL;
    if (embed && tfm_header_set_spm(&h, proto, m, &err))
        return -1;
    struct tfm_writer *w = tfm_writer_open(p, &h, 0, &err);
    tfm_header_free(&h);
    if (!w)
        return -1;
    struct tfm_corpus c;
    tfm_corpus_init(&c);
    if (index) {
        c.index = malloc((size_t)n * sizeof *c.index);
        c.score = malloc((size_t)n * sizeof *c.score);
    }
    int32_t *ids = NULL, two[2] = {5, 6};
    int64_t cap = 0;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int64_t k = 2;
        if (s)
            k = tfm_spm_encode(s, sent[i], strlen(sent[i]), &ids, &cap, &err);
        rc = k < 0 || tfm_corpus_push(&c, s ? ids : two, k, &err) ? -1 : 0;
        if (index) {
            c.index[i] = index[i];
            c.score[i] = -0.25f * (float)i;
        }
    }
    if (rc == 0)
        rc = tfm_corpus_write(w, &c, &err);
    rc = rc == 0 ? tfm_writer_close(w, &err) : (tfm_writer_abort(w), -1);
    tfm_corpus_free(&c);
    free(ids);
    return rc;
}

/* The callback: appends "INDEX:TEXT" (or the ids) and "|" to a buffer; fails on "far away". */
struct got {
    char buf[1024];
    size_t len;
    int calls;
};

static int collect(void *ctx, const struct tfm_hyp *h, struct tfm_error *err)
{
    struct got *g = ctx;
    g->calls++;
    if (h->text && strcmp(h->text, "far away") == 0)
        return tfm_fail(err, "stopped at %lld", (long long)h->n);
    g->len += (size_t)snprintf(g->buf + g->len, sizeof g->buf - g->len, "%lld:",
                               (long long)h->index);
    if (h->text) {
        CHECK_EQ_INT(strlen(h->text), h->len);
        g->len += (size_t)snprintf(g->buf + g->len, sizeof g->buf - g->len, "%s", h->text);
    } else {
        for (int64_t i = 0; i < h->nids; i++)
            g->len += (size_t)snprintf(g->buf + g->len, sizeof g->buf - g->len, "%s%d",
                                       i ? " " : "", h->ids[i]);
    }
    g->len += (size_t)snprintf(g->buf + g->len, sizeof g->buf - g->len, "|");
    return 0;
}

static const char *read_all(const char *p, int flags, const struct tfm_spm *s, int *rc,
                            struct tfm_error *err)
{
    static struct got g;
    memset(&g, 0, sizeof g);
    struct tfm_hyp_opts o = {flags, s, s ? "given.model" : NULL, "-m MODEL"};
    *rc = tfm_hypread(p, &o, collect, &g, err);
    return g.buf;
}

static void test_streams(void)
{
    if (!model || !other) {
        t_skip("no model");
        return;
    }
    struct tfm_error err;
    int rc;
    const char *sent[] = {"the cat sat", "a cat sat", "the dog ran", "red sun", "a dog ran"};
    const int64_t nbest[] = {0, 0, 1, 2, 1};
    CHECK(write_stream(t_path("nbest.tfm"), TFM_KIND_HYPOTHESES, model, 1, sent, 5, nbest) == 0);
    /* every entry in stream order; the best of each sentence in input order */
    CHECK_STR(read_all(t_path("nbest.tfm"), 0, NULL, &rc, &err),
              "0:the cat sat|0:a cat sat|1:the dog ran|2:red sun|1:a dog ran|");
    CHECK_EQ_INT(rc, 0);
    CHECK_STR(read_all(t_path("nbest.tfm"), TFM_HYP_BEST, NULL, &rc, &err),
              "0:the cat sat|1:the dog ran|2:red sun|");
    /* a given model must be the stream's own */
    CHECK_STR(read_all(t_path("nbest.tfm"), TFM_HYP_BEST, model, &rc, &err),
              "0:the cat sat|1:the dog ran|2:red sun|");
    read_all(t_path("nbest.tfm"), 0, other, &rc, &err);
    CHECK_EQ_INT(rc, -1);
    CHECK(strstr(err.msg, "is not given.model's") && strstr(err.msg, "(leave out -m: "));
    /* a tokens stream: no index */
    CHECK(write_stream(t_path("tok.tfm"), TFM_KIND_TOKENS, model, 1, sent, 2, NULL) == 0);
    CHECK_STR(read_all(t_path("tok.tfm"), TFM_HYP_BEST, NULL, &rc, &err),
              "0:the cat sat|1:a cat sat|");
    /* the callback's failure stops the reading and is passed on as it is */
    const char *stop[] = {"red sun", "far away", "a dog"};
    CHECK(write_stream(t_path("stop.tfm"), TFM_KIND_TOKENS, model, 1, stop, 3, NULL) == 0);
    CHECK_STR(read_all(t_path("stop.tfm"), 0, NULL, &rc, &err), "0:red sun|");
    CHECK_EQ_INT(rc, -1);
    CHECK_STR(err.msg, "stopped at 1");
    /* tfm_hypread_text: the best hypotheses, named after the file */
    struct tfm_text t;
    tfm_text_init(&t);
    CHECK(tfm_hypread_text(t_path("nbest.tfm"), &t, &err) == 0 || !printf("# %s\n", err.msg));
    CHECK_EQ_INT(t.n, 3);
    if (t.n == 3)
        CHECK_STR(tfm_text_line(&t, 1), "the dog ran");
    CHECK_STR(t.name, t_path("nbest.tfm"));
    tfm_text_free(&t);
}

static void test_stream_errors(void)
{
    struct tfm_error err;
    int rc;
    char want[1024];
    /* n-best lists must cover every sentence, and no index past the entries */
    const int64_t gap[] = {0, 2, 2}, past[] = {0, 3, 1};
    const char *none[] = {"", "", ""};
    CHECK(write_stream(t_path("gap.tfm"), TFM_KIND_HYPOTHESES, NULL, 0, none, 3, gap) == 0);
    CHECK(write_stream(t_path("past.tfm"), TFM_KIND_HYPOTHESES, NULL, 0, none, 3, past) == 0);
    CHECK_STR(read_all(t_path("gap.tfm"), TFM_HYP_IDS, NULL, &rc, &err), "0:5 6|2:5 6|2:5 6|");
    read_all(t_path("gap.tfm"), TFM_HYP_IDS | TFM_HYP_BEST, NULL, &rc, &err);
    snprintf(want, sizeof want, "%s: no hypothesis for sentence 1, though hyp.index goes up to 2 "
             "(hypothesis 1): every sentence from 0 to the last must have one", t_path("gap.tfm"));
    CHECK_STR(err.msg, want);
    /* an index past the entries: the sentence missing is named, not the entry count */
    read_all(t_path("past.tfm"), TFM_HYP_IDS | TFM_HYP_BEST, NULL, &rc, &err);
    snprintf(want, sizeof want, "%s: no hypothesis for sentence 2, though hyp.index goes up to 3 "
             "(hypothesis 1): every sentence from 0 to the last must have one",
             t_path("past.tfm"));
    CHECK_STR(err.msg, want);
    const int64_t far[] = {0, 1, INT64_MAX - 1};    /* no slot per number */
    CHECK(write_stream(t_path("far.tfm"), TFM_KIND_HYPOTHESES, NULL, 0, none, 3, far) == 0);
    read_all(t_path("far.tfm"), TFM_HYP_IDS | TFM_HYP_BEST, NULL, &rc, &err);
    CHECK_EQ_INT(rc, -1);
    CHECK(strstr(err.msg, ": no hypothesis for sentence 2, though hyp.index goes up to ") != NULL);
    /* no model to detokenize with: how to give one, when there is a way */
    read_all(t_path("gap.tfm"), 0, NULL, &rc, &err);
    snprintf(want, sizeof want, "%s: no embedded SentencePiece model; give one with -m MODEL",
             t_path("gap.tfm"));
    CHECK_STR(err.msg, want);
    struct got g = {0};
    struct tfm_hyp_opts o = {0};
    CHECK(tfm_hypread(t_path("gap.tfm"), &o, collect, &g, &err) == -1);
    snprintf(want, sizeof want,
             "%s: the stream has no embedded SentencePiece model to detokenize with",
             t_path("gap.tfm"));
    CHECK_STR(err.msg, want);
    /* another kind of stream */
    CHECK(write_stream(t_path("ck.tfm"), "checkpoint", NULL, 0, none, 0, NULL) == 0);
    read_all(t_path("ck.tfm"), TFM_HYP_IDS, NULL, &rc, &err);
    snprintf(want, sizeof want, "%s: a 'checkpoint' stream, expected tokens or hypotheses",
             t_path("ck.tfm"));
    CHECK_STR(err.msg, want);
    read_all(t_path("missing.tfm"), 0, NULL, &rc, &err);
    snprintf(want, sizeof want, "%s: No such file or directory", t_path("missing.tfm"));
    CHECK_STR(err.msg, want);
    CHECK(g.calls == 0);
}

static void write_file(const char *p, const char *s)
{
    FILE *f = fopen(p, "w");
    fputs(s, f);
    fclose(f);
}

static void test_text(void)
{
    struct tfm_error err;
    int rc;
    char want[1024];
    write_file(t_path("h.txt"), "the cat\r\n\nred sun");
    CHECK_STR(read_all(t_path("h.txt"), TFM_HYP_BEST, NULL, &rc, &err), "0:the cat|1:|2:red sun|");
    CHECK_EQ_INT(rc, 0);
    /* lines of ids: detokenized with the given model, or passed on as ids */
    write_file(t_path("ids.txt"), "7 8\n\n");
    CHECK_STR(read_all(t_path("ids.txt"), TFM_HYP_TEXT_IDS | TFM_HYP_IDS, model, &rc, &err),
              "0:7 8|1:|");
    read_all(t_path("ids.txt"), TFM_HYP_TEXT_IDS, NULL, &rc, &err);
    snprintf(want, sizeof want, "%s: plain text input (token ids) needs -m MODEL",
             t_path("ids.txt"));
    CHECK_STR(err.msg, want);
    if (model) {
        int32_t *ids = NULL;
        int64_t cap = 0, n = tfm_spm_encode(model, "the dog", 7, &ids, &cap, &err);
        char line[256] = "";
        for (int64_t i = 0, k = 0; i < n; i++)
            k += snprintf(line + k, sizeof line - (size_t)k, "%s%d", i ? " " : "", ids[i]);
        strcat(line, "\n");
        write_file(t_path("ids2.txt"), line);
        free(ids);
        CHECK_STR(read_all(t_path("ids2.txt"), TFM_HYP_TEXT_IDS, model, &rc, &err), "0:the dog|");
        write_file(t_path("bad.txt"), "5 6\n7 x 9\n");
        read_all(t_path("bad.txt"), TFM_HYP_TEXT_IDS, model, &rc, &err);
        snprintf(want, sizeof want, "%s: line 2: 'x' is not a token id of this model (0 to %d)",
                 t_path("bad.txt"), tfm_spm_vocab_size(model) - 1);
        CHECK_STR(err.msg, want);
    }
    /* the text type: lines in one buffer, joined with newlines */
    struct tfm_text t;
    tfm_text_init(&t);
    CHECK(tfm_text_read(&t, t_path("h.txt"), &err) == 0);
    CHECK(tfm_text_push(&t, "last", 4, &err) == 0);
    CHECK_EQ_INT(t.n, 4);
    CHECK_STR(tfm_text_line(&t, 0), "the cat");
    CHECK_EQ_INT(tfm_text_len(&t, 1), 0);
    CHECK_EQ_INT(tfm_text_len(&t, 3), 4);
    CHECK_STR(t.name, t_path("h.txt"));
    size_t len;
    char *all = tfm_text_join(&t, &len, &err);
    CHECK_STR(all, "the cat\n\nred sun\nlast\n");
    CHECK_EQ_INT(len, 22);
    free(all);
    tfm_text_free(&t);
    all = tfm_text_join(&t, &len, &err);     /* empty */
    CHECK_STR(all, "");
    free(all);
    for (int i = 0; i < 5000; i++)      /* growth keeps earlier lines */
        CHECK(tfm_text_push(&t, "abcdefghijklmnopqrstuvwxyz", (size_t)(i % 27), &err) == 0);
    CHECK_EQ_INT(t.n, 5000);
    CHECK_EQ_INT(tfm_text_len(&t, 4998), 4998 % 27);
    CHECK_STR(tfm_text_line(&t, 28), "a");
    tfm_text_free(&t);
    CHECK(tfm_text_read(&t, t_path("nothing.txt"), &err) == -1);
    tfm_text_free(&t);
}

/* The id of a piece, or -1. */
static int piece_id(const struct tfm_spm *s, const char *piece)
{
    for (int i = 0; i < tfm_spm_vocab_size(s); i++)
        if (strcmp(tfm_spm_piece(s, i), piece) == 0)
            return i;
    return -1;
}

/* Byte-fallback pieces decode to any byte: a newline, a NUL, a carriage return and DEL
 * come out as U+FFFD, a tab as itself; so do the line breaks of more than one byte: NEL
 * (U+0085, a C1 control), U+2028 and U+2029, and another C1 control (U+009F), while a
 * no-break space (U+00A0, C2 A0, next to them in UTF-8) is kept.  From a corpus in memory
 * (tfm-decode --text's way) and from lines of ids (tfm-tokenize decode's). */
static void test_one_line(void)
{
    struct tfm_spm *bf = train(400, 3, "byte_fallback=true");
    if (!bf) {
        t_skip("no byte-fallback model");
        return;
    }
    struct tfm_error err;
    int32_t *ids = NULL;
    int64_t cap = 0, n = tfm_spm_encode(bf, "cat", 3, &ids, &cap, &err);
    const char *bytes[] = {"<0x0A>", "<0x00>", "<0x0D>", "<0x09>", "<0x7F>",
                           "<0xC2>", "<0x85>", "<0xE2>", "<0x80>", "<0xA8>",
                           "<0xC2>", "<0xA0>", "<0xE2>", "<0x80>", "<0xA9>",
                           "<0xC2>", "<0x9F>"};
    enum { NB = sizeof bytes / sizeof *bytes };
    int32_t sent[8 + NB];
    CHECK(n > 0 && n <= 8);
    if (n < 0 || n > 8)
        n = 0;
    for (int64_t i = 0; i < n; i++)
        sent[i] = ids[i];
    for (int i = 0; i < NB; i++)
        CHECK((sent[n + i] = piece_id(bf, bytes[i])) >= 0);
    free(ids);
#define R "\xef\xbf\xbd"
    const char *want = "0:cat" R R R "\t" R R R "\xc2\xa0" R R "|";
#undef R

    struct tfm_corpus c;
    tfm_corpus_init(&c);
    CHECK(tfm_corpus_push(&c, sent, n + NB, &err) == 0);
    struct got g = {0};
    CHECK(tfm_hypread_corpus(&c, bf, 0, NULL, collect, &g, &err) == 0);
    CHECK_STR(g.buf, want);
    tfm_corpus_free(&c);

    char line[512] = "";
    for (int64_t i = 0, k = 0; i < n + NB; i++)
        k += snprintf(line + k, sizeof line - (size_t)k, "%s%d", i ? " " : "", sent[i]);
    strcat(line, "\n");
    write_file(t_path("bf.txt"), line);
    int rc;
    CHECK_STR(read_all(t_path("bf.txt"), TFM_HYP_TEXT_IDS, bf, &rc, &err), want);
    CHECK_EQ_INT(rc, 0);

    /* separators alone: U+2028 and U+2029 are as long as U+FFFD, so the text keeps its
     * length and must still change (tfm_hyp_decode_line directly, and a line of ids) */
    const char *seps[] = {"<0xE2>", "<0x80>", "<0xA8>", "<0xE2>", "<0x80>", "<0xA9>"};
    int32_t only[6];
    for (int i = 0; i < 6; i++)
        CHECK((only[i] = piece_id(bf, seps[i])) >= 0);
    char *text = NULL;
    size_t tcap = 0;
    CHECK_EQ_INT(tfm_hyp_decode_line(bf, only, 3, &text, &tcap, &err), 3);
    CHECK_STR(text, "\xef\xbf\xbd");
    CHECK_EQ_INT(tfm_hyp_decode_line(bf, only, 6, &text, &tcap, &err), 6);
    CHECK_STR(text, "\xef\xbf\xbd\xef\xbf\xbd");
    free(text);
    snprintf(line, sizeof line, "%d %d %d\n", only[3], only[4], only[5]);
    write_file(t_path("sep.txt"), line);
    CHECK_STR(read_all(t_path("sep.txt"), TFM_HYP_TEXT_IDS, bf, &rc, &err), "0:\xef\xbf\xbd|");
    CHECK_EQ_INT(rc, 0);
    tfm_spm_free(bf);
}

int main(void)
{
    model = train(60, 1, NULL);
    other = train(45, 2, NULL);
    t_run("streams: own or matching model, n-best to the best, callback errors", test_streams);
    t_run("stream errors: index gaps and overruns, no model, wrong kind", test_stream_errors);
    t_run("text lines, lines of ids, the text type", test_text);
    t_run("decoded text is one line: control characters and line separators are U+FFFD", test_one_line);
    tfm_spm_free(model);
    tfm_spm_free(other);
    return t_done();
}
