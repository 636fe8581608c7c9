/* test_lines: quoting input for messages (tfm_quote) and the text line reader's policy
 * (CRLF, last line without newline, invalid UTF-8, gzip, stream magic). */
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "lines.h"

static void test_quote(void)
{
    char b[64];
    CHECK_STR(tfm_quote(b, sizeof b, "plain text", 10), "plain text");
    CHECK_STR(tfm_quote(b, sizeof b, "Grüße, 東京", strlen("Grüße, 東京")), "Grüße, 東京");
    CHECK_STR(tfm_quote(b, sizeof b, "a\tb\r\nc\\d", 8), "a\\tb\\r\\nc\\\\d");
    CHECK_STR(tfm_quote(b, sizeof b, "\x7f" "ELF\x02\x01\x00x", 8), "\\x7fELF\\x02\\x01\\x00x");
    CHECK_STR(tfm_quote(b, sizeof b, "\x1b[31m", 5), "\\x1b[31m");
    /* bytes that are not UTF-8: a lone continuation, a cut sequence, overlong, C1 */
    CHECK_STR(tfm_quote(b, sizeof b, "\x80", 1), "\\x80");
    CHECK_STR(tfm_quote(b, sizeof b, "\xe6\x9d", 2), "\\xe6\\x9d");
    CHECK_STR(tfm_quote(b, sizeof b, "\xc0\xaf", 2), "\\xc0\\xaf");
    CHECK_STR(tfm_quote(b, sizeof b, "\xc2\x9b", 2), "\\xc2\\x9b");
    CHECK_STR(tfm_quote(b, sizeof b, "", 0), "");
    /* cut to fit, ending in "..."; never past the buffer */
    char s[8];
    CHECK_STR(tfm_quote(s, sizeof s, "abcdefghij", 10), "abcd...");
    CHECK_STR(tfm_quote(s, sizeof s, "abc", 3), "abc");
    CHECK_STR(tfm_quote(s, sizeof s, "\x01\x02\x03", 3), "\\x01...");
    char big[4096];
    memset(big, 0xff, sizeof big);
    CHECK_EQ_INT(strlen(tfm_quote(b, sizeof b, big, sizeof big)), 63);
}

/* Lines of a file holding data[0..n). */
static int lines_of(const void *data, size_t n, char out[][64], int max, struct tfm_error *err)
{
    char path[] = "/tmp/tfm-test-lines-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, data, n) != (ssize_t)n)
        return -2;
    close(fd);
    struct tfm_lines *l = tfm_lines_open(path, err);
    int k = 0, rc = 0;
    const char *line;
    size_t len;
    while (l && k < max && (rc = tfm_lines_next(l, &line, &len, err)) == 1)
        snprintf(out[k++], 64, "%s", line);
    if (!l || rc < 0)
        k = -1;
    tfm_lines_close(l);
    unlink(path);
    return k;
}

static void test_policy(void)
{
    char got[8][64];
    struct tfm_error err;
    CHECK_EQ_INT(lines_of("a\r\nb\n\nc", 8, got, 8, &err), 4);
    CHECK_STR(got[0], "a");
    CHECK_STR(got[1], "b");
    CHECK_STR(got[2], "");
    CHECK_STR(got[3], "c");
    CHECK_EQ_INT(lines_of("ok\nbad \xff here\n", 15, got, 8, &err), -1);
    CHECK(strstr(err.msg, ": line 2: invalid UTF-8 at byte 5") != NULL);
    CHECK_EQ_INT(lines_of("\x89TFM\r\n\x1a\n", 8, got, 8, &err), -1);
    CHECK(strstr(err.msg, ": a tfm stream, not text") != NULL);
    /* gzip, two members */
    unsigned char gz[256];
    size_t n = 0;
    const char *parts[] = {"one\ntwo\n", "three\n"};
    for (int i = 0; i < 2; i++) {
        z_stream z;
        memset(&z, 0, sizeof z);
        CHECK(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
        z.next_in = (unsigned char *)parts[i];
        z.avail_in = (uInt)strlen(parts[i]);
        z.next_out = gz + n;
        z.avail_out = (uInt)(sizeof gz - n);
        CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
        n += z.total_out;
        deflateEnd(&z);
    }
    CHECK_EQ_INT(lines_of(gz, n, got, 8, &err), 3);
    CHECK_STR(got[2], "three");
    CHECK_EQ_INT(lines_of(gz, n - 3, got, 8, &err), -1);    /* cut */
}

int main(void)
{
    t_run("tfm_quote: text as is, other bytes escaped, cut to fit", test_quote);
    t_run("lines: CRLF, empty and unterminated lines, UTF-8, stream magic, gzip", test_policy);
    return t_done();
}
