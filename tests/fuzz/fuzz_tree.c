/* fuzz_tree.c: libFuzzer target for the tree reader (make fuzz).  The input is read as
 * tfm-score reads it: as one line's forest (EVALB's view) and as .mrg text, tree after
 * tree.  Whatever parses is formatted, and must parse back to the same text; it is
 * linearized, and the linearization restored with its words must hold exactly those
 * words; retagging and wrapping run on the results (abort on a broken property).  The
 * input's first line is also restored as decoder output over its second as words.
 * Built with ASan and UBSan; any crash, leak or undefined behavior is a finding. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tree.h"

static struct tfm_tree T, U;
static char *out, *out2, *words, *lin, *rwords, *rlin;
static size_t ocap, ocap2, wcap, lcap, rwcap, rlcap;

static void check_tree(void)
{
    struct tfm_error err;
    if (tfm_tree_format(&T, &out, &ocap, &err) < 0)
        return;
    size_t pos = 0;
    if (tfm_tree_parse(&U, out, strlen(out), &pos, 0, &err) != 0 ||
        tfm_tree_format(&U, &out2, &ocap2, &err) < 0 || strcmp(out, out2) != 0)
        abort();
    for (int keep = 0; keep < 2; keep++) {
        struct tfm_linearize_opts o = {keep, keep};
        if (tfm_tree_linearize(&T, &o, &words, &wcap, &lin, &lcap, &err) < 0)
            continue;
        if (tfm_tree_restore(&U, lin, strlen(lin), words, strlen(words), NULL, NULL, &err) < 0)
            continue;
        struct tfm_linearize_opts all = {1, 1};
        if (tfm_tree_linearize(&U, &all, &rwords, &rwcap, &rlin, &rlcap, &err) < 0)
            continue;
        if (strcmp(words, rwords) != 0)     /* the restored tree holds exactly the words */
            abort();
        tfm_tree_retag(&U, &T, keep ? "XX" : NULL, &err);
        const char *label;
        if (tfm_tree_wrapper(&T, &label) >= 0)
            tfm_tree_wrap(&U, label, &err);
        tfm_tree_format(&U, &out2, &ocap2, &err);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tfm_error err;
    static int started;
    if (!started) {
        tfm_tree_init(&T);
        tfm_tree_init(&U);
        started = 1;
    }
    const char *text = (const char *)data;
    size_t pos = 0;
    if (tfm_tree_parse(&T, text, size, &pos, 0, &err) == 0)
        check_tree();
    else if (pos > size)
        abort();
    pos = 0;
    for (int k; (k = tfm_tree_parse(&T, text, size, &pos, 1, &err)) == 1;) {
        if (pos > size)
            abort();
        check_tree();
    }
    const char *nl = memchr(text, '\n', size);
    if (nl) {
        size_t a = (size_t)(nl - text);
        const char *w = nl + 1, *e = memchr(w, '\n', size - a - 1);
        size_t wl = e ? (size_t)(e - w) : size - a - 1;
        struct tfm_restore_stats st = {0};
        if (tfm_tree_restore(&T, text, a, w, wl, "S", &st, &err) == 0)
            tfm_tree_format(&T, &out, &ocap, &err);
    }
    return 0;
}
