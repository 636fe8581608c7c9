/* test_dist_procs.c: the communicator among processes (tfm_comm_procs), with forked
 * processes on 127.0.0.1: exact sums over chains of 2 to 4 processes, buffers of several
 * chunks; the run's secret (TFM_RUN_TOKEN required with a fixed port, at least 16
 * characters, a process with another one dropped and noted, never joined); the time limits
 * on a sum (a neighbour that sends nothing is named) and the stop flag a signal sets
 * (joining ends at once; a sum gives a silent neighbour TFM_STOP_TIMEOUT, a slow one
 * that then sends still completes); the parsing of the time limits. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "dist.h"

static char dir[] = "/tmp/tfm-test-dist.XXXXXX";

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A free port of 127.0.0.1 for TFM_MASTER_PORT. */
static void free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    char port[16] = "0";
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        snprintf(port, sizeof port, "%d", ntohs(a.sin_port));
    if (fd >= 0)
        close(fd);
    setenv("TFM_MASTER_ADDR", "127.0.0.1", 1);
    setenv("TFM_MASTER_PORT", port, 1);
}

/* What process r wrote to its message file (its error, its notes): "" when nothing. */
static void message(const char *what, int r, char *out, size_t cap)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s%d", dir, what, r);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = 0;
    if (f)
        fclose(f);
}

static void say(const char *what, int r, const char *msg)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s%d", dir, what, r);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(msg, f);
        fclose(f);
    }
}

/* Run fn(rank) in world forked processes; their exit statuses in st[rank] (-1: killed). */
static void spawn(int world, int (*fn)(int rank, int world), int *st)
{
    pid_t pid[8];
    for (int r = 0; r < world; r++) {
        fflush(NULL);
        if ((pid[r] = fork()) == 0)
            _exit(fn(r, world));
    }
    for (int r = 0; r < world; r++) {
        int s = 0;
        waitpid(pid[r], &s, 0);
        st[r] = WIFEXITED(s) ? WEXITSTATUS(s) : -1;
    }
}

static volatile sig_atomic_t stop_flag;

static void on_alarm(int sig)
{
    stop_flag = sig;
}

/* SIGALRM sets stop_flag after s seconds, as SIGTERM does in tfm-train. */
static void stop_after(double s)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval t = {.it_value = {(time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6)}};
    setitimer(ITIMER_REAL, &t, NULL);
}

static struct tfm_comm *join(int rank, int world, struct tfm_error *err)
{
    char path[256];
    snprintf(path, sizeof path, "%s/notes%d", dir, rank);
    FILE *notes = fopen(path, "w");
    struct tfm_dist_watch w = {&stop_flag, notes, "test"};
    struct tfm_comm *c = tfm_comm_procs(rank, world, &w, err);
    if (notes)
        fclose(notes);
    if (!c)
        say("err", rank, err->msg);
    return c;
}

/* ---- sums ---------------------------------------------------------------------------- */

#define BIG ((1u << 21) + 7)        /* floats: two chunks of 4 MiB and a few more */

static int sums(int rank, int world)
{
    struct tfm_error err;
    struct tfm_comm *c = join(rank, world, &err);
    if (!c)
        return 2;
    float *x = malloc(BIG * sizeof *x);
    double d[5];
    if (!x)
        return 3;
    for (size_t i = 0; i < BIG; i++)
        x[i] = (float)(rank + 1) + 0.5f * (float)(i % 7);
    for (int i = 0; i < 5; i++)
        d[i] = (double)rank * 1e9 + i;
    int rc = tfm_comm_sum_f32(c, 0, x, BIG, &err) || tfm_comm_sum_f64(c, 0, d, 5, &err) ||
             tfm_comm_barrier(c, 0, &err);
    if (rc) {
        say("err", rank, err.msg);
        return 4;
    }
    int bad = 0;
    double ranks = world * (world + 1) / 2.0;
    for (size_t i = 0; i < BIG; i++)
        bad += x[i] != (float)(ranks + 0.5 * world * (double)(i % 7));
    for (int i = 0; i < 5; i++)
        bad += d[i] != 1e9 * (world - 1) * world / 2.0 + world * i;
    free(x);
    tfm_comm_free(c);
    return bad ? 5 : 0;
}

static void test_sums(void)
{
    setenv("TFM_RUN_TOKEN", "a secret of the unit test", 1);
    for (int world = 2; world <= 4; world++) {
        free_port();
        int st[8];
        spawn(world, sums, st);
        for (int r = 0; r < world; r++) {
            CHECK_EQ_INT(st[r], 0);
            if (st[r]) {
                char m[1024];
                message("err", r, m, sizeof m);
                printf("# %d processes: process %d: status %d: %s\n", world, r, st[r], m);
            }
        }
    }
}

/* ---- the secret ---------------------------------------------------------------------- */

static void test_token_required(void)
{
    struct tfm_error err;
    free_port();
    unsetenv("TFM_RUN_TOKEN");
    CHECK(tfm_comm_procs(1, 2, NULL, &err) == NULL);
    CHECK(strstr(err.msg, "TFM_MASTER_ADDR and TFM_MASTER_PORT: set TFM_RUN_TOKEN too") != NULL);
    setenv("TFM_RUN_TOKEN", "fifteen chars..", 1);
    CHECK(tfm_comm_procs(1, 2, NULL, &err) == NULL);
    CHECK_STR(err.msg, "TFM_RUN_TOKEN: 15 characters, 16 at least and 256 at most");
    /* a port is a decimal number alone: no space, no hex */
    setenv("TFM_RUN_TOKEN", "sixteen chars...", 1);
    static const char *const bad[] = {" 80", "80 ", "0x50", "+80x", "65536"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("TFM_MASTER_PORT", bad[i], 1);
        CHECK(tfm_comm_procs(1, 2, NULL, &err) == NULL);
        char want[96];
        snprintf(want, sizeof want, "environment TFM_MASTER_PORT='%s': not a port", bad[i]);
        CHECK_STR(err.msg, want);
    }
    free_port();
}

static int other_token(int rank, int world)
{
    if (rank == 1)
        setenv("TFM_RUN_TOKEN", "not the secret of process 0", 1);
    struct tfm_error err;
    struct tfm_comm *c = join(rank, world, &err);
    tfm_comm_free(c);
    return c ? 0 : 1;
}

static void test_other_token(void)
{
    free_port();
    setenv("TFM_RUN_TOKEN", "the secret of process 0", 1);
    setenv("TFM_RENDEZVOUS_TIMEOUT", "1.5", 1);
    int st[2];
    spawn(2, other_token, st);
    CHECK_EQ_INT(st[0], 1);
    CHECK_EQ_INT(st[1], 1);
    char m[1024];
    message("err", 0, m, sizeof m);
    CHECK_STR(m, "1 of 2 processes joined within 1.5 s (TFM_RENDEZVOUS_TIMEOUT): not process 1");
    message("notes", 0, m, sizeof m);
    CHECK(strncmp(m, "test: dropped a connection from 127.0.0.1:", 42) == 0);
    CHECK(strstr(m, ": it did not prove the run's secret\n") != NULL);
    message("err", 1, m, sizeof m);
    CHECK(strstr(m, "no process 0 at 127.0.0.1:") == m);
    CHECK(strstr(m, " within 1.5 s (TFM_RENDEZVOUS_TIMEOUT): it refused this process's proof "
                 "of the run's secret (is TFM_RUN_TOKEN the same for every process?)") != NULL);
    unsetenv("TFM_RENDEZVOUS_TIMEOUT");
}

/* ---- time limits and the stop flag --------------------------------------------------- */

/* Process 1 joins, then waits `late` seconds before its sum (longer: it never sums). */
static double late = 0, stop_at = 0;

static int slow_sum(int rank, int world)
{
    struct tfm_error err;
    struct tfm_comm *c = join(rank, world, &err);
    if (!c)
        return 2;
    if (rank == 1)
        usleep((useconds_t)(late * 1e6));
    else if (stop_at > 0)
        stop_after(stop_at);
    double x = 1, t0 = now_s();
    int rc = tfm_comm_sum_f64(c, 0, &x, 1, &err);
    char m[1100];
    snprintf(m, sizeof m, "%.1f %s", now_s() - t0, rc ? err.msg : "done");
    say("err", rank, m);
    tfm_comm_free(c);
    return rc ? 1 : x == 2 ? 0 : 3;
}

static void test_collective_timeout(void)
{
    free_port();
    setenv("TFM_COLLECTIVE_TIMEOUT", "0.5", 1);
    late = 1.2;
    stop_at = 0;
    int st[2];
    char m[1100];
    spawn(2, slow_sum, st);
    CHECK_EQ_INT(st[0], 1);
    message("err", 0, m, sizeof m);
    CHECK(strstr(m, " process 1 of 2 sent nothing for 0.5 s (TFM_COLLECTIVE_TIMEOUT): it "
                 "stopped, hangs, or waits for one that does") != NULL);
    double t = atof(m);
    CHECK(t >= 0.5 && t < 1.5);
    if (!(t >= 0.5 && t < 1.5))
        printf("# %s\n", m);
    unsetenv("TFM_COLLECTIVE_TIMEOUT");
}

static void test_stop_in_sum(void)
{
    int st[2];
    char m[1100];
    /* a silent neighbour: TFM_STOP_TIMEOUT after the signal, not TFM_COLLECTIVE_TIMEOUT */
    free_port();
    setenv("TFM_STOP_TIMEOUT", "0.5", 1);
    late = 1.5;
    stop_at = 0.3;
    spawn(2, slow_sum, st);
    CHECK_EQ_INT(st[0], 1);
    message("err", 0, m, sizeof m);
    CHECK(strstr(m, " stopped by a signal: process 1 of 2 sent nothing in the 0.5 s that "
                 "followed (TFM_STOP_TIMEOUT)") != NULL);
    double t = atof(m);
    CHECK(t >= 0.7 && t < 1.8);
    if (!(t >= 0.7 && t < 1.8))
        printf("# %s\n", m);
    /* a neighbour that sends within it: the sum completes, so the update can be saved */
    free_port();
    setenv("TFM_STOP_TIMEOUT", "2", 1);
    late = 1;
    stop_at = 0.2;
    spawn(2, slow_sum, st);
    CHECK_EQ_INT(st[0], 0);
    CHECK_EQ_INT(st[1], 0);
    unsetenv("TFM_STOP_TIMEOUT");
    late = stop_at = 0;
}

/* Process `rank` of 2 alone, stopped by a signal after 0.3 s: its exit status. */
static int stopped_joining(int rank)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct tfm_error err;
        stop_after(0.3);
        double t0 = now_s();
        struct tfm_comm *c = join(rank, 2, &err);
        char m[1100];
        snprintf(m, sizeof m, "%.1f %s", now_s() - t0, c ? "joined" : err.msg);
        say("err", rank, m);
        _exit(c ? 0 : 1);
    }
    int s = 0;
    waitpid(pid, &s, 0);
    return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
}

/* Process 0 alone, then process 1 alone: a signal ends the wait within 0.1 s. */
static void test_stop_joining(void)
{
    char m[1100];
    free_port();
    setenv("TFM_RENDEZVOUS_TIMEOUT", "60", 1);
    CHECK_EQ_INT(stopped_joining(0), 1);
    message("err", 0, m, sizeof m);
    CHECK(strstr(m, " stopped by a signal while 1 of 2 processes had joined") != NULL);
    CHECK(atof(m) < 1);
    CHECK_EQ_INT(stopped_joining(1), 1);
    message("err", 1, m, sizeof m);
    char want[128];
    snprintf(want, sizeof want, " stopped by a signal while waiting for process 0 at "
             "127.0.0.1:%s", getenv("TFM_MASTER_PORT"));
    CHECK(strstr(m, want) != NULL);
    CHECK(atof(m) < 1);
    if (!strstr(m, want))
        printf("# %s\n", m);
    unsetenv("TFM_RENDEZVOUS_TIMEOUT");
}

static void test_seconds(void)
{
    struct tfm_error err;
    double s = 0;
    unsetenv("TFM_JOIN_TIMEOUT");
    CHECK(tfm_dist_env_seconds("TFM_JOIN_TIMEOUT", 10, &s, &err) == 0 && s == 10);
    setenv("TFM_JOIN_TIMEOUT", "0.25", 1);
    CHECK(tfm_dist_env_seconds("TFM_JOIN_TIMEOUT", 10, &s, &err) == 0 && s == 0.25);
    static const char *const bad[] = {"0", "-1", "1s", "nan", "1e8", " "};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("TFM_JOIN_TIMEOUT", bad[i], 1);
        CHECK(tfm_dist_env_seconds("TFM_JOIN_TIMEOUT", 10, &s, &err) == -1);
    }
    CHECK_STR(err.msg, "TFM_JOIN_TIMEOUT= : not a number of seconds in (0, 1e7]");
    /* and tfm_comm_procs refuses such a value before it meets anyone */
    setenv("TFM_JOIN_TIMEOUT", "soon", 1);
    free_port();
    setenv("TFM_RUN_TOKEN", "a secret of the unit test", 1);
    CHECK(tfm_comm_procs(0, 2, NULL, &err) == NULL);
    CHECK_STR(err.msg, "TFM_JOIN_TIMEOUT=soon: not a number of seconds in (0, 1e7]");
    unsetenv("TFM_JOIN_TIMEOUT");
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror(dir);
        return 1;
    }
    unsetenv("TFM_RENDEZVOUS");
    setenv("TFM_RENDEZVOUS_TIMEOUT", "30", 1);
    t_run("sums over 2, 3 and 4 processes, exact, of buffers of several chunks", test_sums);
    unsetenv("TFM_RENDEZVOUS_TIMEOUT");
    t_run("TFM_RUN_TOKEN: required with TFM_MASTER_PORT, 16 characters at least",
          test_token_required);
    t_run("a process with another TFM_RUN_TOKEN is dropped and noted, and never joins",
          test_other_token);
    setenv("TFM_RUN_TOKEN", "a secret of the unit test", 1);
    t_run("a neighbour that sends nothing for TFM_COLLECTIVE_TIMEOUT is named",
          test_collective_timeout);
    t_run("the stop flag in a sum: TFM_STOP_TIMEOUT for a silent neighbour; a slow one completes",
          test_stop_in_sum);
    t_run("the stop flag ends the wait for the others to join, and for process 0",
          test_stop_joining);
    t_run("the time limits: seconds in (0, 1e7], refused otherwise", test_seconds);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {
        /* nothing to do: a temporary directory left behind */
    }
    return t_done();
}
