/* cli.c: usage errors and numeric flag parsing shared by the mains in bin/ (src/cli.h).
 * The one src/ module that writes to stderr; library code never calls it. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "output.h"
#include "util.h"

static const char *cli_prog = "tfm";
static const char *cli_usage;

void tfm_cli_init(const char *prog, const char *usage, char **argv)
{
    cli_prog = prog ? prog : "tfm";
    cli_usage = usage;
    if (argv && argv[0])
        argv[0] = (char *)cli_prog;
    program_invocation_name = (char *)cli_prog;
    tfm_output_catch_bus_error(cli_prog);
    /* A standard descriptor closed by the caller (<&-, >&-) is opened on /dev/null the
     * wrong way round, standard input for writing and the outputs for reading, so that no
     * file the tool opens takes its number (an input read again as "-", or a file
     * written as standard output) and using it fails as on a closed one (EBADF). */
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF)
            continue;
        int k = open("/dev/null", (fd == 0 ? O_WRONLY : O_RDONLY) | O_NOCTTY);
        if (k >= 0 && k != fd)      /* a lower one was closed and could not be held */
            close(k);
    }
}

int tfm_cli_usage(void)
{
    if (cli_usage)
        fputs(cli_usage, stderr);
    return 2;
}

int tfm_cli_fail(const struct tfm_error *err, int status)
{
    fflush(stdout);
    fprintf(stderr, "%s: %s\n", cli_prog, err->msg);
    return status;
}

int tfm_cli_close_stdout(int reported)
{
    errno = 0;
    if (fflush(stdout) || ferror(stdout) || fclose(stdout)) {
        if (!reported)
            fprintf(stderr, "%s: write error%s%s\n", cli_prog, errno ? ": " : "",
                    errno ? strerror(errno) : "");
        return 1;
    }
    return 0;
}

int tfm_cli_help(const char *help)
{
    if (cli_usage)
        fputs(cli_usage, stdout);
    fputs(help, stdout);
    return tfm_cli_close_stdout(0);
}

int tfm_cli_version(const char *version)
{
    printf("%s %s\n", cli_prog, version);
    return tfm_cli_close_stdout(0);
}

int tfm_cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cli_prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return tfm_cli_usage();
}

/* Numbers are whole and decimal (tfm_parse_int, tfm_parse_double): a value with space
 * around it, hex or inf is refused by every parser here, as tfm_duration_parse refuses it. */

int tfm_cli_int(const char *flag, const char *s, long long lo, long long hi, long long *v)
{
    long long x;
    if (tfm_parse_int(s, &x) || x < lo || x > hi)
        return tfm_cli_usage_error("%s: '%s': expected an integer from %lld to %lld", flag, s,
                                   lo, hi);
    *v = x;
    return 0;
}

int tfm_cli_double(const char *flag, const char *s, double lo, double hi, int open_lo,
                   double *v)
{
    double x;
    if (tfm_parse_double(s, &x) || !(x >= lo && x <= hi) || (open_lo && x == lo))
        return tfm_cli_usage_error("%s: '%s': expected a number in %c%g, %g]", flag, s,
                                   open_lo ? '(' : '[', lo, hi);
    *v = x;
    return 0;
}

int tfm_cli_size(const char *flag, const char *s, double *v)
{
    static const char units[] = "KkMmGgTt";
    char num[64];
    size_t n = strlen(s);
    const char *u = n ? strchr(units, s[n - 1]) : NULL;
    double x = 0, unit = 1;
    if (u) {
        n--;
        for (long k = (u - units) / 2; k >= 0; k--)
            unit *= 1024.0;
    }
    int ok = n < sizeof num;
    if (ok) {
        memcpy(num, s, n);
        num[n] = '\0';
        ok = tfm_parse_double(num, &x) == 0;
    }
    if (!ok || !(x > 0) || !isfinite(x * unit))
        return tfm_cli_usage_error("%s: '%s' is not a size (512M, 8G)", flag, s);
    *v = x * unit;
    return 0;
}

int tfm_cli_path(const char *flag, const char *s)
{
    if (!*s)
        return tfm_cli_usage_error("%s: an empty path", flag);
    return 0;
}

int tfm_cli_output_not_input(const char *flag, const char *out, const char *kind,
                             const char *in, const char *product)
{
    struct stat so, si;
    int is_stdin = strcmp(in, "-") == 0;
    if (strcmp(out, "-") == 0 || stat(out, &so) != 0 || !S_ISREG(so.st_mode))
        return 0;
    if ((is_stdin ? fstat(0, &si) : stat(in, &si)) != 0 || !S_ISREG(si.st_mode) ||
        so.st_dev != si.st_dev || so.st_ino != si.st_ino)
        return 0;
    return tfm_cli_usage_error("%s '%s' is the %s %s: the %s would replace it", flag, out, kind,
                               is_stdin ? "on standard input" : in, product);
}

int tfm_cli_reads_stdin(const char *path)
{
    if (strcmp(path, "-") == 0)
        return 1;
    struct stat s0, sp;
    if (fstat(0, &s0) != 0 || S_ISREG(s0.st_mode) || S_ISDIR(s0.st_mode) ||
        stat(path, &sp) != 0)
        return 0;
    if (S_ISCHR(s0.st_mode) && !isatty(0))      /* /dev/null, /dev/zero: each reader its own */
        return 0;
    return s0.st_dev == sp.st_dev && s0.st_ino == sp.st_ino;
}

int tfm_cli_names_stdin(const char *path)
{
    if (strcmp(path, "-") == 0)
        return 1;
    struct stat s0, sp;
    if (fstat(0, &s0) != 0 || stat(path, &sp) != 0 || S_ISDIR(s0.st_mode))
        return 0;
    if (S_ISCHR(s0.st_mode) && !isatty(0))
        return 0;
    return s0.st_dev == sp.st_dev && s0.st_ino == sp.st_ino;
}

int tfm_cli_same_stream(const char *a, const char *b)
{
    struct stat sa, sb;
    if ((strcmp(a, "-") == 0 ? fstat(0, &sa) : stat(a, &sa)) != 0 ||
        (strcmp(b, "-") == 0 ? fstat(0, &sb) : stat(b, &sb)) != 0)
        return 0;       /* the open of the one not there says why */
    if (S_ISREG(sa.st_mode) || S_ISDIR(sa.st_mode))
        return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int tfm_cli_not_terminal(const char *flag, const char *path)
{
    struct stat st;
    if (strcmp(path, "-") == 0 || stat(path, &st) != 0 || !S_ISCHR(st.st_mode))
        return 0;
    /* opened without becoming the controlling terminal, and without waiting */
    int fd = open(path, O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;       /* the output's own open says why */
    int tty = isatty(fd);
    close(fd);
    if (tty)
        return tfm_cli_usage_error("%s: '%s' is a terminal: refusing to write a binary stream "
                                   "to it", flag, path);
    return 0;
}

int tfm_cli_same_output(const char *a, const char *b)
{
    struct stat sa, sb;
    int is_a = strcmp(a, "-") == 0, is_b = strcmp(b, "-") == 0;
    if (is_a && is_b)
        return 1;
    if ((is_a ? fstat(1, &sa) : stat(a, &sa)) == 0 && (is_b ? fstat(1, &sb) : stat(b, &sb)) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && !S_ISCHR(sa.st_mode);
    if (is_a || is_b)       /* standard output is there; the other is not */
        return 0;
    char ra[PATH_MAX], rb[PATH_MAX];
    tfm_output_where(a, ra);
    tfm_output_where(b, rb);
    return strcmp(ra, rb) == 0;
}
