/* pool.h: the CPU backend's threads.  A fixed set of workers and the calling thread share
 * the items of a parallel loop by claiming them one at a time ("work claiming"); the call
 * returns when every item is done, without waiting for a worker that claimed none.
 *
 * Why not OpenMP's parallel for: at the end of every region it waits for every thread of
 * the team, and on a loaded machine a descheduled worker holds the caller for a scheduler
 * slice while the others spin on the CPU the caller needs (measured: a small model's
 * beam search 16 s instead of 1.2 s on 2 busy cores).  Here a worker that wakes late finds
 * the items taken and goes back to sleep; workers spin only briefly before sleeping.
 *
 * Results never depend on which thread runs an item: an item's work is fixed by its
 * index, so a loop whose items write disjoint outputs gives the same bits with any load.
 * Not here: what the items compute (backend_cpu.c).
 */
#ifndef TFM_POOL_H
#define TFM_POOL_H

#include <stdint.h>

#include "error.h"

struct tfm_pool;

/* fn(ctx, i0, i1, thread): do items [i0, i1); thread in [0, threads) names the thread that
 * runs it (0 is the caller), for per-thread scratch memory. */
typedef void tfm_pool_fn(void *ctx, int64_t i0, int64_t i1, int thread);

/* A pool of threads in all: the caller and threads - 1 workers.  NULL with err. */
struct tfm_pool *tfm_pool_create(int threads, struct tfm_error *err);
void tfm_pool_free(struct tfm_pool *p);
int tfm_pool_threads(const struct tfm_pool *p);

/* Run items [0, n) in ranges of `grain` items (the last may be shorter): each range is
 * claimed by one thread.  Returns when all are done.  With one thread, a single range, or
 * when called from inside an item (nesting), the ranges run on the calling thread, in
 * order.  Not for concurrent use by several callers. */
void tfm_pool_run(struct tfm_pool *p, int64_t n, int64_t grain, tfm_pool_fn *fn, void *ctx);

/* A grain that cuts n items into about `per_thread` ranges per thread, at least `min`
 * items each (a multiple of `multiple` when that is > 1). */
int64_t tfm_pool_grain(const struct tfm_pool *p, int64_t n, int per_thread, int64_t min,
                       int64_t multiple);

#endif
