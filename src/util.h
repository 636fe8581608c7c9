/* util.h: helpers every part of the library needs: a clock for durations, arrays that
 * grow, random numbers for the host's shuffles and samples, numbers read from text.
 */
#ifndef TFM_UTIL_H
#define TFM_UTIL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* Seconds on the monotonic clock (durations, time limits; not wall time). */
double tfm_now(void);

/* Make *p (an array of elements of `size` bytes, *cap of them, from malloc or NULL) hold
 * at least need elements, growing by half again at least, keeping the contents: 0, or -1
 * when out of memory or when the bytes would overflow (*p and *cap unchanged then). */
int tfm_grow(void *p, size_t *cap, size_t need, size_t size);

/* splitmix64: the next of a stream of random numbers whose state is *s (seed it with any
 * value); the same numbers on every machine.  Not the dropout bits (backend.h). */
uint64_t tfm_rng_next(uint64_t *s);
/* Uniform in [0, n), n > 0, without bias (Lemire's multiply and reject). */
uint64_t tfm_rng_below(uint64_t *s, uint64_t n);

/* The whole of s as a decimal integer (an optional sign, digits; no space, no hex):
 * 0 with *v, -1 for anything else, -2 for a value past long long. */
int tfm_parse_int(const char *s, long long *v);
/* The whole of s as a decimal number (an optional sign, digits with a point, an
 * exponent; no space, no hex, no inf or nan): 0 with *v, -1 for anything else, -2 for a
 * value past double's range, or so small that it would lose its digits (1e-400). */
int tfm_parse_double(const char *s, double *v);

/* Install sa for the signals that stop a tool (SIGINT, SIGTERM, SIGHUP), the three blocked
 * while its handler runs, except one ignored now: a tool started under nohup, or as a
 * shell's background job, keeps it ignored, as the shell asked. */
void tfm_catch_stop_signals(const struct sigaction *sa);

#endif
