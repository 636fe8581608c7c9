/* bootstrap.h: a confidence interval for a corpus score by bootstrap resampling, drawn as
 * sacreBLEU 2 draws it, so that its mean and interval are sacreBLEU's to the bit.
 *
 * sacreBLEU (significance.py, _bootstrap_resample and Score.estimate_ci):
 *   - rng = numpy.random.default_rng(seed) (seed 12345 unless SACREBLEU_SEED says):
 *     numpy's SeedSequence hashes the seed into the state of a PCG64 (XSL-RR 128/64);
 *   - the indices of every resample at once, rng.choice(n, size=(samples, n)): each a
 *     bounded integer by Lemire's multiply-and-reject on 32-bit draws, two to a 64-bit
 *     output (the low half first), in row-major order;
 *   - each resample's statistics summed in float32, sentence by sentence, and scored from
 *     those float32 sums (the metric's own arithmetic: BLEU's then runs partly in
 *     float32, tfm_bleu_score_f32);
 *   - the scores sorted: the interval's half-width is half the distance between the
 *     (samples/40)-th from each end; the mean is statistics.mean's, the sum taken exactly
 *     and rounded once.
 * The float32 sums are exact while every statistic's total stays under 2^24 (16.7
 * million tokens): beyond, both round alike only where numpy sums in the same order.
 * Paired tests between two systems on the same sentences, as sacreBLEU's --paired-bs and
 * --paired-ar (significance.py) compute them:
 *   - bootstrap (bs): rng.choice(n, size=(samples, n)) from default_rng(seed), the same
 *     indices for both systems; each resample scored from float32 sums as above; the
 *     system's mean and interval as estimate_ci gives them (numpy's mean: a pairwise sum,
 *     tfm_np_mean); the statistic |sys - base| of each resample less their mean;
 *   - approximate randomization (ar): rng.integers(2, size=(trials, n), dtype=bool): each
 *     bit swaps a sentence's outputs between the two systems or not (numpy draws 32 of
 *     them from each 32-bit draw, the lowest bit first); each shuffled pair summed
 *     exactly (int64) and scored as the metric scores numpy int64 sums; the statistic
 *     |score a - score b| of each trial;
 *   - p = (1 + the number of trials whose statistic exceeds |sys - base| of the real
 *     scores) / (trials + 1).
 * Not here: the metrics' statistics (bleu.h), the report (score.h).
 */
#ifndef TFM_BOOTSTRAP_H
#define TFM_BOOTSTRAP_H

#include <stdint.h>

#include "error.h"

/* numpy.random.default_rng(seed): PCG64 seeded through SeedSequence. */
struct tfm_np_rng {
    unsigned __int128 state, inc;
    int has_half;           /* the high half of the last 64-bit output is still to give */
    uint32_t half;
};

/* default_rng(seed) for a seed of 0 to 2^64 - 1 (numpy takes any integer from 0). */
void tfm_np_rng_seed(struct tfm_np_rng *r, uint64_t seed);
/* The next 64-bit output (numpy's random_raw). */
uint64_t tfm_np_rng_next64(struct tfm_np_rng *r);
/* The next 32 bits (numpy's next_uint32: a 64-bit output's low half, then its high). */
uint32_t tfm_np_rng_next32(struct tfm_np_rng *r);
/* An integer in [0, n), 1 <= n <= 2^32, as Generator.integers(0, n) and choice(n) draw it. */
int64_t tfm_np_rng_below(struct tfm_np_rng *r, int64_t n);

/* Generator.integers(2, size=..., dtype=bool)'s bits: the state of one such call. */
struct tfm_np_bits {
    uint32_t buf;
    int left;               /* bits of buf still to give */
};
/* The next bit of one integers(2, dtype=bool) call (b zeroed when the call starts). */
int tfm_np_rng_bit(struct tfm_np_rng *r, struct tfm_np_bits *b);

/* score(sum, ctx): the corpus score of summed statistics (width of them). */
typedef double (*tfm_bootstrap_score_fn)(const float *sum, const void *ctx);

/* The mean and half-width of the 95% interval of score over `samples` resamples (2 and
 * up) of the n sentences whose statistics are stats[n][width], drawn from seed, as
 * sacreBLEU's bootstrap.  0, or -1 with err (out of memory, n outside 1 to 2^32). */
int tfm_bootstrap_ci(const float *stats, int64_t n, int width, int samples, uint64_t seed,
                     tfm_bootstrap_score_fn score, const void *ctx, double *mean, double *ci,
                     struct tfm_error *err);

/* The mean of x[0..n) as Python's statistics.mean: the exact sum divided by n, rounded
 * once (to nearest).  The quotient is corrected once from the exact remainder, which
 * decides every case unless the values span over about 2^100 (then the last bit can
 * differ where the quotient lies within 2^-53 of a half-way point); scores such as
 * BLEU's (0, or 1e-3 to 100, n up to 1e5) are always decided. */
double tfm_exact_mean(const double *x, int64_t n);

/* The mean of x[0..n) as numpy's x.mean() on float64: its pairwise sum (blocks of up to
 * 128 summed in 8 lanes), divided by n. */
double tfm_np_mean(const double *x, int64_t n);

/* The scores of a resample as a paired test needs them: from float32 sums (bs), from
 * exact int64 sums (ar). */
typedef double (*tfm_paired_i64_fn)(const int64_t *sum, const void *ctx);

/* The paired bootstrap test of systems 1..nsys-1 against system 0, the baseline (rows[k]:
 * stats[n][width], float32), samples >= 2 resamples from seed, drawn once for all: a
 * system's test against the baseline sees the same resamples whatever the other systems,
 * as sacreBLEU's reseeded one does.  score[k] is system k's real corpus score.  Gives
 * p[k] (p[0]: NAN) and the mean and half-width of each system's resamples, the
 * baseline's among them (sacreBLEU's baseline row). */
int tfm_paired_bs(const float *const *rows, int nsys, int64_t n, int width, int samples,
                  uint64_t seed, tfm_bootstrap_score_fn score_fn, const void *ctx,
                  const double *score, double *p, double *mean, double *ci,
                  struct tfm_error *err);

/* The paired approximate randomization test of sys against base (stats[n][width], int64),
 * trials >= 1 from seed, scored by score. */
int tfm_paired_ar(const int64_t *base, const int64_t *sys, int64_t n, int width, int trials,
                  uint64_t seed, tfm_paired_i64_fn score, const void *ctx, double base_score,
                  double sys_score, double *p, struct tfm_error *err);

#endif
