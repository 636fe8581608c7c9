/* score.c: the scorer loop and the parts every scorer shares (score.h). */
#include "score.h"

#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "text.h"

struct tfm_scorer *tfm_scorer_new(const struct tfm_scorer_ops *ops, void *metric,
                                  const struct tfm_score_opts *o, int nrefs,
                                  struct tfm_error *err)
{
    struct tfm_scorer *s = calloc(1, sizeof *s);
    if (!s) {
        ops->free(metric);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    s->ops = ops;
    s->metric = metric;
    s->o = *o;
    s->nrefs = nrefs;
    return s;
}

void tfm_scorer_free(struct tfm_scorer *s)
{
    if (!s)
        return;
    s->ops->free(s->metric);
    free(s);
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

int tfm_score_sacrebleu_report(const struct tfm_scorer *s, struct tfm_json *j,
                               const char *line, const char *name, double score,
                               const char *sig, const char *verbose)
{
    return tfm_score_sacrebleu_report_ci(s, j, line, name, score, sig, verbose, NULL);
}

int tfm_score_sacrebleu_report_ci(const struct tfm_scorer *s, struct tfm_json *j,
                                  const char *line, const char *name, double score,
                                  const char *sig, const char *verbose, const double *conf)
{
    if (!s->o.json) {
        fprintf(s->o.out, "%s\n%s\n", line, sig);
        return 0;
    }
    tfm_json_init(j, s->o.out);
    tfm_json_object(j, 1);
    tfm_json_member_str(j, "name", name);
    tfm_json_member_num(j, "score", score);
    tfm_json_member_str(j, "signature", sig);
    if (conf) {
        char text[128];
        snprintf(text, sizeof text, "\u03bc = %.2f \u00b1 %.2f", conf[0], conf[1]);
        tfm_json_member_num(j, "confidence_mean", conf[0]);
        tfm_json_member_num(j, "confidence_var", conf[1]);
        tfm_json_member_str(j, "confidence", text);
    }
    if (verbose)
        tfm_json_member_str(j, "verbose_score", verbose);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", sig);
    char *save = NULL;
    for (char *tok = strtok_r(buf, "|", &save); tok; tok = strtok_r(NULL, "|", &save)) {
        char *colon = strchr(tok, ':');
        if (!colon)
            continue;
        *colon = '\0';
        tfm_json_member_str(j, tok, colon + 1);
    }
    return 1;
}
