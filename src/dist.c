/* dist.c: rank placement from the environment and the all-reduce (dist.h).
 * Threads: each rank sums its own slice of the elements over all ranks' buffers in rank
 * order and writes the result to every buffer, between two barriers.
 * Processes: a chain over TCP, process p linked to p-1 and p+1 (procs_sum): the partial
 * sums go up the chain in rank order and the totals come back down, chunk by chunk, so
 * every process sends and receives about twice the buffer whatever their number, and no
 * link ever has both ends writing (the chain has no cycle).  Exact, but W hops long each
 * way; NCCL (GPUs) would replace it.  Process 0 meets the others first (the rendezvous)
 * and tells each where its successor listens; every connection starts with a hello in
 * which both sides prove the run's secret (HMAC-SHA256, sha256.h), several hellos at once
 * (meet_run), each bounded in time, and every wait on a neighbour is bounded too.
 */
#include "dist.h"

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sha256.h"
#include "util.h"

/* ---- environment ------------------------------------------------------------------ */

static int env_int(const char *name, int *v, int max, struct tfm_error *err)
{
    const char *s = getenv(name);
    if (!s)
        return 0;
    long long x;
    if (tfm_parse_int(s, &x) || x < 0 || x > max)
        return tfm_fail(err, "environment %s='%s': not an integer in [0, %d]", name, s, max);
    *v = (int)x;
    return 1;
}

static int place_from_env(struct tfm_dist_env *e, struct tfm_error *err)
{
    static const char *const vars[][2] = {
        {"TFM_RANK", "TFM_WORLD_SIZE"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"PMI_RANK", "PMI_SIZE"},           /* MPICH's and Intel MPI's mpiexec (Hydra) */
        {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS"},
    };
    /* the launcher nearest the process wins: mpirun and mpiexec start theirs from a
     * Slurm step (one task a node), so Slurm's come last */
    e->rank = 0;
    e->world = 1;
    e->local_rank = 0;
    snprintf(e->source, sizeof e->source, "none");
    static const char *const local[] = {"TFM_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                        "MPI_LOCALRANKID", "SLURM_LOCALID"};
    _Static_assert(sizeof local / sizeof *local == sizeof vars / sizeof *vars, "one each");
    /* Slurm's variables place a process only in a job step that srun started, which sets
     * SLURM_STEP_NUM_TASKS, the step's tasks (SLURM_PROCID numbers them): a batch script
     * has SLURM_PROCID 0 and SLURM_NTASKS of the whole job, and an salloc shell
     * SLURM_NTASKS alone, though each is one process: without it, Slurm's are left out. */
    const size_t nsrc = sizeof vars / sizeof *vars - !getenv("SLURM_STEP_NUM_TASKS");
    for (size_t i = 0; i < nsrc; i++) {
        int k = env_int(local[i], &e->local_rank, TFM_DIST_MAX_WORLD - 1, err);
        if (k < 0)
            return -1;
        if (k > 0)
            break;
    }
    for (size_t i = 0; i < nsrc; i++) {
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

int tfm_dist_env_read(struct tfm_dist_env *e, struct tfm_error *err)
{
    if (place_from_env(e, err))
        return -1;
    /* the others, named with the process as tfm_comm_procs names them */
    if (tfm_dist_env_check(err))
        return e->world > 1 ? tfm_error_prefix(err, "process %d of %d", e->rank, e->world) : -1;
    return 0;
}

/* ---- in-process communicator ------------------------------------------------------ */

struct tfm_comm {
    int n;
    /* processes (tfm_comm_procs): this one's rank, and fd[p] the socket to process p:
     * only the neighbours p-1 and p+1 in the chain, -1 elsewhere */
    int procs, rank, *fd;
    int by_file;        /* they met through a rendezvous file */
    char *chunk;        /* one chunk from a neighbour */
    double timeout;     /* TFM_COLLECTIVE_TIMEOUT: seconds a neighbour may be silent */
    double stop_timeout;    /* TFM_STOP_TIMEOUT: the same once *stop is set */
    volatile sig_atomic_t *stop;    /* set by a signal handler, or NULL */
    struct tfm_comm *up;    /* threads: the processes above them (tfm_comm_stack), or NULL */
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
    for (int w = 0; c->fd && w < c->n; w++)
        if (c->fd[w] >= 0)
            close(c->fd[w]);
    free(c->fd);
    free(c->chunk);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->bufs);
    free(c);
}

int tfm_comm_size(const struct tfm_comm *c)
{
    return c->n;
}

int tfm_comm_met_by_file(const struct tfm_comm *c)
{
    return c->by_file;
}

void tfm_comm_abort(struct tfm_comm *c, const char *why)
{
    if (c->up)
        tfm_comm_abort(c->up, why);
    /* the other processes see their sockets close and stop too */
    for (int w = 0; c->procs && w < c->n; w++)
        if (c->fd[w] >= 0)
            shutdown(c->fd[w], SHUT_RDWR);
    pthread_mutex_lock(&c->mu);
    if (!c->aborted)
        snprintf(c->why, sizeof c->why, "%.900s", why ? why : "a rank failed");
    c->aborted = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

int tfm_comm_aborted(struct tfm_comm *c)
{
    pthread_mutex_lock(&c->mu);
    int a = c->aborted;
    pthread_mutex_unlock(&c->mu);
    return a;
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

static int procs_sum(struct tfm_comm *c, void *buf, size_t n, size_t size, int f64,
                     struct tfm_error *err);
static int threads_sum(struct tfm_comm *c, int rank, void *buf, size_t n, size_t size,
                       int f64, struct tfm_error *err);

int tfm_comm_barrier(struct tfm_comm *c, int rank, struct tfm_error *err)
{
    double x = 0;
    if (c->procs)
        return procs_sum(c, &x, 1, sizeof x, 1, err);
    if (!c->up)
        return barrier(c, err);
    return threads_sum(c, rank, &x, 1, sizeof x, 1, err);
}

#define SUM_SLICE(T)                                                                   \
    do {                                                                               \
        T *const *b = (T *const *)c->bufs;                                             \
        for (size_t i = lo; i < hi; i++) {                                             \
            T acc = b[0][i];                                                           \
            for (int r = 1; r < c->n; r++)                                             \
                acc += b[r][i];                                                        \
            for (int r = 0; r < c->n; r++)                                             \
                b[r][i] = acc;                                                         \
        }                                                                              \
    } while (0)

/* The local ranks' sum, then, with processes above (tfm_comm_stack), local rank 0 sums
 * that over the processes and the others copy its result. */
static int threads_sum(struct tfm_comm *c, int rank, void *buf, size_t n, size_t size,
                       int f64, struct tfm_error *err)
{
    if (c->n > 1) {
        c->bufs[rank] = buf;
        if (barrier(c, err))
            return -1;
        size_t lo = n * (size_t)rank / (size_t)c->n, hi = n * (size_t)(rank + 1) / (size_t)c->n;
        if (f64)
            SUM_SLICE(double);
        else
            SUM_SLICE(float);
        if (barrier(c, err))
            return -1;
    }
    if (!c->up)
        return 0;
    if (rank == 0 && procs_sum(c->up, buf, n, size, f64, err)) {
        tfm_comm_abort(c, err->msg);
        return -1;
    }
    if (c->n == 1)
        return 0;
    if (barrier(c, err))                    /* c->bufs still holds every rank's buffer */
        return -1;
    if (rank != 0)
        memcpy(buf, c->bufs[0], n * size);
    return barrier(c, err);                 /* rank 0's buffer is read until here */
}

int tfm_comm_sum_f32(struct tfm_comm *c, int rank, float *buf, size_t n, struct tfm_error *err)
{
    if (c->procs)
        return c->n == 1 ? 0 : procs_sum(c, buf, n, sizeof *buf, 0, err);
    return threads_sum(c, rank, buf, n, sizeof *buf, 0, err);
}

int tfm_comm_sum_f64(struct tfm_comm *c, int rank, double *buf, size_t n, struct tfm_error *err)
{
    if (c->procs)
        return c->n == 1 ? 0 : procs_sum(c, buf, n, sizeof *buf, 1, err);
    return threads_sum(c, rank, buf, n, sizeof *buf, 1, err);
}

void tfm_comm_stack(struct tfm_comm *local, struct tfm_comm *procs)
{
    local->up = procs;
}

/* ---- processes: the sums ------------------------------------------------------------- */

#define CHUNK (1u << 22)                    /* bytes a process sends at a time */
#define NEXT_MAGIC 0x524d4654u              /* process 0's word on a process's successor */
#define SLICE 0.1                           /* seconds between looks at the stop flag */

static int stopped(volatile sig_atomic_t *stop)
{
    return stop && *stop;
}


/* A poll(2) timeout: left seconds, at most SLICE, at least 0. */
static int slice_ms(double left)
{
    if (left > SLICE)
        left = SLICE;
    return left > 0 ? (int)(left * 1000) + 1 : 0;
}

static int lost(struct tfm_comm *c, int peer, struct tfm_error *err)
{
    if (c->aborted)
        return tfm_fail(err, "ranks stopped: %.900s", c->why);
    return tfm_fail(err, "process %d of %d left the run (see its messages)", peer, c->n);
}

/* All n bytes to (out) or from neighbour peer.  The neighbour may take or send nothing for
 * TFM_COLLECTIVE_TIMEOUT seconds at a time, or, once a signal has set the stop flag, for
 * TFM_STOP_TIMEOUT seconds from then (the smaller); then the sum fails, naming it. */
static int xfer(struct tfm_comm *c, int peer, void *p, size_t n, int out, struct tfm_error *err)
{
    int fd = c->fd[peer];
    char *s = p;
    double last = tfm_now(), signalled = 0;
    while (n > 0) {
        ssize_t k = out ? send(fd, s, n, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, s, n, MSG_DONTWAIT);
        if (k > 0) {
            s += k;
            n -= (size_t)k;
            last = tfm_now();
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            return lost(c, peer, err);
        double now = tfm_now();
        if (!signalled && stopped(c->stop))
            signalled = now;
        double from = signalled > last ? signalled : last, limit = c->timeout;
        if (signalled && c->stop_timeout < limit)
            limit = c->stop_timeout;
        if (now - from >= limit) {
            const char *what = out ? "took" : "sent";
            if (limit < c->timeout)
                return tfm_fail(err, "stopped by a signal: process %d of %d %s nothing in the "
                                "%g s that followed (TFM_STOP_TIMEOUT)", peer, c->n, what, limit);
            return tfm_fail(err, "process %d of %d %s nothing for %g s (TFM_COLLECTIVE_TIMEOUT): "
                            "it stopped, hangs, or waits for one that does", peer, c->n, what,
                            limit);
        }
        struct pollfd pf = {.fd = fd, .events = out ? POLLOUT : POLLIN};
        poll(&pf, 1, slice_ms(limit - (now - from)));
    }
    return 0;
}

static int send_all(struct tfm_comm *c, int peer, const void *p, size_t n,
                    struct tfm_error *err)
{
    return xfer(c, peer, (void *)(uintptr_t)p, n, 1, err);
}

static int recv_all(struct tfm_comm *c, int peer, void *p, size_t n, struct tfm_error *err)
{
    return xfer(c, peer, p, n, 0, err);
}

/* A chain: process p adds its buffer to the partial sums of processes 0 .. p-1 that come
 * from p-1 and passes them on to p+1; the last one ends with the sums, which travel back
 * down the chain.  Chunk by chunk, so the chain is a pipeline, and every process sends
 * and receives about twice the buffer whatever the number of processes.  The sums are
 * ((b0 + b1) + b2) + ..., the in-process order. */
static int procs_sum(struct tfm_comm *c, void *buf, size_t n, size_t size, int f64,
                     struct tfm_error *err)
{
    int p = c->rank, last = c->n - 1;
    size_t per = CHUNK / size;
    for (size_t i0 = 0; i0 < n; i0 += per) {
        size_t m = n - i0 < per ? n - i0 : per, bytes = m * size;
        char *b = (char *)buf + i0 * size;
        if (p > 0) {
            if (recv_all(c, p - 1, c->chunk, bytes, err))
                return -1;
            if (f64) {
                double *acc = (double *)(void *)b, *x = (double *)(void *)c->chunk;
                for (size_t i = 0; i < m; i++)
                    acc[i] = x[i] + acc[i];
            } else {
                float *acc = (float *)(void *)b, *x = (float *)(void *)c->chunk;
                for (size_t i = 0; i < m; i++)
                    acc[i] = x[i] + acc[i];
            }
        }
        if (p < last && send_all(c, p + 1, b, bytes, err))
            return -1;
    }
    for (size_t i0 = 0; i0 < n; i0 += per) {
        size_t m = n - i0 < per ? n - i0 : per, bytes = m * size;
        char *b = (char *)buf + i0 * size;
        if ((p < last && recv_all(c, p + 1, b, bytes, err)) ||
            (p > 0 && send_all(c, p - 1, b, bytes, err)))
            return -1;
    }
    return 0;
}

/* ---- processes: meeting ---------------------------------------------------------------- */

/* A hello: "tfm2", the sender's rank, the run's number of processes, the port the sender
 * listens on (0: none), each 4 bytes big-endian, then NONCE random bytes.  The connecting
 * side sends its hello; the accepting side sends its own as soon as it accepts; the
 * connecting side then sends its proof, HMAC-SHA256 under the secret of "client" and both
 * hellos (the connecting side's first), and the accepting side, once that proof holds,
 * sends its own, the same of "server".  Each proof covers the other side's fresh nonce, so
 * that none can be replayed, and names its role, so that none can be sent back as the
 * other's; the accepting side proves nothing to a side that has not proven first. */
#define HELLO_MAGIC 0x74666d32u             /* "tfm2" */
#define NONCE 32
#define HELLO (16 + NONCE)
#define MAC TFM_SHA256_BYTES
#define SECRET_MIN 16
#define SECRET_MAX 256
#define PENDING_MAX 64                      /* connections in their hello at once */

struct meet {
    int rank, world;
    char secret[SECRET_MAX + 1];
    double hello_timeout;                   /* TFM_JOIN_TIMEOUT */
    double timeout, deadline;               /* TFM_RENDEZVOUS_TIMEOUT, and when it runs out */
    const struct tfm_dist_watch *watch;
    int token;                              /* the secret is TFM_RUN_TOKEN's */
    struct rv_file *rv;                     /* process 0's rendezvous file, or NULL */
};

/* Process 0's rendezvous file while the others join: its path, the line process 0 wrote
 * there, and when to read it again (rv_watch). */
#define RV_LINE 1024
#define RV_CHECK 0.5                        /* seconds between readings */
struct rv_file {
    const char *path;
    char line[RV_LINE];
    double next;
};
static int rv_watch(const struct meet *m, int joined, struct tfm_error *err);

/* One side of a connection in its hello. */
struct link {
    int fd;
    int client;                             /* this process connected, else it accepted */
    unsigned char mine[HELLO];
    unsigned char in[HELLO + MAC];          /* the other side's hello, then its proof */
    size_t have;
    double deadline;                        /* for the bytes awaited (TFM_JOIN_TIMEOUT) */
    struct sockaddr_in addr;                /* the other end */
    int done;
};

/* A process that has proven itself: its connection, address and the port it listens on. */
struct peer {
    int fd;
    uint32_t ip;                            /* network order */
    uint16_t port;                          /* network order */
};

static int random_bytes(void *p, size_t n, struct tfm_error *err)
{
    unsigned char *c = p;
    while (n > 0) {
        ssize_t k = getrandom(c, n, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return tfm_fail(err, "getrandom: %s", strerror(errno));
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void proof(const struct meet *m, const char *role, const struct link *l,
                  unsigned char out[MAC])
{
    const unsigned char *hc = l->client ? l->mine : l->in, *hs = l->client ? l->in : l->mine;
    const void *parts[] = {role, hc, hs};
    size_t lens[] = {strlen(role) + 1, HELLO, HELLO};
    tfm_hmac_sha256(m->secret, strlen(m->secret), parts, lens, 3, out);
}

/* Whether the other side's proof, in l->in after its hello, holds (in constant time). */
static int proven(const struct meet *m, const struct link *l)
{
    unsigned char want[MAC];
    proof(m, l->client ? "server" : "client", l, want);
    unsigned d = 0;
    for (int i = 0; i < MAC; i++)
        d |= want[i] ^ l->in[HELLO + i];
    return d == 0;
}

/* Start a hello on connected fd: send this side's. */
static int link_start(const struct meet *m, struct link *l, int fd, int client, int port,
                      struct tfm_error *err)
{
    memset(l, 0, sizeof *l);
    l->fd = fd;
    l->client = client;
    put32(l->mine, HELLO_MAGIC);
    put32(l->mine + 4, (uint32_t)m->rank);
    put32(l->mine + 8, (uint32_t)m->world);
    put32(l->mine + 12, (uint32_t)port);
    if (random_bytes(l->mine + 16, NONCE, err))
        return -1;
    l->deadline = tfm_now() + m->hello_timeout;
    if (send(fd, l->mine, HELLO, MSG_NOSIGNAL | MSG_DONTWAIT) != HELLO)
        return tfm_fail(err, "%s", strerror(errno ? errno : EPIPE));
    return 0;
}

/* Read what has come on l: 0 while the hello goes on, 1 once done, -1 with why (a
 * connecting side: also when the other side fails to prove the secret). */
static int link_step(const struct meet *m, struct link *l, char *why, size_t cap)
{
    size_t want = l->client && l->have < HELLO ? HELLO : HELLO + MAC;
    ssize_t k = recv(l->fd, l->in + l->have, want - l->have, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (k <= 0) {
        if (k < 0)
            snprintf(why, cap, "%s", strerror(errno));
        else if (l->client && l->have >= HELLO)
            snprintf(why, cap, "it refused this process's proof of the run's secret (%s)",
                     m->token ? "is TFM_RUN_TOKEN the same for every process?"
                              : "is the rendezvous file another run's?");
        else if (!l->client && l->have >= HELLO && get32(l->in + 4) == 0)
            /* no process 0 of a run connects anywhere but to the process 0 whose file it
             * found where it was to write its own (rv_free): it looked, and left */
            snprintf(why, cap, "another process 0 (another run's, or one given this "
                     "run's TFM_RANK 0 too), which found this run's rendezvous file in use "
                     "and left it alone");
        else
            snprintf(why, cap, "it closed the connection %s", l->have ? "in the middle of its "
                     "hello" : l->client ? "before its hello" : "without a hello");
        return -1;
    }
    l->have += (size_t)k;
    if (l->have >= 4 && get32(l->in) != HELLO_MAGIC) {
        snprintf(why, cap, l->client ? "it is not a tfm-train process" : "not a tfm-train hello");
        return -1;
    }
    if (l->have < want)
        return 0;
    if (l->client && l->have == HELLO) {            /* the other's hello: our proof */
        unsigned char mac[MAC];
        proof(m, "client", l, mac);
        if (send(l->fd, mac, MAC, MSG_NOSIGNAL | MSG_DONTWAIT) != MAC) {
            snprintf(why, cap, "%s", strerror(errno ? errno : EPIPE));
            return -1;
        }
        l->deadline = tfm_now() + m->hello_timeout;
        return 0;
    }
    if (!proven(m, l)) {
        snprintf(why, cap, "it did not prove the run's secret");
        return -1;
    }
    if (!l->client) {                               /* proven: ours in return */
        unsigned char mac[MAC];
        proof(m, "server", l, mac);
        if (send(l->fd, mac, MAC, MSG_NOSIGNAL | MSG_DONTWAIT) != MAC) {
            snprintf(why, cap, "%s", strerror(errno ? errno : EPIPE));
            return -1;
        }
    }
    l->done = 1;
    return 1;
}

static void note(const struct meet *m, const struct link *l, const char *why)
{
    if (!m->watch || !m->watch->notes)
        return;
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &l->addr.sin_addr, ip, sizeof ip);
    fprintf(m->watch->notes, "%s%sdropped a connection from %s:%d: %s\n",
            m->watch->prog ? m->watch->prog : "", m->watch->prog ? ": " : "", ip,
            ntohs(l->addr.sin_port), why);
    fflush(m->watch->notes);
}

/* The hellos of this process: accept connections on lfd (-1: none) and run the hello with
 * each, several at a time, until one process of each rank lo .. hi has proven the secret
 * (got[rank - lo]); and take the hello on the connection this process opened, *out (NULL:
 * none), to its end.  A connection that fails its hello, sends nothing for
 * TFM_JOIN_TIMEOUT seconds or is not a tfm-train process is dropped and noted; one that
 * proves the secret but says it is another process than expected ends the meeting (two
 * processes with one rank, or runs of other sizes).  -1 with err when the rendezvous time
 * runs out, the stop flag is set, out fails (its messages then start with out_name, when
 * not NULL) or such a process comes. */
static int meet_run(const struct meet *m, int lfd, int lo, int hi, struct peer *got,
                    struct link *out, const char *out_name, struct tfm_error *err)
{
    struct link pend[PENDING_MAX];
    int np = 0, need = lfd >= 0 ? hi - lo + 1 : 0, joined = 0, rc = 0;
    char why[512];
    const char *pre = out_name ? out_name : "", *sep = out_name ? ": " : "";
    for (int i = 0; i < need; i++)
        got[i].fd = -1;
    while (rc == 0 && (joined < need || (out && !out->done))) {
        double now = tfm_now(), next = now + SLICE;
        if (stopped(m->watch ? m->watch->stop : NULL)) {
            if (joined == need)
                rc = tfm_fail(err, "%s%sstopped by a signal in the hello", pre, sep);
            else if (m->rank != 0)
                rc = tfm_fail(err, "stopped by a signal while waiting for process %d", lo);
            else
                rc = tfm_fail(err, "stopped by a signal while %d of %d processes had joined",
                              joined + 1, m->world);
            break;
        }
        if (m->rv && joined < need && now >= m->rv->next && rv_watch(m, joined, err)) {
            rc = -1;
            break;
        }
        if (m->rv && joined < need && m->rv->next < next)
            next = m->rv->next;
        if (joined < need && now > m->deadline) {
            if (m->rank != 0)
                rc = tfm_fail(err, "no link from process %d within %g s "
                              "(TFM_RENDEZVOUS_TIMEOUT)", lo, m->timeout);
            else {
                /* which did not: on a cluster, where to look (a node whose process failed
                 * before it came, or never started) */
                char miss[200] = "";
                int nmiss = 0, len = 0;
                for (int i = 0; i < need; i++) {
                    if (got[i].fd >= 0)
                        continue;
                    if (nmiss++ < 8 && len < (int)sizeof miss)
                        len += snprintf(miss + len, sizeof miss - (size_t)len, "%s%d",
                                        nmiss > 1 ? ", " : "", lo + i);
                }
                char more[32] = "";
                if (nmiss > 8)
                    snprintf(more, sizeof more, " and %d more", nmiss - 8);
                rc = tfm_fail(err, "%d of %d processes joined within %g s "
                              "(TFM_RENDEZVOUS_TIMEOUT): not process%s %s%s", joined + 1,
                              m->world, m->timeout, nmiss > 1 ? "es" : "", miss, more);
            }
            break;
        }
        for (int i = 0; i < np; i++) {
            if (now <= pend[i].deadline) {
                next = pend[i].deadline < next ? pend[i].deadline : next;
                continue;
            }
            snprintf(why, sizeof why, pend[i].have ? "its hello was not complete within %g s "
                     "(TFM_JOIN_TIMEOUT)" : "it sent no hello within %g s (TFM_JOIN_TIMEOUT)",
                     m->hello_timeout);
            note(m, &pend[i], why);
            close(pend[i].fd);
            pend[i--] = pend[--np];
        }
        if (out && !out->done && now > out->deadline) {
            rc = tfm_fail(err, "%s%sit said nothing for %g s (TFM_JOIN_TIMEOUT)", pre, sep,
                          m->hello_timeout);
            break;
        }
        struct pollfd pf[PENDING_MAX + 2];
        int n = 0, at_l = -1, at_out = -1;
        if (lfd >= 0 && joined < need) {
            at_l = n;
            pf[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
        }
        for (int i = 0; i < np; i++)
            pf[n++] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
        if (out && !out->done) {
            at_out = n;
            pf[n++] = (struct pollfd){.fd = out->fd, .events = POLLIN};
        }
        if (poll(pf, (nfds_t)n, slice_ms(next - now)) <= 0)
            continue;
        if (at_out >= 0 && pf[at_out].revents) {
            if (link_step(m, out, why, sizeof why) < 0) {
                rc = tfm_fail(err, "%s%s%s", pre, sep, why);
                break;
            }
        }
        /* the waiting connections, newest first, so that removing one moves none unseen */
        for (int i = np - 1; i >= 0; i--) {
            if (!pf[(at_l >= 0) + i].revents)
                continue;
            struct link *l = &pend[i];
            int k = link_step(m, l, why, sizeof why);
            if (k == 0)
                continue;
            if (k < 0) {
                note(m, l, why);
                close(l->fd);
                pend[i] = pend[--np];
                continue;
            }
            uint32_t r = get32(l->in + 4), w = get32(l->in + 8);
            /* a process of another run that shares the rendezvous file looks the same */
            const char *shared = m->rv ? ", and every run a TFM_RENDEZVOUS file of its own "
                                         "(the processes of two runs that share one meet "
                                         "at one process 0)" : "";
            if (w != (uint32_t)m->world)
                rc = tfm_fail(err, "process %u says the run has %u processes, this one %d: "
                              "give every process the same TFM_WORLD_SIZE%s", r, w, m->world,
                              shared);
            else if (r < (uint32_t)lo || r > (uint32_t)hi)
                rc = tfm_fail(err, "process %d: a connection from process %u of %d, not from "
                              "process %d", m->rank, r, m->world, lo);
            else if (got[r - (uint32_t)lo].fd >= 0)
                rc = tfm_fail(err, "two processes say they are process %u of %d: give each "
                              "its own TFM_RANK%s", r, m->world, shared);
            if (rc) {
                close(l->fd);
                pend[i] = pend[--np];
                break;
            }
            got[r - (uint32_t)lo] = (struct peer){l->fd, l->addr.sin_addr.s_addr,
                                                  htons((uint16_t)get32(l->in + 12))};
            joined++;
            pend[i] = pend[--np];
        }
        if (rc || at_l < 0 || !pf[at_l].revents)
            continue;
        struct link *l = &pend[np];
        if (np == PENDING_MAX) {                /* full: one of them makes room */
            note(m, &pend[0], "too many connections in their hello at once");
            close(pend[0].fd);
            pend[0] = pend[--np];
            l = &pend[np];
        }
        socklen_t len = sizeof l->addr;
        struct sockaddr_in a;
        int fd = accept4(lfd, (struct sockaddr *)&a, &len, SOCK_CLOEXEC);
        if (fd < 0) {       /* a connection's own failure (ECONNABORTED, ...) is not ours */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                rc = tfm_fail(err, "accepting process connections: %s", strerror(errno));
            continue;
        }
        struct tfm_error e;
        int bad = link_start(m, l, fd, 0, 0, &e);
        l->addr = a;
        if (bad) {
            note(m, l, e.msg);
            close(fd);
            continue;
        }
        np++;
    }
    for (int i = 0; i < np; i++)
        close(pend[i].fd);
    if (rc)
        for (int i = 0; i < need; i++)
            if (got[i].fd >= 0)
                close(got[i].fd);
    return rc;
}

/* Where process 0 listens: TFM_MASTER_ADDR and TFM_MASTER_PORT, or the file named by
 * TFM_RENDEZVOUS ("HOST PORT SECRET", written by process 0 once it listens). */
struct where {
    char host[256];
    int port;           /* 0: any (process 0 with a file) */
    const char *file;
    const char *addr;   /* TFM_MASTER_ADDR: process 0 listens there only */
};

/* An environment variable, NULL when unset or empty (as an exported "X=" of a script that
 * meant to leave it out). */
static const char *env_value(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* TFM_MASTER_PORT's value port into *p: 1 to 65535, or -1 with err. */
static int env_port(const char *port, int *p, struct tfm_error *err)
{
    long long v;
    if (tfm_parse_int(port, &v) || v < 1 || v > 65535)
        return tfm_fail(err, "environment TFM_MASTER_PORT='%s': not a port", port);
    *p = (int)v;
    return 0;
}

/* TFM_RUN_TOKEN's value token: SECRET_MIN to SECRET_MAX characters, or -1 with err. */
static int token_check(const char *token, struct tfm_error *err)
{
    size_t n = strlen(token);
    if (n < SECRET_MIN || n > SECRET_MAX)
        return tfm_fail(err, "TFM_RUN_TOKEN: %zu characters, %d at least and %d at most", n,
                        SECRET_MIN, SECRET_MAX);
    return 0;
}

static int where_from_env(struct where *w, struct tfm_error *err)
{
    memset(w, 0, sizeof *w);
    /* one reading of each, for process 0's listening and the others' connecting alike: an
     * empty TFM_MASTER_ADDR had process 0 listen on every interface and the others look
     * for a host named "" */
    const char *addr = env_value("TFM_MASTER_ADDR"), *port = env_value("TFM_MASTER_PORT");
    w->file = getenv("TFM_RENDEZVOUS");
    w->addr = addr;
    if (addr && port) {
        if (env_port(port, &w->port, err))
            return -1;
        snprintf(w->host, sizeof w->host, "%s", addr);
        w->file = NULL;
        return 0;
    }
    if (w->file && *w->file)
        return 0;
    if (addr || port)
        return tfm_fail(err, "environment: %s is set but %s is not (or is empty): process 0 "
                        "listens at an address and a port", addr ? "TFM_MASTER_ADDR" :
                        "TFM_MASTER_PORT", addr ? "TFM_MASTER_PORT" : "TFM_MASTER_ADDR");
    return tfm_fail(err, "several processes need to find process 0: set TFM_MASTER_ADDR and "
                    "TFM_MASTER_PORT, or TFM_RENDEZVOUS to a file on a shared file system");
}

/* A listening socket on address ip (network order; INADDR_ANY: every interface) and port
 * (0: a free one, then in *port). */
static int listen_on(uint32_t ip, int want, int *port, struct tfm_error *err)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
    if (fd < 0)
        return tfm_fail(err, "socket: %s", strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)want),
                            .sin_addr.s_addr = ip};
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 128) ||
        getsockname(fd, (struct sockaddr *)&a, &len)) {
        int e = errno;
        char host[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &ip, host, sizeof host);
        tfm_fail(err, "listening on %s:%d: %s", host, want, strerror(e));
        close(fd);
        errno = e;          /* for the caller's own words on it */
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* The IPv4 address of host, in network order. */
static int resolve(const char *host, uint32_t *ip, char *why, size_t cap)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    int e = getaddrinfo(host, NULL, &hints, &ai);
    if (e) {
        snprintf(why, cap, "%s: %s", host, gai_strerror(e));
        return -1;
    }
    *ip = ((struct sockaddr_in *)(void *)ai->ai_addr)->sin_addr.s_addr;
    freeaddrinfo(ai);
    return 0;
}

/* Write line to the rendezvous file path: to a new file of a name no one can guess,
 * created with O_EXCL and O_NOFOLLOW and readable by this user only, then renamed into
 * place (a link planted at either name is never followed).  0, or -1 with why. */
static int rv_write(const char *path, const char *line, char *why, size_t cap)
{
    char tmp[4096];
    unsigned char r[8];
    struct tfm_error e;
    if (random_bytes(r, sizeof r, &e)) {
        snprintf(why, cap, "%.300s", e.msg);
        return -1;
    }
    if (snprintf(tmp, sizeof tmp, "%s.%02x%02x%02x%02x%02x%02x%02x%02x.tmp", path, r[0],
                 r[1], r[2], r[3], r[4], r[5], r[6], r[7]) >= (int)sizeof tmp) {
        snprintf(why, cap, "path too long");
        return -1;
    }
    size_t n = strlen(line);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(why, cap, "cannot create %.300s: %s", tmp, strerror(errno));
        return -1;
    }
    int bad = write(fd, line, n) != (ssize_t)n;
    int err = errno;
    if (close(fd) || bad || rename(tmp, path)) {
        err = bad ? err : errno;
        unlink(tmp);
        snprintf(why, cap, "%s", strerror(err));
        return -1;
    }
    return 0;
}

/* Process 0's file: "HOST PORT SECRET" ("-" for the secret when it is TFM_RUN_TOKEN's),
 * kept in m->rv for rv_watch. */
static int publish(const struct meet *m, const struct where *w, int port,
                   struct tfm_error *err)
{
    char host[256];
    if (gethostname(host, sizeof host))
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    int n = snprintf(m->rv->line, sizeof m->rv->line, "%s %d %s\n", w->addr ? w->addr : host,
                     port, m->token ? "-" : m->secret);
    if (n < 0 || n >= (int)sizeof m->rv->line)
        return tfm_fail(err, "TFM_MASTER_ADDR: too long");
    m->rv->path = w->file;
    m->rv->next = tfm_now() + RV_CHECK;
    char why[512];
    if (rv_write(w->file, m->rv->line, why, sizeof why))
        return tfm_fail(err, "TFM_RENDEZVOUS %s: %s", w->file, why);
    return 0;
}

/* What the file path holds, up to cap - 1 bytes, as a string: 1; 0 when there is no such
 * file; -1 with errno when it cannot be read (ELOOP: a symbolic link). */
static int rv_read(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    ssize_t k = read(fd, buf, cap - 1);
    int e = errno;
    close(fd);
    if (k < 0) {
        errno = e;
        return -1;
    }
    buf[k] = 0;
    return 1;
}

/* The rendezvous file, when it is process 0's for this run: a regular file of this user's
 * that no one else may read or write, holding "HOST PORT SECRET".  1 when read; 0 with
 * why when not (yet), and *missing set when there is no such file (missing may be NULL). */
static int read_where(const char *path, struct where *w, char *secret, size_t cap, char *why,
                      size_t whycap, int *missing)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (missing)
        *missing = fd < 0 && errno == ENOENT;
    if (fd < 0 && errno == ENOENT) {
        /* process 0 writes the file, never its directory: one missing is no wait's end */
        char dir[4096];
        const char *slash = strrchr(path, '/');
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1,
                 slash ? path : ".");
        struct stat st;
        if (stat(dir, &st) && errno == ENOENT)
            snprintf(why, whycap, "no directory %.400s here", dir);
        else
            snprintf(why, whycap, "not written yet");
        return 0;
    }
    if (fd < 0) {
        snprintf(why, whycap, "%s", errno == ELOOP ? "a symbolic link: ignored" :
                 strerror(errno));
        return 0;
    }
    struct stat st;
    char buf[1024], host[256], sec[SECRET_MAX + 2], nl = 0;
    ssize_t k = -1;
    int port = 0, ok = 0;
    if (fstat(fd, &st))
        snprintf(why, whycap, "%s", strerror(errno));
    else if (!S_ISREG(st.st_mode))
        snprintf(why, whycap, "not a regular file: ignored");
    else if (st.st_uid != geteuid())
        snprintf(why, whycap, "user %ld's, not this user's (%ld): ignored", (long)st.st_uid,
                 (long)geteuid());
    else if (st.st_mode & 077)
        snprintf(why, whycap, "mode %o, not 600: ignored (process 0 makes it for its user "
                 "alone)", (unsigned)(st.st_mode & 0777));
    else if ((k = read(fd, buf, sizeof buf - 1)) < 0)
        snprintf(why, whycap, "%s", strerror(errno));
    else {
        buf[k] = 0;
        ok = sscanf(buf, "%255s %d %257s%c", host, &port, sec, &nl) == 4 && nl == '\n' &&
             port > 0 && port < 65536 && strlen(sec) <= SECRET_MAX && strlen(sec) < cap;
        if (!ok)
            snprintf(why, whycap, "not HOST PORT SECRET: ignored");
    }
    close(fd);
    if (!ok)
        return 0;
    snprintf(w->host, sizeof w->host, "%s", host);
    w->port = port;
    snprintf(secret, cap, "%s", sec);
    return 1;
}

/* A connection to ip:port (network order) before the deadline: fd, -1 with why, or -2
 * when the deadline passes or the stop flag is set first (why untouched). */
static int connect_within(uint32_t ip, uint16_t port, double deadline,
                          volatile sig_atomic_t *stop, char *why, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(why, cap, "socket: %s", strerror(errno));
        return -1;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = port, .sin_addr.s_addr = ip};
    int e = connect(fd, (struct sockaddr *)&a, sizeof a) ? errno : 0;
    while (e == EINPROGRESS) {
        double left = deadline - tfm_now();
        if (left <= 0 || stopped(stop)) {
            close(fd);
            return -2;
        }
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        if (poll(&pf, 1, slice_ms(left)) > 0) {
            socklen_t len = sizeof e;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len);
        }
    }
    if (e) {
        snprintf(why, cap, "%s", strerror(e));
        close(fd);
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

/* Process 0, before it writes the rendezvous file: 0 when the file at path is free to be
 * replaced, as none is there, or it is no rendezvous file of this user, or that of a run
 * that has ended (whose process 0, killed, could not remove it) or started its training
 * (at its address no tfm-train process answers within TFM_JOIN_TIMEOUT).  -1 with err when
 * another run's process 0 answers there: it waits on the file for its processes, which
 * would come to this one instead. */
static int rv_free(const struct meet *m, const char *path, struct tfm_error *err)
{
    struct where o;
    char secret[SECRET_MAX + 1], why[512];
    uint32_t ip;
    memset(&o, 0, sizeof o);
    if (!read_where(path, &o, secret, sizeof secret, why, sizeof why, NULL) ||
        resolve(o.host, &ip, why, sizeof why))
        return 0;
    volatile sig_atomic_t *stop = m->watch ? m->watch->stop : NULL;
    double deadline = tfm_now() + m->hello_timeout;
    int fd = connect_within(ip, htons((uint16_t)o.port), deadline, stop, why, sizeof why);
    if (fd < 0)
        return 0;
    /* this process's hello, which says process 0 (rank 0 never connects in a run), then
     * the other side's, which its process 0 sends as soon as it accepts */
    struct link l;
    struct tfm_error e;
    if (link_start(m, &l, fd, 1, 0, &e) == 0)
        while (l.have < HELLO && tfm_now() < deadline && !stopped(stop)) {
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            if (poll(&pf, 1, slice_ms(deadline - tfm_now())) <= 0)
                continue;
            ssize_t k = recv(fd, l.in + l.have, HELLO - l.have, MSG_DONTWAIT);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                break;
            if (k > 0)
                l.have += (size_t)k;
        }
    close(fd);
    if (l.have < 12 || get32(l.in) != HELLO_MAGIC)
        return 0;
    return tfm_fail(err, "TFM_RENDEZVOUS %s: another process 0 waits on this file for its %u "
                    "processes, at %s:%d: give every run a file of its own (or end that run "
                    "first), and only one process TFM_RANK 0", path, get32(l.in + 8), o.host,
                    o.port);
}

/* Process 0 while the others join (meet_run, every RV_CHECK seconds): its rendezvous file
 * must still be there, or the others cannot find it.  One removed is written again; one
 * replaced, by another run's process 0 that was given the same file (or by anything else),
 * ends the run, as the others now go to that process 0.  0, or -1 with err. */
static int rv_watch(const struct meet *m, int joined, struct tfm_error *err)
{
    struct rv_file *f = m->rv;
    char buf[RV_LINE];
    f->next = tfm_now() + RV_CHECK;
    int k = rv_read(f->path, buf, sizeof buf);
    if (k > 0 && !strcmp(buf, f->line))
        return 0;
    if (k == 0) {
        char why[512];
        if (rv_write(f->path, f->line, why, sizeof why) == 0)
            return 0;
        return tfm_fail(err, "TFM_RENDEZVOUS %s: removed while %d of %d processes had joined, "
                        "and it cannot be written again (%s), so the others cannot find "
                        "process 0", f->path, joined + 1, m->world, why);
    }
    char host[256] = "";
    int port = 0;
    if (k < 0 && errno == ELOOP)
        snprintf(buf, sizeof buf, "a symbolic link");
    else if (k < 0)
        snprintf(buf, sizeof buf, "%s", strerror(errno));
    else if (sscanf(buf, "%255s %d", host, &port) == 2 && port > 0 && port < 65536)
        return tfm_fail(err, "TFM_RENDEZVOUS %s: another run's process 0 (at %s:%d) wrote its "
                        "own rendezvous file over this run's while %d of %d processes had "
                        "joined: give every run a file of its own", f->path, host, port,
                        joined + 1, m->world);
    else
        snprintf(buf, sizeof buf, "something else than HOST PORT SECRET");
    return tfm_fail(err, "TFM_RENDEZVOUS %s: replaced by %s while %d of %d processes had "
                    "joined, so the others cannot find process 0", f->path, buf, joined + 1,
                    m->world);
}

/* Sleep for s seconds, or less when the stop flag is set. */
static void nap(double s, volatile sig_atomic_t *stop)
{
    for (double end = tfm_now() + s; !stopped(stop) && tfm_now() < end;) {
        struct timespec t = {0, 20000000};
        nanosleep(&t, NULL);
    }
}

/* Another process: connect to process 0 and prove the secret, retrying (the file read
 * again each time: process 0 may write it later, or it may still be an earlier run's)
 * until the rendezvous time runs out.  Processes 2 and up first listen, for their
 * predecessor in the chain, on the address they reach process 0 from (*lfd, *lport).
 * The connection to process 0, or -1 with err. */
static int meet_process0(struct meet *m, const struct where *w0, int *lfd, int *lport,
                         struct tfm_error *err)
{
    volatile sig_atomic_t *stop = m->watch ? m->watch->stop : NULL;
    /* seen: where the file last named process 0, and last what came of it */
    char why[512] = "", where[300], secret[SECRET_MAX + 1], seen[300] = "", last[512] = "";
    for (;;) {
        struct where w = *w0;
        int missing = 0;
        int ready = !w.file || read_where(w.file, &w, secret, sizeof secret, why, sizeof why,
                                          &missing);
        snprintf(where, sizeof where, "%s:%d", w.host, w.port);
        if (ready && w.file && strcmp(seen, where)) {
            snprintf(seen, sizeof seen, "%s", where);
            last[0] = 0;
        }
        if (ready && w.file && !m->token) {
            if (!strcmp(secret, "-"))
                return tfm_fail(err, "%s: process 0 has TFM_RUN_TOKEN: set it for this "
                                "process too", w.file);
            if (strlen(secret) < SECRET_MIN) {
                snprintf(why, sizeof why, "a secret shorter than %d characters: ignored",
                         SECRET_MIN);
                ready = 0;
            }
            snprintf(m->secret, sizeof m->secret, "%s", secret);
        }
        uint32_t ip;
        if (ready && resolve(w.host, &ip, why, sizeof why) == 0) {
            int fd = connect_within(ip, htons((uint16_t)w.port), m->deadline, stop, why,
                                    sizeof why);
            if (fd >= 0 && m->rank >= 2 && *lfd < 0) {
                struct sockaddr_in me;
                socklen_t len = sizeof me;
                if (getsockname(fd, (struct sockaddr *)&me, &len))
                    tfm_fail(err, "getsockname: %s", strerror(errno));
                else if ((*lfd = listen_on(me.sin_addr.s_addr, 0, lport, err)) < 0)
                    tfm_error_prefix(err, "process %d, for process %d", m->rank, m->rank - 1);
                if (*lfd < 0) {
                    close(fd);
                    return -1;
                }
            }
            if (fd >= 0) {
                struct link l;
                struct tfm_error e;
                int rc = link_start(m, &l, fd, 1, *lport, &e);
                if (rc == 0)
                    rc = meet_run(m, -1, 0, -1, NULL, &l, NULL, &e);
                if (rc == 0) {
                    if (get32(l.in + 4) != 0 || get32(l.in + 8) != (uint32_t)m->world) {
                        close(fd);
                        return tfm_fail(err, "process 0 at %s says it is process %u of %u, this "
                                        "process one of %d: give every process the same "
                                        "TFM_WORLD_SIZE", where, get32(l.in + 4),
                                        get32(l.in + 8), m->world);
                    }
                    return fd;
                }
                close(fd);
                if (stopped(stop))
                    return tfm_fail(err, "stopped by a signal while waiting for process 0 at "
                                    "%s", w.file ? w.file : where);
                snprintf(last, sizeof last, "%.300s", e.msg);
                if (w.file)
                    snprintf(why, sizeof why, "%.200s: %.300s", where, e.msg);
                else
                    snprintf(why, sizeof why, "%.500s", e.msg);
                nap(0.5, stop);     /* a hello that failed: not ten times a second */
            } else if (fd == -1 && w.file) {
                snprintf(last, sizeof last, "%.300s", why);
                char c[sizeof why];
                snprintf(c, sizeof c, "%.200s: %.300s", where, why);
                snprintf(why, sizeof why, "%s", c);
            }
        }
        if (stopped(stop))
            return tfm_fail(err, "stopped by a signal while waiting for process 0 at %s",
                            w.file ? w.file : where);
        if (tfm_now() > m->deadline && missing && seen[0])
            /* process 0 removes its file once all have joined: all did, this one not */
            return tfm_fail(err, "no process 0 at %s within %g s (TFM_RENDEZVOUS_TIMEOUT): the "
                            "file named one at %s%s%.300s%s, then was removed, as process 0 "
                            "does once all its processes have joined, this one not among them "
                            "(two runs given one TFM_RENDEZVOUS, or two processes one "
                            "TFM_RANK?)", w.file, m->timeout, seen, last[0] ? " (" : "", last,
                            last[0] ? ")" : "");
        if (tfm_now() > m->deadline)
            return tfm_fail(err, "no process 0 at %s within %g s (TFM_RENDEZVOUS_TIMEOUT): %s",
                            w.file ? w.file : where, m->timeout, why);
        nap(0.1, stop);
    }
}

/* Process 0's word on this process's successor, sent once all have joined: n bytes from
 * fd before the rendezvous time runs out.  0, or -1 with err. */
static int read_next(const struct meet *m, int fd, void *p, size_t n, struct tfm_error *err)
{
    volatile sig_atomic_t *stop = m->watch ? m->watch->stop : NULL;
    char *s = p;
    while (n > 0) {
        if (stopped(stop))
            return tfm_fail(err, "stopped by a signal while waiting for the others to join");
        double left = m->deadline - tfm_now();
        if (left <= 0)
            return tfm_fail(err, "the processes did not all join within %g s "
                            "(TFM_RENDEZVOUS_TIMEOUT)", m->timeout);
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, slice_ms(left)) <= 0)
            continue;
        ssize_t k = recv(fd, s, n, MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            continue;
        if (k <= 0)
            return tfm_fail(err, "process 0 left the run before all had joined (see its "
                            "messages)");
        s += k;
        n -= (size_t)k;
    }
    return 0;
}

static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Process 0: every other process joins and learns where its successor listens (NEXT_MAGIC,
 * address, port). */
static int gather(struct tfm_comm *c, struct meet *m, const struct where *w,
                  struct tfm_error *err)
{
    int world = c->n, port = 0;
    uint32_t ip = htonl(INADDR_ANY);
    char why[512];
    struct rv_file rv = {0};
    if (w->addr && resolve(w->addr, &ip, why, sizeof why))
        return tfm_fail(err, "TFM_MASTER_ADDR=%s", why);
    if (w->file && rv_free(m, w->file, err))
        return -1;
    m->rv = w->file ? &rv : NULL;
    int lfd = listen_on(ip, w->port, &port, err);
    if (lfd < 0 && w->addr && errno == EADDRNOTAVAIL)
        tfm_error_prefix(err, "TFM_MASTER_ADDR=%s is no address of this machine, where "
                         "process 0 runs", w->addr);
    else if (lfd < 0 && w->port && errno == EADDRINUSE)
        /* the others would knock at whatever holds it: another run's process 0, maybe */
        tfm_error_prefix(err, "TFM_MASTER_PORT=%d is taken on this machine (by another run, "
                         "another program, or another process given TFM_RANK 0): give the run "
                         "a free port", w->port);
    if (lfd < 0 || (w->file && publish(m, w, port, err))) {
        if (lfd >= 0)
            close(lfd);
        m->rv = NULL;
        return -1;
    }
    struct peer *got = calloc((size_t)world, sizeof *got);
    int bad = !got ? tfm_fail(err, "out of memory")
                   : meet_run(m, lfd, 1, world - 1, got, NULL, NULL, err);
    close(lfd);
    /* this run's file, not another's written over it (rv_watch) */
    char now[RV_LINE];
    if (w->file && rv.path && rv_read(w->file, now, sizeof now) > 0 && !strcmp(now, rv.line))
        unlink(w->file);
    m->rv = NULL;
    for (int p = 1; p < world && !bad; p++) {
        c->fd[p] = got[p - 1].fd;
        nodelay(c->fd[p]);
    }
    for (int p = 1; p < world && !bad; p++) {
        uint32_t next[3] = {NEXT_MAGIC, p + 1 < world ? got[p].ip : 0,
                            p + 1 < world ? got[p].port : 0};
        bad = send_all(c, p, next, sizeof next, err);
    }
    for (int p = 2; p < world; p++)                 /* keep the link to process 1 only */
        if (c->fd[p] >= 0) {
            close(c->fd[p]);
            c->fd[p] = -1;
        }
    free(got);
    return bad ? -1 : 0;
}

/* Another process: join process 0, then link to its neighbours in the chain: the hello
 * with its successor and the one with its predecessor (process 2 and up) at once. */
static int join(struct tfm_comm *c, struct meet *m, const struct where *w,
                struct tfm_error *err)
{
    int rank = c->rank, world = c->n, lport = 0, lfd = -1, rc = -1;
    uint32_t next[3];
    int fd0 = meet_process0(m, w, &lfd, &lport, err);
    if (fd0 < 0)
        goto out;
    c->fd[0] = fd0;
    nodelay(fd0);
    if (read_next(m, fd0, next, sizeof next, err))
        goto out;
    if (next[0] != NEXT_MAGIC) {
        tfm_fail(err, "process 0 answered with a bad message");
        goto out;
    }
    struct link succ;
    char name[128];
    if (rank + 1 < world) {
        char why[256], host[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &next[1], host, sizeof host);
        snprintf(name, sizeof name, "process %d at %s:%d", rank + 1, host,
                 ntohs((uint16_t)next[2]));
        int fd = connect_within(next[1], (uint16_t)next[2], m->deadline,
                                m->watch ? m->watch->stop : NULL, why, sizeof why);
        if (fd < 0) {
            tfm_fail(err, "%s: %s", name, fd == -1 ? why : stopped(m->watch ? m->watch->stop
                     : NULL) ? "stopped by a signal" : "no answer within TFM_RENDEZVOUS_TIMEOUT");
            goto out;
        }
        c->fd[rank + 1] = fd;
        nodelay(fd);
        if (link_start(m, &succ, fd, 1, 0, err)) {
            tfm_error_prefix(err, "%s", name);
            goto out;
        }
    }
    struct peer pred;
    if (meet_run(m, rank >= 2 ? lfd : -1, rank - 1, rank - 1, &pred,
                 rank + 1 < world ? &succ : NULL, name, err))
        goto out;
    if (rank + 1 < world &&
        (get32(succ.in + 4) != (uint32_t)rank + 1 || get32(succ.in + 8) != (uint32_t)world)) {
        tfm_fail(err, "process %d: its successor says it is process %u of %u", rank,
                 get32(succ.in + 4), get32(succ.in + 8));
        goto out;
    }
    if (rank >= 2) {                    /* the predecessor's link; process 0's is not needed */
        close(fd0);
        c->fd[0] = -1;
        c->fd[rank - 1] = pred.fd;
        nodelay(pred.fd);
    }
    rc = 0;
out:
    if (lfd >= 0)
        close(lfd);
    return rc;
}

int tfm_dist_env_seconds(const char *name, double dflt, double *out, struct tfm_error *err)
{
    const char *v = getenv(name);
    *out = dflt;
    if (!v || !*v)
        return 0;
    double s;
    if (tfm_parse_double(v, &s) || !(s > 0) || s > 1e7)
        return tfm_fail(err, "%s=%s: not a number of seconds in (0, 1e7]", name, v);
    *out = s;
    return 0;
}

int tfm_dist_env_bucket_mb(double *mb, struct tfm_error *err)
{
    const char *v = getenv("TFM_BUCKET_MB");
    *mb = 25;
    if (v && *v && (tfm_parse_double(v, mb) || !(*mb > 0) || *mb > 65536))
        return tfm_fail(err, "TFM_BUCKET_MB=%s: not a size in megabytes in (0, 65536]", v);
    return 0;
}

int tfm_dist_env_check(struct tfm_error *err)
{
    static const char *const limits[] = {"TFM_RENDEZVOUS_TIMEOUT", "TFM_JOIN_TIMEOUT",
                                         "TFM_COLLECTIVE_TIMEOUT", "TFM_STOP_TIMEOUT"};
    double x;
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++)
        if (tfm_dist_env_seconds(limits[i], 1, &x, err))
            return -1;
    if (tfm_dist_env_bucket_mb(&x, err))
        return -1;
    const char *token = env_value("TFM_RUN_TOKEN"), *port = env_value("TFM_MASTER_PORT");
    int p;
    if ((token && token_check(token, err)) || (port && env_port(port, &p, err)))
        return -1;
    return 0;
}

struct tfm_comm *tfm_comm_procs(int rank, int world, const struct tfm_dist_watch *watch,
                                struct tfm_error *err)
{
    if (world < 2 || rank < 0 || rank >= world || world > TFM_DIST_MAX_WORLD) {
        tfm_fail(err, "process %d of %d", rank, world);
        return NULL;
    }
    struct where w;
    struct meet m = {.rank = rank, .world = world, .watch = watch};
    double timeout, stop_timeout;
    if (where_from_env(&w, err) ||
        tfm_dist_env_seconds("TFM_RENDEZVOUS_TIMEOUT", 300, &m.timeout, err) ||
        tfm_dist_env_seconds("TFM_JOIN_TIMEOUT", 10, &m.hello_timeout, err) ||
        tfm_dist_env_seconds("TFM_COLLECTIVE_TIMEOUT", 300, &timeout, err) ||
        tfm_dist_env_seconds("TFM_STOP_TIMEOUT", 30, &stop_timeout, err))
        return NULL;
    const char *token = getenv("TFM_RUN_TOKEN");
    if (token && *token) {
        if (token_check(token, err))
            return NULL;
        snprintf(m.secret, sizeof m.secret, "%s", token);
        m.token = 1;
    } else if (!w.file) {
        tfm_fail(err, "TFM_MASTER_ADDR and TFM_MASTER_PORT: set TFM_RUN_TOKEN too, to one "
                 "secret of %d characters or more for every process of the run", SECRET_MIN);
        return NULL;
    } else if (rank == 0) {             /* a new secret, for the rendezvous file */
        unsigned char r[32];
        if (random_bytes(r, sizeof r, err))
            return NULL;
        for (size_t i = 0; i < sizeof r; i++)
            snprintf(m.secret + 2 * i, 3, "%02x", r[i]);
    }
    m.deadline = tfm_now() + m.timeout;
    struct tfm_comm *c = tfm_comm_threads(1, err);
    if (!c)
        return NULL;
    c->procs = 1;
    c->n = world;
    c->rank = rank;
    c->timeout = timeout;
    c->stop_timeout = stop_timeout;
    c->stop = watch ? watch->stop : NULL;
    if (!(c->fd = malloc((size_t)world * sizeof *c->fd)) || !(c->chunk = malloc(CHUNK))) {
        tfm_comm_free(c);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    for (int i = 0; i < world; i++)
        c->fd[i] = -1;
    c->by_file = w.file != NULL;
    int rc = rank == 0 ? gather(c, &m, &w, err) : join(c, &m, &w, err);
    memset(m.secret, 0, sizeof m.secret);
    if (rc) {
        tfm_comm_free(c);
        return NULL;
    }
    return c;
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
