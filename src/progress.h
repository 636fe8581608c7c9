/* progress.h: the training progress line on stderr, the --log file, and durations.
 *
 * A report is one line for people ("step 1200/100000 loss 4.321 ppl 75.3 lr 3.1e-04
 * 12.3k tok/s elapsed 1h02m eta 3h45m") and, with a log file, one tab-separated line for
 * programs, under a header line that names the columns:
 *     kind  step  loss  ppl  lr  tokens_per_s  elapsed_s  tokens  bleu
 * kind is "train" or "valid"; a column that does not apply is "-".
 * Validation lines are printed even without progress lines (to valid_out).  A log is appended
 * to (a resumed run continues its plot); the header is written only into an empty file.
 * Not here: what is measured (train.c).
 */
#ifndef TFM_PROGRESS_H
#define TFM_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

#include "error.h"

struct tfm_progress {
    const char *prog;       /* "tfm-train": line prefix */
    FILE *out;              /* progress lines (stderr), or NULL for none */
    FILE *valid_out;        /* where validation lines go when out is NULL (or NULL) */
    FILE *log;              /* --log, or NULL (also after a write error) */
    const char *log_path;
    int64_t max_steps;      /* 0: unbounded */
    double max_time;        /* seconds of training, 0: unbounded */
    int64_t start_step;     /* step and elapsed time when this process began, for rates */
    double start_elapsed;
};

struct tfm_progress_row {
    int valid;              /* 0: a training report, 1: a validation report */
    int64_t step;
    double loss;            /* mean per target token, nats */
    double ppl;             /* exp of the mean negative log-likelihood per token */
    double lr;              /* train only */
    double tokens_per_s;    /* train only */
    double elapsed;         /* seconds of training so far (across resumes) */
    int64_t tokens;         /* target tokens trained on (train), or in the valid set */
    int has_bleu;           /* valid only: bleu is the validation set's BLEU */
    double bleu;
};

/* Open log_path for appending (NULL: no log).  p is zeroed first; set max_* after. */
int tfm_progress_open(struct tfm_progress *p, const char *prog, FILE *out, const char *log_path,
                      struct tfm_error *err);
/* Print the line (when p->out) and the log line (when p->log).  -1 on a log write error,
 * naming the file; the log is then closed and later reports write only the line. */
int tfm_progress_report(struct tfm_progress *p, const struct tfm_progress_row *row,
                        struct tfm_error *err);
/* The line for people, without the program prefix and newline. */
void tfm_progress_format(const struct tfm_progress *p, const struct tfm_progress_row *row,
                         char *buf, size_t n);
/* Estimated seconds left (-1: unknown). */
double tfm_progress_eta(const struct tfm_progress *p, int64_t step, double elapsed);
/* Close the log, reporting a write error. */
int tfm_progress_close(struct tfm_progress *p, struct tfm_error *err);

/* "90s", "10m", "2h", "1d", "1h30m", "1.5h", "0": seconds into *sec.  A plain number is
 * seconds.  -1 on anything else (negative, empty, unknown unit, overflow). */
int tfm_duration_parse(const char *s, double *sec);
/* 42s, 4m05s, 1h02m, 3d04h */
void tfm_duration_format(double sec, char *buf, size_t n);

#endif
