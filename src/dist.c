/* dist.c: rank placement from the environment and the all-reduce (dist.h).
 * Threads: each rank sums its own slice of the elements over all ranks' buffers in rank
 * order and writes the result to every buffer, between two barriers.
 * Processes: a chain over TCP, process p linked to p-1 and p+1 (procs_sum): the partial
 * sums go up the chain in rank order and the totals come back down, chunk by chunk, so
 * every process sends and receives about twice the buffer whatever their number, and no
 * link ever has both ends writing (the chain has no cycle).  Exact, but W hops long each
 * way; NCCL (GPUs) would replace it.  Process 0 meets the others first (the rendezvous)
 * and tells each where its successor listens.
 */
#include "dist.h"

#include <errno.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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
    e->local_rank = 0;
    snprintf(e->source, sizeof e->source, "none");
    static const char *const local[] = {"TFM_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                        "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof local / sizeof *local; i++) {
        int k = env_int(local[i], &e->local_rank, TFM_DIST_MAX_WORLD - 1, err);
        if (k < 0)
            return -1;
        if (k > 0)
            break;
    }
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
    /* processes (tfm_comm_procs): this one's rank, and fd[p] the socket to process p:
     * only the neighbours p-1 and p+1 in the chain, -1 elsewhere */
    int procs, rank, *fd;
    char *chunk;        /* one chunk from a neighbour */
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

/* ---- processes ----------------------------------------------------------------------- */

#define CHUNK (1u << 22)                    /* bytes a process sends at a time */
#define MAGIC 0x524d4654u                   /* "TFMR" */

static int lost(struct tfm_comm *c, int peer, struct tfm_error *err)
{
    if (c->aborted)
        return tfm_fail(err, "ranks stopped: %.900s", c->why);
    return tfm_fail(err, "process %d of %d left the run (see its messages)", peer, c->n);
}

/* All n bytes to (out) or from socket fd: 0, or -1 when the other end is gone. */
static int xfer(int fd, void *p, size_t n, int out)
{
    char *s = p;
    while (n > 0) {
        ssize_t k = out ? send(fd, s, n, MSG_NOSIGNAL) : recv(fd, s, n, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        s += k;
        n -= (size_t)k;
    }
    return 0;
}

static int send_all(struct tfm_comm *c, int peer, const void *p, size_t n,
                    struct tfm_error *err)
{
    return xfer(c->fd[peer], (void *)(uintptr_t)p, n, 1) ? lost(c, peer, err) : 0;
}

static int recv_all(struct tfm_comm *c, int peer, void *p, size_t n, struct tfm_error *err)
{
    return xfer(c->fd[peer], p, n, 0) ? lost(c, peer, err) : 0;
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

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Where process 0 listens: TFM_MASTER_ADDR and TFM_MASTER_PORT, or the file named by
 * TFM_RENDEZVOUS ("HOST PORT", written by process 0 once it listens). */
struct where {
    char host[256];
    int port;           /* 0: any (process 0 with a file) */
    const char *file;
};

static int where_from_env(struct where *w, struct tfm_error *err)
{
    memset(w, 0, sizeof *w);
    const char *addr = getenv("TFM_MASTER_ADDR"), *port = getenv("TFM_MASTER_PORT");
    w->file = getenv("TFM_RENDEZVOUS");
    if (addr && port) {
        char *end;
        long p = strtol(port, &end, 10);
        if (end == port || *end || p < 1 || p > 65535)
            return tfm_fail(err, "environment TFM_MASTER_PORT='%s': not a port", port);
        snprintf(w->host, sizeof w->host, "%s", addr);
        w->port = (int)p;
        w->file = NULL;
        return 0;
    }
    if (w->file && *w->file)
        return 0;
    return tfm_fail(err, "several processes need to find process 0: set TFM_MASTER_ADDR and "
                    "TFM_MASTER_PORT, or TFM_RENDEZVOUS to a file on a shared file system");
}

static int listen_on(const struct where *w, int *port, struct tfm_error *err)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0)
        return tfm_fail(err, "socket: %s", strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)w->port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 128) ||
        getsockname(fd, (struct sockaddr *)&a, &len)) {
        tfm_fail(err, "listening on port %d: %s", w->port, strerror(errno));
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static int publish(const struct where *w, int port, struct tfm_error *err)
{
    char host[256], tmp[4096];
    if (gethostname(host, sizeof host))
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    const char *addr = getenv("TFM_MASTER_ADDR");
    if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", w->file, (long)getpid()) >= (int)sizeof tmp)
        return tfm_fail(err, "TFM_RENDEZVOUS: path too long");
    FILE *f = fopen(tmp, "w");
    if (!f)
        return tfm_fail(err, "TFM_RENDEZVOUS %s: %s", tmp, strerror(errno));
    int bad = fprintf(f, "%s %d\n", addr ? addr : host, port) < 0;
    if (fclose(f) || bad || rename(tmp, w->file)) {
        unlink(tmp);
        return tfm_fail(err, "TFM_RENDEZVOUS %s: %s", w->file, strerror(errno));
    }
    return 0;
}

/* A connection to w (its file read again on every try: process 0 may write it later, or
 * it may still name an earlier run's port), retried for `timeout` seconds; `who` names the
 * process for the message. */
static int connect_to(const struct where *w0, double timeout, const char *who,
                      struct tfm_error *err)
{
    double deadline = seconds() + timeout;
    for (;;) {
        struct where w = *w0;
        int ready = 1;
        if (w.file) {
            FILE *f = fopen(w.file, "r");
            ready = f && fscanf(f, "%255s %d", w.host, &w.port) == 2;
            if (f)
                fclose(f);
        }
        if (ready) {
            char port[16];
            snprintf(port, sizeof port, "%d", w.port);
            struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
            if (getaddrinfo(w.host, port, &hints, &ai) == 0) {
                for (struct addrinfo *p = ai; p; p = p->ai_next) {
                    int fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, 0);
                    if (fd >= 0 && connect(fd, p->ai_addr, p->ai_addrlen) == 0) {
                        freeaddrinfo(ai);
                        return fd;
                    }
                    if (fd >= 0)
                        close(fd);
                }
                freeaddrinfo(ai);
            }
        }
        if (seconds() > deadline)
            return tfm_fail(err, "no %s at %s%s%s:%d after %.0f s (TFM_RENDEZVOUS_TIMEOUT)", who,
                            w.file ? w.file : "", w.file ? ": " : "",
                            w.host[0] ? w.host : "(not written yet)", w.port, timeout);
        struct timespec nap = {0, 100000000};
        nanosleep(&nap, NULL);
    }
}

/* One connection on lfd before the deadline, with its peer's address when peer is given;
 * -1 with err ("<waiting> within N s" when the time is up). */
static int accept_one(int lfd, double deadline, double timeout, struct sockaddr_in *peer,
                      const char *waiting, struct tfm_error *err)
{
    for (;;) {
        struct pollfd pf = {.fd = lfd, .events = POLLIN};
        int left = (int)((deadline - seconds()) * 1000);
        int k = left > 0 ? poll(&pf, 1, left) : 0;
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return tfm_fail(err, "%s within %.0f s (TFM_RENDEZVOUS_TIMEOUT)", waiting, timeout);
        socklen_t len = sizeof *peer;
        int fd = accept4(lfd, (struct sockaddr *)peer, peer ? &len : NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            return fd;
        if (errno != EINTR && errno != ECONNABORTED)
            return tfm_fail(err, "accepting process connections: %s", strerror(errno));
    }
}

/* A hello of n words from fd: 0, or -1 when it is not one of ours. */
static int hello_from(int fd, uint32_t *h, size_t n)
{
    return xfer(fd, h, n * sizeof *h, 0) || h[0] != MAGIC ? -1 : 0;
}

/* Process 0: every other process joins (hello: MAGIC, rank, world, the port it listens on)
 * and learns where its successor listens (MAGIC, address, port). */
static int gather(struct tfm_comm *c, const struct where *w, double deadline, double timeout,
                  struct tfm_error *err)
{
    int world = c->n, port = 0, lfd = listen_on(w, &port, err);
    if (lfd < 0 || (w->file && publish(w, port, err))) {
        if (lfd >= 0)
            close(lfd);
        return -1;
    }
    uint32_t *ip = calloc((size_t)world, sizeof *ip);
    uint16_t *lport = calloc((size_t)world, sizeof *lport);
    int bad = !ip || !lport ? tfm_fail(err, "out of memory") : 0;
    for (int joined = 1; joined < world && !bad;) {
        struct sockaddr_in peer;
        char waiting[64];
        snprintf(waiting, sizeof waiting, "%d of %d processes joined", joined, world);
        int fd = accept_one(lfd, deadline, timeout, &peer, waiting, err);
        if (fd < 0) {
            bad = -1;
            break;
        }
        uint32_t h[4];
        if (hello_from(fd, h, 4)) {                 /* not one of ours: ignore it */
            close(fd);
            continue;
        }
        if (h[2] != (uint32_t)world || h[1] == 0 || h[1] >= (uint32_t)world ||
            c->fd[h[1]] >= 0) {
            bad = tfm_fail(err, "a process says it is %u of %u; this run has %d processes%s",
                           h[1], h[2], world, h[2] == (uint32_t)world && h[1] ? ", and that "
                           "one has joined already" : "");
            close(fd);
            break;
        }
        nodelay(fd);
        c->fd[h[1]] = fd;
        ip[h[1]] = peer.sin_addr.s_addr;
        lport[h[1]] = htons((uint16_t)h[3]);
        joined++;
    }
    close(lfd);
    if (w->file)
        unlink(w->file);
    for (int p = 1; p < world && !bad; p++) {
        uint32_t next[3] = {MAGIC, p + 1 < world ? ip[p + 1] : 0, p + 1 < world ? lport[p + 1] : 0};
        bad = send_all(c, p, next, sizeof next, err);
    }
    for (int p = 2; p < world; p++)                 /* keep the link to process 1 only */
        if (c->fd[p] >= 0) {
            close(c->fd[p]);
            c->fd[p] = -1;
        }
    free(ip);
    free(lport);
    return bad ? -1 : 0;
}

/* Another process: join process 0, then link to its neighbours in the chain. */
static int join(struct tfm_comm *c, const struct where *w, double deadline, double timeout,
                struct tfm_error *err)
{
    int rank = c->rank, world = c->n, lport = 0, lfd = -1;
    struct where any = {.port = 0};
    if (rank >= 2 && (lfd = listen_on(&any, &lport, err)) < 0)
        return -1;
    uint32_t hello[4] = {MAGIC, (uint32_t)rank, (uint32_t)world, (uint32_t)lport}, next[3];
    int fd0 = connect_to(w, timeout, "process 0", err), rc = -1;
    if (fd0 < 0)
        goto out;
    c->fd[0] = fd0;
    nodelay(fd0);
    if (send_all(c, 0, hello, sizeof hello, err) || recv_all(c, 0, next, sizeof next, err))
        goto out;
    if (next[0] != MAGIC) {
        tfm_fail(err, "process 0 answered with a bad message");
        goto out;
    }
    if (rank + 1 < world) {
        struct where succ = {.port = ntohs((uint16_t)next[2])};
        char who[32];
        inet_ntop(AF_INET, &next[1], succ.host, sizeof succ.host);
        snprintf(who, sizeof who, "process %d", rank + 1);
        double left = deadline - seconds();
        int fd = connect_to(&succ, left > 0 ? left : 0, who, err);
        if (fd < 0)
            goto out;
        nodelay(fd);
        c->fd[rank + 1] = fd;
        uint32_t me[4] = {MAGIC, (uint32_t)rank, (uint32_t)world, 0};
        if (send_all(c, rank + 1, me, sizeof me, err))
            goto out;
    }
    if (rank >= 2) {                    /* the predecessor's link; process 0's is not needed */
        close(fd0);
        c->fd[0] = -1;
        uint32_t h[4];
        char waiting[64];
        snprintf(waiting, sizeof waiting, "no link from process %d", rank - 1);
        int fd = accept_one(lfd, deadline, timeout, NULL, waiting, err);
        if (fd < 0)
            goto out;
        if (hello_from(fd, h, 4) || h[1] != (uint32_t)rank - 1 || h[2] != (uint32_t)world) {
            close(fd);
            tfm_fail(err, "process %d: a connection that is not from process %d", rank,
                     rank - 1);
            goto out;
        }
        nodelay(fd);
        c->fd[rank - 1] = fd;
    }
    rc = 0;
out:
    if (lfd >= 0)
        close(lfd);
    return rc;
}

struct tfm_comm *tfm_comm_procs(int rank, int world, struct tfm_error *err)
{
    if (world < 2 || rank < 0 || rank >= world || world > TFM_DIST_MAX_WORLD) {
        tfm_fail(err, "process %d of %d", rank, world);
        return NULL;
    }
    struct where w;
    if (where_from_env(&w, err))
        return NULL;
    const char *t = getenv("TFM_RENDEZVOUS_TIMEOUT");
    double timeout = t && atof(t) > 0 ? atof(t) : 300, deadline = seconds() + timeout;
    struct tfm_comm *c = tfm_comm_threads(1, err);
    if (!c)
        return NULL;
    c->procs = 1;
    c->n = world;
    c->rank = rank;
    if (!(c->fd = malloc((size_t)world * sizeof *c->fd)) || !(c->chunk = malloc(CHUNK))) {
        tfm_comm_free(c);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    for (int i = 0; i < world; i++)
        c->fd[i] = -1;
    if (rank == 0 ? gather(c, &w, deadline, timeout, err) : join(c, &w, deadline, timeout, err)) {
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
