/* tfm-decode: translate token streams with trained models (man/tfm-decode.1).
 * A thin main: options, then src/decode.h does the work. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cli.h"
#include "config.h"
#include "decode.h"
#include "device.h"
#include "output.h"
#include "treecon.h"

static const char USAGE[] =
    "usage: tfm-decode -m MODEL [-m MODEL]... [--beam K] [--alpha A] [--max-len-b N]\n"
    "                  [--min-len N] [--nbest N] [--text] [--sample] [--topk K]\n"
    "                  [--topp P] [--temperature T] [--seed N] [--tokens N] [--threads N]\n"
    "                  [--device DEV] [-o OUT] [--attention FILE [--attention-all]]\n"
    "                  [--tree copy|count|off] [--progress] [--quiet] [FILE]\n";

static const char HELP[] =
    "Translate a token (or batch) stream; write a hypothesis stream in input order.\n"
    "FILE omitted or - is stdin.  Defaults of --beam, --alpha, --max-len-b and --min-len:\n"
    "the model's config.\n"
    "  -m, --model MODEL      checkpoint; repeat for an ensemble (log-probs averaged)\n"
    "  -k, --beam K           beam size, 1..4096; 1 is greedy\n"
    "  -a, --alpha A          length penalty ((5+|Y|)/6)^A, A in [0, 10]\n"
    "  -b, --max-len-b N      at most source length + N tokens\n"
    "      --min-len N        at least N tokens before eos (1: never empty; 0: no limit)\n"
    "  -n, --nbest N          hypotheses per sentence (<= beam), or samples (1)\n"
    "  -t, --text             detokenized text; n-best as 'N ||| text ||| score'\n"
    "  -s, --sample           sample instead of searching (no --beam)\n"
    "      --topk K           sample among the K most probable tokens (0: all)\n"
    "      --topp P           nucleus sampling, P in (0, 1] (1: all)\n"
    "      --temperature T    sampling temperature > 0 (1)\n"
    "      --seed N           sampling seed (1)\n"
    "      --tokens N         batch budget in token positions (16384)\n"
    "  -j, --threads N        CPU threads (0: all online CPUs)\n"
    "      --device DEV       auto, cpu, cuda or sim (auto)\n"
    "  -o, --output OUT       write OUT (whole or not at all) instead of stdout\n"
    "      --attention FILE   also write the encoder-decoder attention of each best\n"
    "                         hypothesis, every layer and head, as a stream to FILE\n"
    "      --attention-all    with it the encoder and decoder self-attention too\n"
    "      --tree MODE        write only linearized trees over the source's words, their\n"
    "                         leaves the source pieces (copy) or as many as its words\n"
    "                         (count: XX or POS tags); off (default): any text;\n"
    "                         see tfm-decode(1)\n"
    "  -p, --progress / -q, --quiet   progress on stderr (default: when it is a tty)\n"
    "  -h, --help / --version\n";

struct progress {
    int on;
    int quiet;
    int device_shown;       /* the device line goes first */
};

/* The device line: with the progress, or alone when a GPU is not used as asked (a
 * fallback is logged unless --quiet). */
static void show_device(struct progress *p, const struct tfm_decode_stats *st)
{
    if (!p->device_shown && st->device[0] && (p->on || (st->fallback && !p->quiet))) {
        fprintf(stderr, "tfm-decode: %s\n", st->device);
        p->device_shown = 1;
    }
}

static void report(void *ctx, const struct tfm_decode_stats *st, int final)
{
    struct progress *p = ctx;
    show_device(p, st);
    if (!p->on)
        return;
    double s = st->seconds > 0 ? st->seconds : 1e-9;
    if (final)
        fprintf(stderr, "tfm-decode: %lld sentences, %lld hypotheses, %lld tokens in %.1f s "
                "(%.1f sentences/s, %.0f tokens/s)\n",
                (long long)st->sentences, (long long)st->hyps, (long long)st->tokens, s,
                st->sentences / s, st->tokens / s);
    else
        fprintf(stderr, "tfm-decode: %lld/%lld sentences, batch %lld, %.1f s\n",
                (long long)st->done, (long long)st->sentences, (long long)st->batches, s);
}

/* The row of a config key (config.h), which exists. */
static const struct tfm_config_key *config_key(const char *name)
{
    int n;
    const struct tfm_config_key *keys = tfm_config_keys(&n);
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i].name, name) == 0)
            return &keys[i];
    abort();    /* a key of the table: a bug if missing */
}

/* An option that overrides a config key's integer, parsed in the range of that key: one
 * place for it (a value --set refuses is refused here too, and the reverse). */
static int cli_key_int(const char *flag, const char *key, const char *arg, long long *v)
{
    const struct tfm_config_key *k = config_key(key);
    return tfm_cli_int(flag, arg, (long long)k->min, (long long)k->max, v);
}

int main(int argc, char **argv)
{
    enum { O_TOPK = 256, O_TOPP, O_TEMP, O_SEED, O_TOKENS, O_DEVICE, O_VERSION, O_MINLEN, O_ATTN,
           O_ATTN_ALL, O_TREE };
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},
        {"beam", required_argument, NULL, 'k'},
        {"alpha", required_argument, NULL, 'a'},
        {"max-len-b", required_argument, NULL, 'b'},
        {"min-len", required_argument, NULL, O_MINLEN},
        {"nbest", required_argument, NULL, 'n'},
        {"text", no_argument, NULL, 't'},
        {"sample", no_argument, NULL, 's'},
        {"topk", required_argument, NULL, O_TOPK},
        {"topp", required_argument, NULL, O_TOPP},
        {"temperature", required_argument, NULL, O_TEMP},
        {"seed", required_argument, NULL, O_SEED},
        {"tokens", required_argument, NULL, O_TOKENS},
        {"threads", required_argument, NULL, 'j'},
        {"device", required_argument, NULL, O_DEVICE},
        {"output", required_argument, NULL, 'o'},
        {"attention", required_argument, NULL, O_ATTN},
        {"attention-all", no_argument, NULL, O_ATTN_ALL},
        {"tree", required_argument, NULL, O_TREE},
        {"progress", no_argument, NULL, 'p'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0},
    };
    struct tfm_decode_opts o;
    tfm_decode_defaults(&o);
    o.producer = "tfm-decode " TFM_VERSION;
    const char *models[TFM_DECODE_MAX_MODELS];
    int nmodels = 0, progress = isatty(2), quiet = 0, sampling_flag = 0;
    const char *out = "-";
    long long v;
    double d;
    int c;
    tfm_cli_init("tfm-decode", USAGE, argv);
    while ((c = getopt_long(argc, argv, "m:k:a:b:n:tsj:o:pqh", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (nmodels == TFM_DECODE_MAX_MODELS)
                return tfm_cli_usage_error("-m: at most %d models", TFM_DECODE_MAX_MODELS);
            models[nmodels++] = optarg;
            break;
        case 'k':
            if (cli_key_int("--beam", "beam", optarg, &v))
                return 2;
            o.search.beam = (int)v;
            o.beam_given = 1;
            break;
        case 'a': {     /* the range of the config key alpha: one place for it */
            const struct tfm_config_key *k = config_key("alpha");
            if (tfm_cli_double("--alpha", optarg, k->min, k->max, 0, &d))
                return 2;
            o.search.alpha = d;
            o.alpha_given = 1;
            break;
        }
        case 'b':
            if (cli_key_int("--max-len-b", "max_len_b", optarg, &v))
                return 2;
            o.max_len_b = (int)v;
            break;
        case O_MINLEN:
            if (cli_key_int("--min-len", "min_len", optarg, &v))
                return 2;
            o.search.min_len = (int)v;
            o.min_len_given = 1;
            break;
        case 'n':
            if (tfm_cli_int("--nbest", optarg, 1, 4096, &v))
                return 2;
            o.search.nbest = (int)v;
            break;
        case 't': o.text = 1; break;
        case 's': o.search.sample = 1; break;
        case O_TOPK:
            if (tfm_cli_int("--topk", optarg, 0, 1 << 30, &v))
                return 2;
            o.search.topk = (int)v;
            sampling_flag = 1;
            break;
        case O_TOPP:
            if (tfm_cli_double("--topp", optarg, 0, 1, 1, &d))
                return 2;
            o.search.topp = d;
            sampling_flag = 1;
            break;
        case O_TEMP:
            if (tfm_cli_double("--temperature", optarg, 0, 1e6, 1, &d))
                return 2;
            o.search.temperature = d;
            sampling_flag = 1;
            break;
        case O_SEED:
            if (tfm_cli_int("--seed", optarg, 0, (long long)(~0ULL >> 1), &v))
                return 2;
            o.search.seed = (uint64_t)v;
            sampling_flag = 1;
            break;
        case O_TOKENS:
            if (tfm_cli_int("--tokens", optarg, 1, 1LL << 40, &v))
                return 2;
            o.tokens = v;
            break;
        case 'j':
            if (tfm_cli_int("--threads", optarg, 0, TFM_CPU_MAX_THREADS, &v))
                return 2;
            o.threads = (int)v;
            break;
        case O_DEVICE:
            if (!tfm_device_name_ok(optarg))
                return tfm_cli_usage_error("--device: '%s': expected " TFM_DEVICE_NAMES,
                                           optarg);
            o.device = optarg;
            break;
        case 'o':
            if (tfm_cli_path("--output", optarg))
                return 2;
            out = optarg;
            break;
        case O_ATTN:
            if (tfm_cli_path("--attention", optarg))
                return 2;
            o.attention = optarg;
            break;
        case O_ATTN_ALL: o.attention_all = 1; break;
        case O_TREE:
            if ((o.tree = tfm_tree_mode_parse(optarg)) < 0)
                return tfm_cli_usage_error("--tree: '%s': expected copy, count or off", optarg);
            break;
        case 'p': progress = 1; break;
        case 'q': quiet = 1; break;
        case 'h': return tfm_cli_help(HELP);
        case O_VERSION: return tfm_cli_version(TFM_VERSION);
        default: return tfm_cli_usage();
        }
    }
    if (nmodels == 0)
        return tfm_cli_usage_error("a model is required (-m MODEL)");
    if (optind + 1 < argc)
        return tfm_cli_usage_error("one input file at most ('%s' is extra)", argv[optind + 1]);
    if (sampling_flag && !o.search.sample)
        return tfm_cli_usage_error("--topk, --topp, --temperature and --seed need --sample");
    if (o.search.sample && o.beam_given)
        return tfm_cli_usage_error("--beam and --sample exclude each other");
    if (!o.search.sample && o.beam_given && o.search.nbest > o.search.beam)
        return tfm_cli_usage_error("--nbest %d exceeds --beam %d", o.search.nbest, o.search.beam);
    if (o.attention_all && !o.attention)
        return tfm_cli_usage_error("--attention-all needs --attention FILE");
    /* by identity, not by name: "./h.tfm" is "h.tfm", and so is a link to it */
    if (o.attention && tfm_cli_same_output(o.attention, out)) {
        if (strcmp(o.attention, "-") == 0)
            return tfm_cli_usage_error("--attention -: standard output carries the hypotheses "
                                       "(give -o OUT)");
        if (strcmp(out, "-") == 0)
            return tfm_cli_usage_error("--attention %s is standard output, which carries the "
                                       "hypotheses (give -o OUT)", o.attention);
        return tfm_cli_usage_error("--attention %s and -o %s are one file: the hypotheses "
                                   "would overwrite the attention (give two files)",
                                   o.attention, out);
    }
    /* the hypothesis and attention streams are binary: not for a terminal (--text is) */
    if (!o.text && strcmp(out, "-") == 0 && isatty(1))
        return tfm_cli_usage_error("refusing to write a binary stream to a terminal (give "
                                   "--text, redirect it or use -o OUT)");
    if ((!o.text && tfm_cli_not_terminal("--output", out)) ||
        (o.attention && tfm_cli_not_terminal("--attention", o.attention)))
        return 2;
    if (o.attention && strcmp(o.attention, "-") == 0 && isatty(1))
        return tfm_cli_usage_error("--attention -: refusing to write a binary stream to a "
                                   "terminal (redirect it or give FILE)");
    const char *in = optind < argc ? argv[optind] : "-";
    /* an output that is an input, the sentences or a model, would replace it */
    for (int k = 0; k < 2; k++) {
        const char *path = k ? o.attention : out, *flag = k ? "--attention" : "--output";
        const char *what = k ? "attention" : "hypotheses";
        if (!path)
            continue;
        if (tfm_cli_output_not_input(flag, path, "input", in, what))
            return 2;
        for (int i = 0; i < nmodels; i++)
            if (tfm_cli_output_not_input(flag, path, "model", models[i], what))
                return 2;
    }
    tfm_output_catch_signals();     /* no temporary file left by Ctrl-C */
    /* standard input is read once: by one model or by the sentences */
    int stdin_models = 0;
    for (int i = 0; i < nmodels; i++)
        stdin_models += tfm_cli_reads_stdin(models[i]);
    if (stdin_models > 1)
        return tfm_cli_usage_error("-m given standard input %d times (- or /dev/stdin): it "
                                   "holds one model", stdin_models);
    /* whatever standard input is (a regular file too: -m /dev/stdin < ckpt.tfm would read
     * the checkpoint as the sentences) */
    int in_stdin = tfm_cli_names_stdin(in);
    for (int i = 0; i < nmodels && in_stdin; i++)
        if (tfm_cli_names_stdin(models[i]))
            return tfm_cli_usage_error("-m %s: standard input cannot feed both the model and "
                                       "the sentences to translate (give FILE)", models[i]);
    struct progress pr = {progress && !quiet, quiet, 0};
    o.progress = report;
    o.progress_ctx = &pr;
    struct tfm_error err;
    if (tfm_decode_run(models, nmodels, in, out, &o, &err)) {
        fflush(stdout);
        return tfm_cli_fail(&err, o.usage_error ? 2 : 1);
    }
    /* a warning about the data, not progress: --quiet keeps it */
    if (o.stats.truncated)
        fprintf(stderr, "tfm-decode: %s: warning: %lld source sentences cut to the model's "
                "max_len\n", strcmp(in, "-") == 0 ? "<stdin>" : in,
                (long long)o.stats.truncated);
    show_device(&pr, &o.stats);
    if (tfm_cli_close_stdout(0))
        return 1;
    return 0;
}
