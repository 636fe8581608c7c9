/* progress.c: progress lines, the --log file and durations (see progress.h).
 */
#include "progress.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char LOG_HEADER[] =
    "kind\tstep\tloss\tppl\tlr\ttokens_per_s\telapsed_s\ttokens\tbleu\n";

int tfm_progress_open(struct tfm_progress *p, const char *prog, FILE *out, const char *log_path,
                      struct tfm_error *err)
{
    memset(p, 0, sizeof *p);
    p->prog = prog;
    p->out = out;
    p->log_path = log_path;
    if (!log_path)
        return 0;
    /* "-": standard output, which tfm-train leaves free; a copy of the descriptor, closed
     * as a file's would be */
    int fd = -1;
    if (strcmp(log_path, "-") == 0) {
        p->log_path = log_path = "<stdout>";
        if ((fd = dup(1)) < 0 || !(p->log = fdopen(fd, "a"))) {
            int e = errno;
            if (fd >= 0)
                close(fd);
            return tfm_fail(err, "%s: %s", log_path, strerror(e));
        }
    } else if (!(p->log = fopen(log_path, "a"))) {
        return tfm_fail(err, "%s: %s", log_path, strerror(errno));
    }
    /* the header first, unless a regular file already holds lines (a resumed run's log):
     * a pipe or a FIFO (whose position ftell cannot tell) starts a reader's copy afresh */
    struct stat st;
    int fresh = fstat(fileno(p->log), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0;
    if (fresh && fputs(LOG_HEADER, p->log) < 0) {
        fclose(p->log);
        p->log = NULL;
        return tfm_fail(err, "%s: write error", log_path);
    }
    fflush(p->log);
    return 0;
}

double tfm_progress_eta(const struct tfm_progress *p, int64_t step, double elapsed)
{
    double eta = -1;
    if (p->max_steps > 0 && step > p->start_step && elapsed > p->start_elapsed) {
        double rate = (elapsed - p->start_elapsed) / (double)(step - p->start_step);
        eta = (double)(p->max_steps > step ? p->max_steps - step : 0) * rate;
    }
    if (p->max_time > 0) {
        double left = p->max_time > elapsed ? p->max_time - elapsed : 0;
        if (eta < 0 || left < eta)
            eta = left;
    }
    return eta;
}

/* 999, 12.3k, 1.23M, 4.56G: three significant digits and the largest unit that leaves
 * the rounded number below 1000 (999.7 is "1k", not %.3g's "1e+03") */
static void si(double v, char *buf, size_t n)
{
    static const char *const unit[] = {"", "k", "M", "G"};
    char num[32];
    int u = 0;
    for (;;) {
        snprintf(num, sizeof num, "%.3g", v);
        if (u == 3 || !(strtod(num, NULL) >= 1000))
            break;
        v /= 1e3;
        u++;
    }
    snprintf(buf, n, "%.24s%s", num, unit[u]);   /* %.3g: at most 10 bytes */
}

/* 90.02; from a million on 1.234e+06, so that a diverging run's perplexity (up to 1e308,
 * or inf) leaves room on the line for what follows it */
static void ppl_text(double v, char *buf, size_t n)
{
    snprintf(buf, n, v < 1e6 ? "%.2f" : "%.3e", v);
}

void tfm_progress_format(const struct tfm_progress *p, const struct tfm_progress_row *row,
                         char *buf, size_t n)
{
    char el[32], eta[32], tps[32], steps[48], ppl[32];
    tfm_duration_format(row->elapsed, el, sizeof el);
    ppl_text(row->ppl, ppl, sizeof ppl);
    if (row->valid) {
        int k = snprintf(buf, n, "valid step %lld loss %.4f ppl %s tokens %lld",
                         (long long)row->step, row->loss, ppl, (long long)row->tokens);
        if (row->has_bleu && k > 0 && (size_t)k < n)
            snprintf(buf + k, n - (size_t)k, " bleu %.2f", row->bleu);
        return;
    }
    double e = tfm_progress_eta(p, row->step, row->elapsed);
    if (e >= 0)
        tfm_duration_format(e, eta, sizeof eta);
    else
        snprintf(eta, sizeof eta, "?");
    si(row->tokens_per_s, tps, sizeof tps);
    if (p->max_steps > 0)
        snprintf(steps, sizeof steps, "%lld/%lld", (long long)row->step, (long long)p->max_steps);
    else
        snprintf(steps, sizeof steps, "%lld", (long long)row->step);
    snprintf(buf, n, "step %s loss %.4f ppl %s lr %.3e %s tok/s elapsed %s eta %s", steps,
             row->loss, ppl, row->lr, tps, el, eta);
}

int tfm_progress_report(struct tfm_progress *p, const struct tfm_progress_row *row,
                        struct tfm_error *err)
{
    FILE *out = p->out ? p->out : row->valid ? p->valid_out : NULL;
    if (out) {
        char line[512];
        tfm_progress_format(p, row, line, sizeof line);
        fprintf(out, "%s: %s\n", p->prog, line);
        fflush(out);
    }
    if (!p->log)
        return 0;
    if (row->valid) {
        char bleu[32] = "-";
        if (row->has_bleu)
            snprintf(bleu, sizeof bleu, "%.4f", row->bleu);
        fprintf(p->log, "valid\t%lld\t%.6f\t%.6f\t-\t-\t%.3f\t%lld\t%s\n",
                (long long)row->step, row->loss, row->ppl, row->elapsed, (long long)row->tokens,
                bleu);
    } else {
        fprintf(p->log, "train\t%lld\t%.6f\t%.6f\t%.6e\t%.1f\t%.3f\t%lld\t-\n",
                (long long)row->step, row->loss, row->ppl, row->lr, row->tokens_per_s,
                row->elapsed, (long long)row->tokens);
    }
    if (fflush(p->log) || ferror(p->log)) {
        int e = errno;
        fclose(p->log);
        p->log = NULL;
        return tfm_fail(err, "%s: write error: %s", p->log_path, strerror(e));
    }
    return 0;
}

int tfm_progress_close(struct tfm_progress *p, struct tfm_error *err)
{
    if (!p->log)
        return 0;
    int bad = ferror(p->log);
    bad |= fclose(p->log) != 0;
    p->log = NULL;
    return bad ? tfm_fail(err, "%s: write error", p->log_path) : 0;
}

int tfm_duration_parse(const char *s, double *sec)
{
    double total = 0;
    if (!s || !*s)
        return -1;
    const char *p = s;
    while (*p) {
        char num[32];
        size_t k = 0;
        while ((p[k] >= '0' && p[k] <= '9') || p[k] == '.') {
            if (k + 1 >= sizeof num)
                return -1;
            num[k] = p[k];
            k++;
        }
        num[k] = 0;
        char *stop;
        errno = 0;
        double v = strtod(num, &stop);
        if (k == 0 || errno || *stop || !isfinite(v) || v < 0)
            return -1;
        const char *end = p + k;
        double unit;
        switch (*end) {
        case 0: unit = 1; break;
        case 's': unit = 1; end++; break;
        case 'm': unit = 60; end++; break;
        case 'h': unit = 3600; end++; break;
        case 'd': unit = 86400; end++; break;
        default: return -1;
        }
        total += v * unit;
        if (total > 1e12)
            return -1;
        p = end;
    }
    *sec = total;
    return 0;
}

void tfm_duration_format(double sec, char *buf, size_t n)
{
    if (!(sec >= 0))
        sec = 0;
    long long s = (long long)(sec + 0.5);
    if (s < 60)
        snprintf(buf, n, "%llds", s);
    else if (s < 3600)
        snprintf(buf, n, "%lldm%02llds", s / 60, s % 60);
    else if (s < 86400)
        snprintf(buf, n, "%lldh%02lldm", s / 3600, s % 3600 / 60);
    else
        snprintf(buf, n, "%lldd%02lldh", s / 86400, s % 86400 / 3600);
}
