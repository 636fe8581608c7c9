/* text.h: a text held in memory, line by line (references, hypotheses, source words).
 *
 * The lines live in one buffer, each NUL-terminated, with an offset array beside it: no
 * allocation per line.  Reading a file follows the input policy of lines.h (UTF-8,
 * CRLF, gzip, TFM_LINE_MAX); hypotheses that may come as a stream are read by
 * tfm_hypread_text (hypread.h).
 * Not here: what the lines mean.
 */
#ifndef TFM_TEXT_H
#define TFM_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct tfm_text {
    char *buf;              /* line i at buf + off[i], NUL-terminated */
    size_t used, cap;
    size_t *off;            /* [n + 1]: off[n] is where the next line goes */
    size_t cap_n;
    int64_t n;
    char name[512];         /* for messages: the path as given, or "<stdin>" */
};

void tfm_text_init(struct tfm_text *t);
void tfm_text_free(struct tfm_text *t);
void tfm_text_set_name(struct tfm_text *t, const char *name);

static inline const char *tfm_text_line(const struct tfm_text *t, int64_t i)
{
    return t->buf + t->off[i];
}
static inline size_t tfm_text_len(const struct tfm_text *t, int64_t i)
{
    return t->off[i + 1] - t->off[i] - 1;
}

/* Append a line of len bytes (no newline). */
int tfm_text_push(struct tfm_text *t, const char *s, size_t len, struct tfm_error *err);

/* Append every line of path ("-": stdin); t is named path. */
int tfm_text_read(struct tfm_text *t, const char *path, struct tfm_error *err);

/* The lines as one text, each followed by '\n' (a tree file whose trees span lines):
 * *len bytes at the returned pointer (NUL-terminated, owned by the caller), or NULL. */
char *tfm_text_join(const struct tfm_text *t, size_t *len, struct tfm_error *err);

#endif
