/* lines.c: line reader with tfm's text input policy (see lines.h).
 *
 * One buffer of BUF_SIZE bytes holds unconsumed text; a line is handed out in place
 * (its '\n' overwritten by NUL).  Plain input is read(2) straight into the buffer; gzip
 * input goes through a small raw buffer and zlib's inflate.
 */
#include "lines.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "stream.h"

enum {
    BUF_SIZE = 4 << 20,         /* > 2 * TFM_LINE_MAX: a refill always has room */
    RAW_SIZE = 1 << 16,         /* compressed input per read */
};

struct tfm_lines {
    int fd, own_fd;
    char name[512];
    int64_t lineno;
    char *buf;                  /* [BUF_SIZE + 1] */
    size_t pos, end;            /* unconsumed text is buf[pos, end) */
    int eof;                    /* no more text will come */
    /* gzip */
    int gz, gz_done;            /* inflating; the current member has ended */
    z_stream zs;
    unsigned char *raw;         /* [RAW_SIZE] compressed bytes */
    int raw_eof;
};

static int fail_io(struct tfm_lines *l, struct tfm_error *err, const char *what)
{
    return tfm_fail(err, "%s: %s", l->name, what);
}

/* read(2) that retries on EINTR; bytes read, 0 at end, -1 on error. */
static ssize_t read_some(int fd, void *p, size_t n)
{
    for (;;) {
        ssize_t k = read(fd, p, n);
        if (k >= 0 || errno != EINTR)
            return k;
    }
}

/* Refill the raw (compressed) buffer if inflate has used it all. */
static int raw_fill(struct tfm_lines *l, struct tfm_error *err)
{
    if (l->zs.avail_in > 0 || l->raw_eof)
        return 0;
    ssize_t k = read_some(l->fd, l->raw, RAW_SIZE);
    if (k < 0)
        return fail_io(l, err, strerror(errno));
    if (k == 0)
        l->raw_eof = 1;
    l->zs.next_in = l->raw;
    l->zs.avail_in = (uInt)k;
    return 0;
}

/* Append decompressed or plain bytes to buf[end..]; sets eof at the end of input. */
static int fill(struct tfm_lines *l, struct tfm_error *err)
{
    if (l->pos > 0) {       /* keep the partial line at the start of the buffer */
        memmove(l->buf, l->buf + l->pos, l->end - l->pos);
        l->end -= l->pos;
        l->pos = 0;
    }
    size_t room = BUF_SIZE - l->end;
    if (!l->gz) {
        ssize_t k = read_some(l->fd, l->buf + l->end, room);
        if (k < 0)
            return fail_io(l, err, strerror(errno));
        if (k == 0)
            l->eof = 1;
        l->end += (size_t)k;
        return 0;
    }
    size_t before = l->end;
    while (l->end == before && !l->eof) {
        if (raw_fill(l, err))
            return -1;
        if (l->gz_done) {   /* another gzip member follows, or the end */
            if (l->zs.avail_in == 0 && l->raw_eof) {
                l->eof = 1;
                break;
            }
            if (inflateReset(&l->zs) != Z_OK)
                return fail_io(l, err, "gzip: cannot restart inflate");
            l->gz_done = 0;
        }
        if (l->zs.avail_in == 0 && l->raw_eof)
            return fail_io(l, err, "gzip data truncated");
        l->zs.next_out = (unsigned char *)l->buf + l->end;
        l->zs.avail_out = (uInt)room;
        int rc = inflate(&l->zs, Z_NO_FLUSH);
        l->end += room - l->zs.avail_out;
        if (rc == Z_STREAM_END)
            l->gz_done = 1;
        else if (rc != Z_OK && rc != Z_BUF_ERROR)
            return tfm_fail(err, "%s: gzip data corrupt (%s)", l->name,
                            l->zs.msg ? l->zs.msg : "inflate failed");
    }
    return 0;
}

struct tfm_lines *tfm_lines_open_fd(int fd, const char *name, const void *peek, size_t npeek,
                                    struct tfm_error *err)
{
    struct tfm_lines *l = calloc(1, sizeof *l);
    if (!l || !(l->buf = malloc(BUF_SIZE + 1))) {
        free(l);
        tfm_fail(err, "%s: out of memory", name);
        return NULL;
    }
    l->fd = fd;
    snprintf(l->name, sizeof l->name, "%s", name);
    if (npeek > BUF_SIZE)
        npeek = BUF_SIZE;
    if (npeek)
        memcpy(l->buf, peek, npeek);
    l->end = npeek;
    /* Enough bytes to tell gzip and tfm streams from text. */
    while (l->end < 8 && !l->eof)
        if (fill(l, err)) {
            tfm_lines_close(l);
            return NULL;
        }
    if (tfm_is_stream_magic(l->buf, l->end)) {
        tfm_fail(err, "%s: a tfm stream, not text", name);
        tfm_lines_close(l);
        return NULL;
    }
    if (l->end >= 2 && (unsigned char)l->buf[0] == 0x1f && (unsigned char)l->buf[1] == 0x8b) {
        l->raw = malloc(l->end > RAW_SIZE ? l->end : RAW_SIZE);   /* what fill() got */
        if (!l->raw || inflateInit2(&l->zs, 15 + 16) != Z_OK) {
            tfm_fail(err, "%s: out of memory for gzip", name);
            tfm_lines_close(l);
            return NULL;
        }
        l->gz = 1;
        memcpy(l->raw, l->buf, l->end);
        l->zs.next_in = l->raw;
        l->zs.avail_in = (uInt)l->end;
        l->end = 0;
        l->eof = 0;
        l->raw_eof = 0;
    }
    return l;
}

struct tfm_lines *tfm_lines_open(const char *path, struct tfm_error *err)
{
    if (!path || strcmp(path, "-") == 0)
        return tfm_lines_open_fd(0, "<stdin>", NULL, 0, err);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tfm_fail(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct tfm_lines *l = tfm_lines_open_fd(fd, path, NULL, 0, err);
    if (!l) {
        close(fd);
        return NULL;
    }
    l->own_fd = 1;
    return l;
}

void tfm_lines_close(struct tfm_lines *l)
{
    if (!l)
        return;
    if (l->gz)
        inflateEnd(&l->zs);
    if (l->own_fd)
        close(l->fd);
    free(l->raw);
    free(l->buf);
    free(l);
}

int64_t tfm_lines_number(const struct tfm_lines *l)
{
    return l->lineno;
}

const char *tfm_lines_name(const struct tfm_lines *l)
{
    return l->name;
}

int tfm_lines_next(struct tfm_lines *l, const char **line, size_t *len, struct tfm_error *err)
{
    size_t scanned = 0;     /* bytes of the current line already searched for '\n' */
    char *nl;
    for (;;) {
        nl = memchr(l->buf + l->pos + scanned, '\n', l->end - l->pos - scanned);
        if (nl)
            break;
        scanned = l->end - l->pos;
        if (scanned > TFM_LINE_MAX + 1)    /* + 1: room for a '\r' */
            return tfm_fail(err, "%s: line %lld: longer than %zu bytes", l->name,
                            (long long)l->lineno + 1, TFM_LINE_MAX);
        if (l->eof) {
            if (scanned == 0)
                return 0;
            nl = l->buf + l->end;   /* last line without '\n'; buf has one spare byte */
            break;
        }
        if (fill(l, err))
            return -1;
    }
    l->lineno++;
    char *s = l->buf + l->pos;
    size_t n = (size_t)(nl - s);
    l->pos = nl < l->buf + l->end ? n + 1 + l->pos : l->end;
    if (n > 0 && s[n - 1] == '\r')
        n--;
    if (n > TFM_LINE_MAX)
        return tfm_fail(err, "%s: line %lld: longer than %zu bytes", l->name,
                        (long long)l->lineno, TFM_LINE_MAX);
    size_t bad;
    if (!tfm_utf8_valid(s, n, &bad))
        return tfm_fail(err, "%s: line %lld: invalid UTF-8 at byte %zu", l->name,
                        (long long)l->lineno, bad + 1);
    s[n] = 0;
    *line = s;
    *len = n;
    return 1;
}

int tfm_utf8_valid(const char *str, size_t n, size_t *bad)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path, 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned lo = 0x80, hi = 0xbf;  /* range of the first continuation byte */
        if (c >= 0xc2 && c <= 0xdf) {
            need = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            if (c == 0xe0)
                lo = 0xa0;      /* no overlong forms */
            else if (c == 0xed)
                hi = 0x9f;      /* no surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            if (c == 0xf0)
                lo = 0x90;
            else if (c == 0xf4)
                hi = 0x8f;      /* nothing beyond U+10FFFF */
        } else {
            *bad = i;
            return 0;
        }
        for (size_t k = 1; k <= need; k++) {
            unsigned d = i + k < n ? s[i + k] : 0;  /* a cut sequence fails here too */
            if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xbf)) {
                *bad = i;       /* blame the sequence's first byte */
                return 0;
            }
        }
        i += need + 1;
    }
    return 1;
}

const char *tfm_quote(char *buf, size_t size, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0, i = 0;
    while (i < n) {
        char tmp[8];
        size_t len = 0, used = 1;
        unsigned c = u[i];
        if (c == '\t' || c == '\r' || c == '\n' || c == '\\') {
            tmp[0] = '\\';
            tmp[1] = c == '\t' ? 't' : c == '\r' ? 'r' : c == '\n' ? 'n' : '\\';
            len = 2;
        } else if (c >= 0x20 && c < 0x7f) {
            tmp[0] = (char)c;
            len = 1;
        } else {
            /* a whole UTF-8 sequence (not a C1 control), or one escaped byte */
            size_t k = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0, bad;
            if (k && i + k <= n && tfm_utf8_valid(s + i, k, &bad) &&
                !(c == 0xc2 && u[i + 1] < 0xa0)) {
                memcpy(tmp, s + i, k);
                len = used = k;
            } else {
                tmp[0] = '\\';
                tmp[1] = 'x';
                tmp[2] = hex[c >> 4];
                tmp[3] = hex[c & 15];
                len = 4;
            }
        }
        if (o + len + 4 > size) {   /* what went before left room for "..." and the NUL */
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(buf + o, tmp, len);
        o += len;
        i += used;
    }
    buf[o] = 0;
    return buf;
}
