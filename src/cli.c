/* cli.c: usage errors and numeric flag parsing shared by the mains in bin/ (src/cli.h).
 * The one src/ module that writes to stderr; library code never calls it. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static const char *cli_prog = "tfm";
static const char *cli_usage;

void tfm_cli_init(const char *prog, const char *usage)
{
    cli_prog = prog ? prog : "tfm";
    cli_usage = usage;
}

int tfm_cli_usage(void)
{
    if (cli_usage)
        fputs(cli_usage, stderr);
    return 2;
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

int tfm_cli_int(const char *flag, const char *s, long long lo, long long hi, long long *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end || errno || x < lo || x > hi)
        return tfm_cli_usage_error("%s: '%s': expected an integer from %lld to %lld", flag, s,
                                   lo, hi);
    *v = x;
    return 0;
}

int tfm_cli_double(const char *flag, const char *s, double lo, double hi, int open_lo,
                   double *v)
{
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(x) || !(x >= lo && x <= hi) ||
        (open_lo && x == lo))
        return tfm_cli_usage_error("%s: '%s': expected a number in %c%g, %g]", flag, s,
                                   open_lo ? '(' : '[', lo, hi);
    *v = x;
    return 0;
}
