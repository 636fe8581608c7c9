/* score.c: the scorer loop and the parts every scorer shares (score.h). */
#include "score.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "text.h"

struct tfm_scorer *tfm_scorer_alloc(size_t size, const struct tfm_scorer_ops *ops,
                                    const struct tfm_score_opts *o, int nrefs,
                                    struct tfm_error *err)
{
    struct tfm_scorer *s = size >= sizeof *s ? calloc(1, size) : NULL;
    if (!s) {
        tfm_fail(err, "out of memory");
        return NULL;
    }
    s->ops = ops;
    s->o = *o;
    s->nrefs = nrefs;
    return s;
}

void tfm_scorer_free(struct tfm_scorer *s)
{
    if (s)
        s->ops->free(s);
}

void tfm_scorer_warn(const struct tfm_scorer *s, const char *fmt, ...)
{
    if (!s->o.warn)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->o.warn(s->o.warn_ctx, msg);
}

int tfm_score_run(struct tfm_scorer *s, const struct tfm_text *hyp,
                  const struct tfm_text *refs, struct tfm_error *err)
{
    for (int r = 0; r < s->nrefs; r++)
        if (refs[r].n != hyp->n)
            return tfm_fail(err, "%s: %lld lines, hypotheses have %lld", refs[r].name,
                            (long long)refs[r].n, (long long)hyp->n);
    s->hyp_name = hyp->name;
    s->ref_name = s->nrefs ? refs[0].name : NULL;
    s->sentences = hyp->n;
    s->added = 0;
    if (s->ops->start && s->ops->start(s, err) < 0)
        return -1;
    const char **rl = malloc((size_t)(s->nrefs ? s->nrefs : 1) * sizeof *rl);
    size_t *rn = malloc((size_t)(s->nrefs ? s->nrefs : 1) * sizeof *rn);
    int rc = rl && rn ? 0 : tfm_fail(err, "out of memory");
    for (int64_t i = 0; i < hyp->n && rc == 0; i++) {
        for (int r = 0; r < s->nrefs; r++) {
            rl[r] = tfm_text_line(&refs[r], i);
            rn[r] = tfm_text_len(&refs[r], i);
        }
        rc = s->ops->add(s, i, tfm_text_line(hyp, i), tfm_text_len(hyp, i), rl, rn, err);
        if (rc == 0)
            s->added++;
    }
    free(rl);
    free(rn);
    if (rc == 0)
        rc = s->ops->report(s, err);
    return rc;
}

void tfm_score_json_signature(struct tfm_json *j, const char *sig)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", sig);
    char *save = NULL;
    for (char *tok = strtok_r(buf, "|", &save); tok; tok = strtok_r(NULL, "|", &save)) {
        char *colon = strchr(tok, ':');
        if (!colon)
            continue;
        *colon = '\0';
        tfm_json_key(j, tok);
        tfm_json_str(j, colon + 1);
    }
}
