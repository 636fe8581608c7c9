/* text.c: a text in memory (text.h). */
#include "text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lines.h"
#include "util.h"

void tfm_text_init(struct tfm_text *t)
{
    memset(t, 0, sizeof *t);
}

void tfm_text_free(struct tfm_text *t)
{
    free(t->buf);
    free(t->off);
    tfm_text_init(t);
}

void tfm_text_set_name(struct tfm_text *t, const char *name)
{
    snprintf(t->name, sizeof t->name, "%s", name);
}

int tfm_text_push(struct tfm_text *t, const char *s, size_t len, struct tfm_error *err)
{
    if (tfm_grow(&t->off, &t->cap_n, (size_t)t->n + 2, sizeof *t->off) ||
        tfm_grow(&t->buf, &t->cap, t->used + len + 1, 1))
        return tfm_fail(err, "out of memory");
    t->off[0] = 0;
    memcpy(t->buf + t->used, s, len);
    t->buf[t->used + len] = '\0';
    t->used += len + 1;
    t->off[++t->n] = t->used;
    return 0;
}

int tfm_text_read(struct tfm_text *t, const char *path, struct tfm_error *err)
{
    tfm_text_set_name(t, path);
    struct tfm_lines *l = tfm_lines_open(path, err);
    if (!l)
        return -1;
    const char *s;
    size_t len;
    int k;
    while ((k = tfm_lines_next(l, &s, &len, err)) == 1)
        if (tfm_text_push(t, s, len, err) < 0) {
            k = -1;
            break;
        }
    tfm_lines_close(l);
    return k;
}

char *tfm_text_join(const struct tfm_text *t, size_t *len, struct tfm_error *err)
{
    size_t n = t->n ? t->off[t->n] : 0;    /* every line and its NUL, which becomes '\n' */
    char *all = malloc(n + 1);
    if (!all) {
        tfm_fail(err, "out of memory");
        return NULL;
    }
    if (n)
        memcpy(all, t->buf, n);
    for (int64_t i = 0; i < t->n; i++)
        all[t->off[i + 1] - 1] = '\n';
    all[n] = '\0';
    *len = n;
    return all;
}
