/* json.c: the JSON writer of json.h. */
#include "json.h"

#include <math.h>
#include <stdlib.h>

void tfm_json_init(struct tfm_json *j, FILE *f)
{
    j->f = f;
    j->depth = 0;
    j->keyed = 0;
    j->top = 0;
    j->bad = 0;
}

static void indent(struct tfm_json *j, int depth)
{
    fputc('\n', j->f);
    for (int i = 0; i < depth; i++)
        fputc(' ', j->f);
}

/* Before any value or key: the separator the open container wants.  0, or -1 when a
 * value is not allowed here (a key is due, or a second top-level value). */
static int before(struct tfm_json *j, int is_key)
{
    if (j->depth == 0) {
        if (is_key || j->top++ > 0)
            return j->bad = -1;
        return 0;
    }
    int d = j->depth - 1;
    if (j->keyed) {                     /* the value of a key: nothing before it */
        if (is_key)
            return j->bad = -1;
        j->keyed = 0;
        return 0;
    }
    if (j->object[d] != is_key)         /* objects take keys, arrays values */
        return j->bad = -1;
    if (j->members[d]++ > 0)
        fputc(',', j->f);
    if (j->lines[d])
        indent(j, j->depth);
    else if (j->members[d] > 1)
        fputc(' ', j->f);
    return 0;
}

static void open_container(struct tfm_json *j, int lines, int object)
{
    if (j->depth + 1 >= TFM_JSON_DEPTH || before(j, 0) < 0) {
        j->bad = -1;
        return;
    }
    fputc(object ? '{' : '[', j->f);
    j->depth++;
    j->members[j->depth - 1] = 0;
    j->lines[j->depth - 1] = (unsigned char)(lines != 0);
    j->object[j->depth - 1] = (unsigned char)object;
}

void tfm_json_object(struct tfm_json *j, int lines)
{
    open_container(j, lines, 1);
}

void tfm_json_array(struct tfm_json *j, int lines)
{
    open_container(j, lines, 0);
}

void tfm_json_end(struct tfm_json *j)
{
    if (j->depth == 0 || j->keyed) {
        j->bad = -1;
        return;
    }
    int d = --j->depth;
    if (j->lines[d])
        indent(j, d);
    fputc(j->object[d] ? '}' : ']', j->f);
    if (j->depth == 0)
        fputc('\n', j->f);
}

static void string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

void tfm_json_key(struct tfm_json *j, const char *key)
{
    if (before(j, 1) < 0)
        return;
    string(j->f, key);
    fputs(": ", j->f);
    j->keyed = 1;
}

void tfm_json_str(struct tfm_json *j, const char *s)
{
    if (before(j, 0) == 0)
        string(j->f, s);
}

void tfm_json_num(struct tfm_json *j, double x)
{
    if (before(j, 0) < 0)
        return;
    if (!isfinite(x)) {
        fputs("null", j->f);
        return;
    }
    /* the shortest of 15, 16 and 17 digits that reads back as x: 17 always does */
    char buf[32];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    fputs(buf, j->f);
}

void tfm_json_int(struct tfm_json *j, int64_t v)
{
    if (before(j, 0) == 0)
        fprintf(j->f, "%lld", (long long)v);
}

void tfm_json_bool(struct tfm_json *j, int b)
{
    if (before(j, 0) == 0)
        fputs(b ? "true" : "false", j->f);
}

void tfm_json_member_str(struct tfm_json *j, const char *key, const char *s)
{
    tfm_json_key(j, key);
    tfm_json_str(j, s);
}

void tfm_json_member_num(struct tfm_json *j, const char *key, double x)
{
    tfm_json_key(j, key);
    tfm_json_num(j, x);
}

void tfm_json_member_int(struct tfm_json *j, const char *key, int64_t v)
{
    tfm_json_key(j, key);
    tfm_json_int(j, v);
}

void tfm_json_member_bool(struct tfm_json *j, const char *key, int b)
{
    tfm_json_key(j, key);
    tfm_json_bool(j, b);
}

void tfm_json_member_nums(struct tfm_json *j, const char *key, const double *x, int n)
{
    tfm_json_key(j, key);
    tfm_json_array(j, 0);
    for (int i = 0; i < n; i++)
        tfm_json_num(j, x[i]);
    tfm_json_end(j);
}

void tfm_json_member_ints(struct tfm_json *j, const char *key, const int64_t *v, int n)
{
    tfm_json_key(j, key);
    tfm_json_array(j, 0);
    for (int i = 0; i < n; i++)
        tfm_json_int(j, v[i]);
    tfm_json_end(j);
}

int tfm_json_done(const struct tfm_json *j)
{
    return j->bad || j->depth != 0 || j->keyed ? -1 : 0;
}
