/* json.h: a small JSON writer for reports (tfm-score --json).
 *
 * Objects, arrays, keys, strings, numbers and booleans written straight to a FILE, with
 * the commas and the layout kept here so that every report has the same shape: a
 * container opened with lines = 1 puts each member on a line of its own, indented one
 * space per level, and closes on a line of its own; any other container is written on
 * one line with ", " between members.  Numbers are unrounded: the fewest digits that
 * read back as the same double (26.3, 26.333333333333332; null when not finite);
 * integers exact; strings escape '"', '\\' and control characters (\u00XX) and are
 * otherwise written as they are (UTF-8 passes through).
 *
 *   struct tfm_json j;
 *   tfm_json_init(&j, stdout);
 *   tfm_json_object(&j, 1);                         {
 *   tfm_json_member_num(&j, "score", 26.3);          "score": 26.3,
 *   tfm_json_key(&j, "counts");                      "counts": [1, 2]
 *   tfm_json_array(&j, 0);
 *   tfm_json_int(&j, 1); tfm_json_int(&j, 2); tfm_json_end(&j);
 *   tfm_json_end(&j);                               }
 *
 * Not here: checking writes (the caller checks the FILE, as for any other output).
 * Misuse (a value where a key is due, more than TFM_JSON_DEPTH levels, an end with
 * nothing open) is recorded, not written; tfm_json_done says whether the document came
 * out whole.
 */
#ifndef TFM_JSON_H
#define TFM_JSON_H

#include <stdint.h>
#include <stdio.h>

#define TFM_JSON_DEPTH 16

struct tfm_json {
    FILE *f;
    int depth;                          /* containers open */
    int64_t members[TFM_JSON_DEPTH];    /* members written in each open container */
    unsigned char lines[TFM_JSON_DEPTH];
    unsigned char object[TFM_JSON_DEPTH];
    int keyed;                          /* a key was written; its value is due */
    int top;                            /* top-level values written (one allowed) */
    int bad;                            /* misused (see above) */
};

void tfm_json_init(struct tfm_json *j, FILE *f);
/* Open an object or an array (lines: one member a line). */
void tfm_json_object(struct tfm_json *j, int lines);
void tfm_json_array(struct tfm_json *j, int lines);
/* Close the innermost container; closing the outermost ends the document with '\n'. */
void tfm_json_end(struct tfm_json *j);
/* A key of the open object; the value follows. */
void tfm_json_key(struct tfm_json *j, const char *key);
void tfm_json_str(struct tfm_json *j, const char *s);
void tfm_json_num(struct tfm_json *j, double x);
void tfm_json_int(struct tfm_json *j, int64_t v);
void tfm_json_bool(struct tfm_json *j, int b);
/* A member of the open object at once: its key and its value; an array of n values is
 * written on one line. */
void tfm_json_member_str(struct tfm_json *j, const char *key, const char *s);
void tfm_json_member_num(struct tfm_json *j, const char *key, double x);
void tfm_json_member_int(struct tfm_json *j, const char *key, int64_t v);
void tfm_json_member_bool(struct tfm_json *j, const char *key, int b);
void tfm_json_member_nums(struct tfm_json *j, const char *key, const double *x, int n);
void tfm_json_member_ints(struct tfm_json *j, const char *key, const int64_t *v, int n);
/* 0 when every container was closed and nothing was misused, else -1. */
int tfm_json_done(const struct tfm_json *j);

#endif
