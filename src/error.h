/* error.h: how the library reports failure.
 *
 * Library functions never print and never exit.  A failing call fills a struct tfm_error
 * with one line that names the place and the reason ("train.tfm: record 12 'batch.src':
 * at byte 4096: crc mismatch") and returns -1 (or NULL).  A main prints it after its own
 * name ("tfm-batch: train.tfm: ...") and exits 1.
 */
#ifndef TFM_ERROR_H
#define TFM_ERROR_H

#include <stdarg.h>

struct tfm_error {
    char msg[1024];
};

/* Set the message (printf-style); returns -1 so callers can `return tfm_fail(err, ...)`. */
int tfm_fail(struct tfm_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Put "prefix: " in front of the current message (for adding a file name or a place). */
int tfm_error_prefix(struct tfm_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
