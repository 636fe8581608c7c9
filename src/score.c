/* score.c: the scorer loop and the parts every scorer shares (score.h). */
#include "score.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
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

int tfm_score_collect(struct tfm_scorer *s, const struct tfm_text *hyp,
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
    return rc;
}

int tfm_score_run(struct tfm_scorer *s, const struct tfm_text *hyp,
                  const struct tfm_text *refs, struct tfm_error *err)
{
    if (tfm_score_collect(s, hyp, refs, err))
        return -1;
    return s->ops->report(s, err);
}

void tfm_score_signature_seeded(char *sig, size_t n, const char *key, int samples,
                                uint64_t seed)
{
    char rest[256];
    const char *bar = strchr(sig, '|');
    snprintf(rest, sizeof rest, "%s", bar ? bar + 1 : "");
    size_t head = bar ? (size_t)(bar - sig) + 1 : strlen(sig);
    snprintf(sig + head, n - head, "%s%s:%d|seed:%llu|%s", bar ? "" : "|", key, samples,
             (unsigned long long)seed, rest);
}

/* What the report says of each system k: score[k], p[k] (NAN for the baseline) and the
 * mean and half-width of its resamples (NAN without them). */
struct paired_results {
    double *score, *p, *mean, *ci;
};

/* The statistics as int64, for approximate randomization (they are counts). */
static void rows_i64(const struct tfm_score_rows *r, int64_t n, int64_t *out)
{
    for (int64_t i = 0; i < n * r->width; i++)
        out[i] = (int64_t)r->rows[i];
}

static void paired_report(struct tfm_scorer *const *sys, const char *const *names, int nsys,
                          const struct tfm_score_rows *r, const struct paired_results *res)
{
    FILE *out = sys[0]->o.out;
    static const char BASE[] = "Baseline: ";
    if (sys[0]->o.json) {
        struct tfm_json j;
        tfm_json_init(&j, out);
        tfm_json_array(&j, 1);
        for (int k = 0; k < nsys; k++) {
            char *name = malloc(strlen(BASE) + strlen(names[k]) + 1);
            tfm_json_object(&j, 1);
            if (name)
                strcat(strcpy(name, k ? "" : BASE), names[k]);
            tfm_json_member_str(&j, "system", name ? name : names[k]);
            free(name);
            tfm_json_key(&j, r[0].name);
            tfm_json_object(&j, 1);
            tfm_json_member_num(&j, "score", res->score[k]);
            tfm_json_member_num(&j, "p_value", res->p[k]);
            tfm_json_member_num(&j, "mean", res->mean[k]);
            tfm_json_member_num(&j, "ci", res->ci[k]);
            tfm_json_member_str(&j, "signature", r[0].sig);
            tfm_json_end(&j);
            tfm_json_end(&j);
        }
        tfm_json_end(&j);
        fputc('\n', out);
        return;
    }
    int width = 0;
    for (int k = 0; k < nsys; k++) {
        int w = (int)strlen(names[k]) + (k ? 0 : (int)strlen(BASE));
        width = w > width ? w : width;
    }
    for (int k = 0; k < nsys; k++) {
        fprintf(out, "%s%-*s  %s = %.2f", k ? "" : BASE,
                width - (k ? 0 : (int)strlen(BASE)), names[k], r[0].name, res->score[k]);
        if (!isnan(res->mean[k]))
            fprintf(out, " (\u03bc = %.2f \u00b1 %.2f)", res->mean[k], res->ci[k]);
        if (k)
            fprintf(out, " (p = %.4f)%s", res->p[k], res->p[k] <= 0.05 ? "*" : "");
        fputc('\n', out);
    }
    fprintf(out, "%s\n", r[0].sig);
}

int tfm_score_paired(struct tfm_scorer *const *sys, const char *const *names, int nsys,
                     int test, int samples, uint64_t seed, struct tfm_error *err)
{
    if (nsys < 2)
        return tfm_fail(err, "a paired test needs a baseline and at least one system");
    int64_t n = sys[0]->added;
    for (int k = 1; k < nsys; k++)
        if (sys[k]->added != n)
            return tfm_fail(err, "%s: %lld sentences, the baseline has %lld", names[k],
                            (long long)sys[k]->added, (long long)n);
    if (n == 0)
        return tfm_fail(err, "no sentence: nothing to resample");
    struct tfm_score_rows *r = calloc((size_t)nsys, sizeof *r);
    const float **rows = calloc((size_t)nsys, sizeof *rows);
    double *v = malloc((size_t)nsys * 4 * sizeof *v);
    int64_t *base = NULL, *other = NULL;
    int rc = r && rows && v ? 0 : tfm_fail(err, "out of memory");
    struct paired_results res = {v, v + nsys, v + 2 * nsys, v + 3 * nsys};
    for (int k = 0; k < nsys && rc == 0; k++) {
        if (!sys[k]->ops->paired)
            rc = tfm_fail(err, "this metric has no paired test");
        else
            rc = sys[k]->ops->paired(sys[k], &r[k], err);
        if (rc == 0) {
            rows[k] = r[k].rows;
            res.score[k] = r[k].score;
            res.p[k] = res.mean[k] = res.ci[k] = NAN;
        }
    }
    if (rc == 0 && test == TFM_PAIRED_BS) {
        rc = tfm_paired_bs(rows, nsys, n, r[0].width, samples, seed, r[0].score_f32, r[0].ctx,
                           res.score, res.p, res.mean, res.ci, err);
    } else if (rc == 0) {
        base = malloc((size_t)n * (size_t)r[0].width * sizeof *base);
        other = malloc((size_t)n * (size_t)r[0].width * sizeof *other);
        if (!base || !other)
            rc = tfm_fail(err, "out of memory");
        else
            rows_i64(&r[0], n, base);
        for (int k = 1; k < nsys && rc == 0; k++) {
            rows_i64(&r[k], n, other);
            rc = tfm_paired_ar(base, other, n, r[0].width, samples, seed, r[0].score_i64,
                               r[0].ctx, res.score[0], res.score[k], &res.p[k], err);
        }
    }
    if (rc == 0) {
        tfm_score_signature_seeded(r[0].sig, sizeof r[0].sig,
                                   test == TFM_PAIRED_BS ? "bs" : "ar", samples, seed);
        paired_report(sys, names, nsys, r, &res);
    }
    free(r);
    free(rows);
    free(v);
    free(base);
    free(other);
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
