/* pool.c: work-claiming threads for the CPU backend (see pool.h).
 *
 * A job is published under the mutex with a new generation number.  The claim word packs
 * the generation (high bits) and the next range (low bits), so a worker still holding an
 * old job can never take a range of a newer one: its compare-and-swap fails on the
 * generation.  Every claimed range is counted in `done` when finished; the caller returns
 * when done reaches the number of ranges, which happens only after every claimed range has
 * run, so a new job never overlaps an old one.
 */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#define GEN_SHIFT 40
#define IDX_MASK ((UINT64_C(1) << GEN_SHIFT) - 1)
#define GEN_MASK ((UINT64_C(1) << (64 - GEN_SHIFT)) - 1)
/* Polls of the generation word before a worker sleeps, and of `done` before the caller
 * does: SPIN busy polls (tens of microseconds), then up to YIELDS polls that give the CPU
 * to any other runnable thread first (about a millisecond when there is none): a worker
 * catches the next op's job without a wake-up, and on a loaded machine it does not hold
 * a CPU that others need. */
#define SPIN 2000
#define YIELDS 200

struct tfm_pool {
    int threads;
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t wake;        /* workers: a new job or stop */
    pthread_cond_t finished;    /* caller: done == ranges */
    int sleepers, caller_sleeps, stop;
    /* the job, written under mu before gen is advanced */
    tfm_pool_fn *fn;
    void *ctx;
    int64_t n, grain, ranges;
    _Atomic uint64_t gen;
    _Atomic uint64_t claim;     /* (gen & GEN_MASK) << GEN_SHIFT | next range */
    _Atomic int64_t done;
};

struct worker_arg {
    struct tfm_pool *p;
    int thread;
};

static _Thread_local int inside = -1;   /* the pool thread index while running an item */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claim and run ranges of job g until none is left (or a newer job has replaced it). */
static void work(struct tfm_pool *p, uint64_t g, tfm_pool_fn *fn, void *ctx, int64_t n,
                 int64_t grain, int64_t ranges, int thread)
{
    uint64_t tag = (g & GEN_MASK) << GEN_SHIFT;
    for (;;) {
        uint64_t c = atomic_load_explicit(&p->claim, memory_order_relaxed);
        do {
            if ((c & ~IDX_MASK) != tag || (int64_t)(c & IDX_MASK) >= ranges)
                return;
        } while (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1,
                                                        memory_order_acquire,
                                                        memory_order_relaxed));
        int64_t r = (int64_t)(c & IDX_MASK), i0 = r * grain;
        int64_t i1 = i0 + grain < n ? i0 + grain : n;
        inside = thread;
        fn(ctx, i0, i1, thread);
        inside = -1;
        if (atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1 == ranges) {
            pthread_mutex_lock(&p->mu);
            if (p->caller_sleeps)
                pthread_cond_signal(&p->finished);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void *worker_main(void *arg)
{
    struct worker_arg *a = arg;
    struct tfm_pool *p = a->p;
    int thread = a->thread;
    free(a);
    uint64_t seen = 0;
    for (;;) {
        for (int s = 0; s < SPIN && atomic_load_explicit(&p->gen, memory_order_acquire) == seen;
             s++)
            cpu_relax();
        for (int s = 0; s < YIELDS && atomic_load_explicit(&p->gen, memory_order_acquire) == seen;
             s++)
            sched_yield();
        pthread_mutex_lock(&p->mu);
        p->sleepers++;
        while (!p->stop && atomic_load_explicit(&p->gen, memory_order_relaxed) == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        p->sleepers--;
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = atomic_load_explicit(&p->gen, memory_order_relaxed);
        tfm_pool_fn *fn = p->fn;
        void *ctx = p->ctx;
        int64_t n = p->n, grain = p->grain, ranges = p->ranges;
        pthread_mutex_unlock(&p->mu);
        work(p, seen, fn, ctx, n, grain, ranges, thread);
    }
}

struct tfm_pool *tfm_pool_create(int threads, struct tfm_error *err)
{
    if (threads < 1 || threads > 1024) {
        tfm_fail(err, "threads %d: out of range [1, 1024]", threads);
        return NULL;
    }
    struct tfm_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->workers = calloc((size_t)threads, sizeof *p->workers))) {
        free(p);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    p->threads = 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->finished, NULL);
    for (int t = 1; t < threads; t++) {
        struct worker_arg *a = malloc(sizeof *a);
        if (a) {
            a->p = p;
            a->thread = t;
        }
        if (!a || pthread_create(&p->workers[t], NULL, worker_main, a) != 0) {
            free(a);
            tfm_pool_free(p);
            tfm_fail(err, "cannot start thread %d of %d", t + 1, threads);
            return NULL;
        }
        p->threads = t + 1;
    }
    return p;
}

void tfm_pool_free(struct tfm_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int t = 1; t < p->threads; t++)
        pthread_join(p->workers[t], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->finished);
    free(p->workers);
    free(p);
}

int tfm_pool_threads(const struct tfm_pool *p) { return p->threads; }

int64_t tfm_pool_grain(const struct tfm_pool *p, int64_t n, int per_thread, int64_t min,
                       int64_t multiple)
{
    int64_t parts = (int64_t)p->threads * (per_thread > 0 ? per_thread : 1);
    int64_t g = (n + parts - 1) / parts;
    if (g < min)
        g = min;
    if (multiple > 1)
        g = (g + multiple - 1) / multiple * multiple;
    return g > 0 ? g : 1;
}

void tfm_pool_run(struct tfm_pool *p, int64_t n, int64_t grain, tfm_pool_fn *fn, void *ctx)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int64_t ranges = (n + grain - 1) / grain;
    if (p->threads == 1 || ranges == 1 || inside >= 0) {
        int thread = inside >= 0 ? inside : 0;
        for (int64_t i0 = 0; i0 < n; i0 += grain)
            fn(ctx, i0, i0 + grain < n ? i0 + grain : n, thread);
        return;
    }
    pthread_mutex_lock(&p->mu);
    uint64_t g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->grain = grain;
    p->ranges = ranges;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->claim, (g & GEN_MASK) << GEN_SHIFT, memory_order_relaxed);
    atomic_store_explicit(&p->gen, g, memory_order_release);
    if (p->sleepers)
        pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    work(p, g, fn, ctx, n, grain, ranges, 0);

    for (int s = 0; s < SPIN; s++) {
        if (atomic_load_explicit(&p->done, memory_order_acquire) == ranges)
            return;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    p->caller_sleeps = 1;
    while (atomic_load_explicit(&p->done, memory_order_acquire) != ranges)
        pthread_cond_wait(&p->finished, &p->mu);
    p->caller_sleeps = 0;
    pthread_mutex_unlock(&p->mu);
}
