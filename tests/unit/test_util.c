/* test_util: the monotonic clock and growing arrays (src/util.h). */
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

int main(void)
{
    t_run("tfm_grow: keeps, grows by half, refuses overflow", test_grow);
    t_run("tfm_now: a monotonic clock in seconds", test_now);
    return t_done();
}
