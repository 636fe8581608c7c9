/* tfm-tokenize: SentencePiece models and token streams (man/tfm-tokenize.1).
 * A thin main: options per subcommand, then src/tokenize.h does the work. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "output.h"
#include "stream.h"
#include "tokenize.h"
#include "util.h"

static const char USAGE[] =
    "usage: tfm-tokenize train  -m MODEL [--vocab N] [--type bpe|unigram] [--coverage F]\n"
    "                           [--max-sentences N] [--seed N] [--threads N]\n"
    "                           [--trainer-option KEY=VALUE]... [-v]\n"
    "                           [--progress | --quiet] FILE...\n"
    "       tfm-tokenize encode -m MODEL [--bos] [--eos] [--threads N] [--compress]\n"
    "                           [-o OUT] [--progress | --quiet] [FILE]\n"
    "       tfm-tokenize decode [-m MODEL] [--ids] [--progress | --quiet] [FILE]\n";

static const char HELP[] =
    "Train SentencePiece models; turn text into tfm token streams and back.\n"
    "Every model has pad=0 unk=1 bos=2 eos=3.  FILE omitted or - is stdin.\n"
    "\n"
    "train:  text files -> one shared model MODEL (bpe, 8000 pieces by default)\n"
    "  -m, --model MODEL          model file to write\n"
    "  -n, --vocab N              vocabulary size, special pieces included (8000)\n"
    "  -t, --type bpe|unigram     model type (bpe)\n"
    "  -c, --coverage F           character coverage in [0.98, 1] (0.9995)\n"
    "  -s, --max-sentences N      train on a random sample of N lines; 0: all (0)\n"
    "      --seed N               seed of that sample (1)\n"
    "  -j, --threads N            trainer threads (1)\n"
    "  -O, --trainer-option K=V   any other spm_train option, e.g. hard_vocab_limit=false\n"
    "  -v, --verbose              show the trainer's log\n"
    "encode: text, a sentence a line -> token stream with the model embedded\n"
    "  -m, --model MODEL          .model file, or any tfm stream that embeds one\n"
    "  -b, --bos / -e, --eos      add bos (2) / eos (3) to every sentence\n"
    "  -j, --threads N            encoding threads (1); output is identical\n"
    "  -z, --compress             deflate the records\n"
    "  -o, --output OUT           write OUT (whole or not at all) instead of stdout\n"
    "decode: tokens or hypotheses stream, or lines of ids -> text, a line per sentence\n"
    "  -m, --model MODEL          use this model instead of the embedded one\n"
    "  -i, --ids                  print ids, not text\n"
    "common:\n"
    "  -p, --progress / -q, --quiet   summary on stderr (default: when it is a tty)\n"
    "  -h, --help / --version\n";

enum { OPT_SEED = 256, OPT_VERSION };

static const struct option OPTS[] = {
    {"model", required_argument, NULL, 'm'},
    {"vocab", required_argument, NULL, 'n'},
    {"type", required_argument, NULL, 't'},
    {"coverage", required_argument, NULL, 'c'},
    {"max-sentences", required_argument, NULL, 's'},
    {"seed", required_argument, NULL, OPT_SEED},
    {"threads", required_argument, NULL, 'j'},
    {"trainer-option", required_argument, NULL, 'O'},
    {"verbose", no_argument, NULL, 'v'},
    {"bos", no_argument, NULL, 'b'},
    {"eos", no_argument, NULL, 'e'},
    {"compress", no_argument, NULL, 'z'},
    {"output", required_argument, NULL, 'o'},
    {"ids", no_argument, NULL, 'i'},
    {"progress", no_argument, NULL, 'p'},
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

/* Which options each subcommand takes (short letters; OPT_SEED is train only). */
static const char *const SHORT[] = {"m:n:t:c:s:j:O:vpqh", "m:bej:zo:pqh", "m:ipqh"};

/* encode's and decode's summary on stderr (--progress), of a run started at t0. */
static void summary(int64_t sentences, int64_t tokens, int64_t unknown, double t0)
{
    double dt = tfm_now() - t0;
    fprintf(stderr, "tfm-tokenize: %lld sentences, %lld tokens (%lld unknown), %.2f s, "
            "%.0f sentences/s\n", (long long)sentences, (long long)tokens,
            (long long)unknown, dt, dt > 0 ? (double)sentences / dt : 0.0);
}

/* The tool, with room for the --trainer-option values (one per argument at most). */
static int run(int argc, char **argv, const char **options)
{
    tfm_cli_init("tfm-tokenize", USAGE, argv);
    if (argc < 2)
        return tfm_cli_usage_error("a subcommand is needed (train, encode or decode)");
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0)
        return tfm_cli_help(HELP);
    if (strcmp(cmd, "--version") == 0)
        return tfm_cli_version(TFM_VERSION);
    int sub = strcmp(cmd, "train") == 0 ? 0 : strcmp(cmd, "encode") == 0 ? 1
            : strcmp(cmd, "decode") == 0 ? 2 : -1;
    if (sub < 0)
        return tfm_cli_usage_error("'%s': unknown subcommand (train, encode or decode)", cmd);

    struct tfm_spm_train_opts topt;
    tfm_spm_train_defaults(&topt);
    struct tfm_encode_opts eopt = {.threads = 1, .producer = "tfm-tokenize " TFM_VERSION};
    struct tfm_detok_opts dopt = {0};
    const char *model = NULL, *output = NULL;
    int progress = isatty(2);
    long long v;
    double d;
    int c, li = 0;
    optind = 2;
    while ((c = getopt_long(argc, argv, SHORT[sub], OPTS, &li)) != -1) {
        /* a long option of another subcommand (a short one is getopt's '?'), named as
         * OPTS has it: argv[optind - 1] may be its argument */
        if (c < 256 && c != '?' && !strchr(SHORT[sub], c))
            return tfm_cli_usage_error("%s: option '--%s' is not one of %s's", cmd,
                                       OPTS[li].name, cmd);
        switch (c) {
        case 'm':
            if (tfm_cli_path("--model", optarg))
                return 2;
            model = optarg;
            break;
        case 'n':
            if (tfm_cli_int("--vocab", optarg, 5, 1000000, &v))
                return 2;
            topt.vocab_size = (int)v;
            break;
        case 't':
            if (strcmp(optarg, "bpe") != 0 && strcmp(optarg, "unigram") != 0)
                return tfm_cli_usage_error("--type: '%s': bpe or unigram expected", optarg);
            topt.type = optarg;
            break;
        case 'c':
            if (tfm_cli_double("--coverage", optarg, TFM_SPM_COVERAGE_MIN, 1, 0, &d))
                return 2;
            topt.coverage = d;
            break;
        case 's':
            if (tfm_cli_int("--max-sentences", optarg, 0, INT64_MAX / 2, &v))
                return 2;
            topt.max_sentences = v;
            break;
        case OPT_SEED:
            if (sub != 0)
                return tfm_cli_usage_error("--seed: only for train");
            if (tfm_cli_int("--seed", optarg, 0, UINT_MAX - 1, &v))
                return 2;
            topt.seed = (unsigned)v;
            break;
        case 'j':
            if (tfm_cli_int("--threads", optarg, 1, 256, &v))
                return 2;
            topt.threads = eopt.threads = (int)v;
            break;
        case 'O': {
            struct tfm_error err;
            if (tfm_spm_train_option_check(optarg, &err))
                return tfm_cli_usage_error("--trainer-option: %s", err.msg);
            options[topt.noptions++] = optarg;
            break;
        }
        case 'v': topt.verbose = 1; break;
        case 'b': eopt.bos = 1; break;
        case 'e': eopt.eos = 1; break;
        case 'z': eopt.flags |= TFM_DEFLATE; break;
        case 'o':
            if (tfm_cli_path("--output", optarg))
                return 2;
            output = optarg;
            break;
        case 'i': dopt.ids = 1; break;
        case 'p': progress = 1; break;
        case 'q': progress = 0; break;
        case 'h': return tfm_cli_help(HELP);
        case OPT_VERSION: return tfm_cli_version(TFM_VERSION);
        default: return tfm_cli_usage();
        }
    }
    topt.options = options;
    tfm_output_catch_signals();     /* no temporary file left by Ctrl-C */
    struct tfm_error err;
    int nfiles = argc - optind;

    if (sub == 0) {     /* train */
        if (!model)
            return tfm_cli_usage_error("train: -m MODEL is needed");
        /* the model is written whole to a file (renamed into place), never to stdout */
        if (strcmp(model, "-") == 0)
            return tfm_cli_usage_error("train: -m -: the model is written to a file: give "
                                       "its path");
        if (nfiles < 1)
            return tfm_cli_usage_error("train: at least one FILE is needed");
        for (int i = optind; i < argc; i++)
            if (tfm_cli_output_not_input("train: -m MODEL", model, "input", argv[i], "model"))
                return 2;
        double t0 = tfm_now();
        int vocab = 0;
        if (tfm_tokenize_train((const char *const *)argv + optind, nfiles, &topt, model,
                               &vocab, &err)) {
            return tfm_cli_fail(&err, 1);
        }
        if (progress)
            fprintf(stderr, "tfm-tokenize: %s: %s model, %d pieces, %.1f s\n", model,
                    topt.type, vocab, tfm_now() - t0);
        return tfm_cli_close_stdout(0);
    }

    if (nfiles > 1)
        return tfm_cli_usage_error("%s: at most one FILE", cmd);
    const char *in = nfiles ? argv[optind] : "-";
    struct tfm_spm *s = NULL;
    if (sub == 1 && !model)
        return tfm_cli_usage_error("encode: -m MODEL is needed");
    if (sub == 1 && output &&
        (tfm_cli_output_not_input("encode: --output", output, "input", in, "stream") ||
         tfm_cli_output_not_input("encode: --output", output, "model", model, "stream")))
        return 2;
    /* by identity whatever is on descriptor 0: -m /dev/stdin < m.model opens the model
     * again from its start, and the text read on descriptor 0 would be its bytes */
    if (model && tfm_cli_names_stdin(model) && tfm_cli_names_stdin(in))
        return tfm_cli_usage_error("%s: -m %s: standard input cannot feed both the model and "
                                   "the %s (give FILE)", cmd, model,
                                   sub == 1 ? "text" : "input");
    if (model && !(s = tfm_spm_load_file(model, &err))) {
        return tfm_cli_fail(&err, 1);
    }
    int status = 0;
    if (sub == 1) {     /* encode */
        if ((!output || strcmp(output, "-") == 0) && isatty(1)) {
            tfm_spm_free(s);
            return tfm_cli_usage_error("encode: refusing to write a binary stream to a terminal "
                                       "(redirect it or use -o OUT)");
        }
        if (output && tfm_cli_not_terminal("--output", output)) {
            tfm_spm_free(s);
            return 2;
        }
        double t0 = tfm_now();
        if (tfm_tokenize_encode(s, in, output, &eopt, &err)) {
            status = tfm_cli_fail(&err, 1);
        } else if (progress) {
            summary(eopt.sentences, eopt.tokens, eopt.unknown, t0);
        }
    } else {            /* decode */
        dopt.model = s;
        dopt.model_name = model;
        double t0 = tfm_now();
        if (tfm_tokenize_decode(in, stdout, &dopt, &err)) {
            status = tfm_cli_fail(&err, 1);
        } else if (progress) {
            summary(dopt.sentences, dopt.tokens, dopt.unknown, t0);
        }
    }
    tfm_spm_free(s);
    /* a failed write to stdout was the error just printed */
    if (tfm_cli_close_stdout(status != 0 && ferror(stdout)))
        return 1;
    return status;
}

int main(int argc, char **argv)
{
    const char **options = calloc((size_t)argc, sizeof *options);
    if (!options) {
        perror("tfm-tokenize");
        return 1;
    }
    int rc = run(argc, argv, options);
    free(options);
    return rc;
}
