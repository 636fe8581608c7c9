/* bootstrap.c: sacreBLEU's bootstrap confidence interval, numpy's generator and all (see
 * bootstrap.h). */
#include "bootstrap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- numpy's SeedSequence (the default pool of 4 words) -------------------------------- */

#define SS_POOL 4
#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_L 0xca01f9ddu
#define SS_MIX_R 0x4973f715u
#define SS_SHIFT 16

static uint32_t ss_hashmix(uint32_t v, uint32_t *hash)
{
    v ^= *hash;
    *hash *= SS_MULT_A;
    v *= *hash;
    return v ^ (v >> SS_SHIFT);
}

static uint32_t ss_mix(uint32_t x, uint32_t y)
{
    uint32_t r = SS_MIX_L * x - SS_MIX_R * y;
    return r ^ (r >> SS_SHIFT);
}

/* SeedSequence(seed).generate_state(4, uint64) into out. */
static void seed_sequence(uint64_t seed, uint64_t out[4])
{
    /* the integer as 32-bit words, least significant first (0 is one word) */
    uint32_t entropy[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    int words = seed >> 32 ? 2 : 1;
    uint32_t pool[SS_POOL], hash = SS_INIT_A;
    for (int i = 0; i < SS_POOL; i++)
        pool[i] = ss_hashmix(i < words ? entropy[i] : 0, &hash);
    for (int src = 0; src < SS_POOL; src++)
        for (int dst = 0; dst < SS_POOL; dst++)
            if (src != dst)
                pool[dst] = ss_mix(pool[dst], ss_hashmix(pool[src], &hash));
    uint32_t hb = SS_INIT_B, w[8];
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % SS_POOL] ^ hb;
        hb *= SS_MULT_B;
        v *= hb;
        w[i] = v ^ (v >> SS_SHIFT);
    }
    for (int i = 0; i < 4; i++)
        out[i] = (uint64_t)w[2 * i] | (uint64_t)w[2 * i + 1] << 32;
}

/* ---- PCG64 ---------------------------------------------------------------------------- */

#define PCG_MULT (((unsigned __int128)0x2360ED051FC65DA4ull << 64) | 0x4385DF649FCCF645ull)

static void pcg_step(struct tfm_np_rng *r)
{
    r->state = r->state * PCG_MULT + r->inc;
}

void tfm_np_rng_seed(struct tfm_np_rng *r, uint64_t seed)
{
    uint64_t v[4];
    seed_sequence(seed, v);
    unsigned __int128 initstate = (unsigned __int128)v[0] << 64 | v[1];
    unsigned __int128 initseq = (unsigned __int128)v[2] << 64 | v[3];
    r->inc = initseq << 1 | 1;
    r->state = 0;
    pcg_step(r);
    r->state += initstate;
    pcg_step(r);
    r->has_half = 0;
    r->half = 0;
}

uint64_t tfm_np_rng_next64(struct tfm_np_rng *r)
{
    pcg_step(r);
    unsigned rot = (unsigned)(r->state >> 122);
    uint64_t v = (uint64_t)(r->state >> 64) ^ (uint64_t)r->state;
    return (v >> rot) | (v << ((64 - rot) & 63));
}

uint32_t tfm_np_rng_next32(struct tfm_np_rng *r)
{
    if (r->has_half) {
        r->has_half = 0;
        return r->half;
    }
    uint64_t v = tfm_np_rng_next64(r);
    r->has_half = 1;
    r->half = (uint32_t)(v >> 32);
    return (uint32_t)v;
}

int64_t tfm_np_rng_below(struct tfm_np_rng *r, int64_t n)
{
    uint64_t rng = (uint64_t)n - 1;    /* numpy's inclusive range */
    if (rng == 0)
        return 0;
    if (rng == 0xFFFFFFFFu)
        return tfm_np_rng_next32(r);
    uint32_t excl = (uint32_t)rng + 1;
    uint64_t m = (uint64_t)tfm_np_rng_next32(r) * excl;
    uint32_t left = (uint32_t)m;
    if (left < excl) {
        uint32_t threshold = (UINT32_MAX - (uint32_t)rng) % excl;
        while (left < threshold) {
            m = (uint64_t)tfm_np_rng_next32(r) * excl;
            left = (uint32_t)m;
        }
    }
    return (int64_t)(m >> 32);
}

int tfm_np_rng_bit(struct tfm_np_rng *r, struct tfm_np_bits *b)
{
    if (b->left == 0) {
        b->buf = tfm_np_rng_next32(r);
        b->left = 31;
    } else {
        b->buf >>= 1;
        b->left--;
    }
    return (int)(b->buf & 1);
}

/* ---- the exact mean ------------------------------------------------------------------- */

/* Shewchuk's partials: *np non-overlapping doubles whose sum is exactly what was added. */
static void partials_add(double *p, int *np, double x)
{
    int k = 0;
    for (int i = 0; i < *np; i++) {
        double y = p[i];
        if (fabs(x) < fabs(y)) {
            double t = x;
            x = y;
            y = t;
        }
        double hi = x + y, lo = y - (hi - x);
        if (lo != 0.0)
            p[k++] = lo;
        x = hi;
    }
    p[k++] = x;
    *np = k;
}

/* The partials' sum rounded once, as Python's math.fsum. */
static double partials_sum(const double *p, int np)
{
    if (np == 0)
        return 0.0;
    int i = np - 1;
    double hi = p[i], lo = 0.0;
    while (i > 0) {
        double x = hi, y = p[--i];
        hi = x + y;
        lo = y - (hi - x);
        if (lo != 0.0)
            break;
    }
    /* a half-way case: the rest decides which way it rounds */
    if (i > 0 && ((lo < 0 && p[i - 1] < 0) || (lo > 0 && p[i - 1] > 0))) {
        double y = lo * 2, x = hi + y;
        if (y == x - hi)
            hi = x;
    }
    return hi;
}

/* The partials of finite doubles stay few (at most about 40 for the exponent range). */
enum { PARTIALS = 64 };

double tfm_exact_mean(const double *x, int64_t n)
{
    if (n <= 0)
        return NAN;
    double p[PARTIALS];
    int np = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i]))
            return x[i] + x[i];     /* as statistics.mean would not: but no score is */
        partials_add(p, &np, x[i]);
    }
    double dn = (double)n, q = partials_sum(p, np) / dn;
    /* the rest, sum - q * n, exactly (q * n is prod + err), then one correction */
    double prod = q * dn, perr = fma(q, dn, -prod);
    partials_add(p, &np, -prod);
    partials_add(p, &np, -perr);
    return q + partials_sum(p, np) / dn;
}

/* ---- the resamples -------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy's pairwise_sum for float64 (its add.reduce over a contiguous array). */
static double pairwise_sum(const double *a, int64_t n)
{
    if (n < 8) {
        double r = 0.;
        for (int64_t i = 0; i < n; i++)
            r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        int64_t i;
        for (int k = 0; k < 8; k++)
            r[k] = a[k];
        for (i = 8; i < n - n % 8; i += 8)
            for (int k = 0; k < 8; k++)
                r[k] += a[i + k];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

double tfm_np_mean(const double *x, int64_t n)
{
    return n > 0 ? pairwise_sum(x, n) / (double)n : NAN;
}

/* Sort scores[0..samples) and give the half-width of their 95% interval. */
static double interval(double *scores, int samples)
{
    qsort(scores, (size_t)samples, sizeof *scores, cmp_double);
    int lower = samples / 40, upper = samples - lower - 1;
    return 0.5 * (scores[upper] - scores[lower]);
}

static int check_sizes(int64_t n, int width, int samples, struct tfm_error *err)
{
    if (n < 1 || n > ((int64_t)1 << 32))
        return tfm_fail(err, "resampling %lld sentences: 1 to 2^32 expected", (long long)n);
    if (samples < 1 || width < 1)
        return tfm_fail(err, "resampling: at least 1 resample and 1 statistic expected");
    return 0;
}

int tfm_bootstrap_ci(const float *stats, int64_t n, int width, int samples, uint64_t seed,
                     tfm_bootstrap_score_fn score, const void *ctx, double *mean, double *ci,
                     struct tfm_error *err)
{
    if (check_sizes(n, width, samples, err))
        return -1;
    if (samples < 2)
        return tfm_fail(err, "bootstrap: at least 2 resamples expected");
    double *scores = malloc((size_t)samples * sizeof *scores);
    float *sum = malloc((size_t)width * sizeof *sum);
    if (!scores || !sum) {
        free(scores);
        free(sum);
        return tfm_fail(err, "out of memory");
    }
    struct tfm_np_rng r;
    tfm_np_rng_seed(&r, seed);
    for (int s = 0; s < samples; s++) {
        memset(sum, 0, (size_t)width * sizeof *sum);
        for (int64_t i = 0; i < n; i++) {
            const float *row = stats + tfm_np_rng_below(&r, n) * width;
            for (int k = 0; k < width; k++)
                sum[k] += row[k];
        }
        scores[s] = score(sum, ctx);
    }
    *ci = interval(scores, samples);
    *mean = tfm_exact_mean(scores, samples);
    free(scores);
    free(sum);
    return 0;
}

/* p = (1 + how many of stat[0..trials) exceed real) / (trials + 1), as sacreBLEU's
 * _compute_p_value. */
static double p_value(const double *stat, int trials, double real)
{
    int64_t c = 0;
    for (int t = 0; t < trials; t++)
        c += stat[t] > real;
    return (double)(c + 1) / (double)(trials + 1);
}

int tfm_paired_bs(const float *const *rows, int nsys, int64_t n, int width, int samples,
                  uint64_t seed, tfm_bootstrap_score_fn score_fn, const void *ctx,
                  const double *score, double *p, double *mean, double *ci,
                  struct tfm_error *err)
{
    if (check_sizes(n, width, samples, err))
        return -1;
    if (samples < 2 || nsys < 1)
        return tfm_fail(err, "paired bootstrap: at least 2 resamples and 1 system expected");
    /* every system's resample scores, [nsys][samples], then the differences */
    double *sc = malloc(((size_t)nsys + 1) * (size_t)samples * sizeof *sc);
    float *sum = malloc((size_t)nsys * (size_t)width * sizeof *sum);
    if (!sc || !sum) {
        free(sc);
        free(sum);
        return tfm_fail(err, "out of memory");
    }
    double *d = sc + (size_t)nsys * (size_t)samples;
    struct tfm_np_rng r;
    tfm_np_rng_seed(&r, seed);
    for (int s = 0; s < samples; s++) {
        memset(sum, 0, (size_t)nsys * (size_t)width * sizeof *sum);
        for (int64_t i = 0; i < n; i++) {
            int64_t at = tfm_np_rng_below(&r, n) * width;
            for (int k = 0; k < nsys; k++)
                for (int w = 0; w < width; w++)
                    sum[k * width + w] += rows[k][at + w];
        }
        for (int k = 0; k < nsys; k++)
            sc[(size_t)k * samples + s] = score_fn(sum + k * width, ctx);
    }
    /* each system's differences from the baseline, centred on their mean, against the
     * real difference */
    const double *base = sc;
    p[0] = NAN;
    for (int k = 1; k < nsys; k++) {
        const double *sys = sc + (size_t)k * samples;
        for (int s = 0; s < samples; s++)
            d[s] = fabs(sys[s] - base[s]);
        double mean_d = tfm_np_mean(d, samples);
        for (int s = 0; s < samples; s++)
            d[s] -= mean_d;
        p[k] = p_value(d, samples, fabs(score[0] - score[k]));
    }
    /* estimate_ci: the mean of the sorted scores (sorting last: the differences pair
     * resamples by their order) */
    for (int k = 0; k < nsys; k++) {
        ci[k] = interval(sc + (size_t)k * samples, samples);
        mean[k] = tfm_np_mean(sc + (size_t)k * samples, samples);
    }
    free(sc);
    free(sum);
    return 0;
}

int tfm_paired_ar(const int64_t *base, const int64_t *sys, int64_t n, int width, int trials,
                  uint64_t seed, tfm_paired_i64_fn score, const void *ctx, double base_score,
                  double sys_score, double *p, struct tfm_error *err)
{
    if (check_sizes(n, width, trials, err))
        return -1;
    double *stat = malloc((size_t)trials * sizeof *stat);
    int64_t *buf = calloc((size_t)width * 3, sizeof *buf);
    if (!stat || !buf) {
        free(stat);
        free(buf);
        return tfm_fail(err, "out of memory");
    }
    int64_t *both = buf, *a = buf + width, *b = buf + 2 * width;
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < width; k++)
            both[k] += base[i * width + k] + sys[i * width + k];
    struct tfm_np_rng r;
    tfm_np_rng_seed(&r, seed);
    /* one integers() call draws every trial's bits: its bit buffer runs across them */
    struct tfm_np_bits bits = {0, 0};
    for (int t = 0; t < trials; t++) {
        memset(a, 0, (size_t)width * sizeof *a);
        for (int64_t i = 0; i < n; i++) {
            /* a set bit gives pseudo-system a the baseline's output of sentence i */
            const int64_t *row = (tfm_np_rng_bit(&r, &bits) ? base : sys) + i * width;
            for (int k = 0; k < width; k++)
                a[k] += row[k];
        }
        for (int k = 0; k < width; k++)
            b[k] = both[k] - a[k];
        stat[t] = fabs(score(a, ctx) - score(b, ctx));
    }
    *p = p_value(stat, trials, fabs(base_score - sys_score));
    free(stat);
    free(buf);
    return 0;
}
