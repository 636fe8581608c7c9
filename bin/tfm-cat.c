/* tfm-cat: print tfm streams as text (man/tfm-cat.1). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dump.h"

static const char USAGE[] = "usage: tfm-cat [--values] [--header] [FILE...]\n";
static const char HELP[] =
    "Print tfm streams as text: the header, then one line per record\n"
    "(index, name, dtype, shape, size, offset).\n"
    "  -v, --values   print every element, a row of the last dimension a line\n"
    "  -H, --header   print the header only\n"
    "  -h, --help     this help\n"
    "      --version  print the version\n";

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"values", no_argument, NULL, 'v'}, {"header", no_argument, NULL, 'H'},
        {"help", no_argument, NULL, 'h'},   {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int flags = 0, c;
    tfm_cli_init("tfm-cat", USAGE, argv);
    while ((c = getopt_long(argc, argv, "vHh", opts, NULL)) != -1) {
        switch (c) {
        case 'v': flags |= TFM_DUMP_VALUES; break;
        case 'H': flags |= TFM_DUMP_HEADER; break;
        case 'h': return tfm_cli_help(HELP);
        case 'V': return tfm_cli_version(TFM_VERSION);
        default: return tfm_cli_usage();
        }
    }
    int status = 0;
    const char *stdin_only[] = {"-"};
    const char **files = optind < argc ? (const char **)argv + optind : stdin_only;
    int nfiles = optind < argc ? argc - optind : 1;
    for (int i = 0; i < nfiles && !ferror(stdout); i++) {
        struct tfm_error err;
        struct tfm_reader *r = tfm_reader_open(files[i], &err);
        if (!r || tfm_dump(r, stdout, flags, &err)) {
            status = 1;
            /* a failed write is said once, below */
            if (!ferror(stdout))
                tfm_cli_fail(&err, 1);
        }
        tfm_reader_close(r);
    }
    if (tfm_cli_close_stdout(0))
        return 1;
    return status;
}
