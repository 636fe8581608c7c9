/* lines.h: reading UTF-8 text one line at a time, with tfm's input policy.
 *
 * The policy (the same for every tool that reads text, documented in tfm-tokenize(1)):
 *  - a line ends at '\n'; a '\r' just before it is dropped (CRLF files read as LF); the
 *    last line may lack its '\n'; an empty line is an empty sentence;
 *  - a line must be valid UTF-8 (no overlong forms, surrogates or code points beyond
 *    U+10FFFF), else "FILE: line N: invalid UTF-8 at byte K" (K counts from 1);
 *  - a line longer than TFM_LINE_MAX bytes is an error naming the line;
 *  - input that starts with the gzip magic is inflated on the fly (concatenated members
 *    too), so the gzipped files under data/ are read as they are;
 *  - input that starts with the tfm stream magic is refused ("a tfm stream, not text").
 * Memory is bounded by TFM_LINE_MAX, whatever the size of the input.
 *
 * Not here: what a line means (see tokenize.h).
 */
#ifndef TFM_LINES_H
#define TFM_LINES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {   /* error.h has no guard of its own */
#endif

#include "error.h"

/* The longest line accepted, in bytes, '\n' excluded: 1 MiB. */
#define TFM_LINE_MAX ((size_t)1 << 20)

struct tfm_lines;

/* Open path ("-" or NULL: stdin, named "<stdin>" in messages). */
struct tfm_lines *tfm_lines_open(const char *path, struct tfm_error *err);
/* Read from fd (not closed by tfm_lines_close), whose first npeek bytes were already read
 * into peek by the caller (to look for a magic number). */
struct tfm_lines *tfm_lines_open_fd(int fd, const char *name, const void *peek, size_t npeek,
                                    struct tfm_error *err);
/* The next line: 1 with *line (NUL-terminated, valid until the next call) and *len;
 * 0 at the end of the input; -1 with "FILE: line N: reason". */
int tfm_lines_next(struct tfm_lines *l, const char **line, size_t *len, struct tfm_error *err);
/* Number (from 1) of the line last returned. */
int64_t tfm_lines_number(const struct tfm_lines *l);
const char *tfm_lines_name(const struct tfm_lines *l);
void tfm_lines_close(struct tfm_lines *l);

/* Is s[0..n) valid UTF-8?  1, or 0 with *bad the offset of the first bad byte. */
int tfm_utf8_valid(const char *s, size_t n, size_t *bad);

/* s[0..n), input to be quoted in a message, made safe to print into buf (size bytes, at
 * least 8): valid UTF-8 text as it is; tab, CR, LF and backslash as \t \r \n \\; any other
 * control character or byte that is not UTF-8 as \xHH; what does not fit is cut, ending
 * in "...".  Returns buf. */
const char *tfm_quote(char *buf, size_t size, const char *s, size_t n);

#ifdef __cplusplus
}
#endif

#endif
