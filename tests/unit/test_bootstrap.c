/* test_bootstrap: numpy's default_rng as bootstrap.c draws it (outputs, bounded integers
 * and boolean bits against values numpy 2.4 printed), the exact mean (statistics.mean's
 * values) and numpy's pairwise mean, the interval of a known set of scores, BLEU's
 * float32 score of summed statistics, and both paired tests on a toy metric against
 * sacreBLEU's algorithms written with numpy. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "bleu.h"
#include "bootstrap.h"
#include "check.h"

/* numpy: np.random.default_rng(seed).bit_generator.random_raw(k) */
static void test_raw(void)
{
    struct tfm_np_rng r;
    tfm_np_rng_seed(&r, 12345);
    CHECK(tfm_np_rng_next64(&r) == 0x3a32b18db2ffc19dull);
    CHECK(tfm_np_rng_next64(&r) == 0x51171315c9e4c4deull);
    CHECK(tfm_np_rng_next64(&r) == 0xcc2024823444efd9ull);
    tfm_np_rng_seed(&r, UINT64_MAX);    /* two 32-bit words of entropy */
    CHECK(tfm_np_rng_next64(&r) == 0xae163a7a8c47568full);
    CHECK(tfm_np_rng_next64(&r) == 0xd86659f5f3382359ull);
}

/* numpy: list(np.random.default_rng(seed).choice(n, size=k)) */
static void test_below(void)
{
    static const struct {
        uint64_t seed;
        int64_t n;
        int64_t want[8];
        int k;
    } cases[] = {
        {12345, 1000, {699, 227, 788, 316, 204, 797, 642, 676}, 8},
        {0, 3, {2, 1, 1, 0, 0, 0, 0, 0}, 8},
        {((uint64_t)1 << 40) + 5, 100003, {1415, 473, 44998, 37259, 91577, 58724}, 6},
        /* the whole 32-bit range: the draws themselves, low half first */
        {12345, (int64_t)1 << 32, {3003105693, 976400781, 3387213022}, 3},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct tfm_np_rng r;
        tfm_np_rng_seed(&r, cases[c].seed);
        for (int i = 0; i < cases[c].k; i++) {
            int64_t got = tfm_np_rng_below(&r, cases[c].n);
            if (got != cases[c].want[i])
                printf("#   seed %llu n %lld draw %d: %lld, numpy %lld\n",
                       (unsigned long long)cases[c].seed, (long long)cases[c].n, i,
                       (long long)got, (long long)cases[c].want[i]);
            CHECK(got == cases[c].want[i]);
        }
    }
    /* n = 1 draws nothing and gives 0 */
    struct tfm_np_rng r, q;
    tfm_np_rng_seed(&r, 12345);
    tfm_np_rng_seed(&q, 12345);
    CHECK(tfm_np_rng_below(&r, 1) == 0);
    CHECK(tfm_np_rng_next32(&r) == tfm_np_rng_next32(&q));
}

/* Python: statistics.mean(x) */
static void test_mean(void)
{
    double a[] = {1e16, 1.0, -1e16};        /* summed in order: 0 */
    CHECK(tfm_exact_mean(a, 3) == 0.3333333333333333);
    double b[10];
    for (int i = 0; i < 10; i++)
        b[i] = 0.1;                         /* summed in order: 0.9999999999999999 */
    CHECK(tfm_exact_mean(b, 10) == 0.1);
    double c[] = {3.0, 1e-300, 7.0};
    CHECK(tfm_exact_mean(c, 3) == 3.3333333333333335);
    double d[] = {29.87};
    CHECK(tfm_exact_mean(d, 1) == 29.87);
}

/* The "score" of a resample is its first statistic: the draws and the interval by hand. */
static double first(const float *sum, const void *ctx)
{
    (void)ctx;
    return sum[0];
}

static void test_ci(void)
{
    /* one sentence: every resample is it, the interval 0 */
    float one[] = {7};
    double mean, ci;
    struct tfm_error err;
    CHECK(tfm_bootstrap_ci(one, 1, 1, 40, 12345, first, NULL, &mean, &ci, &err) == 0);
    CHECK(mean == 7 && ci == 0);
    /* 3 sentences of 0, 1, 2 and 4 resamples: the sums of the draws of seed 0, n = 3
     * (2 1 1 | 0 0 0 | 0 0 ...) as numpy gives them, sorted; 4 / 40 = 0: the ends */
    float three[] = {0, 1, 2};
    struct tfm_np_rng r;
    tfm_np_rng_seed(&r, 0);
    double sums[4], lo = 1e9, hi = -1e9, total = 0;
    for (int s = 0; s < 4; s++) {
        sums[s] = 0;
        for (int i = 0; i < 3; i++)
            sums[s] += three[tfm_np_rng_below(&r, 3)];
        lo = sums[s] < lo ? sums[s] : lo;
        hi = sums[s] > hi ? sums[s] : hi;
        total += sums[s];
    }
    CHECK(sums[0] == 4 && sums[1] == 0);
    CHECK(tfm_bootstrap_ci(three, 3, 1, 4, 0, first, NULL, &mean, &ci, &err) == 0);
    CHECK(mean == total / 4);
    CHECK(ci == 0.5 * (hi - lo));
    CHECK(tfm_bootstrap_ci(three, 0, 1, 4, 0, first, NULL, &mean, &ci, &err) == -1);
    CHECK(tfm_bootstrap_ci(three, 3, 1, 1, 0, first, NULL, &mean, &ci, &err) == -1);
}

/* sacreBLEU's compute_bleu on np.float32 statistics (numpy 2: the precisions float32):
 * BLEU()._compute_score_from_stats(np.array(st, dtype='float32')).score */
static void test_bleu_f32(void)
{
    struct tfm_bleu_opts o;
    tfm_bleu_opts_default(&o);
    float st[] = {10627, 10755, 6617, 3527, 2042, 1180, 10627, 9627, 8627, 7627};
    double f32 = tfm_bleu_score_f32(st, &o);
    CHECK(f32 == 29.870418069259213);
    /* and it is not the float64 score, 29.870417935052544 */
    struct tfm_bleu_stats s = {1000, 10627, 10755, {6617, 3527, 2042, 1180},
                               {10627, 9627, 8627, 7627}};
    struct tfm_bleu_score sc;
    tfm_bleu_compute(&s, &o, &sc);
    CHECK(sc.score == 29.870417935052544 && f32 != sc.score);
    /* no 4-gram matched: exp smoothing, 100 / (2 * total) in float32 */
    float z[] = {100, 120, 50, 20, 5, 0, 100, 90, 80, 70};
    CHECK(tfm_bleu_score_f32(z, &o) == 6.870976609895309);
    float none[] = {100, 120, 0, 0, 0, 0, 100, 90, 80, 70};
    CHECK(tfm_bleu_score_f32(none, &o) == 0.0);
}

/* numpy: default_rng(12345).integers(2, size=(3, 25), dtype=bool), then choice(1000, 3) */
static void test_bits(void)
{
    static const char want[] =
        "101110011000001111111111010011011011000110001101010011000101110001111011001";
    struct tfm_np_rng r;
    struct tfm_np_bits b = {0, 0};
    tfm_np_rng_seed(&r, 12345);
    int bad = 0;
    for (int i = 0; want[i]; i++)
        bad += tfm_np_rng_bit(&r, &b) != want[i] - '0';
    CHECK(bad == 0);
    /* 75 bits took three 32-bit draws: the next draw is the high half of a 64-bit one */
    CHECK(tfm_np_rng_below(&r, 1000) == 316);
    CHECK(tfm_np_rng_below(&r, 1000) == 204);
    CHECK(tfm_np_rng_below(&r, 1000) == 797);
}

/* numpy: np.array([math.sin(i) * 30 + i * 1e-3 for i in range(n)]).mean() */
static void test_np_mean(void)
{
    static const struct {
        int n;
        double want;
    } cases[] = {
        {5, 6.8125155463131035}, {100, 0.16325838823480154},
        {1000, 0.4991127028062349}, {4097, 2.0471365052028787},
    };
    static double x[4097];
    for (int i = 0; i < 4097; i++)
        x[i] = sin((double)i) * 30 + i * 1e-3;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        double got = tfm_np_mean(x, cases[c].n);
        if (got != cases[c].want)
            printf("#   n %d: %.17g, numpy %.17g\n", cases[c].n, got, cases[c].want);
        CHECK(got == cases[c].want);
    }
    /* the exact mean of 1000 differs: another summation */
    CHECK(tfm_exact_mean(x, 1000) != tfm_np_mean(x, 1000));
}

/* A toy metric of 2 statistics: 100 * s0 / s1. */
static double ratio_f32(const float *sum, const void *ctx)
{
    (void)ctx;
    return 100.0 * (double)sum[0] / (double)sum[1];
}

static double ratio_i64(const int64_t *sum, const void *ctx)
{
    (void)ctx;
    return 100.0 * (double)sum[0] / (double)sum[1];
}

/* Both paired tests on 37 sentences of that metric, against sacreBLEU's
 * _paired_bs_test and _paired_ar_test written with numpy for it (seed 7; 200 resamples,
 * 500 trials): base row i (7i mod 5, 3 + i mod 4), system row i (3i mod 6, 3 + i mod 4). */
static void test_paired(void)
{
    enum { N = 37 };
    float bf[N * 2], sf[N * 2];
    int64_t bi[N * 2], si[N * 2], tb[2] = {0, 0}, ts[2] = {0, 0};
    for (int i = 0; i < N; i++) {
        bi[2 * i] = (i * 7) % 5, si[2 * i] = (i * 3) % 6;
        bi[2 * i + 1] = si[2 * i + 1] = 3 + i % 4;
        for (int k = 0; k < 2; k++) {
            bf[2 * i + k] = (float)bi[2 * i + k], sf[2 * i + k] = (float)si[2 * i + k];
            tb[k] += bi[2 * i + k], ts[k] += si[2 * i + k];
        }
    }
    double base = ratio_i64(tb, NULL), sys = ratio_i64(ts, NULL);
    CHECK(base == 43.63636363636363 && sys == 32.72727272727273);
    double p, score[3] = {base, sys, sys}, ps[3], mean[3], ci[3];
    const float *rows[3] = {bf, sf, sf};
    struct tfm_error err;
    CHECK(tfm_paired_bs(rows, 2, N, 2, 200, 7, ratio_f32, NULL, score, ps, mean, ci, &err) == 0);
    CHECK(isnan(ps[0]));
    CHECK(ps[1] == 0.08955223880597014);
    CHECK(mean[1] == 32.5081302972247 && ci[1] == 10.024470945061005);
    CHECK(mean[0] == 44.10102320136077 && ci[0] == 11.380266075388025);
    /* a third system (the second again) leaves the first's figures as they were */
    CHECK(tfm_paired_bs(rows, 3, N, 2, 200, 7, ratio_f32, NULL, score, ps, mean, ci, &err) == 0);
    CHECK(ps[1] == 0.08955223880597014 && ps[2] == ps[1]);
    CHECK(mean[2] == mean[1] && ci[2] == ci[1] && mean[0] == 44.10102320136077);
    CHECK(tfm_paired_ar(bi, si, N, 2, 500, 7, ratio_i64, NULL, base, sys, &p, &err) == 0);
    CHECK(p == 0.14171656686626746);
    /* a system against itself: every shuffle is the same pair, no difference exceeds 0 */
    CHECK(tfm_paired_ar(bi, bi, N, 2, 500, 7, ratio_i64, NULL, base, base, &p, &err) == 0);
    CHECK(p == 1.0 / 501);
    CHECK(tfm_paired_bs(rows, 2, N, 2, 1, 7, ratio_f32, NULL, score, ps, mean, ci, &err) == -1);
    CHECK(tfm_paired_ar(bi, si, 0, 2, 500, 7, ratio_i64, NULL, base, sys, &p, &err) == -1);
}

int main(void)
{
    t_run("numpy's default_rng: PCG64 seeded through SeedSequence", test_raw);
    t_run("numpy's bounded integers (choice), Lemire's rejection on 32-bit draws", test_below);
    t_run("the mean as statistics.mean: exact sum, one rounding", test_mean);
    t_run("the interval and mean of known resamples; refusals", test_ci);
    t_run("BLEU of float32 statistics as sacreBLEU's bootstrap scores them", test_bleu_f32);
    t_run("numpy's boolean integers: 32 bits a draw, the lowest first", test_bits);
    t_run("numpy's mean: the pairwise sum", test_np_mean);
    t_run("the paired bootstrap and approximate randomization tests (toy metric)", test_paired);
    return t_done();
}
