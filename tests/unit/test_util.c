/* test_util: the monotonic clock, growing arrays and random numbers (src/util.h). */
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

int main(void)
{
    t_run("tfm_grow: keeps, grows by half, refuses overflow", test_grow);
    t_run("tfm_now: a monotonic clock in seconds", test_now);
    t_run("tfm_rng_next, tfm_rng_below: splitmix64, uniform below n", test_rng);
    return t_done();
}
