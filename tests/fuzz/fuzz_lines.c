/* fuzz_lines.c: libFuzzer target for the text line reader (make fuzz).  Every input is
 * read to the end from a memfd and, when it fits the pipe buffer, from a pipe; every line
 * returned must be valid UTF-8, at most TFM_LINE_MAX bytes, without '\n' and with its NUL
 * where its length says (abort otherwise).  tfm_quote runs on the input too.  Built with
 * ASan and UBSan; any crash, leak or undefined behavior is a finding. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lines.h"

static void drain(int fd)
{
    struct tfm_error err;
    struct tfm_lines *l = tfm_lines_open_fd(fd, "fuzz", NULL, 0, &err);
    if (!l)
        return;
    const char *line;
    size_t len, bad;
    int64_t n = 0;
    while (tfm_lines_next(l, &line, &len, &err) == 1) {
        if (len > TFM_LINE_MAX || line[len] != 0 || memchr(line, '\n', len) ||
            !tfm_utf8_valid(line, len, &bad) || tfm_lines_number(l) != ++n)
            abort();
    }
    tfm_lines_close(l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char q[96];
    if (strlen(tfm_quote(q, sizeof q, (const char *)data, size)) >= sizeof q)
        abort();
    int fd = memfd_create("fuzz", 0);
    if (fd >= 0) {
        if (write(fd, data, size) == (ssize_t)size && lseek(fd, 0, SEEK_SET) == 0)
            drain(fd);
        close(fd);
    }
    int p[2];
    if (size <= 60000 && pipe(p) == 0) {
        if (write(p[1], data, size) == (ssize_t)size) {
            close(p[1]);
            drain(p[0]);
        } else {
            close(p[1]);
        }
        close(p[0]);
    }
    return 0;
}
