/* tfm-avg: average checkpoints element-wise (man/tfm-avg.1).  The arithmetic is
 * tfm_checkpoint_average (src/checkpoint.c); this main picks the files. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "cli.h"
#include "output.h"

static const char USAGE[] =
    "usage: tfm-avg [-n N] [-o OUT] [--keep-optimizer] [--progress | --quiet] DIR|CHECKPOINT...\n";

static const char HELP[] =
    "Average checkpoints element-wise (summed in fp64, the mean rounded to fp32 once): the\n"
    "newest N of each DIR (step-*.tfm), and each CHECKPOINT given.  Writes a checkpoint to\n"
    "OUT (default: stdout).\n"
    "  -n, --last N          checkpoints taken from each DIR (default 5)\n"
    "  -o, --output OUT      output file ('-': stdout)\n"
    "  -k, --keep-optimizer  average the Adam moments too (dropped otherwise)\n"
    "  -p, --progress        a line on stderr as each checkpoint is read, and one when the\n"
    "                        mean is written (default: when stderr is a tty)\n"
    "  -q, --quiet           nothing on stderr but errors\n"
    "  -h, --help            this help\n"
    "      --version         print the version\n";

static void progress(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, "tfm-avg: %s\n", line);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"last", required_argument, NULL, 'n'},   {"output", required_argument, NULL, 'o'},
        {"keep-optimizer", no_argument, NULL, 'k'}, {"help", no_argument, NULL, 'h'},
        {"progress", no_argument, NULL, 'p'},     {"quiet", no_argument, NULL, 'q'},
        {"version", no_argument, NULL, 'V'},      {NULL, 0, NULL, 0},
    };
    int last = 5, keep = 0, show = isatty(2), c;
    long long v;
    const char *out = "-";
    tfm_cli_init("tfm-avg", USAGE, argv);
    while ((c = getopt_long(argc, argv, "n:o:kpqh", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (tfm_cli_int("-n", optarg, 1, 100000, &v))
                return 2;
            last = (int)v;
            break;
        case 'o':
            if (tfm_cli_path("--output", optarg))
                return 2;
            out = optarg;
            break;
        case 'k': keep = 1; break;
        case 'p': show = 1; break;
        case 'q': show = 0; break;
        case 'h': return tfm_cli_help(HELP);
        case 'V': return tfm_cli_version(TFM_VERSION);
        default: return tfm_cli_usage();
        }
    }
    if (optind == argc)
        return tfm_cli_usage_error("no checkpoint or directory given");
    /* a checkpoint is binary: not for a terminal */
    if (strcmp(out, "-") == 0 && isatty(1))
        return tfm_cli_usage_error("refusing to write a checkpoint to a terminal (redirect it "
                                   "or use -o OUT)");
    if (tfm_cli_not_terminal("--output", out))
        return 2;
    /* "-" is a checkpoint on standard input, which holds one */
    int stdin_reads = 0;
    for (int i = optind; i < argc; i++)
        stdin_reads += tfm_cli_reads_stdin(argv[i]);
    if (stdin_reads > 1)
        return tfm_cli_usage_error("standard input given %d times (- or /dev/stdin): it holds "
                                   "one checkpoint", stdin_reads);
    tfm_output_catch_signals();     /* no temporary file left by Ctrl-C */
    struct tfm_error err;
    int nfiles = 0, cap = 0, status = 1;
    char **files = NULL;
    for (int i = optind; i < argc; i++) {
        struct stat st;
        char **paths = NULL;
        int64_t *steps = NULL;
        int n = 0, from = 0;
        if (strcmp(argv[i], "-") == 0)
            st.st_mode = S_IFREG;       /* one checkpoint, read from standard input */
        else if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "tfm-avg: %s: %s\n", argv[i], strerror(errno));
            goto out;
        }
        if (S_ISDIR(st.st_mode)) {
            if (tfm_checkpoint_list(argv[i], &paths, &steps, &n, &err)) {
                tfm_cli_fail(&err, 1);
                goto out;
            }
            if (n < last) {
                fprintf(stderr, "tfm-avg: %s: %d checkpoints (step-*.tfm), -n asks for the last %d\n",
                        argv[i], n, last);
                tfm_checkpoint_list_free(paths, steps, n);
                goto out;
            }
            from = n - last;
        } else {
            if (!(paths = malloc(sizeof *paths)) || !(paths[0] = strdup(argv[i]))) {
                free(paths);
                fprintf(stderr, "tfm-avg: out of memory\n");
                goto out;
            }
            n = 1;
        }
        for (int k = from; k < n; k++) {
            if (nfiles == cap) {
                cap = cap ? 2 * cap : 16;
                char **p = realloc(files, (size_t)cap * sizeof *files);
                if (!p) {
                    fprintf(stderr, "tfm-avg: out of memory\n");
                    tfm_checkpoint_list_free(paths, steps, n);
                    goto out;
                }
                files = p;
            }
            files[nfiles++] = paths[k];
            paths[k] = NULL;
        }
        tfm_checkpoint_list_free(paths, steps, n);
    }
    /* an output that is one of the checkpoints (run/last.tfm over run/) would replace it */
    for (int k = 0; k < nfiles; k++)
        if (tfm_cli_output_not_input("--output", out, "checkpoint", files[k], "average")) {
            status = 2;
            goto out;
        }
    if (tfm_checkpoint_average_progress((const char *const *)files, nfiles, keep, out,
                                        show ? progress : NULL, NULL, &err)) {
        tfm_cli_fail(&err, 1);
        goto out;
    }
    status = 0;
    if (strcmp(out, "-") == 0 && tfm_cli_close_stdout(0))
        status = 1;
out:
    for (int i = 0; i < nfiles; i++)
        free(files[i]);
    free(files);
    return status;
}
