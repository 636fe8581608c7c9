/* tfm-batch: token streams -> padded batches under a token budget (man/tfm-batch.1).
 * A thin main: options, then tfm_batch_run (src/batch.h) does the work. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batch.h"
#include "cli.h"
#include "output.h"

static const char USAGE[] =
    "usage: tfm-batch [--tokens N] [--max-len N] [--seed N] [--compress] [-o OUT]\n"
    "                 [--progress | --quiet] SRC.tfm [TGT.tfm]\n";

static const char HELP[] =
    "Cut token streams into padded batches of similar lengths under a token budget.\n"
    "SRC and TGT (training pairs) or SRC alone (input to decode); - is stdin.\n"
    "  -t, --tokens N     budget per batch and side, padding and eos included (25000)\n"
    "  -l, --max-len N    drop pairs with a side longer than N tokens, eos included;\n"
    "                     0: no limit but the budget (256)\n"
    "  -s, --seed N       seed of the shuffles of sentences and batches (1)\n"
    "  -z, --compress     deflate the records\n"
    "  -o, --output OUT   write OUT (whole or not at all) instead of stdout\n"
    "  -p, --progress     show each phase on stderr (default: when stderr is a tty)\n"
    "  -q, --quiet        no report on stderr\n"
    "  -h, --help / --version\n";

static void progress(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, "tfm-batch: %s\n", line);
}

enum { OPT_VERSION = 256 };

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"tokens", required_argument, NULL, 't'},  {"max-len", required_argument, NULL, 'l'},
        {"seed", required_argument, NULL, 's'},    {"compress", no_argument, NULL, 'z'},
        {"output", required_argument, NULL, 'o'},  {"progress", no_argument, NULL, 'p'},
        {"quiet", no_argument, NULL, 'q'},         {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION}, {NULL, 0, NULL, 0},
    };
    struct tfm_batch_opts o;
    tfm_batch_defaults(&o);
    o.producer = "tfm-batch " TFM_VERSION;
    const char *out = NULL;
    int show = isatty(2), quiet = 0, c;
    long long v;
    tfm_cli_init("tfm-batch", USAGE, argv);
    while ((c = getopt_long(argc, argv, "t:l:s:zo:pqh", opts, NULL)) != -1) {
        switch (c) {
        case 't':
            if (tfm_cli_int("--tokens", optarg, 1, TFM_BATCH_MAX_TOKENS, &v))
                return 2;
            o.tokens = v;
            break;
        case 'l':
            if (tfm_cli_int("--max-len", optarg, 0, TFM_BATCH_MAX_TOKENS, &v))
                return 2;
            o.max_len = v;
            break;
        case 's':
            if (tfm_cli_int("--seed", optarg, 0, INT64_MAX, &v))
                return 2;
            o.seed = (uint64_t)v;
            break;
        case 'z': o.flags |= TFM_DEFLATE; break;
        case 'o':
            if (tfm_cli_path("--output", optarg))
                return 2;
            out = optarg;
            break;
        case 'p': show = 1; quiet = 0; break;
        case 'q': quiet = 1; show = 0; break;
        case 'h': return tfm_cli_help(HELP);
        case OPT_VERSION: return tfm_cli_version(TFM_VERSION);
        default: return tfm_cli_usage();
        }
    }
    int nfiles = argc - optind;
    if (nfiles < 1 || nfiles > 2)
        return tfm_cli_usage_error("%s", nfiles < 1 ? "SRC is needed (- for stdin)"
                                                 : "at most SRC and TGT");
    const char *src = argv[optind], *tgt = nfiles == 2 ? argv[optind + 1] : NULL;
    if (tgt && tfm_cli_reads_stdin(src) && tfm_cli_reads_stdin(tgt))
        return tfm_cli_usage_error("SRC and TGT cannot both be stdin");
    if (tgt && tfm_cli_same_stream(src, tgt))
        return tfm_cli_usage_error("SRC '%s' and TGT '%s' are one pipe, FIFO or device: it "
                                   "can be read once", src, tgt);
    if ((!out || strcmp(out, "-") == 0) && isatty(1))
        return tfm_cli_usage_error("refusing to write a binary stream to a terminal "
                                   "(redirect it or use -o OUT)");
    if (out && tfm_cli_not_terminal("--output", out))
        return 2;
    for (int i = 0; i < nfiles && out; i++)
        if (tfm_cli_output_not_input("--output", out, "input", argv[optind + i], "batches"))
            return 2;
    if (show) {
        o.progress = progress;
    }

    tfm_output_catch_signals();     /* no temporary file left by Ctrl-C */
    struct tfm_batch_plan st;
    struct tfm_error err;
    if (tfm_batch_run(src, tgt, out, &o, &st, &err)) {
        tfm_cli_fail(&err, 1);
        tfm_cli_close_stdout(1);
        return 1;
    }
    if (!quiet) {
        char lim[64];
        if (o.max_len > 0 && o.max_len < o.tokens)
            snprintf(lim, sizeof lim, "--max-len %lld", (long long)o.max_len);
        else
            snprintf(lim, sizeof lim, "the budget of %lld", (long long)o.tokens);
        fprintf(stderr, "tfm-batch: %lld sentences, %lld batches", (long long)st.sentences,
                (long long)st.nbatches);
        if (tgt)
            fprintf(stderr, ", %lld dropped (longer than %s), padding %.2f%% source "
                    "%.2f%% target\n", (long long)st.dropped, lim,
                    100 * tfm_batch_pad_src(&st), 100 * tfm_batch_pad_tgt(&st));
        else
            fprintf(stderr, ", padding %.2f%%\n", 100 * tfm_batch_pad_src(&st));
    }
    return tfm_cli_close_stdout(0);
}
