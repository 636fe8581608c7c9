/* util.h: two helpers every part of the library needs: a clock for durations, and
 * arrays that grow.
 */
#ifndef TFM_UTIL_H
#define TFM_UTIL_H

#include <stddef.h>

/* Seconds on the monotonic clock (durations, time limits; not wall time). */
double tfm_now(void);

/* Make *p (an array of elements of `size` bytes, *cap of them, from malloc or NULL) hold
 * at least need elements, growing by half again at least, keeping the contents: 0, or -1
 * when out of memory or when the bytes would overflow (*p and *cap unchanged then). */
int tfm_grow(void *p, size_t *cap, size_t need, size_t size);

#endif
