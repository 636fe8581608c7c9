/* dist.c: rank placement from the environment and the in-process all-reduce (dist.h).
 * The reduction: each rank sums its own slice of the elements over all ranks' buffers in
 * rank order and writes the result to every buffer, between two barriers.
 * Owner: the trainer engineer. */
#include "dist.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- environment ------------------------------------------------------------------ */

static int env_int(const char *name, int *v, int max, struct tfm_error *err)
{
    const char *s = getenv(name);
    if (!s)
        return 0;
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < 0 || x > max)
        return tfm_fail(err, "environment %s='%s': not an integer in [0, %d]", name, s, max);
    *v = (int)x;
    return 1;
}

int tfm_dist_env_read(struct tfm_dist_env *e, struct tfm_error *err)
{
    static const char *const vars[][2] = {
        {"TFM_RANK", "TFM_WORLD_SIZE"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"SLURM_PROCID", "SLURM_NTASKS"},
    };
    e->rank = 0;
    e->world = 1;
    snprintf(e->source, sizeof e->source, "none");
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        int r = 0, w = 0;
        int hr = env_int(vars[i][0], &r, TFM_DIST_MAX_WORLD - 1, err);
        int hw = env_int(vars[i][1], &w, TFM_DIST_MAX_WORLD, err);
        if (hr < 0 || hw < 0)
            return -1;
        if (!hr && !hw)
            continue;
        if (hr != hw)
            return tfm_fail(err, "environment: %s is set but %s is not", vars[i][hr ? 0 : 1],
                            vars[i][hr ? 1 : 0]);
        if (w < 1 || r >= w)
            return tfm_fail(err, "environment: %s=%d outside %s=%d", vars[i][0], r, vars[i][1], w);
        e->rank = r;
        e->world = w;
        snprintf(e->source, sizeof e->source, "%s", vars[i][0]);
        return 0;
    }
    return 0;
}

/* ---- in-process communicator ------------------------------------------------------ */

struct tfm_comm {
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    unsigned long generation;
    int aborted;
    char why[1024];
    void **bufs;        /* [n] each rank's buffer for the collective in progress */
};

struct tfm_comm *tfm_comm_threads(int nranks, struct tfm_error *err)
{
    if (nranks < 1 || nranks > TFM_DIST_MAX_LOCAL) {
        tfm_fail(err, "%d ranks in one process (1 to %d)", nranks, TFM_DIST_MAX_LOCAL);
        return NULL;
    }
    struct tfm_comm *c = calloc(1, sizeof *c);
    if (!c || !(c->bufs = calloc((size_t)nranks, sizeof *c->bufs))) {
        free(c);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    c->n = nranks;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    return c;
}

void tfm_comm_free(struct tfm_comm *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->bufs);
    free(c);
}

int tfm_comm_size(const struct tfm_comm *c)
{
    return c->n;
}

void tfm_comm_abort(struct tfm_comm *c, const char *why)
{
    pthread_mutex_lock(&c->mu);
    if (!c->aborted)
        snprintf(c->why, sizeof c->why, "%.900s", why ? why : "a rank failed");
    c->aborted = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Wait until all n ranks arrive.  -1 if the communicator was aborted. */
static int barrier(struct tfm_comm *c, struct tfm_error *err)
{
    pthread_mutex_lock(&c->mu);
    unsigned long gen = c->generation;
    if (!c->aborted && ++c->arrived == c->n) {
        c->arrived = 0;
        c->generation++;
        pthread_cond_broadcast(&c->cv);
    } else {
        while (!c->aborted && gen == c->generation)
            pthread_cond_wait(&c->cv, &c->mu);
    }
    int aborted = c->aborted;
    if (aborted)
        tfm_fail(err, "ranks stopped: %.900s", c->why);
    pthread_mutex_unlock(&c->mu);
    return aborted ? -1 : 0;
}

int tfm_comm_barrier(struct tfm_comm *c, int rank, struct tfm_error *err)
{
    (void)rank;
    return barrier(c, err);
}

#define SUM_BODY(T)                                                                    \
    c->bufs[rank] = buf;                                                               \
    if (barrier(c, err))                                                               \
        return -1;                                                                     \
    size_t lo = n * (size_t)rank / (size_t)c->n, hi = n * (size_t)(rank + 1) / (size_t)c->n; \
    T *const *b = (T *const *)c->bufs;                                                 \
    for (size_t i = lo; i < hi; i++) {                                                 \
        T acc = b[0][i];                                                               \
        for (int r = 1; r < c->n; r++)                                                 \
            acc += b[r][i];                                                            \
        for (int r = 0; r < c->n; r++)                                                 \
            b[r][i] = acc;                                                             \
    }                                                                                  \
    return barrier(c, err);

int tfm_comm_sum_f32(struct tfm_comm *c, int rank, float *buf, size_t n, struct tfm_error *err)
{
    if (c->n == 1)
        return 0;
    SUM_BODY(float)
}

int tfm_comm_sum_f64(struct tfm_comm *c, int rank, double *buf, size_t n, struct tfm_error *err)
{
    if (c->n == 1)
        return 0;
    SUM_BODY(double)
}

/* ---- threads ---------------------------------------------------------------------- */

struct job {
    int (*fn)(int, void *);
    int rank;
    void *arg;
    int rc;
};

static void *run_job(void *p)
{
    struct job *j = p;
    j->rc = j->fn(j->rank, j->arg);
    return NULL;
}

int tfm_dist_run(int nranks, int (*fn)(int rank, void *arg), void **args, struct tfm_comm *comm,
                 struct tfm_error *err)
{
    if (nranks < 1 || nranks > TFM_DIST_MAX_LOCAL)
        return tfm_fail(err, "%d ranks in one process (1 to %d)", nranks, TFM_DIST_MAX_LOCAL);
    struct job jobs[TFM_DIST_MAX_LOCAL];
    pthread_t th[TFM_DIST_MAX_LOCAL];
    int started = 1, failed = 0;
    for (int r = 0; r < nranks; r++)
        jobs[r] = (struct job){fn, r, args[r], 0};
    for (int r = 1; r < nranks; r++) {
        int e = pthread_create(&th[r], NULL, run_job, &jobs[r]);
        if (e) {
            tfm_fail(err, "cannot start rank %d: %s", r, strerror(e));
            failed = -1;
            break;
        }
        started++;
    }
    if (failed < 0) {
        if (comm)
            tfm_comm_abort(comm, err->msg);
        for (int r = 1; r < started; r++)
            pthread_join(th[r], NULL);
        return -1;
    }
    run_job(&jobs[0]);
    for (int r = 1; r < nranks; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < nranks; r++)
        failed += jobs[r].rc != 0;
    return failed;
}
