/* test_stream.c: the tensor stream: round trips of every dtype and shape, raw and
 * deflated, through a regular file (memory-mapped) and a pipe; headers; alignment;
 * atomic writes; corpus chunks; and corruption found at the right record and byte. */
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* Read path through a pipe (a child copies it), so the non-mmap path is exercised. */
static struct tfm_reader *open_via_pipe(const char *path, pid_t *child)
{
    int fds[2];
    if (pipe(fds))
        return NULL;
    *child = fork();
    if (*child == 0) {
        close(fds[0]);
        int fd = open(path, O_RDONLY);
        char buf[4096];
        ssize_t k;
        while ((k = read(fd, buf, sizeof buf)) > 0)
            if (write(fds[1], buf, (size_t)k) != k)
                _exit(1);
        _exit(0);
    }
    close(fds[1]);
    struct tfm_error err;
    struct tfm_reader *r = tfm_reader_open_fd(fds[0], "<pipe>", &err);
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
    t_run("writes are atomic; bad records refused", test_atomic);
    t_run("corpus chunks round trip and id bounds", test_corpus);
    t_run("every single-byte corruption is detected", test_every_byte_flip);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", dir);
    return t_done();
}
