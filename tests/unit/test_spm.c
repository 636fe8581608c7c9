/* test_spm.c: the SentencePiece wrapper (spm.h), the text input policy (lines.h) and the
 * encode/decode pipeline (tokenize.h), on a model trained here from the real onmt-toy-ende
 * sample (a few hundred sentences, a small vocabulary: about a second). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "corpus.h"
#include "lines.h"
#include "spm.h"
#include "stream.h"
#include "tokenize.h"

static char dir[256];           /* scratch directory */
static char data_src[512], data_tgt[512];
static struct tfm_spm *model;   /* trained once, used by most tests */

static const char *path(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void write_file(const char *p, const void *data, size_t n);
static void write_text(const char *p, const char *text)
{
    write_file(p, text, strlen(text));
}

static void write_file(const char *p, const void *data, size_t n)
{
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f))
        printf("# cannot write %s\n", p);
}

static size_t read_all(const char *p, char **out)
{
    FILE *f = fopen(p, "rb");
    *out = NULL;
    if (!f)
        return 0;
    size_t cap = 1 << 16, n = 0, k;
    char *b = malloc(cap);
    while ((k = fread(b + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap)
            b = realloc(b, cap *= 2);
    }
    fclose(f);
    *out = b;
    return n;
}

/* ---- UTF-8 and lines ---------------------------------------------------------------- */

static void test_utf8(void)
{
    size_t bad = 99;
    CHECK(tfm_utf8_valid("", 0, &bad));
    CHECK(tfm_utf8_valid("plain ascii text, long enough for the fast path", 47, &bad));
    CHECK(tfm_utf8_valid("Gr\xc3\xbc\xc3\x9f \xe2\x82\xac \xf0\x9f\x98\x80", 15, &bad));
    CHECK(tfm_utf8_valid("\xf4\x8f\xbf\xbf", 4, &bad));              /* U+10FFFF */
    CHECK(!tfm_utf8_valid("ab\xff", 3, &bad));
    CHECK_EQ_INT(bad, 2);
    CHECK(!tfm_utf8_valid("abcdefgh\x80z", 10, &bad));                /* lone continuation */
    CHECK_EQ_INT(bad, 8);
    CHECK(!tfm_utf8_valid("a\xc0\x80", 3, &bad));                     /* overlong NUL */
    CHECK_EQ_INT(bad, 1);
    CHECK(!tfm_utf8_valid("\xe0\x80\xaf", 3, &bad));                  /* overlong '/' */
    CHECK(!tfm_utf8_valid("\xed\xa0\x80", 3, &bad));                  /* surrogate */
    CHECK(!tfm_utf8_valid("\xf4\x90\x80\x80", 4, &bad));              /* > U+10FFFF */
    CHECK(!tfm_utf8_valid("xy\xe2\x82", 4, &bad));                    /* cut at the end */
    CHECK_EQ_INT(bad, 2);
    CHECK(!tfm_utf8_valid("\xc3(", 2, &bad));                         /* bad continuation */
    CHECK_EQ_INT(bad, 0);
}

/* Every line of p, joined with '|'; NULL and err on failure. */
static char *lines_of(const char *p, struct tfm_error *err)
{
    struct tfm_lines *l = tfm_lines_open(p, err);
    if (!l)
        return NULL;
    static char out[4096];
    out[0] = 0;
    const char *line;
    size_t len;
    int k;
    while ((k = tfm_lines_next(l, &line, &len, err)) == 1) {
        CHECK_EQ_INT(strlen(line), len);
        strncat(out, line, sizeof out - strlen(out) - 2);
        strcat(out, "|");
    }
    tfm_lines_close(l);
    return k < 0 ? NULL : out;
}

static void test_lines(void)
{
    struct tfm_error err;
    write_text(path("crlf.txt"), "one\r\ntwo\n\nthree\r\nlast");
    CHECK_STR(lines_of(path("crlf.txt"), &err), "one|two||three|last|");
    write_text(path("empty.txt"), "");
    CHECK_STR(lines_of(path("empty.txt"), &err), "");
    write_text(path("nl.txt"), "\n");
    CHECK_STR(lines_of(path("nl.txt"), &err), "|");
    write_text(path("mid-cr.txt"), "a\rb\n");                      /* only a final \r goes */
    CHECK_STR(lines_of(path("mid-cr.txt"), &err), "a\rb|");

    write_text(path("bad.txt"), "fine\nalso fine\nnot \xc3\x28 fine\n");
    CHECK(lines_of(path("bad.txt"), &err) == NULL);
    char want[600];
    snprintf(want, sizeof want, "%s: line 3: invalid UTF-8 at byte 5", path("bad.txt"));
    CHECK_STR(err.msg, want);

    /* a line of exactly TFM_LINE_MAX bytes is fine, one more byte is not */
    size_t n = TFM_LINE_MAX + 3;
    char *big = malloc(n + 2);
    memset(big, 'a', n + 2);
    big[0] = 'x';
    big[1] = '\n';
    big[2 + TFM_LINE_MAX] = '\n';
    write_file(path("max.txt"), big, n);
    struct tfm_lines *l = tfm_lines_open(path("max.txt"), &err);
    const char *line;
    size_t len;
    CHECK(l && tfm_lines_next(l, &line, &len, &err) == 1 && len == 1);
    CHECK(l && tfm_lines_next(l, &line, &len, &err) == 1 && len == TFM_LINE_MAX);
    CHECK(l && tfm_lines_next(l, &line, &len, &err) == 0);
    tfm_lines_close(l);
    big[2 + TFM_LINE_MAX] = 'a';
    write_file(path("long.txt"), big, n + 2);
    CHECK(lines_of(path("long.txt"), &err) == NULL);
    snprintf(want, sizeof want, "%s: line 2: longer than 1048576 bytes", path("long.txt"));
    CHECK_STR(err.msg, want);
    free(big);

    /* gzip, two members concatenated, read as text */
    gzFile g = gzopen(path("two.gz"), "wb");
    gzputs(g, "erste Zeile\nzweite ");
    gzclose(g);
    g = gzopen(path("b.gz"), "wb");
    gzputs(g, "Zeile\ndritte\n");
    gzclose(g);
    char *a, *b;
    size_t na = read_all(path("two.gz"), &a), nb = read_all(path("b.gz"), &b);
    a = realloc(a, na + nb);
    memcpy(a + na, b, nb);
    write_file(path("two.gz"), a, na + nb);
    CHECK_STR(lines_of(path("two.gz"), &err), "erste Zeile|zweite Zeile|dritte|");
    write_file(path("cut.gz"), a, na - 4);                            /* truncated member */
    CHECK(lines_of(path("cut.gz"), &err) == NULL);
    CHECK(strstr(err.msg, "gzip data truncated") != NULL);
    free(a);
    free(b);

    CHECK(lines_of(path("missing.txt"), &err) == NULL);
    CHECK(strstr(err.msg, "No such file or directory") != NULL);
}

/* ---- training and the model ---------------------------------------------------------- */

struct two_files {
    struct tfm_lines *l[2];
    int cur;
    int64_t given;
};

static int next_line(void *ctx, const char **line, size_t *len, struct tfm_error *err)
{
    struct two_files *t = ctx;
    while (t->cur < 2) {
        int k = tfm_lines_next(t->l[t->cur], line, len, err);
        if (k != 0) {
            t->given += k == 1;
            return k;
        }
        t->cur++;
    }
    return 0;
}

static void *train(const char *type, int vocab, int64_t max, size_t *n, struct tfm_error *err)
{
    struct tfm_spm_train_opts o;
    tfm_spm_train_defaults(&o);
    o.type = type;
    o.vocab_size = vocab;
    o.max_sentences = max;
    o.coverage = 1.0;
    struct two_files t = {{tfm_lines_open(data_src, err), tfm_lines_open(data_tgt, err)}, 0, 0};
    void *proto = NULL;
    if (!t.l[0] || !t.l[1] || tfm_spm_train(&o, next_line, &t, &proto, n, err))
        proto = NULL;
    tfm_lines_close(t.l[0]);
    tfm_lines_close(t.l[1]);
    return proto;
}

static void test_train_load(void)
{
    struct tfm_error err;
    size_t n = 0;
    void *proto = train("bpe", 1000, 3000, &n, &err);
    CHECK(proto != NULL);
    if (!proto) {
        printf("# %s\n", err.msg);
        return;
    }
    model = tfm_spm_load(proto, n, &err);
    CHECK(model != NULL);
    if (!model)
        return;
    CHECK_EQ_INT(tfm_spm_vocab_size(model), 1000);
    CHECK_STR(tfm_spm_piece(model, TFM_PAD_ID), "<pad>");
    CHECK_STR(tfm_spm_piece(model, TFM_UNK_ID), "<unk>");
    CHECK_STR(tfm_spm_piece(model, TFM_BOS_ID), "<s>");
    CHECK_STR(tfm_spm_piece(model, TFM_EOS_ID), "</s>");
    CHECK(tfm_spm_piece(model, 1000) == NULL);
    size_t m;
    const void *p = tfm_spm_proto(model, &m);
    CHECK(m == n && memcmp(p, proto, n) == 0);
    write_file(path("bpe.model"), proto, n);
    free(proto);

    struct tfm_spm *u = NULL;
    proto = train("unigram", 800, 3000, &n, &err);
    CHECK(proto && (u = tfm_spm_load(proto, n, &err)) != NULL);
    CHECK(u && tfm_spm_vocab_size(u) == 800);
    tfm_spm_free(u);
    free(proto);

    /* too large a vocabulary: a message that says what to do */
    CHECK(train("bpe", 200000, 101, &n, &err) == NULL);
    CHECK(strstr(err.msg, "vocabulary size 200000 too high") != NULL);
    CHECK(strstr(err.msg, "hard_vocab_limit=false") != NULL);

    CHECK(train("bpe", 1000, -1, &n, &err) == NULL);
    CHECK(strstr(err.msg, "sentence sample of -1") != NULL);

    /* load_file: a .model file; garbage; an empty file */
    struct tfm_spm *f = tfm_spm_load_file(path("bpe.model"), &err);
    CHECK(f && tfm_spm_vocab_size(f) == 1000);
    tfm_spm_free(f);
    write_text(path("junk.model"), "this is not a model\n");
    CHECK(tfm_spm_load_file(path("junk.model"), &err) == NULL);
    CHECK(strstr(err.msg, "not a SentencePiece model") != NULL);
    CHECK(tfm_spm_load_file(path("empty.txt"), &err) == NULL);
    CHECK(strstr(err.msg, "empty file") != NULL);
}

static void test_option_check(void)
{
    struct tfm_error err;
    CHECK(tfm_spm_train_option_check("hard_vocab_limit=false", &err) == 0);
    CHECK(tfm_spm_train_option_check("--split_digits=true", &err) == 0);
    CHECK(tfm_spm_train_option_check("eos_id=1", &err) < 0);
    CHECK(strstr(err.msg, "eos_id") != NULL);
    CHECK(tfm_spm_train_option_check("vocab_size", &err) < 0);
    CHECK(tfm_spm_train_option_check("=1", &err) < 0);
    /* what the trainer refuses, found by the trainer before any input */
    CHECK(tfm_spm_train_option_check("nonexistent_opt=1", &err) < 0);
    CHECK_STR(err.msg, "'nonexistent_opt=1': unknown field name \"nonexistent_opt\" in "
                       "TrainerSpec.");
    CHECK(tfm_spm_train_option_check("split_digits=maybe", &err) < 0);
    CHECK_STR(err.msg, "'split_digits=maybe': cannot parse \"maybe\" as bool.");
    CHECK(tfm_spm_train_option_check("max_sentence_length=5", &err) < 0);
    CHECK(strstr(err.msg, "'max_sentence_length=5': ") && strstr(err.msg, "max_sentence_length"));
    CHECK(tfm_spm_train_option_check("minloglevel=x", &err) < 0);
    CHECK_STR(err.msg, "'minloglevel=x': an integer expected");
    CHECK(tfm_spm_train_option_check("max_sentence_length=100", &err) == 0);
    CHECK(tfm_spm_train_option_check("normalization_rule_name=identity", &err) == 0);
    CHECK(tfm_spm_train_option_check("user_defined_symbols=<sep>,<cls>", &err) == 0);
}

static void test_encode_decode(void)
{
    if (!model)
        return t_skip("no model");
    struct tfm_error err;
    int32_t *ids = NULL;
    int64_t cap = 0;
    char *text = NULL;
    size_t tcap = 0;
    const char *s = "The European Parliament , Herr Präsident .";
    int64_t n = tfm_spm_encode(model, s, strlen(s), &ids, &cap, &err);
    CHECK(n > 3 && cap >= n);
    for (int64_t i = 0; i < n; i++)
        CHECK(ids[i] > TFM_EOS_ID && ids[i] < 1000);
    CHECK_EQ_INT(tfm_spm_decode(model, ids, n, &text, &tcap, &err), (int64_t)strlen(s));
    CHECK_STR(text, s);

    /* the buffer is reused: a shorter sentence overwrites from the start */
    CHECK_EQ_INT(tfm_spm_encode(model, "", 0, &ids, &cap, &err), 0);
    CHECK_EQ_INT(tfm_spm_decode(model, ids, 0, &text, &tcap, &err), 0);
    CHECK_STR(text, "");

    /* pad, bos, eos are dropped in decoding; an unknown id reads as spm_decode's " ⁇ " */
    n = tfm_spm_encode(model, "Herr", 4, &ids, &cap, &err);
    int32_t with[16] = {TFM_BOS_ID};
    memcpy(with + 1, ids, (size_t)n * sizeof *ids);
    with[n + 1] = TFM_EOS_ID;
    with[n + 2] = TFM_PAD_ID;
    with[n + 3] = TFM_PAD_ID;
    CHECK(tfm_spm_decode(model, with, n + 4, &text, &tcap, &err) == 4);
    CHECK_STR(text, "Herr");
    int32_t unk[3] = {ids[0], TFM_UNK_ID, ids[0]};
    CHECK(tfm_spm_decode(model, unk, 3, &text, &tcap, &err) > 0);
    CHECK(strstr(text, "\xe2\x81\x87") != NULL);

    int32_t bad[2] = {5, 1000};
    CHECK(tfm_spm_decode(model, bad, 2, &text, &tcap, &err) < 0);
    CHECK_STR(err.msg, "id 1000 at position 1 outside the vocabulary (1000)");
    free(ids);
    free(text);
}

/* ---- the encode pipeline ------------------------------------------------------------- */

static void test_stream(void)
{
    if (!model)
        return t_skip("no model");
    struct tfm_error err;
    const char *text = "Resumption of the session\n\nIch erkläre die Sitzung für eröffnet .\r\n"
                       "last line without newline";
    write_file(path("in.txt"), text, strlen(text));
    struct tfm_encode_opts o = {.bos = 1, .eos = 1, .threads = 1, .producer = "test"};
    CHECK(tfm_tokenize_encode(model, path("in.txt"), path("out.tfm"), &o, &err) == 0);
    CHECK_EQ_INT(o.sentences, 4);

    struct tfm_reader *r = tfm_reader_open(path("out.tfm"), &err);
    CHECK(r != NULL);
    if (!r)
        return;
    const struct tfm_header *h = tfm_reader_header(r);
    CHECK_STR(h->kind, TFM_KIND_TOKENS);
    CHECK_STR(tfm_header_get(h, "vocab.size"), "1000");
    CHECK_STR(tfm_header_get(h, "bos"), "1");
    CHECK_STR(tfm_header_get(h, "eos"), "1");
    CHECK_STR(tfm_header_get(h, "producer"), "test");
    size_t m;
    const void *p = tfm_spm_proto(model, &m);
    CHECK(h->spm && h->spm_size == m && memcmp(h->spm, p, m) == 0);
    struct tfm_corpus c;
    tfm_corpus_init(&c);
    CHECK(tfm_corpus_read(r, &c, 1000, &err) == 0);
    tfm_reader_close(r);
    CHECK_EQ_INT(c.n, 4);
    const char *want[4] = {"Resumption of the session", "",
                           "Ich erkläre die Sitzung für eröffnet .", "last line without newline"};
    int32_t *ids = NULL;
    int64_t cap = 0;
    for (int i = 0; i < 4 && c.n == 4; i++) {
        int64_t n = tfm_spm_encode(model, want[i], strlen(want[i]), &ids, &cap, &err);
        const int32_t *got = tfm_corpus_sent(&c, i);
        CHECK_EQ_INT(tfm_corpus_len(&c, i), n + 2);
        CHECK_EQ_INT(got[0], TFM_BOS_ID);
        CHECK_EQ_INT(got[n + 1], TFM_EOS_ID);
        CHECK(memcmp(got + 1, ids, (size_t)n * sizeof *ids) == 0);
    }
    free(ids);
    tfm_corpus_free(&c);

    /* the model embedded in a stream loads like the .model file */
    struct tfm_spm *e = tfm_spm_load_file(path("out.tfm"), &err);
    CHECK(e && tfm_spm_vocab_size(e) == 1000);
    tfm_spm_free(e);

    /* decode back: the text, CRLF gone */
    FILE *f = fopen(path("dec.txt"), "w");
    struct tfm_detok_opts d = {0};
    CHECK(tfm_tokenize_decode(path("out.tfm"), f, &d, &err) == 0);
    fclose(f);
    char *back;
    size_t nb = read_all(path("dec.txt"), &back);
    const char *expect = "Resumption of the session\n\nIch erkläre die Sitzung für eröffnet .\n"
                         "last line without newline\n";
    CHECK(nb == strlen(expect) && memcmp(back, expect, nb) == 0);
    free(back);

    /* invalid UTF-8: an error naming the line, no output file */
    write_text(path("bad.txt"), "good\nbad \xff\n");
    CHECK(tfm_tokenize_encode(model, path("bad.txt"), path("bad.tfm"), &o, &err) < 0);
    CHECK(strstr(err.msg, "line 2: invalid UTF-8 at byte 5") != NULL);
    struct stat st;
    CHECK(stat(path("bad.tfm"), &st) != 0);
}

/* Count "tokens.offsets" records (chunks) of a stream. */
static int chunks(const char *p)
{
    struct tfm_error err;
    struct tfm_reader *r = tfm_reader_open(p, &err);
    if (!r)
        return -1;
    struct tfm_record rec;
    int n = 0, k;
    while ((k = tfm_reader_next(r, &rec, &err)) == 1)
        n += strcmp(rec.name, "tokens.offsets") == 0;
    tfm_reader_close(r);
    return k < 0 ? -1 : n;
}

static void test_threads_chunks(void)
{
    if (!model)
        return t_skip("no model");
    /* More sentences than one chunk holds, most of them empty (fast), some real text:
     * every thread count must write the same bytes, chunked the same way. */
    int64_t lines = TFM_CHUNK_SENTS + 5000;
    FILE *f = fopen(path("many.txt"), "w");
    for (int64_t i = 0; i < lines; i++)
        fputs(i % 97 == 0 ? "Das ist ein Test .\n" : "\n", f);
    fclose(f);
    struct tfm_error err;
    char *ref = NULL, *got = NULL;
    size_t nref = 0;
    for (int t = 1; t <= 3; t++) {
        struct tfm_encode_opts o = {.eos = 1, .threads = t};
        const char *out = path(t == 1 ? "t1.tfm" : "tn.tfm");
        CHECK(tfm_tokenize_encode(model, path("many.txt"), out, &o, &err) == 0);
        CHECK_EQ_INT(o.sentences, lines);
        if (t == 1) {
            nref = read_all(out, &ref);
            CHECK_EQ_INT(chunks(out), 2);
        } else {
            size_t n = read_all(out, &got);
            CHECK(n == nref && ref && got && memcmp(ref, got, n) == 0);
            free(got);
        }
    }
    free(ref);
}

/* A hypotheses stream with a 2-best list: one output line per entry, in stream order. */
static void test_hypotheses(void)
{
    if (!model)
        return t_skip("no model");
    struct tfm_error err;
    struct tfm_header h;
    tfm_header_init(&h, TFM_KIND_HYPOTHESES);
    size_t m;
    const void *p = tfm_spm_proto(model, &m);
    CHECK(tfm_header_set_spm(&h, p, m, &err) == 0);
    struct tfm_writer *w = tfm_writer_open(path("hyp.tfm"), &h, 0, &err);
    tfm_header_free(&h);
    CHECK(w != NULL);
    if (!w)
        return;
    struct tfm_corpus c;
    tfm_corpus_init(&c);
    const char *sent[3] = {"Herr Präsident", "Herr", "die Sitzung"};
    int64_t index[3] = {0, 0, 1};
    float score[3] = {-0.5f, -0.9f, -0.2f};
    c.index = malloc(sizeof index);     /* push() grows index/score once they exist */
    c.score = malloc(sizeof score);
    c.cap_n = 0;
    int32_t *ids = NULL;
    int64_t cap = 0;
    for (int i = 0; i < 3; i++) {
        int64_t n = tfm_spm_encode(model, sent[i], strlen(sent[i]), &ids, &cap, &err);
        ids[n] = TFM_EOS_ID;
        CHECK(tfm_corpus_push(&c, ids, n + 1, &err) == 0);
    }
    memcpy(c.index, index, sizeof index);
    memcpy(c.score, score, sizeof score);
    CHECK(tfm_corpus_write(w, &c, &err) == 0);
    CHECK(tfm_writer_close(w, &err) == 0);
    tfm_corpus_free(&c);
    free(ids);

    FILE *f = fopen(path("hyp.txt"), "w");
    struct tfm_detok_opts d = {0};
    CHECK(tfm_tokenize_decode(path("hyp.tfm"), f, &d, &err) == 0);
    fclose(f);
    char *back;
    size_t nb = read_all(path("hyp.txt"), &back);
    const char *expect = "Herr Präsident\nHerr\ndie Sitzung\n";
    CHECK(back && nb == strlen(expect) && memcmp(back, expect, nb) == 0);
    free(back);
}

int main(void)
{
    const char *root = getenv("TFM_ROOT");
    snprintf(data_src, sizeof data_src, "%s/data/onmt-toy-ende/src-train.txt", root ? root : ".");
    snprintf(data_tgt, sizeof data_tgt, "%s/data/onmt-toy-ende/tgt-train.txt", root ? root : ".");
    snprintf(dir, sizeof dir, "%s/tfm-test-spm.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    t_run("utf8", test_utf8);
    t_run("lines", test_lines);
    t_run("train_load", test_train_load);
    t_run("option_check", test_option_check);
    t_run("encode_decode", test_encode_decode);
    t_run("stream", test_stream);
    t_run("threads_chunks", test_threads_chunks);
    t_run("hypotheses", test_hypotheses);
    tfm_spm_free(model);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", dir);
    return t_done();
}
