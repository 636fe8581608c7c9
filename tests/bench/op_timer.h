/* op_timer.h: where a training step's time goes, op by op, on any backend (bench only).
 *
 * op_timer_wrap(be) replaces each op of be's table with one that runs the op, waits for
 * the device (be->sync) and adds the elapsed wall time to the op's total.  Waiting after
 * every op drains the device's queue, so each op's time is its launch plus its execution,
 * and the step is slower than without the timer: the split is measured in passes of its
 * own and reported as shares, next to the untimed step time.  The inner ops see the same
 * backend pointer (be->impl is untouched), so any backend can be timed: the CPU, sim and
 * CUDA alike.  Single-threaded: one timer per process.
 */
#ifndef TFM_BENCH_OP_TIMER_H
#define TFM_BENCH_OP_TIMER_H

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend.h"

/* The ops timed: every compute op of TFM_BACKEND_OPS, then the memory ops a step calls. */
#define OP_TIMER_SLOT(ret, name, params, args, devs) OPT_##name,
enum { TFM_BACKEND_OPS(OP_TIMER_SLOT) OPT_copy, OPT_zero, OPT_upload, OP_TIMER_MAX };
#undef OP_TIMER_SLOT

static struct {
    struct tfm_backend inner;           /* the backend's table before wrapping */
    const char *label[OP_TIMER_MAX];
    double seconds[OP_TIMER_MAX];
    long calls[OP_TIMER_MAX];
    int n;
} op_timer;

static double op_timer_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void op_timer_add(struct tfm_backend *be, int slot, double t0)
{
    op_timer.inner.sync(be);
    op_timer.seconds[slot] += op_timer_now() - t0;
    op_timer.calls[slot]++;
}

/* One wrapper per op, by its return type. */
#define OP_TIMED_void(name, params, args)                                                 \
    static void timed_##name params                                                       \
    {                                                                                     \
        double t0 = op_timer_now();                                                       \
        op_timer.inner.name args;                                                         \
        op_timer_add(be, OPT_##name, t0);                                                 \
    }
#define OP_TIMED_double(name, params, args)                                               \
    static double timed_##name params                                                     \
    {                                                                                     \
        double t0 = op_timer_now();                                                       \
        double r = op_timer.inner.name args;                                              \
        op_timer_add(be, OPT_##name, t0);                                                 \
        return r;                                                                         \
    }
#define OP_TIMED(ret, name, params, args, devs) OP_TIMED_##ret(name, params, args)
TFM_BACKEND_OPS(OP_TIMED)
OP_TIMED_void(copy, (struct tfm_backend *be, void *dst, const void *src, size_t bytes),
              (be, dst, src, bytes))
OP_TIMED_void(zero, (struct tfm_backend *be, void *dst, size_t bytes), (be, dst, bytes))
OP_TIMED_void(upload, (struct tfm_backend *be, void *dst, const void *host, size_t bytes),
              (be, dst, host, bytes))
#undef OP_TIMED

/* Time every op of be from now on (the ops a training step calls). */
static void op_timer_wrap(struct tfm_backend *be)
{
    op_timer.inner = *be;
    op_timer.n = OP_TIMER_MAX;
#define OP_SET(ret, name, params, args, devs)                                             \
    be->name = timed_##name;                                                              \
    op_timer.label[OPT_##name] = #name;
    TFM_BACKEND_OPS(OP_SET)
    OP_SET(, copy, , , ) OP_SET(, zero, , , ) OP_SET(, upload, , , )
#undef OP_SET
}

static void op_timer_reset(void)
{
    memset(op_timer.seconds, 0, sizeof op_timer.seconds);
    memset(op_timer.calls, 0, sizeof op_timer.calls);
}

/* One line per op with time, in order of time: "op NAME calls=N ms_per_step=X share=X%". */
static void op_timer_print(FILE *f, int steps)
{
    double total = 0;
    int order[OP_TIMER_MAX];
    for (int i = 0; i < op_timer.n; i++) {
        total += op_timer.seconds[i];
        order[i] = i;
    }
    for (int i = 1; i < op_timer.n; i++)   /* insertion sort, longest first */
        for (int j = i; j > 0 && op_timer.seconds[order[j]] > op_timer.seconds[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int k = 0; k < op_timer.n; k++) {
        int i = order[k];
        if (!op_timer.calls[i])
            continue;
        fprintf(f, "op %s calls=%ld ms_per_step=%.3f share=%.1f%%\n", op_timer.label[i],
                op_timer.calls[i] / steps, op_timer.seconds[i] * 1e3 / steps,
                total > 0 ? 100 * op_timer.seconds[i] / total : 0);
    }
}

#endif
