/* error.c: filling struct tfm_error (see error.h). */
#include "error.h"

#include <stdio.h>
#include <string.h>

int tfm_fail(struct tfm_error *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int tfm_error_prefix(struct tfm_error *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prefix[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* built by hand: truncation of a long message is intended, not a bug to warn about */
    size_t n = strnlen(prefix, sizeof prefix);
    if (n > sizeof err->msg - 3)
        n = sizeof err->msg - 3;
    memcpy(err->msg, prefix, n);
    memcpy(err->msg + n, ": ", 2);
    size_t m = strnlen(old, sizeof old);
    if (m > sizeof err->msg - n - 3)
        m = sizeof err->msg - n - 3;
    memcpy(err->msg + n + 2, old, m);
    err->msg[n + 2 + m] = 0;
    return -1;
}
