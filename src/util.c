/* util.c: the clock, growing arrays and the random numbers of the host (util.h). */
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

uint64_t tfm_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t tfm_rng_below(uint64_t *s, uint64_t n)
{
    unsigned __int128 m = (unsigned __int128)tfm_rng_next(s) * n;
    uint64_t lo = (uint64_t)m;
    if (lo < n) {
        uint64_t t = -n % n;
        while (lo < t) {
            m = (unsigned __int128)tfm_rng_next(s) * n;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

void tfm_catch_stop_signals(const struct sigaction *sa)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction one = *sa;
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        sigaddset(&one.sa_mask, sigs[i]);   /* one handler at a time on a thread */
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(sigs[i], &one, NULL);
    }
}
