/* test_pool.c: the work-claiming thread pool: every item runs exactly once, ranges follow
 * the grain, thread indexes are in range, many short jobs back to back (the generation
 * handshake), nesting runs inline, and the caller does not wait for a busy worker that
 * claimed nothing. */
#include "check.h"
#include "pool.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#define N 100003

static _Atomic int hits[N];
static _Atomic int64_t ranges_seen, bad_range, bad_thread;

struct job {
    struct tfm_pool *p;
    int64_t n, grain;
    int threads;
};

static void count(void *ctx, int64_t i0, int64_t i1, int thread)
{
    struct job *j = ctx;
    if (i0 % j->grain != 0 || (i1 - i0 != j->grain && i1 != j->n) || i1 <= i0)
        atomic_fetch_add(&bad_range, 1);
    if (thread < 0 || thread >= j->threads)
        atomic_fetch_add(&bad_thread, 1);
    atomic_fetch_add(&ranges_seen, 1);
    for (int64_t i = i0; i < i1; i++)
        atomic_fetch_add(&hits[i], 1);
}

static int run_and_check(struct tfm_pool *p, int64_t n, int64_t grain)
{
    struct job j = {p, n, grain, tfm_pool_threads(p)};
    for (int64_t i = 0; i < n; i++)
        hits[i] = 0;
    ranges_seen = bad_range = bad_thread = 0;
    tfm_pool_run(p, n, grain, count, &j);
    int ok = ranges_seen == (n + grain - 1) / grain && bad_range == 0 && bad_thread == 0;
    for (int64_t i = 0; i < n && ok; i++)
        ok = hits[i] == 1;
    return ok;
}

static void test_items(void)
{
    struct tfm_error err;
    for (int threads = 1; threads <= 4; threads++) {
        struct tfm_pool *p = tfm_pool_create(threads, &err);
        CHECK(p != NULL);
        if (!p)
            return;
        CHECK_EQ_INT(tfm_pool_threads(p), threads);
        CHECK(run_and_check(p, N, 1));
        CHECK(run_and_check(p, N, 7));
        CHECK(run_and_check(p, N, N));
        CHECK(run_and_check(p, N, 2 * N));
        CHECK(run_and_check(p, 1, 1));
        CHECK(run_and_check(p, 5, tfm_pool_grain(p, 5, 4, 1, 1)));
        tfm_pool_run(p, 0, 1, count, NULL);     /* nothing to do: fn never called */
        tfm_pool_free(p);
    }
    CHECK(tfm_pool_create(0, &err) == NULL);
    CHECK(strstr(err.msg, "threads 0: out of range") != NULL);
}

static void test_grain(void)
{
    struct tfm_error err;
    struct tfm_pool *p = tfm_pool_create(2, &err);
    if (!p) {
        CHECK(0);
        return;
    }
    CHECK_EQ_INT(tfm_pool_grain(p, 1000, 4, 1, 1), 125);     /* 8 ranges */
    CHECK_EQ_INT(tfm_pool_grain(p, 1000, 4, 300, 1), 300);   /* at least min */
    CHECK_EQ_INT(tfm_pool_grain(p, 1000, 4, 1, 16), 128);    /* a multiple of 16 */
    CHECK_EQ_INT(tfm_pool_grain(p, 0, 4, 1, 1), 1);
    tfm_pool_free(p);
}

/* Many tiny jobs in a row: a worker late for job k must not take ranges of job k + 1
 * with job k's function, and no range may be lost or run twice. */
static _Atomic int64_t total;
static void add_index(void *ctx, int64_t i0, int64_t i1, int thread)
{
    (void)thread;
    int64_t base = *(int64_t *)ctx;
    for (int64_t i = i0; i < i1; i++)
        atomic_fetch_add(&total, base + i);
}

static void test_many_jobs(void)
{
    struct tfm_error err;
    struct tfm_pool *p = tfm_pool_create(3, &err);
    if (!p) {
        CHECK(0);
        return;
    }
    int64_t expect = 0;
    total = 0;
    for (int64_t k = 0; k < 20000; k++) {
        int64_t base = k * 1000, n = 1 + k % 9;
        for (int64_t i = 0; i < n; i++)
            expect += base + i;
        tfm_pool_run(p, n, 1, add_index, &base);
    }
    CHECK_EQ_INT(total, expect);
    tfm_pool_free(p);
}

/* An item that starts a loop of its own: the inner loop runs on the item's thread. */
struct nest {
    struct tfm_pool *p;
    _Atomic int inner_items;
};
static void inner(void *ctx, int64_t i0, int64_t i1, int thread)
{
    struct nest *s = ctx;
    (void)thread;
    atomic_fetch_add(&s->inner_items, (int)(i1 - i0));
}
static void outer(void *ctx, int64_t i0, int64_t i1, int thread)
{
    struct nest *s = ctx;
    (void)i0;
    (void)i1;
    (void)thread;
    tfm_pool_run(s->p, 10, 3, inner, s);
}

static void test_nesting(void)
{
    struct tfm_error err;
    struct nest s = {0};
    s.p = tfm_pool_create(2, &err);
    if (!s.p) {
        CHECK(0);
        return;
    }
    tfm_pool_run(s.p, 8, 1, outer, &s);
    CHECK_EQ_INT(s.inner_items, 80);
    tfm_pool_free(s.p);
}

/* The caller does not wait for a worker that claimed nothing: the worker of a 2-thread
 * pool is held in a signal handler for 300 ms (as if descheduled by other load) while the
 * caller runs jobs, which must all finish on the caller alone, long before the worker is
 * back; a range the worker did claim is waited for. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static _Atomic int held;
static void hold(int sig)
{
    (void)sig;
    held = 1;
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    held = 2;
}

static _Atomic int slow_started;
static void slow_on_worker(void *ctx, int64_t i0, int64_t i1, int thread)
{
    (void)ctx;
    (void)i0;
    (void)i1;
    if (thread != 0) {
        slow_started = 1;
        usleep(300000);
    } else {
        while (!slow_started)       /* wait until the worker holds a range */
            ;
    }
}

static void test_no_wait_for_idle(void)
{
    struct tfm_error err;
    struct tfm_pool *p = tfm_pool_create(2, &err);
    if (!p) {
        CHECK(0);
        return;
    }
    /* the worker inherited an unblocked SIGUSR1; the caller blocks it, so the process
     * signal goes to the worker */
    struct sigaction sa = {0};
    sa.sa_handler = hold;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    kill(getpid(), SIGUSR1);
    while (held == 0)
        ;
    double t0 = now();
    int ok = 1;
    for (int k = 0; k < 100; k++)
        ok &= run_and_check(p, 1000, 10);
    double t1 = now();
    CHECK(ok);
    CHECK(held == 1);               /* the worker was still held at the end */
    printf("# 100 jobs with the worker held: %.1f ms\n", (t1 - t0) * 1e3);
    CHECK(t1 - t0 < 0.2);
    while (held != 2)
        ;
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    /* a range the worker claimed: the call returns only after it */
    slow_started = 0;
    t0 = now();
    tfm_pool_run(p, 2, 1, slow_on_worker, NULL);
    CHECK(now() - t0 >= 0.29);
    CHECK(run_and_check(p, 1000, 10));   /* and the pool works on afterwards */
    tfm_pool_free(p);
}

int main(void)
{
    t_run("every item exactly once, ranges by grain, thread indexes", test_items);
    t_run("grain from threads, minimum and multiple", test_grain);
    t_run("20000 short jobs back to back", test_many_jobs);
    t_run("a loop inside an item runs on its thread", test_nesting);
    t_run("no wait for a worker that claimed nothing; a claimed range is waited for",
          test_no_wait_for_idle);
    return t_done();
}
