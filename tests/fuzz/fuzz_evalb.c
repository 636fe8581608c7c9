/* fuzz_evalb.c: libFuzzer target for EVALB parameter files and scoring (make fuzz).  The
 * input is "PARAMETERS\0GOLD\0TEST" (missing parts empty): the parameter text is parsed
 * on EVALB's defaults; when it parses, the gold and test lines are read as trees and
 * scored with it, and the totals must stay consistent (abort otherwise).  Built with ASan
 * and UBSan; any crash, leak or undefined behavior is a finding. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "evalb.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tfm_error err;
    const char *part[3] = {"", "", ""};
    size_t len[3] = {0, 0, 0};
    const char *p = (const char *)data, *end = p + size;
    for (int i = 0; i < 3 && p <= end; i++) {
        const char *z = i < 2 ? memchr(p, 0, (size_t)(end - p)) : NULL;
        part[i] = p;
        len[i] = (size_t)((z ? z : end) - p);
        if (!z)
            break;
        p = z + 1;
    }
    struct tfm_evalb_params prm;
    tfm_evalb_params_init(&prm);
    if (tfm_evalb_params_parse(&prm, part[0], len[0], "fuzz.prm", &err) == 0) {
        struct tfm_evalb e;
        if (tfm_evalb_init(&e, &prm, &err) == 0) {
            struct tfm_tree g, t;
            tfm_tree_init(&g);
            tfm_tree_init(&t);
            size_t gp = 0, tp = 0;
            struct tfm_evalb_sent s;
            if (tfm_tree_parse(&g, part[1], len[1], &gp, TFM_TREE_EMPTY_WORDS, &err) == 0) {
                int ok = tfm_tree_parse(&t, part[2], len[2], &tp, TFM_TREE_EMPTY_WORDS, &err) == 0;
                if (tfm_evalb_add(&e, 1, &g, ok ? &t : NULL, ok ? NULL : "bad test tree", &s,
                                  &err) == 0 &&
                    tfm_evalb_add(&e, 2, &g, &g, NULL, &s, &err) == 0) {
                    if (s.status == TFM_EVALB_OK && (s.matched != s.gold || s.gold != s.test))
                        abort();    /* a tree against itself matches every bracket */
                    const struct tfm_evalb_totals *a = &e.all;
                    if (a->matched > a->gold || a->matched > a->test || a->sentences != 2 ||
                        a->errors + a->skipped > a->sentences)
                        abort();
                    double r, pr, f;
                    tfm_evalb_prf(a, &r, &pr, &f);
                }
            }
            tfm_tree_free(&g);
            tfm_tree_free(&t);
            tfm_evalb_free(&e);
        }
    }
    tfm_evalb_params_free(&prm);
    return 0;
}
