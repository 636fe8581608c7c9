/* util.c: the clock and growing arrays (util.h). */
#include "util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double tfm_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int tfm_grow(void *p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap + *cap / 2;
    if (n < need)
        n = need;
    if (n < 16)
        n = 16;
    if (size && n > SIZE_MAX / size)
        return -1;
    void *q = realloc(*(void **)p, n * size);
    if (!q)
        return -1;
    *(void **)p = q;
    *cap = n;
    return 0;
}
