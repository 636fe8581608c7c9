/* test_util: the monotonic clock, growing arrays, random numbers and numbers read from text
 * (src/util.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "util.h"

static void test_grow(void)
{
    int32_t *a = NULL;
    size_t cap = 0;
    CHECK(tfm_grow(&a, &cap, 3, sizeof *a) == 0 && a && cap >= 16);
    for (int i = 0; i < 16; i++)
        a[i] = i;
    size_t before = cap;
    CHECK(tfm_grow(&a, &cap, 10, sizeof *a) == 0 && cap == before);   /* fits: unchanged */
    CHECK(tfm_grow(&a, &cap, 17, sizeof *a) == 0 && cap == 24);       /* half again */
    CHECK(tfm_grow(&a, &cap, 1000, sizeof *a) == 0 && cap == 1000);   /* or what is asked */
    int kept = 1;
    for (int i = 0; i < 16; i++)
        kept &= a[i] == i;
    CHECK(kept);
    /* bytes that overflow size_t are refused, the array untouched */
    int32_t *was = a;
    CHECK(tfm_grow(&a, &cap, SIZE_MAX / 2, sizeof *a) == -1 && a == was && cap == 1000);
    free(a);
}

static void test_now(void)
{
    double t0 = tfm_now();
    usleep(20000);
    double t1 = tfm_now();
    CHECK(t1 - t0 >= 0.019 && t1 - t0 < 5);
}

static void test_rng(void)
{
    /* splitmix64's published first outputs for seed 0 */
    uint64_t s = 0;
    CHECK(tfm_rng_next(&s) == 0xe220a8397b1dcdafULL);
    CHECK(tfm_rng_next(&s) == 0x6e789e6aa1b965f4ULL);
    /* below n: in range, every value drawn, about equally often */
    s = 7;
    int count[10] = {0}, in_range = 1;
    for (int i = 0; i < 100000; i++) {
        uint64_t v = tfm_rng_below(&s, 10);
        in_range &= v < 10;
        if (v < 10)
            count[v]++;
    }
    CHECK(in_range);
    for (int k = 0; k < 10; k++)
        CHECK(count[k] > 9500 && count[k] < 10500);
    CHECK(tfm_rng_below(&s, 1) == 0);
}

static void test_parse(void)
{
    long long i = 7;
    CHECK(tfm_parse_int("80", &i) == 0 && i == 80);
    CHECK(tfm_parse_int("-3", &i) == 0 && i == -3);
    CHECK(tfm_parse_int("+3", &i) == 0 && i == 3);
    CHECK(tfm_parse_int("9223372036854775807", &i) == 0 && i == INT64_MAX);
    CHECK_EQ_INT(tfm_parse_int("9223372036854775808", &i), -2);
    static const char *const not_int[] = {"", " 80", "80 ", "0x10", "8.0", "1e3", "-", "+",
                                          "80x", "\t8", "\n"};
    for (size_t k = 0; k < sizeof not_int / sizeof *not_int; k++) {
        i = 7;
        CHECK(tfm_parse_int(not_int[k], &i) == -1 && i == 7);
    }
    double d = 7;
    CHECK(tfm_parse_double("0.5", &d) == 0 && d == 0.5);
    CHECK(tfm_parse_double(".5", &d) == 0 && d == 0.5);
    CHECK(tfm_parse_double("5.", &d) == 0 && d == 5);
    CHECK(tfm_parse_double("-2e-3", &d) == 0 && d == -2e-3);
    CHECK(tfm_parse_double("1E+2", &d) == 0 && d == 100);
    CHECK(tfm_parse_double("1e-300", &d) == 0 && d == 1e-300);
    CHECK_EQ_INT(tfm_parse_double("1e-400", &d), -2);
    CHECK_EQ_INT(tfm_parse_double("1e400", &d), -2);
    static const char *const not_real[] = {"", " 1", "1 ", "0x1p3", "inf", "nan", "-inf",
                                           "1e", "1e+", ".", "e3", "1.2.3", "1,5", "5s"};
    for (size_t k = 0; k < sizeof not_real / sizeof *not_real; k++) {
        d = 7;
        CHECK(tfm_parse_double(not_real[k], &d) == -1 && d == 7);
    }
}

int main(void)
{
    t_run("tfm_grow: keeps, grows by half, refuses overflow", test_grow);
    t_run("tfm_now: a monotonic clock in seconds", test_now);
    t_run("tfm_rng_next, tfm_rng_below: splitmix64, uniform below n", test_rng);
    t_run("tfm_parse_int, tfm_parse_double: decimal, whole, in range", test_parse);
    return t_done();
}
