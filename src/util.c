/* util.c: the clock, growing arrays and the random numbers of the host (util.h). */
#include "util.h"

#include <errno.h>
#include <math.h>
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

/* Whether s is a sign, then digits, then (decimal) a point, digits and an exponent: the
 * forms strtoll and strtod read that every reader here means; none of their leading
 * space, hex, inf or nan. */
static int decimal(const char *s, int real)
{
    s += *s == '+' || *s == '-';
    int digits = 0;
    for (; *s >= '0' && *s <= '9'; s++)
        digits++;
    if (real && *s == '.')
        for (s++; *s >= '0' && *s <= '9'; s++)
            digits++;
    if (!digits)
        return 0;
    if (real && (*s == 'e' || *s == 'E')) {
        s++;
        s += *s == '+' || *s == '-';
        if (!(*s >= '0' && *s <= '9'))
            return 0;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    return *s == '\0';
}

int tfm_parse_int(const char *s, long long *v)
{
    if (!decimal(s, 0))
        return -1;
    errno = 0;
    long long x = strtoll(s, NULL, 10);
    if (errno)
        return -2;
    *v = x;
    return 0;
}

int tfm_parse_double(const char *s, double *v)
{
    if (!decimal(s, 1))
        return -1;
    errno = 0;
    double x = strtod(s, NULL);
    if (errno || !isfinite(x))
        return -2;
    *v = x;
    return 0;
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
