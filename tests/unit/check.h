/* check.h: the unit-test harness.  Each test program is a list of test functions run
 * by t_run(); it prints TAP ("ok N - name", "not ok N - name", "# SKIP") on stdout and
 * exits non-zero when any test failed, so tests/run can count and CI can trust it.
 *
 *   static void test_crc(void) { CHECK(crc("") == 0); CHECK_NEAR(x, 1.0, 1e-6); }
 *   int main(void) { t_run("crc", test_crc); return t_done(); }
 */
#ifndef TFM_CHECK_H
#define TFM_CHECK_H

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int t_count, t_failed, t_cur_failed, t_cur_skipped;
static char t_skip_reason[256];

static __attribute__((unused)) void t_fail(const char *file, int line, const char *what)
{
    printf("#   %s:%d: check failed: %s\n", file, line, what);
    t_cur_failed++;
}

#define CHECK(cond) \
    do { if (!(cond)) t_fail(__FILE__, __LINE__, #cond); } while (0)

/* |a - b| <= tol * max(1, |b|): relative for large values, absolute near zero. */
#define CHECK_NEAR(a, b, tol)                                                          \
    do {                                                                               \
        double a_ = (a), b_ = (b), t_ = (tol);                                         \
        double s_ = fabs(b_) > 1.0 ? fabs(b_) : 1.0;                                   \
        if (!(fabs(a_ - b_) <= t_ * s_)) {                                             \
            char m_[256];                                                              \
            snprintf(m_, sizeof m_, "%s = %.9g, expected %s = %.9g (tol %g)", #a, a_,  \
                     #b, b_, t_);                                                      \
            t_fail(__FILE__, __LINE__, m_);                                            \
        }                                                                              \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                             \
    do {                                                                               \
        long long a_ = (long long)(a), b_ = (long long)(b);                            \
        if (a_ != b_) {                                                                \
            char m_[256];                                                              \
            snprintf(m_, sizeof m_, "%s = %lld, expected %lld", #a, a_, b_);           \
            t_fail(__FILE__, __LINE__, m_);                                            \
        }                                                                              \
    } while (0)

#define CHECK_STR(a, b)                                                                \
    do {                                                                               \
        const char *a_ = (a), *b_ = (b);                                               \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                       \
            char m_[512];                                                              \
            snprintf(m_, sizeof m_, "%s = \"%.200s\", expected \"%.200s\"", #a,        \
                     a_ ? a_ : "(null)", b_ ? b_ : "(null)");                          \
            t_fail(__FILE__, __LINE__, m_);                                            \
        }                                                                              \
    } while (0)

/* Call inside a test to mark it skipped (for example: no GPU). */
static __attribute__((unused)) void t_skip(const char *reason)
{
    t_cur_skipped = 1;
    snprintf(t_skip_reason, sizeof t_skip_reason, "%s", reason);
}

static void t_run(const char *name, void (*fn)(void))
{
    t_cur_failed = 0;
    t_cur_skipped = 0;
    fflush(stdout);
    fn();
    t_count++;
    if (t_cur_failed) {
        t_failed++;
        printf("not ok %d - %s\n", t_count, name);
    } else if (t_cur_skipped) {
        printf("ok %d - %s # SKIP %s\n", t_count, name, t_skip_reason);
    } else {
        printf("ok %d - %s\n", t_count, name);
    }
    fflush(stdout);
}

/* A scratch directory, made on first use under $TMPDIR (else /tmp) and removed by t_done:
 * t_path(name) is name inside it (each result valid for the next 15 calls). */
static char t_dir[256];

static __attribute__((unused)) const char *t_path(const char *name)
{
    static char p[16][512];
    static int k;
    if (!t_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(t_dir, sizeof t_dir, "%s/tfm-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(t_dir)) {
            perror(t_dir);
            exit(1);
        }
    }
    k = (k + 1) % 16;
    snprintf(p[k], sizeof p[k], "%s/%s", t_dir, name);
    return p[k];
}

/* What has been written to f (a tmpfile) since it was last emptied, as a string (valid
 * until the next call); f is emptied. */
static __attribute__((unused)) const char *t_contents(FILE *f)
{
    static char buf[1 << 16];
    fflush(f);
    long n = ftell(f);
    rewind(f);
    size_t got = n > 0 ? fread(buf, 1, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1, f)
                       : 0;
    buf[got] = '\0';
    rewind(f);
    if (ftruncate(fileno(f), 0) != 0)
        t_fail(__FILE__, __LINE__, "ftruncate");
    return buf;
}

/* The read end of a pipe that a child process fills with the contents of path, so that a
 * reader takes its path for input read once; the caller closes it and waits for *child. */
static __attribute__((unused)) int t_pipe_from(const char *path, pid_t *child)
{
    int fds[2];
    if (pipe(fds))
        return -1;
    *child = fork();
    if (*child == 0) {
        close(fds[0]);
        int fd = open(path, O_RDONLY);
        char buf[65536];
        ssize_t k;
        while ((k = read(fd, buf, sizeof buf)) > 0)
            if (write(fds[1], buf, (size_t)k) != k)
                _exit(1);
        _exit(0);
    }
    close(fds[1]);
    return fds[0];
}

static int t_done(void)
{
    printf("1..%d\n", t_count);
    if (t_dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", t_dir);
        if (system(cmd) != 0)
            return 1;
    }
    return t_failed ? 1 : 0;
}

#endif
