/* stream.c: reader and writer of the tfm tensor stream (layout in man/tfm.5).
 *
 * Stream   = preamble, record*, where record 0 is "tfm.header" and the last "tfm.end".
 * Preamble = 8 bytes magic 89 'T' 'F' 'M' 0D 0A 1A 0A, u32 version, u32 flags (0).
 * Record   = 32-byte fixed header, u64 dims[rank], name, zero padding to a multiple of
 *            TFM_ALIGN from the stream start, payload (stored_size bytes).
 * Fixed header (little-endian):
 *    0 u32 magic "TREC"      4 u8 dtype    5 u8 rank    6 u8 codec   7 u8 0
 *    8 u16 name_len         10 u16 0      12 u32 crc32 of the decoded payload
 *   16 u64 stored_size      24 u32 crc32 of bytes 0..23, dims and name   28 u32 0
 *
 * The reader trusts nothing: every field is checked before it sizes an allocation, pipe
 * payloads are read in growing pieces so a lying size meets end-of-file before it meets
 * malloc, and a regular file is memory-mapped so raw payloads are used in place.
 * Concatenated streams (cat a.tfm b.tfm) are read as one: after an end record, more input
 * must be a preamble and header of the same kind, with the same vocabulary and
 * TFM_SAME_KEYS; padding is counted from each stream's own start.
 * This file is the only code that knows the byte layout.
 */
#include "stream.h"

#include "output.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* The fields are read and written byte by byte (get32, put32...), but payloads are
 * copied as they lie in memory (and a mapped file's used in place): tfm(5)'s
 * little-endian payloads are the host's own order only on a little-endian host, the only
 * kind tfm builds on. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "tfm streams hold little-endian payloads, copied in the host's order");

static const unsigned char MAGIC[8] = {0x89, 'T', 'F', 'M', '\r', '\n', 0x1a, '\n'};
static const unsigned char REC_MAGIC[4] = {'T', 'R', 'E', 'C'};
enum { PREAMBLE = 16, FIXED = 32, CODEC_RAW = 0, CODEC_DEFLATE = 1 };
/* deflate cannot expand more than 1032:1; a claimed ratio above that is a lie.  The
 * bound has a little slack, for the shortest streams; tfm(5) VALIDATION states both. */
enum { DEFLATE_MAX_RATIO = 1032, DEFLATE_SLACK = 64 };

/* ---- dtypes ---------------------------------------------------------------------- */

static const struct { const char *name; size_t size; } DTYPES[] = {
    [TFM_U8] = {"u8", 1},     [TFM_U16] = {"u16", 2},   [TFM_I32] = {"i32", 4},
    [TFM_I64] = {"i64", 8},   [TFM_F16] = {"f16", 2},   [TFM_BF16] = {"bf16", 2},
    [TFM_F32] = {"f32", 4},
};
enum { NDTYPES = sizeof DTYPES / sizeof DTYPES[0] };

size_t tfm_dtype_size(int dtype)
{
    return dtype > 0 && dtype < NDTYPES ? DTYPES[dtype].size : 0;
}

const char *tfm_dtype_name(int dtype)
{
    return tfm_dtype_size(dtype) ? DTYPES[dtype].name : "?";
}

int tfm_dtype_parse(const char *s)
{
    for (int d = 1; d < NDTYPES; d++)
        if (strcmp(s, DTYPES[d].name) == 0)
            return d;
    return 0;
}

uint32_t tfm_crc32(uint32_t crc, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n > 0) {     /* zlib takes a uInt length */
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, p, k);
        p += k;
        n -= k;
    }
    return crc;
}

int tfm_inflate(void *out, size_t n, const void *in, size_t m, size_t step, size_t *produced)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    *produced = 0;
    int zr = inflateInit(&z);
    if (zr != Z_OK)
        return zr;
    if (step < 1 || step > UINT_MAX)
        step = UINT_MAX;
    const unsigned char *next_in = in;
    unsigned char *next_out = out, none;
    size_t in_left = m, out_left = n;   /* not yet handed to zlib */
    z.next_out = n ? next_out : &none;  /* zlib refuses a null one, even with no room */
    do {    /* zlib counts in uInt: hand it at most step bytes of each side at a time */
        if (z.avail_in == 0 && in_left > 0) {
            z.next_in = (unsigned char *)next_in;
            z.avail_in = (uInt)(in_left < step ? in_left : step);
            next_in += z.avail_in;
            in_left -= z.avail_in;
        }
        if (z.avail_out == 0 && out_left > 0) {
            z.next_out = next_out;
            z.avail_out = (uInt)(out_left < step ? out_left : step);
            next_out += z.avail_out;
            out_left -= z.avail_out;
        }
        zr = inflate(&z, Z_NO_FLUSH);
    } while (zr == Z_OK);   /* Z_BUF_ERROR: no progress, with input or room exhausted */
    *produced = (size_t)(next_out - (unsigned char *)out) - z.avail_out;
    int whole = zr == Z_STREAM_END && *produced == n && z.avail_in == 0 && in_left == 0;
    inflateEnd(&z);
    if (whole)
        return Z_OK;
    return zr == Z_STREAM_END || zr == Z_OK ? Z_DATA_ERROR : zr;
}

int tfm_is_stream_magic(const void *buf, size_t n)
{
    return n >= sizeof MAGIC && memcmp(buf, MAGIC, sizeof MAGIC) == 0;
}

/* ---- little-endian fields -------------------------------------------------------- */

static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }
static void put16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> 8 * i);
}
static void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t pad_to_align(uint64_t off) { return (TFM_ALIGN - off % TFM_ALIGN) % TFM_ALIGN; }

static int valid_name(const char *s, size_t n)
{
    if (n == 0 || n > TFM_MAX_NAME)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '!' || s[i] > '~')
            return 0;
    return 1;
}

/* count = product of dims, nbytes = count * size; 0 on overflow or a bound exceeded. */
static int shape_bytes(int dtype, int rank, const int64_t *dims, int64_t *count, uint64_t *nbytes)
{
    uint64_t c = 1, size = tfm_dtype_size(dtype);
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return 0;
        uint64_t d = (uint64_t)dims[i];
        if (d != 0 && c > TFM_MAX_PAYLOAD / d)
            return 0;
        c *= d;
    }
    if (size == 0 || c > TFM_MAX_PAYLOAD / size)
        return 0;
    *count = (int64_t)c;
    *nbytes = c * size;
    return 1;
}

/* ---- headers --------------------------------------------------------------------- */

void tfm_header_init(struct tfm_header *h, const char *kind)
{
    memset(h, 0, sizeof *h);
    snprintf(h->kind, sizeof h->kind, "%s", kind ? kind : "");
}

void tfm_header_free(struct tfm_header *h)
{
    for (int i = 0; i < h->nmeta; i++) {
        free(h->keys[i]);
        free(h->values[i]);
    }
    free(h->spm);
    memset(h, 0, sizeof *h);
}

static int valid_key(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > TFM_MAX_KEY)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = k[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

static int header_set_n(struct tfm_header *h, const char *key, const char *value, size_t vlen,
                        struct tfm_error *err)
{
    if (!valid_key(key))
        return tfm_fail(err, "bad header key '%.80s'", key);
    if (vlen > TFM_MAX_VALUE || memchr(value, '\n', vlen) || memchr(value, '\0', vlen))
        return tfm_fail(err, "bad value for header key '%s'", key);
    if (strcmp(key, "kind") == 0) {
        if (vlen == 0 || vlen >= sizeof h->kind)
            return tfm_fail(err, "bad stream kind '%.*s'", (int)(vlen > 40 ? 40 : vlen), value);
        memcpy(h->kind, value, vlen);
        h->kind[vlen] = 0;
        return 0;
    }
    char *v = malloc(vlen + 1);
    if (!v)
        return tfm_fail(err, "out of memory");
    memcpy(v, value, vlen);
    v[vlen] = 0;
    for (int i = 0; i < h->nmeta; i++) {
        if (strcmp(h->keys[i], key) == 0) {
            free(h->values[i]);
            h->values[i] = v;
            return 0;
        }
    }
    if (h->nmeta == TFM_MAX_META) {
        free(v);
        return tfm_fail(err, "too many header keys (at most %d)", TFM_MAX_META);
    }
    char *k = strdup(key);
    if (!k) {
        free(v);
        return tfm_fail(err, "out of memory");
    }
    h->keys[h->nmeta] = k;
    h->values[h->nmeta] = v;
    h->nmeta++;
    return 0;
}

int tfm_header_set(struct tfm_header *h, const char *key, const char *value, struct tfm_error *err)
{
    return header_set_n(h, key, value, strlen(value), err);
}

int tfm_header_setf(struct tfm_header *h, struct tfm_error *err, const char *key, const char *fmt, ...)
{
    char buf[TFM_MAX_VALUE + 1];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || n > TFM_MAX_VALUE)
        return tfm_fail(err, "value for header key '%s' too long", key);
    return tfm_header_set(h, key, buf, err);
}

const char *tfm_header_get(const struct tfm_header *h, const char *key)
{
    if (strcmp(key, "kind") == 0)
        return h->kind;
    for (int i = 0; i < h->nmeta; i++)
        if (strcmp(h->keys[i], key) == 0)
            return h->values[i];
    return NULL;
}

int64_t tfm_header_int(const struct tfm_header *h, const char *key)
{
    const char *v = tfm_header_get(h, key);
    long long x;
    return v && tfm_parse_int(v, &x) == 0 && x >= 0 ? (int64_t)x : -1;
}

int tfm_header_set_spm(struct tfm_header *h, const void *spm, size_t n, struct tfm_error *err)
{
    void *copy = NULL;
    if (n > 0) {
        if (n > TFM_MAX_PAYLOAD)
            return tfm_fail(err, "vocabulary model too large");
        copy = malloc(n);
        if (!copy)
            return tfm_fail(err, "out of memory");
        memcpy(copy, spm, n);
    }
    free(h->spm);
    h->spm = copy;
    h->spm_size = n;
    if (tfm_header_setf(h, err, "spm.size", "%zu", n) ||
        tfm_header_setf(h, err, "spm.crc32", "%08x", n ? tfm_crc32(0, spm, n) : 0))
        return -1;
    return 0;
}

uint32_t tfm_header_vocab_id(const struct tfm_header *h)
{
    return h->spm ? tfm_crc32(0, h->spm, h->spm_size) : 0;
}

int tfm_header_copy(struct tfm_header *dst, const struct tfm_header *src, struct tfm_error *err)
{
    tfm_header_init(dst, src->kind);
    for (int i = 0; i < src->nmeta; i++)
        if (tfm_header_set(dst, src->keys[i], src->values[i], err))
            goto fail;
    if (src->spm && tfm_header_set_spm(dst, src->spm, src->spm_size, err))
        goto fail;
    return 0;
fail:
    tfm_header_free(dst);
    return -1;
}

/* The header payload: "kind=K\n" then "key=value\n" for each key. */
static char *header_text(const struct tfm_header *h, size_t *n)
{
    size_t len = strlen("kind=\n") + strlen(h->kind);
    for (int i = 0; i < h->nmeta; i++)
        len += strlen(h->keys[i]) + strlen(h->values[i]) + 2;
    char *text = malloc(len + 1), *p = text;
    if (!text)
        return NULL;
    p += sprintf(p, "kind=%s\n", h->kind);
    for (int i = 0; i < h->nmeta; i++)
        p += sprintf(p, "%s=%s\n", h->keys[i], h->values[i]);
    *n = (size_t)(p - text);
    return text;
}

static int header_parse(struct tfm_header *h, const char *text, size_t n, struct tfm_error *err)
{
    int have_kind = 0;
    const char *p = text, *end = text + n;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            return tfm_fail(err, "header: last line has no newline");
        const char *eq = memchr(p, '=', (size_t)(nl - p));
        if (!eq || eq == p || eq - p > TFM_MAX_KEY)
            return tfm_fail(err, "header: line without key=value");
        char key[TFM_MAX_KEY + 1];
        memcpy(key, p, (size_t)(eq - p));
        key[eq - p] = 0;
        /* a NUL would end the key early for valid_key and strcmp ("kind\0x" read as
         * "kind"): refused, shown with the NUL as \0 (a value's is refused by header_set_n) */
        if (memchr(key, '\0', (size_t)(eq - p))) {
            char shown[2 * TFM_MAX_KEY + 1], *q = shown;
            for (const char *c = p; c < eq; c++) {
                if (*c == '\0')
                    *q++ = '\\';
                *q++ = *c ? *c : '0';
            }
            *q = 0;
            return tfm_fail(err, "header: bad header key '%s'", shown);
        }
        if (strcmp(key, "kind") == 0) {
            if (have_kind)
                return tfm_fail(err, "header: kind given twice");
            have_kind = 1;
        } else if (tfm_header_get(h, key)) {
            return tfm_fail(err, "header: key '%s' given twice", key);
        }
        if (header_set_n(h, key, eq + 1, (size_t)(nl - eq - 1), err))
            return tfm_error_prefix(err, "header");
        p = nl + 1;
    }
    if (!have_kind)
        return tfm_fail(err, "header: no kind");
    return 0;
}

/* ---- reader ---------------------------------------------------------------------- */

struct tfm_reader {
    int fd, own_fd;
    char *name;
    /* regular files: the whole file mapped; map + start is the stream's first byte */
    unsigned char *map;
    size_t map_size, start;
    int map_slot;               /* its entry for SIGBUS to name (tfm_output_mapped), or 0 */
    /* pipes: a read buffer (pending peeked bytes first) */
    unsigned char rbuf[1 << 16];
    size_t rpos, rlen;
    uint64_t pos;               /* input offset of the next byte */
    uint64_t index;             /* records of the current stream read so far */
    int done;
    struct tfm_header header;   /* of the first stream */
    /* concatenations: the stream now read (0 the first), where it starts, its header */
    uint64_t member, base;
    struct tfm_header mheader;  /* when member > 0 */
    uint64_t rec_member;        /* stream of the record last returned */
    int (*on_member)(void *ctx, const struct tfm_header *h, uint64_t member, uint64_t offset,
                     struct tfm_error *err);
    void *on_member_ctx;
    /* the current record */
    char rname[TFM_MAX_NAME + 1];
    void *buf;                  /* aligned payload buffer (pipes, deflate) */
    size_t buf_cap;
    void *zbuf;                 /* compressed payload from a pipe */
    size_t zbuf_cap;
    int held;                   /* a record read raw, for tfm_reader_next to take next */
    struct tfm_record held_rec;
    int (*skip)(const char *name, void *ctx);   /* records passed over, or NULL */
    void *skip_ctx;
    volatile sig_atomic_t *stop;    /* pipes: a read waiting for input gives up when set */
};

const struct tfm_header *tfm_reader_header(const struct tfm_reader *r) { return &r->header; }
const struct tfm_header *tfm_reader_member_header(const struct tfm_reader *r)
{
    return r->member ? &r->mheader : &r->header;
}
const char *tfm_reader_name(const struct tfm_reader *r) { return r->name; }

/* "FILE: record N 'NAME': at byte OFF: reason"; "FILE: stream S, record N ..." in a
 * following stream of a concatenation (S counted from 1). */
static int rfail(const struct tfm_reader *r, uint64_t member, uint64_t index, const char *rname,
                 uint64_t off, struct tfm_error *err, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static int rfail(const struct tfm_reader *r, uint64_t member, uint64_t index, const char *rname,
                 uint64_t off, struct tfm_error *err, const char *fmt, ...)
{
    char reason[512], place[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    if (member)
        snprintf(place, sizeof place, "stream %llu, record %llu", (unsigned long long)member + 1,
                 (unsigned long long)index);
    else
        snprintf(place, sizeof place, "record %llu", (unsigned long long)index);
    if (rname && rname[0])
        return tfm_fail(err, "%s: %s '%s': at byte %llu: %s", r->name, place, rname,
                        (unsigned long long)off, reason);
    return tfm_fail(err, "%s: %s: at byte %llu: %s", r->name, place, (unsigned long long)off,
                    reason);
}

int tfm_reader_fail(const struct tfm_reader *r, const struct tfm_record *rec,
                    struct tfm_error *err, const char *fmt, ...)
{
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return rfail(r, rec->member, rec->index, rec->name, rec->offset, err, "%s", reason);
}

/* Before a read from a pipe: wait until there is input, or the reader's stop flag is set
 * (looked at every 100 ms: the signal that sets it may land on any thread, so EINTR from
 * this one's read cannot be counted on).  0: read; EINTR: stopped. */
static int wait_input(const struct tfm_reader *r)
{
    if (!r->stop)
        return 0;
    for (;;) {
        if (*r->stop)
            return EINTR;
        struct pollfd p = {.fd = r->fd, .events = POLLIN};
        int k = poll(&p, 1, 100);
        if (k > 0 || (k < 0 && errno != EINTR))
            return 0;                   /* input, its end, or an error for read to say */
    }
}

/* Read up to n bytes into dst (pipes) or point at them (maps).  Returns bytes got. */
static size_t src_read(struct tfm_reader *r, void *dst, size_t n, int *ioerr)
{
    size_t got = 0;
    if (r->map) {
        size_t avail = r->map_size - r->start - (size_t)r->pos;
        got = n < avail ? n : avail;
        memcpy(dst, r->map + r->start + r->pos, got);
    } else {
        unsigned char *d = dst;
        while (got < n) {
            if (r->rpos < r->rlen) {
                size_t k = r->rlen - r->rpos;
                if (k > n - got)
                    k = n - got;
                memcpy(d + got, r->rbuf + r->rpos, k);
                r->rpos += k;
                got += k;
                continue;
            }
            if ((*ioerr = wait_input(r)))
                break;
            if (n - got >= sizeof r->rbuf) {        /* large: straight into dst */
                ssize_t k = read(r->fd, d + got, n - got);
                if (k < 0 && errno == EINTR)
                    continue;
                if (k < 0) {
                    *ioerr = errno;
                    break;
                }
                if (k == 0)
                    break;
                got += (size_t)k;
                continue;
            }
            ssize_t k = read(r->fd, r->rbuf, sizeof r->rbuf);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0) {
                *ioerr = errno;
                break;
            }
            if (k == 0)
                break;
            r->rpos = 0;
            r->rlen = (size_t)k;
        }
    }
    r->pos += got;
    return got;
}

static int ensure_buf(void **buf, size_t *cap, size_t n)
{
    if (n <= *cap && *buf)
        return 0;
    size_t want = n < 64 ? 64 : n;
    want = (want + TFM_ALIGN - 1) / TFM_ALIGN * TFM_ALIGN;
    void *p = NULL;
    if (posix_memalign(&p, TFM_ALIGN, want))
        return -1;
    free(*buf);
    *buf = p;
    *cap = want;
    return 0;
}

/* Read exactly n payload bytes from a pipe into a buffer grown as the data arrives, so
 * a size that lies runs into end-of-file before it runs into a huge allocation. */
static int read_payload(struct tfm_reader *r, void **buf, size_t *cap, size_t n, size_t *got,
                        int *ioerr)
{
    size_t have = 0;
    while (have < n) {
        size_t step = n - have;
        size_t limit = have < (1 << 20) ? (1 << 20) : have;   /* at most double */
        if (step > limit)
            step = limit;
        if (*cap < have + step) {
            void *p = NULL;
            size_t want = (have + step + TFM_ALIGN - 1) / TFM_ALIGN * TFM_ALIGN;
            if (posix_memalign(&p, TFM_ALIGN, want))
                return -1;
            if (have)
                memcpy(p, *buf, have);
            free(*buf);
            *buf = p;
            *cap = want;
        }
        size_t k = src_read(r, (unsigned char *)*buf + have, step, ioerr);
        have += k;
        if (k < step)
            break;
    }
    *got = have;
    return 0;
}

static const char *eof_reason(int ioerr)
{
    return ioerr ? strerror(ioerr) : "truncated";
}

/* The next `stored` payload bytes of a mapped stream: *p and the position past them. */
static int map_take(struct tfm_reader *r, uint64_t stored, uint64_t idx, uint64_t off,
                    const unsigned char **p, struct tfm_error *err)
{
    uint64_t avail = r->map_size - r->start - r->pos;
    if (stored > avail)
        return rfail(r, r->member, idx, r->rname, off, err,
                     "truncated payload (%llu bytes expected, %llu left)",
                     (unsigned long long)stored, (unsigned long long)avail);
    *p = r->map + r->start + r->pos;
    r->pos += stored;
    return 0;
}

static int reader_next_raw(struct tfm_reader *r, struct tfm_record *rec, struct tfm_error *err)
{
    uint64_t off = r->pos, idx = r->index;
    unsigned char fixed[FIXED + TFM_MAX_RANK * 8 + TFM_MAX_NAME];
    int ioerr = 0;
    size_t got = src_read(r, fixed, FIXED, &ioerr);
    if (got == 0 && !ioerr)
        return rfail(r, r->member, idx, NULL, off, err, "truncated: stream ends without its end record");
    if (got < FIXED)
        return rfail(r, r->member, idx, NULL, off, err, "%s record header (%zu of %d bytes)",
                     eof_reason(ioerr), got, FIXED);
    if (memcmp(fixed, REC_MAGIC, 4) != 0)
        return rfail(r, r->member, idx, NULL, off, err, "bad record magic");
    int dtype = fixed[4], rank = fixed[5], codec = fixed[6];
    unsigned name_len = get16(fixed + 8);
    if (fixed[7] || get16(fixed + 10) || get32(fixed + 28))
        return rfail(r, r->member, idx, NULL, off, err, "reserved header bytes are not zero");
    if (!tfm_dtype_size(dtype))
        return rfail(r, r->member, idx, NULL, off, err, "unknown dtype %d", dtype);
    if (rank > TFM_MAX_RANK)
        return rfail(r, r->member, idx, NULL, off, err, "rank %d too high (at most %d)", rank, TFM_MAX_RANK);
    if (codec != CODEC_RAW && codec != CODEC_DEFLATE)
        return rfail(r, r->member, idx, NULL, off, err, "unknown codec %d", codec);
    if (name_len == 0 || name_len > TFM_MAX_NAME)
        return rfail(r, r->member, idx, NULL, off, err, "bad name length %u", name_len);
    size_t var = (size_t)rank * 8 + name_len;
    got = src_read(r, fixed + FIXED, var, &ioerr);
    if (got < var)
        return rfail(r, r->member, idx, NULL, off, err, "%s record header (%zu of %zu bytes)",
                     eof_reason(ioerr), FIXED + got, FIXED + var);
    uint32_t hcrc = tfm_crc32(0, fixed, 24);
    hcrc = tfm_crc32(hcrc, fixed + FIXED, var);
    if (hcrc != get32(fixed + 24))
        return rfail(r, r->member, idx, NULL, off, err, "record header crc mismatch");
    const char *name = (const char *)fixed + FIXED + rank * 8;
    if (!valid_name(name, name_len))
        return rfail(r, r->member, idx, NULL, off, err, "bad record name");
    memcpy(r->rname, name, name_len);
    r->rname[name_len] = 0;

    memset(rec, 0, sizeof *rec);
    rec->name = r->rname;
    rec->dtype = dtype;
    rec->rank = rank;
    rec->index = idx;
    rec->offset = off;
    rec->member = r->member;
    for (int i = 0; i < rank; i++) {
        uint64_t d = get64(fixed + FIXED + 8 * i);
        if (d > (uint64_t)INT64_MAX)
            return rfail(r, r->member, idx, r->rname, off, err, "dimension %d too large", i);
        rec->dims[i] = (int64_t)d;
    }
    uint64_t nbytes;
    if (!shape_bytes(dtype, rank, rec->dims, &rec->count, &nbytes))
        return rfail(r, r->member, idx, r->rname, off, err, "shape too large (over %llu bytes)",
                     (unsigned long long)TFM_MAX_PAYLOAD);
    rec->nbytes = (size_t)nbytes;
    /* the records of fixed size are checked before their payload is read or inflated:
     * a few bytes of deflate must not make a header of gigabytes */
    if (strcmp(r->rname, "tfm.header") == 0 && nbytes > TFM_MAX_HEADER_TEXT)
        return rfail(r, r->member, idx, r->rname, off, err, "header of %llu bytes, more than "
                     "a header can hold (%d)", (unsigned long long)nbytes, TFM_MAX_HEADER_TEXT);
    if (strcmp(r->rname, "tfm.spm") == 0 && nbytes > TFM_MAX_SPM)
        return rfail(r, r->member, idx, r->rname, off, err, "vocabulary of %llu bytes, more "
                     "than a SentencePiece model is read (%llu)", (unsigned long long)nbytes,
                     (unsigned long long)TFM_MAX_SPM);
    if (strcmp(r->rname, "tfm.end") == 0 && nbytes != 8)
        return rfail(r, r->member, idx, r->rname, off, err, "end record must be i64 [1]");
    uint64_t stored = get64(fixed + 16);
    if (codec == CODEC_RAW && stored != nbytes)
        return rfail(r, r->member, idx, r->rname, off, err,
                     "payload size %llu does not match shape (%llu bytes)",
                     (unsigned long long)stored, (unsigned long long)nbytes);
    /* A zlib stream may be longer than its data (stored blocks, and a writer that flushes
     * as it goes adds an empty block each time), so the stored size has no ceiling but the
     * payload's own; its floor is deflate's largest ratio. */
    if (codec == CODEC_DEFLATE &&
        (stored > TFM_MAX_PAYLOAD || nbytes > stored * DEFLATE_MAX_RATIO + DEFLATE_SLACK || stored == 0))
        return rfail(r, r->member, idx, r->rname, off, err,
                     "compressed size %llu impossible for %llu bytes",
                     (unsigned long long)stored, (unsigned long long)nbytes);

    /* padding before the payload: zeros */
    unsigned char zeros[TFM_ALIGN];
    size_t pad = (size_t)pad_to_align(r->pos - r->base);   /* from this stream's start */
    got = src_read(r, zeros, pad, &ioerr);
    if (got < pad)
        return rfail(r, r->member, idx, r->rname, off, err, "%s padding", eof_reason(ioerr));
    for (size_t i = 0; i < pad; i++)
        if (zeros[i])
            return rfail(r, r->member, idx, r->rname, off, err, "padding is not zero");

    uint64_t payload_off = r->pos;
    const unsigned char *stored_ptr = NULL;
    if (r->skip && strncmp(r->rname, "tfm.", 4) != 0 && r->skip(r->rname, r->skip_ctx)) {
        /* passed over unread: from a file by moving on, from a pipe by reading it */
        if (r->map) {
            if (map_take(r, stored, idx, off, &stored_ptr, err) < 0)
                return -1;
        } else {
            for (uint64_t left = stored; left > 0;) {
                unsigned char sink[1 << 14];
                size_t want = left < sizeof sink ? (size_t)left : sizeof sink;
                size_t k = src_read(r, sink, want, &ioerr);
                if (k < want)
                    return rfail(r, r->member, idx, r->rname, off, err, "%s payload", eof_reason(ioerr));
                left -= k;
            }
        }
        r->index++;
        return 2;
    }
    if (r->map) {
        if (map_take(r, stored, idx, off, &stored_ptr, err) < 0)
            return -1;
    } else {
        void **b = codec == CODEC_RAW ? &r->buf : &r->zbuf;
        size_t *cap = codec == CODEC_RAW ? &r->buf_cap : &r->zbuf_cap;
        if (read_payload(r, b, cap, (size_t)stored, &got, &ioerr))
            return rfail(r, r->member, idx, r->rname, off, err, "out of memory for %llu bytes",
                         (unsigned long long)stored);
        if (got < stored)
            return rfail(r, r->member, idx, r->rname, off, err,
                         "%s payload (%llu bytes expected, %zu read)", eof_reason(ioerr),
                         (unsigned long long)stored, got);
        stored_ptr = *b;
    }

    const unsigned char *data = stored_ptr;
    if (codec == CODEC_DEFLATE) {
        if (ensure_buf(&r->buf, &r->buf_cap, rec->nbytes))
            return rfail(r, r->member, idx, r->rname, off, err, "out of memory for %zu bytes", rec->nbytes);
        size_t produced;
        int zr = tfm_inflate(r->buf, rec->nbytes, stored_ptr, (size_t)stored, UINT_MAX,
                             &produced);
        if (zr == Z_MEM_ERROR || zr == Z_VERSION_ERROR)
            return rfail(r, r->member, idx, r->rname, off, err, "zlib: cannot initialize");
        if (zr != Z_OK)
            return rfail(r, r->member, idx, r->rname, payload_off, err,
                         "corrupt compressed payload (zlib %d, %zu of %llu bytes)", zr,
                         produced, (unsigned long long)nbytes);
        data = r->buf;
    } else if (r->map && ((uintptr_t)data % TFM_ALIGN) != 0 && rec->nbytes > 0) {
        /* a stream that starts at an unaligned file offset: copy to keep the promise */
        if (ensure_buf(&r->buf, &r->buf_cap, rec->nbytes))
            return rfail(r, r->member, idx, r->rname, off, err, "out of memory for %zu bytes", rec->nbytes);
        memcpy(r->buf, data, rec->nbytes);
        data = r->buf;
    }
    if (tfm_crc32(0, data, rec->nbytes) != get32(fixed + 12))
        return rfail(r, r->member, idx, r->rname, payload_off, err, "crc mismatch");
    rec->data = data;
    rec->mapped = data == stored_ptr && r->map != NULL;
    r->index++;
    return 1;
}

void tfm_reader_skip(struct tfm_reader *r, int (*skip)(const char *name, void *ctx), void *ctx)
{
    r->skip = skip;
    r->skip_ctx = ctx;
}

void tfm_reader_on_member(struct tfm_reader *r,
                          int (*fn)(void *ctx, const struct tfm_header *h, uint64_t member,
                                    uint64_t offset, struct tfm_error *err),
                          void *ctx)
{
    r->on_member = fn;
    r->on_member_ctx = ctx;
}

/* Is there input after the current position?  1, 0 at its end, -1 on a read error. */
static int more_input(struct tfm_reader *r, struct tfm_error *err)
{
    if (r->map)
        return r->pos < r->map_size - r->start;
    if (r->rpos < r->rlen)
        return 1;
    for (;;) {
        int stopped = wait_input(r);
        if (stopped)
            return tfm_fail(err, "%s: at byte %llu: %s", r->name, (unsigned long long)r->pos,
                            strerror(stopped));
        ssize_t k = read(r->fd, r->rbuf, sizeof r->rbuf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return tfm_fail(err, "%s: at byte %llu: %s", r->name, (unsigned long long)r->pos,
                            strerror(errno));
        r->rpos = 0;
        r->rlen = (size_t)k;
        return k > 0;
    }
}

/* The preamble of the stream that starts at r->pos (r->base). */
static int read_preamble(struct tfm_reader *r, struct tfm_error *err)
{
    unsigned char pre[PREAMBLE];
    int ioerr = 0;
    unsigned long long at = r->pos;
    size_t got = src_read(r, pre, PREAMBLE, &ioerr);
    if (got == 0 && !ioerr && r->member == 0)
        return tfm_fail(err, "%s: empty input (not a tfm stream)", r->name);
    if (ioerr && got < PREAMBLE)                /* a directory, an I/O error */
        return tfm_fail(err, "%s: at byte %llu: %s", r->name, at + got, strerror(ioerr));
    if (got < sizeof MAGIC || !tfm_is_stream_magic(pre, got)) {
        if (r->member == 0)
            return tfm_fail(err, "%s: at byte 0: bad magic (not a tfm stream)", r->name);
        return tfm_fail(err, "%s: at byte %llu: input after the end record is not a tfm stream "
                        "(bad magic)", r->name, at);
    }
    if (got < PREAMBLE)
        return tfm_fail(err, "%s: at byte %llu: %s preamble", r->name, at + got,
                        eof_reason(ioerr));
    uint32_t version = get32(pre + 8), flags = get32(pre + 12);
    if (version != TFM_STREAM_VERSION)
        return tfm_fail(err, "%s: at byte %llu: stream version %u, this tfm reads version %d",
                        r->name, at + 8, version, TFM_STREAM_VERSION);
    if (flags)
        return tfm_fail(err, "%s: at byte %llu: unknown flags 0x%x", r->name, at + 12, flags);
    return 0;
}

/* The header record of the stream being started, parsed into h. */
static int read_header(struct tfm_reader *r, struct tfm_header *h, struct tfm_error *err)
{
    struct tfm_record rec;
    if (reader_next_raw(r, &rec, err) < 0)
        return -1;
    if (strcmp(rec.name, "tfm.header") != 0 || rec.dtype != TFM_U8 || rec.rank != 1)
        return tfm_reader_fail(r, &rec, err, "first record must be 'tfm.header' u8 [n]");
    if (header_parse(h, rec.data, rec.nbytes, err)) {
        if (r->member)
            return tfm_error_prefix(err, "%s: stream %llu, record 0 'tfm.header': at byte %llu",
                                    r->name, (unsigned long long)r->member + 1,
                                    (unsigned long long)rec.offset);
        return tfm_error_prefix(err, "%s: record 0 'tfm.header': at byte %llu", r->name,
                                (unsigned long long)rec.offset);
    }
    return 0;
}

/* The record after a header: read raw into *rec; 1 when it is the vocabulary (checked to
 * be u8 [n]), 0 when it is another record, held for tfm_reader_next. */
static int read_vocab(struct tfm_reader *r, struct tfm_record *rec, struct tfm_error *err)
{
    int k;
    while ((k = reader_next_raw(r, rec, err)) == 2)
        ;
    if (k < 0)
        return -1;
    if (strcmp(rec->name, "tfm.spm") != 0) {
        r->held = 1;
        r->held_rec = *rec;
        return 0;
    }
    if (rec->dtype != TFM_U8 || rec->rank != 1)
        return tfm_reader_fail(r, rec, err, "vocabulary record must be u8 [n]");
    return 1;
}

/* Copy the vocabulary of rec into h and check it against h's spm.crc32. */
static int take_vocab(struct tfm_reader *r, struct tfm_header *h, const struct tfm_record *rec,
                      struct tfm_error *err)
{
    void *copy = malloc(rec->nbytes ? rec->nbytes : 1);
    if (!copy)
        return tfm_reader_fail(r, rec, err, "out of memory");
    memcpy(copy, rec->data, rec->nbytes);
    h->spm = copy;
    h->spm_size = rec->nbytes;
    const char *crc = tfm_header_get(h, "spm.crc32");
    char want[16];
    snprintf(want, sizeof want, "%08x", tfm_header_vocab_id(h));
    if (crc && strcmp(crc, want) != 0)
        return tfm_reader_fail(r, rec, err, "vocabulary crc %s, header says %s", want, crc);
    const char *size = tfm_header_get(h, "spm.size");
    char have[32];
    snprintf(have, sizeof have, "%zu", rec->nbytes);
    if (size && strcmp(size, have) != 0)
        return tfm_reader_fail(r, rec, err, "vocabulary of %s bytes, header says spm.size=%s",
                               have, size);
    return 0;
}

/* A stream without a vocabulary record (rec is its record 1, held): its header must not
 * say it has one. */
static int check_no_vocab(struct tfm_reader *r, const struct tfm_header *h,
                          const struct tfm_record *rec, struct tfm_error *err)
{
    const char *size = tfm_header_get(h, "spm.size"), *crc = tfm_header_get(h, "spm.crc32");
    if (size || crc)
        return tfm_reader_fail(r, rec, err, "the header says %s%.40s%s%s%.40s, but the stream "
                               "has no vocabulary record (record 1 'tfm.spm')",
                               size ? "spm.size=" : "", size ? size : "", size && crc ? ", " : "",
                               crc ? "spm.crc32=" : "", crc ? crc : "");
    return 0;
}

/* Input follows an end record: it must be another stream of the same kind, vocabulary
 * and TFM_SAME_KEYS, whose records are then read on (tfm.h).  A checkpoint is one
 * stream: nothing may follow it. */
static int member_begin(struct tfm_reader *r, struct tfm_error *err)
{
    unsigned long long at = r->pos;
    if (strcmp(r->header.kind, TFM_KIND_CHECKPOINT) == 0)
        return tfm_fail(err, "%s: at byte %llu: input after the end of the checkpoint (a "
                        "checkpoint is one stream; concatenated checkpoints are not read)",
                        r->name, at);
    r->member++;
    r->base = at;
    r->index = 0;
    tfm_header_free(&r->mheader);
    if (read_preamble(r, err) || read_header(r, &r->mheader, err))
        return -1;
    const char *first = r->header.kind, *kind = r->mheader.kind;
    if (strcmp(kind, first) != 0)
        return tfm_fail(err, "%s: stream %llu: at byte %llu: a '%s' stream after a '%s' "
                        "stream: a concatenation must be of one kind", r->name,
                        (unsigned long long)r->member + 1, at, kind, first);
    struct tfm_record rec;
    int k = read_vocab(r, &rec, err);
    if (k < 0)
        return -1;
    if (k == 1) {
        if (take_vocab(r, &r->mheader, &rec, err))
            return -1;
        if (!r->header.spm)
            return tfm_reader_fail(r, &rec, err, "a vocabulary, where the first stream has "
                                   "none: streams of different vocabularies are not read as "
                                   "one");
        if (rec.nbytes != r->header.spm_size || memcmp(rec.data, r->header.spm, rec.nbytes))
            return tfm_reader_fail(r, &rec, err, "vocabulary %08x, the first stream's is %08x: "
                                   "streams of different vocabularies are not read as one",
                                   (unsigned)tfm_header_vocab_id(&r->mheader),
                                   (unsigned)tfm_header_vocab_id(&r->header));
    } else if (check_no_vocab(r, &r->mheader, &rec, err)) {
        return -1;
    } else if (r->header.spm) {
        return tfm_reader_fail(r, &rec, err, "no vocabulary, where the first stream has %08x: "
                               "streams of different vocabularies are not read as one",
                               (unsigned)tfm_header_vocab_id(&r->header));
    }
    static const char *const same[] = TFM_SAME_KEYS;
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        const char *a = tfm_header_get(&r->header, same[i]);
        const char *b = tfm_header_get(&r->mheader, same[i]);
        if ((a == NULL) != (b == NULL) || (a && strcmp(a, b) != 0))
            return tfm_fail(err, "%s: stream %llu: at byte %llu: header key '%s': %s%.40s%s "
                            "here, %s%.40s%s in the first stream", r->name,
                            (unsigned long long)r->member + 1, at, same[i], b ? "'" : "",
                            b ? b : "absent", b ? "'" : "", a ? "'" : "", a ? a : "absent",
                            a ? "'" : "");
    }
    if (r->on_member && r->on_member(r->on_member_ctx, &r->mheader, r->member, at, err))
        return -1;
    return 0;
}

int tfm_reader_next(struct tfm_reader *r, struct tfm_record *rec, struct tfm_error *err)
{
    for (;;) {
        if (r->held) {
            *rec = r->held_rec;
            r->held = 0;
        } else {
            if (r->done)
                return 0;
            int k;
            while ((k = reader_next_raw(r, rec, err)) == 2)
                ;
            if (k < 0)
                return -1;
        }
        if (strcmp(rec->name, "tfm.end") == 0) {
            if (rec->dtype != TFM_I64 || rec->rank != 1 || rec->dims[0] != 1)
                return tfm_reader_fail(r, rec, err, "end record must be i64 [1]");
            int64_t n;
            memcpy(&n, rec->data, 8);
            if (n < 0 || (uint64_t)n != rec->index)
                return tfm_reader_fail(r, rec, err,
                                       "end record counts %lld records, stream has %llu",
                                       (long long)n, (unsigned long long)rec->index);
            int more = more_input(r, err);
            if (more < 0)
                return -1;
            if (!more) {
                r->done = 1;
                return 0;
            }
            if (member_begin(r, err))
                return -1;
            continue;
        }
        if (rec->index > 0 && strcmp(rec->name, "tfm.header") == 0)
            return tfm_reader_fail(r, rec, err, "second header record");
        /* the vocabulary, when there is one, is record 1, taken when the stream starts */
        if (strcmp(rec->name, "tfm.spm") == 0)
            return tfm_reader_fail(r, rec, err, "vocabulary record out of place (it is record "
                                   "1 or absent)");
        r->rec_member = rec->member;
        return 1;
    }
}

int tfm_reader_expect(struct tfm_reader *r, struct tfm_record *rec, const char *name, int dtype,
                      int rank, struct tfm_error *err)
{
    uint64_t before = r->rec_member;
    int k = tfm_reader_next(r, rec, err);
    if (k < 0)
        return -1;
    if (k == 0)
        return rfail(r, r->member, r->index, NULL, r->pos, err,
                     "stream ends where '%s' was expected", name);
    if (rec->member != before)
        return tfm_reader_fail(r, rec, err, "the stream before this one ends where '%s' was "
                               "expected", name);
    if (strcmp(rec->name, name) != 0)
        return tfm_reader_fail(r, rec, err, "'%s' expected", name);
    if (dtype > 0 && rec->dtype != dtype)
        return tfm_reader_fail(r, rec, err, "dtype %s, expected %s", tfm_dtype_name(rec->dtype),
                               tfm_dtype_name(dtype));
    if (rank >= 0 && rec->rank != rank)
        return tfm_reader_fail(r, rec, err, "rank %d, expected %d", rec->rank, rank);
    return 1;
}

/* Preamble, header record, optional vocabulary record of the first stream. */
static int reader_start(struct tfm_reader *r, struct tfm_error *err)
{
    if (read_preamble(r, err) || read_header(r, &r->header, err))
        return -1;
    struct tfm_record rec;
    int k = read_vocab(r, &rec, err);
    if (k < 0)
        return -1;
    return k == 1 ? take_vocab(r, &r->header, &rec, err) : check_no_vocab(r, &r->header, &rec, err);
}

static struct tfm_reader *reader_new(int fd, const char *name, struct tfm_error *err)
{
    struct tfm_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->name = strdup(name))) {
        free(r);
        tfm_fail(err, "%s: out of memory", name);
        return NULL;
    }
    r->fd = fd;
    return r;
}

/* Map a regular file, the stream starting at byte start. */
static int reader_map(struct tfm_reader *r, off_t start)
{
    struct stat st;
    if (fstat(r->fd, &st) || !S_ISREG(st.st_mode) || start < 0 || st.st_size <= start)
        return -1;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, r->fd, 0);
    if (m == MAP_FAILED)
        return -1;
    r->map = m;
    r->map_size = (size_t)st.st_size;
    r->start = (size_t)start;
    r->map_slot = tfm_output_mapped(m, r->map_size, r->name);
    return 0;
}

static struct tfm_reader *reader_finish_open(struct tfm_reader *r, struct tfm_error *err)
{
    if (reader_start(r, err) < 0) {
        tfm_reader_close(r);
        return NULL;
    }
    return r;
}

/* tfm_reader_open_fd, waiting for the header on a pipe only until *stop is set (stop may
 * be NULL). */
static struct tfm_reader *open_fd(int fd, const char *name, volatile sig_atomic_t *stop,
                                  struct tfm_error *err)
{
    struct tfm_reader *r = reader_new(fd, name, err);
    if (!r)
        return NULL;
    r->stop = stop;
    off_t cur = lseek(fd, 0, SEEK_CUR);
    if (cur >= 0)
        reader_map(r, cur);
    return reader_finish_open(r, err);
}

struct tfm_reader *tfm_reader_open_fd(int fd, const char *name, struct tfm_error *err)
{
    return open_fd(fd, name, NULL, err);
}

struct tfm_reader *tfm_reader_open_peeked(int fd, const char *name, const void *peek,
                                          size_t npeek, struct tfm_error *err)
{
    struct tfm_reader *r = reader_new(fd, name, err);
    if (!r)
        return NULL;
    off_t cur = lseek(fd, 0, SEEK_CUR);
    if (cur < 0 || cur < (off_t)npeek || reader_map(r, cur - (off_t)npeek) < 0) {
        if (npeek > sizeof r->rbuf)
            npeek = sizeof r->rbuf;
        memcpy(r->rbuf, peek, npeek);
        r->rlen = npeek;
    }
    return reader_finish_open(r, err);
}

struct tfm_reader *tfm_reader_open(const char *path, struct tfm_error *err)
{
    return tfm_reader_open_stop(path, NULL, err);
}

struct tfm_reader *tfm_reader_open_stop(const char *path, volatile sig_atomic_t *stop,
                                        struct tfm_error *err)
{
    if (!path || strcmp(path, "-") == 0)
        return open_fd(0, "<stdin>", stop, err);
    /* open(2) of a FIFO waits for a writer, deaf to the stop flag: with one, it opens at
     * once and the wait for a writer is the poll of every read (wait_input: Linux reports
     * no end of input on a FIFO that no writer has opened yet) */
    struct stat st;
    int fifo = stop && stat(path, &st) == 0 && S_ISFIFO(st.st_mode);
    int fd = fifo ? tfm_open_nowait(path, O_RDONLY | O_CLOEXEC)
                  : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tfm_fail(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct tfm_reader *r = open_fd(fd, path, stop, err);
    if (!r) {
        close(fd);
        return NULL;
    }
    r->own_fd = 1;
    return r;
}

void tfm_reader_unmap_after(struct tfm_reader *r, const void *end)
{
    if (!r->map || (const unsigned char *)end < r->map ||
        (const unsigned char *)end >= r->map + r->map_size)
        return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t keep = ((size_t)((const unsigned char *)end - r->map) + page - 1) / page * page;
    if (keep >= r->map_size)
        return;
    /* the table shrinks first: it never holds a page that is no longer mapped */
    tfm_output_mapped_shrink(r->map_slot, keep);
    if (munmap(r->map + keep, r->map_size - keep) == 0)
        r->map_size = keep;
    else
        tfm_output_mapped_shrink(r->map_slot, r->map_size);
}

void tfm_reader_close(struct tfm_reader *r)
{
    if (!r)
        return;
    if (r->map) {
        tfm_output_mapped_forget(r->map_slot);
        munmap(r->map, r->map_size);
    }
    /* a descriptor the caller keeps (standard input redirected from a file) is left where
     * the reading ended, as reading it through read(2) would leave it: a second reader of
     * it goes on from there, as it does on a pipe, instead of reading the stream again */
    if (r->map && !r->own_fd)
        lseek(r->fd, (off_t)(r->start + r->pos), SEEK_SET);
    if (r->own_fd)
        close(r->fd);
    tfm_header_free(&r->header);
    tfm_header_free(&r->mheader);
    free(r->buf);
    free(r->zbuf);
    free(r->name);
    free(r);
}

/* ---- writer ---------------------------------------------------------------------- */

struct tfm_writer {
    int fd;
    int flags;
    int to_file;                /* out is open (not stdout) */
    struct tfm_output out;
    char *name;                 /* for messages */
    unsigned char buf[1 << 16];
    size_t len;
    uint64_t pos, index;
    int failed;
    void *zbuf;
    size_t zbuf_cap;
};

const char *tfm_writer_name(const struct tfm_writer *w) { return w->name; }

uint64_t tfm_writer_offset(const struct tfm_writer *w) { return w->pos; }

static int wflush(struct tfm_writer *w, struct tfm_error *err)
{
    size_t off = 0;
    while (off < w->len) {
        ssize_t k = write(w->fd, w->buf + off, w->len - off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            w->failed = 1;
            return tfm_fail(err, "%s: write error: %s", w->name, strerror(errno));
        }
        off += (size_t)k;
    }
    w->len = 0;
    return 0;
}

static int wbytes(struct tfm_writer *w, const void *p, size_t n, struct tfm_error *err)
{
    const unsigned char *s = p;
    if (w->failed)
        return tfm_fail(err, "%s: write error earlier", w->name);
    while (n > 0) {
        if (w->len == sizeof w->buf && wflush(w, err))
            return -1;
        if (w->len == 0 && n >= sizeof w->buf) {   /* large: write through */
            ssize_t k = write(w->fd, s, n);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0) {
                w->failed = 1;
                return tfm_fail(err, "%s: write error: %s", w->name, strerror(errno));
            }
            s += k;
            n -= (size_t)k;
            w->pos += (uint64_t)k;
            continue;
        }
        size_t k = sizeof w->buf - w->len;
        if (k > n)
            k = n;
        memcpy(w->buf + w->len, s, k);
        w->len += k;
        s += k;
        n -= k;
        w->pos += k;
    }
    return 0;
}

int tfm_writer_put(struct tfm_writer *w, const char *name, int dtype, int rank,
                   const int64_t *dims, const void *data, struct tfm_error *err)
{
    size_t name_len = strlen(name);
    if (!valid_name(name, name_len))
        return tfm_fail(err, "%s: bad record name '%.80s'", w->name, name);
    if (!tfm_dtype_size(dtype))
        return tfm_fail(err, "%s: record '%s': unknown dtype %d", w->name, name, dtype);
    if (rank < 0 || rank > TFM_MAX_RANK)
        return tfm_fail(err, "%s: record '%s': rank %d", w->name, name, rank);
    int64_t count;
    uint64_t nbytes;
    if (!shape_bytes(dtype, rank, dims, &count, &nbytes))
        return tfm_fail(err, "%s: record '%s': bad or too large shape", w->name, name);

    const void *stored = data;
    uint64_t stored_size = nbytes;
    int codec = CODEC_RAW;
    if ((w->flags & TFM_DEFLATE) && nbytes >= 256) {
        uLong bound = compressBound((uLong)nbytes);
        if (ensure_buf(&w->zbuf, &w->zbuf_cap, bound))
            return tfm_fail(err, "%s: out of memory", w->name);
        uLongf zlen = bound;
        if (compress2(w->zbuf, &zlen, data, (uLong)nbytes, 6) == Z_OK && zlen < nbytes - nbytes / 16) {
            stored = w->zbuf;
            stored_size = zlen;
            codec = CODEC_DEFLATE;
        }
    }

    unsigned char hdr[FIXED + TFM_MAX_RANK * 8 + TFM_MAX_NAME];
    memset(hdr, 0, FIXED);
    memcpy(hdr, REC_MAGIC, 4);
    hdr[4] = (unsigned char)dtype;
    hdr[5] = (unsigned char)rank;
    hdr[6] = (unsigned char)codec;
    put16(hdr + 8, (uint16_t)name_len);
    put32(hdr + 12, tfm_crc32(0, data, (size_t)nbytes));
    put64(hdr + 16, stored_size);
    for (int i = 0; i < rank; i++)
        put64(hdr + FIXED + 8 * i, (uint64_t)dims[i]);
    memcpy(hdr + FIXED + 8 * rank, name, name_len);
    size_t var = (size_t)rank * 8 + name_len;
    uint32_t hcrc = tfm_crc32(tfm_crc32(0, hdr, 24), hdr + FIXED, var);
    put32(hdr + 24, hcrc);
    static const unsigned char zeros[TFM_ALIGN];
    if (wbytes(w, hdr, FIXED + var, err) ||
        wbytes(w, zeros, (size_t)pad_to_align(w->pos + 0), err) ||
        wbytes(w, stored, (size_t)stored_size, err))
        return -1;
    w->index++;
    return 0;
}

struct tfm_writer *tfm_writer_open(const char *path, const struct tfm_header *h, int flags,
                                   struct tfm_error *err)
{
    if (!path || strcmp(path, "-") == 0)
        return tfm_writer_open_output(NULL, h, flags, err);
    struct tfm_output out;
    if (tfm_output_open(&out, path, err))
        return NULL;
    return tfm_writer_open_output(&out, h, flags, err);
}

struct tfm_writer *tfm_writer_open_output(struct tfm_output *out, const struct tfm_header *h,
                                          int flags, struct tfm_error *err)
{
    struct tfm_writer *w = calloc(1, sizeof *w);
    if (!w) {
        if (out)
            tfm_output_abort(out);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    w->flags = flags;
    w->out.fd = -1;
    if (!out) {
        w->fd = 1;
        w->name = strdup("<stdout>");
    } else {
        w->out = *out;              /* the writer owns it now; the caller's copy is inert */
        *out = (struct tfm_output){.fd = -1};
        w->to_file = 1;
        w->name = strdup(w->out.path);
        w->fd = tfm_output_fd(&w->out, err);    /* a FIFO waits for its reader here */
        if (w->fd < 0) {
            tfm_writer_abort(w);
            return NULL;
        }
    }
    if (!w->name) {
        tfm_writer_abort(w);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    unsigned char pre[PREAMBLE] = {0};
    memcpy(pre, MAGIC, sizeof MAGIC);
    put32(pre + 8, TFM_STREAM_VERSION);
    size_t ntext = 0;
    char *text = header_text(h, &ntext);
    if (!text) {
        tfm_writer_abort(w);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    int64_t dim = (int64_t)ntext, sdim = (int64_t)h->spm_size;
    int rc = wbytes(w, pre, PREAMBLE, err);
    if (!rc)
        rc = tfm_writer_put(w, "tfm.header", TFM_U8, 1, &dim, text, err);
    free(text);
    if (!rc && h->spm)
        rc = tfm_writer_put(w, "tfm.spm", TFM_U8, 1, &sdim, h->spm, err);
    if (rc) {
        tfm_writer_abort(w);
        return NULL;
    }
    return w;
}

void tfm_writer_abort(struct tfm_writer *w)
{
    if (!w)
        return;
    if (w->to_file)
        tfm_output_abort(&w->out);
    free(w->name);
    free(w->zbuf);
    free(w);
}

int tfm_writer_close(struct tfm_writer *w, struct tfm_error *err)
{
    int64_t one = 1, count = (int64_t)w->index;
    if (tfm_writer_put(w, "tfm.end", TFM_I64, 1, &one, &count, err) || wflush(w, err))
        goto fail;
    if (w->to_file) {
        w->to_file = 0;
        if (tfm_output_commit(&w->out, err))
            goto fail;
    }
    tfm_writer_abort(w);
    return 0;
fail:
    tfm_writer_abort(w);
    return -1;
}
