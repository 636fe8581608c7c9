/* treebank.c: tfm-score's tree modes (treebank.h). */
#include "treebank.h"

#include <stdlib.h>

#include "hypread.h"
#include "text.h"

/* Each tree of path, linearized with o (words and linearization), or with o NULL as it
 * was read, one a line. */
static int each_tree(const char *path, const struct tfm_linearize_opts *o, FILE *out,
                     struct tfm_error *err)
{
    struct tfm_text in;
    tfm_text_init(&in);
    size_t len = 0, pos = 0;
    char *all = NULL;
    if (tfm_text_read(&in, path, err) < 0 || !(all = tfm_text_join(&in, &len, err))) {
        tfm_text_free(&in);
        return -1;
    }
    struct tfm_tree t;
    tfm_tree_init(&t);
    char *words = NULL, *lin = NULL;
    size_t wcap = 0, lcap = 0;
    int k;
    while ((k = tfm_tree_parse_next(&t, all, len, &pos, err)) == 1) {
        if (o ? tfm_tree_linearize(&t, o, &words, &wcap, &lin, &lcap, err) < 0
              : tfm_tree_format(&t, &lin, &lcap, err) < 0) {
            k = -2;
            break;
        }
        if (o)
            fprintf(out, "%s\t%s\n", words, lin);
        else
            fprintf(out, "%s\n", lin);
    }
    if (k == -1)    /* the text's fault: name the file */
        tfm_error_prefix(err, "%s", in.name);
    tfm_tree_free(&t);
    free(words);
    free(lin);
    free(all);
    tfm_text_free(&in);
    return k < 0 ? -1 : 0;
}

int tfm_treebank_linearize(const char *path, const struct tfm_linearize_opts *o, FILE *out,
                           struct tfm_error *err)
{
    return each_tree(path, o, out, err);
}

int tfm_treebank_oneline(const char *path, FILE *out, struct tfm_error *err)
{
    return each_tree(path, NULL, out, err);
}

int tfm_treebank_restore(const char *path, const char *source, const char *root, FILE *out,
                         struct tfm_error *err)
{
    struct tfm_text in, src;
    tfm_text_init(&in);
    tfm_text_init(&src);
    int rc = -1;
    if (tfm_hypread_text(path, &in, err) < 0 || tfm_text_read(&src, source, err) < 0)
        goto out;
    if (src.n != in.n) {
        tfm_fail(err, "%s: %lld lines, hypotheses have %lld", source, (long long)src.n,
                 (long long)in.n);
        goto out;
    }
    struct tfm_tree t;
    tfm_tree_init(&t);
    char *text = NULL;
    size_t cap = 0;
    rc = 0;
    for (int64_t i = 0; i < in.n; i++) {
        if (tfm_tree_restore(&t, tfm_text_line(&in, i), tfm_text_len(&in, i),
                             tfm_text_line(&src, i), tfm_text_len(&src, i), root, NULL,
                             err) < 0 ||
            tfm_tree_format(&t, &text, &cap, err) < 0) {
            rc = tfm_error_prefix(err, "line %lld", (long long)i + 1);
            break;
        }
        fprintf(out, "%s\n", text);
    }
    tfm_tree_free(&t);
    free(text);
out:
    tfm_text_free(&in);
    tfm_text_free(&src);
    return rc;
}
