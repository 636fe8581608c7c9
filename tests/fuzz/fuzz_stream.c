/* fuzz_stream.c: libFuzzer target for the stream reader (make fuzz).  Every input is read
 * to the end twice: from a memfd (the reader's mmap path) and, when it fits the pipe
 * buffer, from a pipe (the buffered path); token streams also go through the corpus
 * reader's checks.  Built with ASan and UBSan; any crash, leak or undefined behavior is a
 * finding. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "corpus.h"
#include "stream.h"

static void drain(struct tfm_reader *r)
{
    struct tfm_error err;
    struct tfm_record rec;
    const char *kind = tfm_reader_header(r)->kind;
    if (strcmp(kind, TFM_KIND_TOKENS) == 0 || strcmp(kind, TFM_KIND_HYPOTHESES) == 0) {
        struct tfm_corpus c;
        tfm_corpus_init(&c);
        tfm_corpus_read(r, &c, 1000, &err);
        tfm_corpus_free(&c);
        return;
    }
    while (tfm_reader_next(r, &rec, &err) == 1) {
        volatile unsigned char sink = 0;
        for (size_t i = 0; i < rec.nbytes; i += 4096)
            sink ^= ((const unsigned char *)rec.data)[i];
        (void)sink;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tfm_error err;
    /* regular-file path (mmap) */
    int fd = memfd_create("fuzz", 0);
    if (fd >= 0) {
        if (write(fd, data, size) == (ssize_t)size && lseek(fd, 0, SEEK_SET) == 0) {
            struct tfm_reader *r = tfm_reader_open_fd(fd, "fuzz", &err);
            if (r) {
                drain(r);
                tfm_reader_close(r);
            }
        }
        close(fd);
    }
    /* pipe path (buffered reads), for inputs that fit the pipe buffer */
    int p[2];
    if (size <= 60000 && pipe(p) == 0) {
        if (write(p[1], data, size) == (ssize_t)size) {
            close(p[1]);
            struct tfm_reader *r = tfm_reader_open_fd(p[0], "fuzz", &err);
            if (r) {
                drain(r);
                tfm_reader_close(r);
            }
        } else {
            close(p[1]);
        }
        close(p[0]);
    }
    return 0;
}
