/* test_stream.c: the tensor stream: round trips of every dtype and shape, raw and
 * deflated, through a regular file (memory-mapped) and a pipe; headers; alignment;
 * atomic writes; corpus chunks; and corruption found at the right record and byte. */
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "corpus.h"
#include "dump.h"
#include "stream.h"

static char dir[] = "/tmp/tfm-test-stream.XXXXXX";

static void path_in_dir(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
}

/* A deterministic payload of n bytes: compressible when smooth, not otherwise. */
static void fill(unsigned char *p, size_t n, uint32_t seed, int smooth)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = smooth ? (unsigned char)(i / 97) : (unsigned char)(x >> 24);
    }
}

struct shape { int rank; int64_t dims[TFM_MAX_RANK]; };
static const struct shape SHAPES[] = {
    {0, {0}}, {1, {0}}, {1, {1}}, {1, {1000}}, {2, {3, 7}}, {3, {2, 0, 5}},
    {4, {2, 3, 4, 5}}, {8, {1, 2, 1, 2, 1, 2, 1, 3}}, {2, {64, 129}},
};
enum { NSHAPES = sizeof SHAPES / sizeof SHAPES[0] };

static int64_t count_of(const struct shape *s)
{
    int64_t c = 1;
    for (int i = 0; i < s->rank; i++)
        c *= s->dims[i];
    return c;
}

/* Write every dtype x shape to path with flags, then read back from a file and a pipe. */
static void write_all(const char *path, int flags)
{
    struct tfm_error err;
    struct tfm_header h;
    tfm_header_init(&h, "checkpoint");
    CHECK(tfm_header_set(&h, "producer", "test_stream", &err) == 0);
    unsigned char spm[300];
    fill(spm, sizeof spm, 7, 0);
    CHECK(tfm_header_set_spm(&h, spm, sizeof spm, &err) == 0);
    struct tfm_writer *w = tfm_writer_open(path, &h, flags, &err);
    CHECK(w != NULL);
    tfm_header_free(&h);
    if (!w)
        return;
    for (int dt = TFM_U8; dt <= TFM_F32; dt++) {
        for (int s = 0; s < NSHAPES; s++) {
            size_t nbytes = (size_t)count_of(&SHAPES[s]) * tfm_dtype_size(dt);
            unsigned char *p = malloc(nbytes + 1);
            fill(p, nbytes, (uint32_t)(dt * 100 + s), s % 2);
            char name[64];
            snprintf(name, sizeof name, "t.%s.%d", tfm_dtype_name(dt), s);
            CHECK(tfm_writer_put(w, name, dt, SHAPES[s].rank, SHAPES[s].dims, p, &err) == 0);
            free(p);
        }
    }
    CHECK(tfm_writer_close(w, &err) == 0);
}

static void read_all(struct tfm_reader *r)
{
    struct tfm_error err;
    CHECK(r != NULL);
    if (!r)
        return;
    const struct tfm_header *h = tfm_reader_header(r);
    CHECK_STR(h->kind, "checkpoint");
    CHECK_STR(tfm_header_get(h, "producer"), "test_stream");
    unsigned char spm[300];
    fill(spm, sizeof spm, 7, 0);
    CHECK(h->spm_size == sizeof spm && memcmp(h->spm, spm, sizeof spm) == 0);
    struct tfm_record rec;
    for (int dt = TFM_U8; dt <= TFM_F32; dt++) {
        for (int s = 0; s < NSHAPES; s++) {
            CHECK(tfm_reader_next(r, &rec, &err) == 1);
            char name[64];
            snprintf(name, sizeof name, "t.%s.%d", tfm_dtype_name(dt), s);
            CHECK_STR(rec.name, name);
            CHECK_EQ_INT(rec.dtype, dt);
            CHECK_EQ_INT(rec.rank, SHAPES[s].rank);
            for (int i = 0; i < rec.rank; i++)
                CHECK_EQ_INT(rec.dims[i], SHAPES[s].dims[i]);
            size_t nbytes = (size_t)count_of(&SHAPES[s]) * tfm_dtype_size(dt);
            CHECK_EQ_INT(rec.nbytes, nbytes);
            CHECK(((uintptr_t)rec.data % TFM_ALIGN) == 0);
            unsigned char *p = malloc(nbytes + 1);
            fill(p, nbytes, (uint32_t)(dt * 100 + s), s % 2);
            CHECK(memcmp(rec.data, p, nbytes) == 0);
            free(p);
        }
    }
    CHECK(tfm_reader_next(r, &rec, &err) == 0);
    CHECK(tfm_reader_next(r, &rec, &err) == 0);   /* stays at the end */
    tfm_reader_close(r);
}

static int pipe_fd = -1;    /* read end of the last open_via_pipe (the reader keeps it open) */

/* Read path through a pipe (a child copies it), so the non-mmap path is exercised. */
static struct tfm_reader *open_via_pipe(const char *path, pid_t *child)
{
    if ((pipe_fd = t_pipe_from(path, child)) < 0)
        return NULL;
    struct tfm_error err;
    struct tfm_reader *r = tfm_reader_open_fd(pipe_fd, "<pipe>", &err);
    if (!r)
        printf("# %s\n", err.msg);
    return r;
}

static void roundtrip(int flags)
{
    char path[256];
    path_in_dir(path, sizeof path, flags ? "all.z.tfm" : "all.tfm");
    write_all(path, flags);
    struct tfm_error err;
    read_all(tfm_reader_open(path, &err));
    pid_t child = -1;
    struct tfm_reader *r = open_via_pipe(path, &child);
    read_all(r);
    int status;
    waitpid(child, &status, 0);
}

static void test_roundtrip_raw(void) { roundtrip(0); }
static void test_roundtrip_deflate(void) { roundtrip(TFM_DEFLATE); }

static void test_deflate_smaller(void)
{
    char a[256], b[256];
    path_in_dir(a, sizeof a, "all.tfm");
    path_in_dir(b, sizeof b, "all.z.tfm");
    struct stat sa, sb;
    CHECK(stat(a, &sa) == 0 && stat(b, &sb) == 0);
    CHECK(sb.st_size < sa.st_size);   /* half the payloads are smooth: they must shrink */
}

static void test_dtypes(void)
{
    CHECK_EQ_INT(tfm_dtype_size(TFM_U8), 1);
    CHECK_EQ_INT(tfm_dtype_size(TFM_U16), 2);
    CHECK_EQ_INT(tfm_dtype_size(TFM_I32), 4);
    CHECK_EQ_INT(tfm_dtype_size(TFM_I64), 8);
    CHECK_EQ_INT(tfm_dtype_size(TFM_F16), 2);
    CHECK_EQ_INT(tfm_dtype_size(TFM_BF16), 2);
    CHECK_EQ_INT(tfm_dtype_size(TFM_F32), 4);
    CHECK_EQ_INT(tfm_dtype_size(0), 0);
    CHECK_EQ_INT(tfm_dtype_size(8), 0);
    CHECK_EQ_INT(tfm_dtype_parse("bf16"), TFM_BF16);
    CHECK_EQ_INT(tfm_dtype_parse("f64"), 0);
    /* known conversions: 1.0, -2.0, 65504 (f16 max), smallest subnormal, 0.1 in bf16 */
    CHECK(tfm_f16_to_f32(0x3c00) == 1.0f);
    CHECK(tfm_f16_to_f32(0xc000) == -2.0f);
    CHECK(tfm_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(tfm_f16_to_f32(0x0001) == 5.9604644775390625e-8f);
    CHECK(tfm_bf16_to_f32(0x3dcd) == 0.10009765625f);
    CHECK_EQ_INT(tfm_crc32(0, "123456789", 9), 0xcbf43926);   /* the CRC-32 check value */
}

static void test_header(void)
{
    struct tfm_error err;
    struct tfm_header h, c;
    tfm_header_init(&h, "tokens");
    CHECK(tfm_header_set(&h, "a", "1", &err) == 0);
    CHECK(tfm_header_set(&h, "a", "2", &err) == 0);           /* replaces */
    CHECK(tfm_header_setf(&h, &err, "b.c-d_e", "%d", 42) == 0);
    CHECK(tfm_header_set(&h, "bad key", "x", &err) == -1);
    CHECK(tfm_header_set(&h, "k", "two\nlines", &err) == -1);
    CHECK_STR(tfm_header_get(&h, "a"), "2");
    CHECK_STR(tfm_header_get(&h, "b.c-d_e"), "42");
    CHECK_STR(tfm_header_get(&h, "kind"), "tokens");
    CHECK(tfm_header_get(&h, "zzz") == NULL);
    CHECK_EQ_INT(tfm_header_vocab_id(&h), 0);
    CHECK(tfm_header_set_spm(&h, "abc", 3, &err) == 0);
    CHECK_EQ_INT(tfm_header_vocab_id(&h), 0x352441c2);        /* crc32("abc") */
    CHECK_STR(tfm_header_get(&h, "spm.crc32"), "352441c2");
    CHECK(tfm_header_copy(&c, &h, &err) == 0);
    CHECK_STR(tfm_header_get(&c, "a"), "2");
    CHECK_EQ_INT(tfm_header_vocab_id(&c), 0x352441c2);
    tfm_header_free(&c);
    for (int i = 0; i < TFM_MAX_META; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        tfm_header_set(&h, k, "v", &err);
    }
    CHECK(tfm_header_set(&h, "one.too.many", "v", &err) == -1);
    tfm_header_free(&h);
}

/* A writer that is aborted, or not yet closed, leaves no file at its path. */
static void test_atomic(void)
{
    char path[256];
    path_in_dir(path, sizeof path, "atomic.tfm");
    struct tfm_error err;
    struct tfm_header h;
    tfm_header_init(&h, "tokens");
    struct tfm_writer *w = tfm_writer_open(path, &h, 0, &err);
    CHECK(w != NULL);
    int64_t d = 4;
    int32_t v[4] = {1, 2, 3, 4};
    CHECK(tfm_writer_put(w, "x", TFM_I32, 1, &d, v, &err) == 0);
    CHECK(access(path, F_OK) != 0);
    tfm_writer_abort(w);
    CHECK(access(path, F_OK) != 0);
    w = tfm_writer_open(path, &h, 0, &err);
    CHECK(tfm_writer_put(w, "x", TFM_I32, 1, &d, v, &err) == 0);
    CHECK(tfm_writer_put(w, "bad name", TFM_I32, 1, &d, v, &err) == -1);
    CHECK(tfm_writer_put(w, "x", 99, 1, &d, v, &err) == -1);
    int64_t neg = -1;
    CHECK(tfm_writer_put(w, "x", TFM_I32, 1, &neg, v, &err) == -1);
    CHECK(tfm_writer_close(w, &err) == 0);
    CHECK(access(path, F_OK) == 0);
    tfm_header_free(&h);
    /* and nothing else is left in the directory but the finished files */
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(access(tmp, F_OK) != 0);
}

static void test_corpus(void)
{
    char path[256];
    path_in_dir(path, sizeof path, "corpus.tfm");
    struct tfm_error err;
    struct tfm_corpus c;
    tfm_corpus_init(&c);
    /* 150000 sentences of lengths 0..20: more than two chunks */
    int32_t ids[21];
    for (int i = 0; i < 21; i++)
        ids[i] = 100 + i;
    for (int i = 0; i < 150000; i++)
        CHECK(tfm_corpus_push(&c, ids, i % 21, &err) == 0);
    struct tfm_header h;
    tfm_header_init(&h, TFM_KIND_TOKENS);
    struct tfm_writer *w = tfm_writer_open(path, &h, TFM_DEFLATE, &err);
    CHECK(tfm_corpus_write(w, &c, &err) == 0);
    CHECK(tfm_writer_close(w, &err) == 0);
    tfm_header_free(&h);

    struct tfm_reader *r = tfm_reader_open(path, &err);
    struct tfm_corpus d;
    tfm_corpus_init(&d);
    CHECK(tfm_corpus_read(r, &d, 0, &err) == 0);
    tfm_reader_close(r);
    CHECK_EQ_INT(d.n, 150000);
    CHECK_EQ_INT(d.offsets[d.n], c.offsets[c.n]);
    CHECK(memcmp(d.offsets, c.offsets, (size_t)(c.n + 1) * 8) == 0);
    CHECK(memcmp(d.ids, c.ids, (size_t)c.offsets[c.n] * 4) == 0);
    CHECK_EQ_INT(tfm_corpus_len(&d, 20), 20);
    CHECK_EQ_INT(tfm_corpus_sent(&d, 20)[19], 119);
    tfm_corpus_free(&d);

    /* chunk at a time: the same sentences, in pieces of at most TFM_CHUNK_SENTS */
    r = tfm_reader_open(path, &err);
    tfm_corpus_init(&d);
    int64_t seen = 0, chunks = 0;
    int k;
    while ((k = tfm_corpus_read_chunk(r, &d, 0, &err)) == 1) {
        CHECK(d.n <= TFM_CHUNK_SENTS);
        for (int64_t i = 0; i < d.n; i++)
            CHECK_EQ_INT(tfm_corpus_len(&d, i), (seen + i) % 21);
        seen += d.n;
        chunks++;
    }
    CHECK_EQ_INT(k, 0);
    CHECK_EQ_INT(d.n, 0);
    CHECK_EQ_INT(seen, 150000);
    CHECK_EQ_INT(chunks, 3);
    tfm_reader_close(r);
    tfm_corpus_free(&d);

    /* a vocabulary bound catches an id out of range, naming the record */
    r = tfm_reader_open(path, &err);
    tfm_corpus_init(&d);
    CHECK(tfm_corpus_read(r, &d, 110, &err) == -1);
    CHECK(strstr(err.msg, "'tokens.ids'") && strstr(err.msg, "outside the vocabulary"));
    tfm_reader_close(r);
    tfm_corpus_free(&d);
    tfm_corpus_free(&c);

    /* the bad id named by its line over the stream (not the chunk) and its token in it;
     * with no vocabulary size, a negative one said as such */
    tfm_corpus_init(&c);
    for (int i = 0; i < TFM_CHUNK_SENTS + 5; i++)
        CHECK(tfm_corpus_push(&c, ids, i % 4, &err) == 0);
    c.ids[c.offsets[TFM_CHUNK_SENTS + 3] + 1] = -3;     /* line 65540, token 2 */
    c.ids[c.offsets[2] + 1] = 500;                      /* line 3, token 2 */
    tfm_header_init(&h, TFM_KIND_TOKENS);
    w = tfm_writer_open(path, &h, 0, &err);
    CHECK(tfm_corpus_write(w, &c, &err) == 0);
    CHECK(tfm_writer_close(w, &err) == 0);
    tfm_header_free(&h);
    r = tfm_reader_open(path, &err);
    tfm_corpus_init(&d);
    CHECK(tfm_corpus_read(r, &d, 200, &err) == -1);
    CHECK(strstr(err.msg, "'tokens.ids': at byte ") &&
          strstr(err.msg, ": line 3: id 500 at token 2 outside the vocabulary (200)"));
    tfm_reader_close(r);
    tfm_corpus_free(&d);
    for (int chunked = 0; chunked < 2; chunked++) {
        r = tfm_reader_open(path, &err);
        tfm_corpus_init(&d);
        if (chunked) {
            CHECK(tfm_corpus_read_chunk(r, &d, 0, &err) == 1);
            CHECK(tfm_corpus_read_chunk(r, &d, 0, &err) == -1);
        } else {
            CHECK(tfm_corpus_read(r, &d, 0, &err) == -1);
        }
        CHECK(strstr(err.msg, "'tokens.ids': at byte ") &&
              strstr(err.msg, ": line 65540: negative id -3 at token 2"));
        if (!strstr(err.msg, "line 65540"))
            printf("#   got: %s\n", err.msg);
        tfm_reader_close(r);
        tfm_corpus_free(&d);
    }
    tfm_corpus_free(&c);
}

/* Flip one byte in each region of a small stream; the reader must fail, naming the
 * record, never crash or accept. */
static void test_every_byte_flip(void)
{
    char path[256], bad[256];
    path_in_dir(path, sizeof path, "small.tfm");
    path_in_dir(bad, sizeof bad, "flip.tfm");
    struct tfm_error err;
    struct tfm_header h;
    tfm_header_init(&h, "tokens");
    struct tfm_writer *w = tfm_writer_open(path, &h, 0, &err);
    int64_t d[2] = {2, 3};
    float v[6] = {1, 2, 3, 4, 5, 6};
    tfm_writer_put(w, "m", TFM_F32, 2, d, v, &err);
    CHECK(tfm_writer_close(w, &err) == 0);
    tfm_header_free(&h);
    FILE *f = fopen(path, "rb");
    unsigned char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    int accepted = 0;
    for (size_t i = 0; i < n; i++) {
        buf[i] ^= 0x5a;
        f = fopen(bad, "wb");
        fwrite(buf, 1, n, f);
        fclose(f);
        buf[i] ^= 0x5a;
        struct tfm_reader *r = tfm_reader_open(bad, &err);
        int ok = r != NULL;
        struct tfm_record rec;
        int k = 1;
        while (ok && (k = tfm_reader_next(r, &rec, &err)) == 1) {
        }
        if (ok && k == 0) {
            accepted++;
            printf("#   flip at byte %zu accepted\n", i);
        }
        tfm_reader_close(r);
    }
    CHECK_EQ_INT(accepted, 0);
}

/* ---- concatenated streams (cat a.tfm b.tfm) ----------------------------------------- */

/* Write a tokens (or hypotheses) stream of n sentences: sentence i is first+i repeated
 * (i % 4 + 1) times; vocabulary spm (NULL: none); extra header key=value or NULL. */
static void write_tokens(const char *path, const char *kind, const char *spm, int64_t first,
                         int64_t n, const char *key, const char *value, int flags)
{
    struct tfm_error err;
    struct tfm_header h;
    tfm_header_init(&h, kind);
    if (spm)
        CHECK(tfm_header_set_spm(&h, spm, strlen(spm), &err) == 0);
    if (key)
        CHECK(tfm_header_set(&h, key, value, &err) == 0);
    struct tfm_corpus c;
    tfm_corpus_init(&c);
    int hyp = strcmp(kind, TFM_KIND_HYPOTHESES) == 0;
    int64_t *index = malloc((size_t)n * sizeof *index);
    float *score = malloc((size_t)n * sizeof *score);
    for (int64_t i = 0; i < n; i++) {
        int32_t ids[4] = {(int32_t)(first + i), (int32_t)(first + i), (int32_t)(first + i),
                          (int32_t)(first + i)};
        CHECK(tfm_corpus_push(&c, ids, i % 4 + 1, &err) == 0);
        index[i] = i;
        score[i] = -1.0f * (float)i;
    }
    if (hyp) {
        c.index = index;
        c.score = score;
    }
    struct tfm_writer *w = tfm_writer_open(path, &h, flags, &err);
    CHECK(w != NULL);
    CHECK(tfm_corpus_write(w, &c, &err) == 0);
    CHECK(tfm_writer_close(w, &err) == 0);
    if (!hyp) {
        free(index);
        free(score);
    }
    tfm_corpus_free(&c);
    tfm_header_free(&h);
}

/* dst = the bytes of the files srcs[0..n) one after another, then extra (len bytes). */
static void cat_files(const char *dst, const char *const *srcs, int n, const void *extra,
                      size_t len)
{
    FILE *out = fopen(dst, "wb");
    for (int i = 0; i < n; i++) {
        FILE *in = fopen(srcs[i], "rb");
        char buf[4096];
        size_t k;
        while ((k = fread(buf, 1, sizeof buf, in)) > 0)
            fwrite(buf, 1, k, out);
        fclose(in);
    }
    if (len)
        fwrite(extra, 1, len, out);
    fclose(out);
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Read path as a corpus from the file (mmap) and through a pipe: 0, or -1 with err (the
 * same from both, else a check fails). */
static int read_corpus_both(const char *path, struct tfm_corpus *c, struct tfm_error *err)
{
    int rc[2];
    char msg[2][1024];
    for (int via = 1; via >= 0; via--) {    /* the file last: its message stays in err */
        pid_t child = -1;
        struct tfm_reader *r = via ? open_via_pipe(path, &child) : tfm_reader_open(path, err);
        tfm_corpus_free(c);
        rc[via] = r ? tfm_corpus_read(r, c, 0, err) : -1;
        snprintf(msg[via], sizeof msg[via], "%s", rc[via] ? err->msg : "");
        tfm_reader_close(r);
        if (child > 0) {        /* a reader may stop early: the child then gets EPIPE */
            int status;
            close(pipe_fd);
            waitpid(child, &status, 0);
        }
    }
    CHECK_EQ_INT(rc[0], rc[1]);
    if (rc[1] && strstr(msg[1], "<pipe>: ")) /* the same message, but for the file's name */
        CHECK_STR(strchr(msg[0], ':'), strchr(msg[1], ':'));
    return rc[0];
}

static void test_concat(void)
{
    char a[256], b[256], e[256], ab[256], other[256], kind[256], eos[256], bad[256];
    path_in_dir(a, sizeof a, "cat-a.tfm");
    path_in_dir(b, sizeof b, "cat-b.tfm");
    path_in_dir(e, sizeof e, "cat-empty.tfm");
    path_in_dir(ab, sizeof ab, "cat-ab.tfm");
    path_in_dir(other, sizeof other, "cat-other.tfm");
    path_in_dir(kind, sizeof kind, "cat-kind.tfm");
    path_in_dir(eos, sizeof eos, "cat-eos.tfm");
    path_in_dir(bad, sizeof bad, "cat-bad.tfm");
    write_tokens(a, TFM_KIND_TOKENS, "vocab one", 10, 5, NULL, NULL, 0);
    write_tokens(b, TFM_KIND_TOKENS, "vocab one", 100, 70000, NULL, NULL, TFM_DEFLATE);
    write_tokens(e, TFM_KIND_TOKENS, "vocab one", 0, 0, NULL, NULL, 0);
    write_tokens(other, TFM_KIND_TOKENS, "vocab two", 10, 5, NULL, NULL, 0);
    write_tokens(kind, TFM_KIND_HYPOTHESES, "vocab one", 10, 5, NULL, NULL, 0);
    write_tokens(eos, TFM_KIND_TOKENS, "vocab one", 10, 5, "eos", "1", 0);
    struct tfm_error err;
    struct tfm_corpus c;
    tfm_corpus_init(&c);

    /* a, an empty stream, b (two chunks, deflated), a: every sentence, in order */
    const char *parts[] = {a, e, b, a};
    cat_files(ab, parts, 4, NULL, 0);
    CHECK(read_corpus_both(ab, &c, &err) == 0);
    CHECK_EQ_INT(c.n, 5 + 70000 + 5);
    if (c.n != 5 + 70000 + 5) {
        tfm_corpus_free(&c);
        return;
    }
    CHECK_EQ_INT(tfm_corpus_len(&c, 4), 1);
    CHECK_EQ_INT(tfm_corpus_sent(&c, 4)[0], 14);
    CHECK_EQ_INT(tfm_corpus_len(&c, 5), 1);
    CHECK_EQ_INT(tfm_corpus_sent(&c, 5)[0], 100);
    CHECK_EQ_INT(tfm_corpus_len(&c, 5 + 69999), 4);
    CHECK_EQ_INT(tfm_corpus_sent(&c, 5 + 69999)[3], 100 + 69999);
    CHECK_EQ_INT(tfm_corpus_sent(&c, 70005)[0], 10);

    /* records: members numbered, per-stream record numbers, payloads aligned */
    struct tfm_reader *r = tfm_reader_open(a, &err);
    struct tfm_record rec;
    CHECK(tfm_reader_next(r, &rec, &err) == 1);
    long first_off = (long)rec.offset;      /* of a stream's first record */
    tfm_reader_close(r);
    r = tfm_reader_open(ab, &err);
    uint64_t members[8] = {0}, last_member = 0;
    int k, nrec = 0;
    while ((k = tfm_reader_next(r, &rec, &err)) == 1) {
        CHECK(rec.member >= last_member && rec.member < 4);
        CHECK(((uintptr_t)rec.data % TFM_ALIGN) == 0);
        CHECK(strncmp(rec.name, "tfm.", 4) != 0);
        members[rec.member]++;
        last_member = rec.member;
        CHECK_STR(tfm_reader_member_header(r)->kind, TFM_KIND_TOKENS);
        if (rec.member == 2 && members[2] == 1) {
            CHECK_EQ_INT(rec.index, 2);     /* after its header and vocabulary */
            CHECK_EQ_INT(rec.offset, file_size(a) + file_size(e) + first_off);
        }
        nrec++;
    }
    CHECK_EQ_INT(k, 0);
    CHECK_EQ_INT(members[0], 2);
    CHECK_EQ_INT(members[1], 0);
    CHECK_EQ_INT(members[2], 4);
    CHECK_EQ_INT(members[3], 2);
    tfm_reader_close(r);

    /* whatever follows an end record must be another stream like the first */
    long at = file_size(a);
    char want[512];
    const char *one[] = {a}, *a_other[] = {a, other}, *a_kind[] = {a, kind},
               *a_eos[] = {a, eos}, *eos_a[] = {eos, a};
    cat_files(bad, one, 1, "garbage\n", 8);
    CHECK(read_corpus_both(bad, &c, &err) == -1);
    snprintf(want, sizeof want, "%s: at byte %ld: input after the end record is not a tfm "
             "stream (bad magic)", bad, at);
    CHECK_STR(err.msg, want);
    cat_files(bad, one, 1, "\0", 1);
    CHECK(read_corpus_both(bad, &c, &err) == -1);
    CHECK_STR(err.msg, want);
    cat_files(bad, a_other, 2, NULL, 0);
    CHECK(read_corpus_both(bad, &c, &err) == -1);
    CHECK(strstr(err.msg, "stream 2, record 1 'tfm.spm'") && strstr(err.msg, "vocabulary"));
    cat_files(bad, a_kind, 2, NULL, 0);
    CHECK(read_corpus_both(bad, &c, &err) == -1);
    snprintf(want, sizeof want, "%s: stream 2: at byte %ld: a 'hypotheses' stream after a "
             "'tokens' stream: a concatenation must be of one kind", bad, at);
    CHECK_STR(err.msg, want);
    cat_files(bad, a_eos, 2, NULL, 0);
    CHECK(read_corpus_both(bad, &c, &err) == -1);
    CHECK(strstr(err.msg, "header key 'eos': '1' here, absent in the first stream"));
    cat_files(bad, eos_a, 2, NULL, 0);
    CHECK(read_corpus_both(bad, &c, &err) == -1);
    CHECK(strstr(err.msg, "header key 'eos': absent here, '1' in the first stream"));
    /* a second stream cut short: truncated, named as stream 2 */
    FILE *f = fopen(a, "rb");
    unsigned char head[300];
    size_t nh = fread(head, 1, sizeof head, f);
    fclose(f);
    cat_files(bad, one, 1, head, nh);
    CHECK(read_corpus_both(bad, &c, &err) == -1);
    CHECK(strstr(err.msg, "stream 2, record") && strstr(err.msg, "truncated"));
    /* a stream that ends inside a chunk, another after it: the chunk is not completed
     * from the next stream */
    struct tfm_header h;
    tfm_header_init(&h, TFM_KIND_TOKENS);
    tfm_header_set_spm(&h, "vocab one", 9, &err);
    struct tfm_writer *w = tfm_writer_open(e, &h, 0, &err);
    int64_t two = 2, off[2] = {0, 1};
    CHECK(tfm_writer_put(w, "tokens.offsets", TFM_I64, 1, &two, off, &err) == 0);
    CHECK(tfm_writer_close(w, &err) == 0);
    tfm_header_free(&h);
    const char *cut_a[] = {e, a};
    cat_files(bad, cut_a, 2, NULL, 0);
    CHECK(read_corpus_both(bad, &c, &err) == -1);
    CHECK(strstr(err.msg, "stream 2, record 2 'tokens.offsets'") &&
          strstr(err.msg, "the stream before this one ends where 'tokens.ids' was expected"));

    /* hypotheses: each stream's hyp.index goes on after the largest before it */
    write_tokens(a, TFM_KIND_HYPOTHESES, "vocab one", 10, 5, NULL, NULL, 0);
    write_tokens(b, TFM_KIND_HYPOTHESES, "vocab one", 100, 3, NULL, NULL, 0);
    const char *hyps[] = {a, b, a};
    cat_files(ab, hyps, 3, NULL, 0);
    CHECK(read_corpus_both(ab, &c, &err) == 0);
    CHECK_EQ_INT(c.n, 13);
    CHECK(c.index != NULL);
    for (int64_t i = 0; c.index && i < c.n; i++)
        CHECK_EQ_INT(c.index[i], i);
    tfm_corpus_free(&c);

    /* a checkpoint is one stream: nothing may follow it */
    tfm_header_init(&h, TFM_KIND_CHECKPOINT);
    w = tfm_writer_open(a, &h, 0, &err);
    float x = 1;
    CHECK(tfm_writer_put(w, "param.x", TFM_F32, 0, NULL, &x, &err) == 0);
    CHECK(tfm_writer_close(w, &err) == 0);
    tfm_header_free(&h);
    const char *ckpts[] = {a, a};
    cat_files(ab, ckpts, 2, NULL, 0);
    r = tfm_reader_open(ab, &err);
    CHECK(tfm_reader_next(r, &rec, &err) == 1);
    CHECK(tfm_reader_next(r, &rec, &err) == -1);
    snprintf(want, sizeof want, "%s: at byte %ld: input after the end of the checkpoint (a "
             "checkpoint is one stream; concatenated checkpoints are not read)", ab,
             file_size(a));
    CHECK_STR(err.msg, want);
    tfm_reader_close(r);
}

/* tfm_inflate hands zlib its input and room a step at a time (4 GiB in the reader): with
 * steps of a few bytes, every boundary falls inside a deflate block, and the result must be
 * the same bytes; data that is short, long or damaged is an error at every step. */
static void test_inflate_steps(void)
{
    enum { N = 100000 };
    unsigned char *src = malloc(N), *out = malloc(N + 16);
    uint64_t x = 7;
    for (int i = 0; i < N; i++) {      /* compressible, not trivially: a few symbols */
        x = x * 6364136223846793005ULL + 1;
        src[i] = (unsigned char)("abcab\n"[(x >> 60) % 6]);
    }
    uLongf zn = compressBound(N);
    unsigned char *z = malloc(zn);
    CHECK(compress2(z, &zn, src, N, 6) == Z_OK);
    size_t steps[] = {1, 2, 3, 7, 4096, 65536, 0};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        size_t got;
        memset(out, 0, N);
        CHECK_EQ_INT(tfm_inflate(out, N, z, zn, steps[k], &got), Z_OK);
        CHECK(got == N);
        CHECK(memcmp(out, src, N) == 0);
        /* room for fewer bytes than the data holds; more room than it fills */
        CHECK_EQ_INT(tfm_inflate(out, N - 1, z, zn, steps[k], &got), Z_BUF_ERROR);
        CHECK(got == N - 1);
        CHECK_EQ_INT(tfm_inflate(out, N + 16, z, zn, steps[k], &got), Z_DATA_ERROR);
        CHECK(got == N);
        /* the data cut short; a byte after its end */
        CHECK_EQ_INT(tfm_inflate(out, N, z, zn - 1, steps[k], &got), Z_BUF_ERROR);
        unsigned char *z2 = malloc(zn + 1);
        memcpy(z2, z, zn);
        z2[zn] = 0;
        CHECK_EQ_INT(tfm_inflate(out, N, z2, zn + 1, steps[k], &got), Z_DATA_ERROR);
        z2[zn / 2] ^= 0x55;     /* damaged: zlib's own check (adler32, codes) refuses it */
        CHECK(tfm_inflate(out, N, z2, zn, steps[k], &got) != Z_OK);
        free(z2);
    }
    /* an empty payload: the zlib data of no bytes, into no room (out may be NULL) */
    unsigned char e[16];
    uLongf en = sizeof e;
    CHECK(compress2(e, &en, src, 0, 6) == Z_OK);
    size_t got = 1;
    CHECK_EQ_INT(tfm_inflate(out, 0, e, en, 0, &got), Z_OK);
    CHECK(got == 0);
    CHECK_EQ_INT(tfm_inflate(NULL, 0, e, en, 0, &got), Z_OK);
    CHECK_EQ_INT(tfm_inflate(NULL, 0, z, zn, 0, &got), Z_BUF_ERROR);   /* data, no room */
    free(src);
    free(out);
    free(z);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    t_run("dtype sizes, names, f16/bf16 widening, crc32 check value", test_dtypes);
    t_run("header keys, values, vocabulary id", test_header);
    t_run("round trip every dtype x shape, raw, file and pipe", test_roundtrip_raw);
    t_run("round trip every dtype x shape, deflate, file and pipe", test_roundtrip_deflate);
    t_run("deflate shrinks smooth payloads", test_deflate_smaller);
    t_run("inflate a few bytes at a time: the same payload, the same refusals", test_inflate_steps);
    t_run("writes are atomic; bad records refused", test_atomic);
    t_run("corpus chunks round trip and id bounds", test_corpus);
    t_run("every single-byte corruption is detected", test_every_byte_flip);
    t_run("concatenated streams read as one; anything else after the end refused",
          test_concat);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", dir);
    return t_done();
}
