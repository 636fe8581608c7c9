/* tfm-score: BLEU and chrF as sacreBLEU, the paper's tokenized BLEU, and EVALB bracket F1
 * (man/tfm-score.1).  A thin main: options, their validation, and dispatch to a scorer
 * (src/score.h: src/bleu.c, src/chrf.c, src/evalb.c) or a tree mode (src/treebank.h).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bleu.h"
#include "chrf.h"
#include "cli.h"
#include "evalb.h"
#include "hypread.h"
#include "score.h"
#include "text.h"
#include "treebank.h"

#define PROG "tfm-score"
#define SIG_VERSION "tfm-" TFM_VERSION

static const char USAGE[] =
    "usage: tfm-score -r REF [-r REF]... [--metric bleu|chrf|f1] [--lowercase]\n"
    "                 [--tok 13a|intl|none] [--smooth exp|none|floor|add-k]\n"
    "                 [--smooth-value V] [--tokenized [--compound-split]]\n"
    "                 [--chrf-char-order N] [--chrf-word-order N] [--chrf-beta N]\n"
    "                 [--chrf-whitespace] [--chrf-eps-smoothing] [--param FILE.prm]\n"
    "                 [--source FILE | --linearized] [--keep-tags] [--root LABEL]\n"
    "                 [--per-sentence] [--max-error N] [--confidence [--confidence-n N]\n"
    "                 [--seed N]] [--json] [--quiet] [FILE]\n"
    "       tfm-score -r REF [-r REF]... [BLEU options] --paired-bs [--paired-bs-n N]\n"
    "                 [--seed N] [--json] BASELINE SYSTEM...\n"
    "       tfm-score -r REF [-r REF]... [BLEU options] --paired-ar [--paired-ar-n N]\n"
    "                 [--seed N] [--json] BASELINE SYSTEM...\n"
    "       tfm-score --linearize [--keep-tags | --keep-words] [--keep-function-tags]\n"
    "                 [FILE]\n"
    "       tfm-score --restore --source FILE [--root LABEL] [FILE]\n"
    "       tfm-score --oneline [FILE]\n";

static const char HELP[] =
    "Score hypotheses (a tfm hypotheses/tokens stream, detokenized with its embedded\n"
    "SentencePiece model, or text lines) against references.\n"
    "  -r, --ref FILE          reference (repeat for several); gold trees for f1\n"
    "  -m, --metric M          bleu (default), chrf or f1\n"
    "  -t, --tok T             BLEU tokenization: 13a (default), intl, none\n"
    "  -l, --lowercase         case-insensitive BLEU or chrF\n"
    "      --smooth M          BLEU smoothing: exp (default), none, floor, add-k\n"
    "      --smooth-value V    for floor (0.1) and add-k (1)\n"
    "      --tokenized         text is tokenized already: split on whitespace, score as\n"
    "                          multi-bleu.perl (no smoothing)\n"
    "      --compound-split    with --tokenized: split hyphens as ##AT##-##AT## (paper)\n"
    "      --chrf-char-order N character n-gram order (6)\n"
    "      --chrf-word-order N word n-gram order (0; 2 is chrF++)\n"
    "      --chrf-beta N       beta (2)\n"
    "      --chrf-whitespace   keep whitespace in character n-grams\n"
    "      --chrf-eps-smoothing  chrF++.py's smoothing\n"
    "  -p, --param FILE.prm    EVALB parameter file (default: COLLINS.prm, built in)\n"
    "  -s, --source FILE       f1: test lines are linearized trees; restore them with\n"
    "                          the words of FILE (one sentence a line)\n"
    "      --linearized        f1: test lines are linearized; words from the gold trees\n"
    "  -v, --per-sentence      f1: print EVALB's whole report (also --verbose)\n"
    "      --max-error N       f1: override MAX_ERROR\n"
    "      --confidence        BLEU: the mean and 95% interval of 1000 bootstrap\n"
    "                          resamples, as sacreBLEU --confidence draws them\n"
    "      --confidence-n N    resamples, 2 to 100000 (1000)\n"
    "      --seed N            their seed (12345, sacreBLEU's)\n"
    "      --paired-bs         BLEU: test each SYSTEM against BASELINE by paired\n"
    "                          bootstrap resampling (p, mean and 95% interval), as\n"
    "                          sacreBLEU --paired-bs\n"
    "      --paired-bs-n N     resamples, 2 to 100000 (1000)\n"
    "      --paired-ar         BLEU: the same by approximate randomization (p), as\n"
    "                          sacreBLEU --paired-ar\n"
    "      --paired-ar-n N     trials, 1 to 1000000 (10000)\n"
    "  -j, --json              print the result as JSON\n"
    "      --linearize         print \"WORDS<TAB>LINEARIZED\" for each tree of FILE\n"
    "      --keep-tags         --linearize: write POS tags instead of XX; f1 with\n"
    "                          --source or --linearized: the model writes POS tags, give\n"
    "                          only XX preterminals the gold tags (default: all)\n"
    "      --root LABEL        label of the root that restoration opens when the output\n"
    "                          does not open one first (" TFM_TREE_ROOT ")\n"
    "      --keep-words        --linearize: write the words instead of XX\n"
    "      --keep-function-tags  --linearize: keep NP-SBJ and the like\n"
    "      --restore           print the trees restored from linearized lines + --source\n"
    "      --oneline           print each tree of FILE on one line\n"
    "  -q, --quiet             no warnings on stderr\n"
    "  -h, --help              this help\n"
    "      --version           print the version\n";

enum { MODE_SCORE, MODE_LINEARIZE, MODE_RESTORE, MODE_ONELINE };
enum { MET_BLEU, MET_CHRF, MET_F1 };

enum {
    OPT_SMOOTH = 256, OPT_SMOOTH_VALUE, OPT_TOKENIZED, OPT_COMPOUND, OPT_CHAR_ORDER,
    OPT_WORD_ORDER, OPT_BETA, OPT_WS, OPT_EPS, OPT_LINEARIZED, OPT_MAX_ERROR, OPT_LINEARIZE, OPT_ONELINE,
    OPT_KEEP_TAGS, OPT_KEEP_FTAGS, OPT_KEEP_WORDS, OPT_RESTORE, OPT_ROOT, OPT_VERSION,
    OPT_CONFIDENCE, OPT_CONFIDENCE_N, OPT_SEED, OPT_PAIRED_BS, OPT_PAIRED_AR, OPT_PAIRED_BS_N,
    OPT_PAIRED_AR_N,
};

static void warn(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, PROG ": %s\n", msg);
}

/* Read the references refs[0..nrefs) into rt (freed by the caller). */
static int read_refs(struct tfm_text *rt, const char *const *refs, int nrefs,
                     struct tfm_error *err)
{
    for (int r = 0; r < nrefs; r++)
        if (tfm_text_read(&rt[r], refs[r], err))
            return -1;
    return 0;
}

/* Score the hypotheses at hyp_path (a stream or text) against the references rt. */
static int score_file(struct tfm_scorer *s, const struct tfm_text *rt, const char *hyp_path,
                      struct tfm_error *err)
{
    struct tfm_text hyp;
    tfm_text_init(&hyp);
    int rc = tfm_hypread_text(hyp_path, &hyp, err);
    if (rc == 0)
        rc = tfm_score_run(s, &hyp, rt, err);
    tfm_text_free(&hyp);
    return rc;
}

/* The paired test of the systems paths[1..n) against paths[0]: a BLEU scorer each. */
static int paired_files(const struct tfm_bleu_opts *bo, const struct tfm_score_opts *so,
                        const struct tfm_text *rt, int nrefs, const char *const *paths,
                        int n, int test, int samples, uint64_t seed, struct tfm_error *err)
{
    struct tfm_scorer **sys = calloc((size_t)n, sizeof *sys);
    int rc = sys ? 0 : tfm_fail(err, "out of memory");
    for (int k = 0; k < n && rc == 0; k++) {
        struct tfm_text hyp;
        tfm_text_init(&hyp);
        sys[k] = tfm_bleu_scorer(bo, nrefs, so, err);
        rc = sys[k] ? tfm_hypread_text(paths[k], &hyp, err) : -1;   /* names the file */
        if (rc == 0 && tfm_score_collect(sys[k], &hyp, rt, err))
            rc = tfm_error_prefix(err, "%s", hyp.name);
        tfm_text_free(&hyp);
    }
    if (rc == 0)
        rc = tfm_score_paired(sys, paths, n, test, samples, seed, err);
    for (int k = 0; sys && k < n; k++)
        tfm_scorer_free(sys[k]);
    free(sys);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"ref", required_argument, NULL, 'r'},
        {"metric", required_argument, NULL, 'm'},
        {"tok", required_argument, NULL, 't'},
        {"lowercase", no_argument, NULL, 'l'},
        {"smooth", required_argument, NULL, OPT_SMOOTH},
        {"smooth-value", required_argument, NULL, OPT_SMOOTH_VALUE},
        {"tokenized", no_argument, NULL, OPT_TOKENIZED},
        {"compound-split", no_argument, NULL, OPT_COMPOUND},
        {"chrf-char-order", required_argument, NULL, OPT_CHAR_ORDER},
        {"chrf-word-order", required_argument, NULL, OPT_WORD_ORDER},
        {"chrf-beta", required_argument, NULL, OPT_BETA},
        {"chrf-whitespace", no_argument, NULL, OPT_WS},
        {"chrf-eps-smoothing", no_argument, NULL, OPT_EPS},
        {"param", required_argument, NULL, 'p'},
        {"source", required_argument, NULL, 's'},
        {"linearized", no_argument, NULL, OPT_LINEARIZED},
        {"per-sentence", no_argument, NULL, 'v'},
        {"verbose", no_argument, NULL, 'v'},
        {"max-error", required_argument, NULL, OPT_MAX_ERROR},
        {"json", no_argument, NULL, 'j'},
        {"confidence", no_argument, NULL, OPT_CONFIDENCE},
        {"confidence-n", required_argument, NULL, OPT_CONFIDENCE_N},
        {"seed", required_argument, NULL, OPT_SEED},
        {"paired-bs", no_argument, NULL, OPT_PAIRED_BS},
        {"paired-ar", no_argument, NULL, OPT_PAIRED_AR},
        {"paired-bs-n", required_argument, NULL, OPT_PAIRED_BS_N},
        {"paired-ar-n", required_argument, NULL, OPT_PAIRED_AR_N},
        {"linearize", no_argument, NULL, OPT_LINEARIZE},
        {"keep-tags", no_argument, NULL, OPT_KEEP_TAGS},
        {"keep-function-tags", no_argument, NULL, OPT_KEEP_FTAGS},
        {"keep-words", no_argument, NULL, OPT_KEEP_WORDS},
        {"restore", no_argument, NULL, OPT_RESTORE},
        {"oneline", no_argument, NULL, OPT_ONELINE},
        {"root", required_argument, NULL, OPT_ROOT},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    const char **refs = calloc((size_t)argc + 1, sizeof *refs);
    if (!refs) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    int nrefs = 0, metric = MET_BLEU, json = 0, mode = MODE_SCORE, quiet = 0, c;
    long long v;
    int tok_set = 0, smooth_set = 0, smooth_value_set = 0, chrf_set = 0, tokenized = 0;
    int confidence = 0, bootstrap = 1000, bootstrap_set = 0, seed_set = 0;
    int paired = 0, bs_n = 1000, ar_n = 10000, bs_n_set = 0, ar_n_set = 0;
    unsigned long long seed = 12345;
    struct tfm_bleu_opts bo;
    struct tfm_chrf_opts co;
    struct tfm_f1_opts fo = {NULL, NULL, 0, 0, -1, 0, NULL};
    struct tfm_linearize_opts lo = {0, 0, 0};
    tfm_bleu_opts_default(&bo);
    tfm_chrf_opts_default(&co);
    int st = 0;
    tfm_cli_init(PROG, USAGE, argv);
    while ((c = getopt_long(argc, argv, "r:m:t:lp:s:vjqh", opts, NULL)) != -1) {
        switch (c) {
        case 'r': refs[nrefs++] = optarg; break;
        case 'm':
            if (strcmp(optarg, "bleu") == 0)
                metric = MET_BLEU;
            else if (strcmp(optarg, "chrf") == 0)
                metric = MET_CHRF;
            else if (strcmp(optarg, "f1") == 0)
                metric = MET_F1;
            else
                st = tfm_cli_usage_error("--metric: '%s': expected bleu, chrf or f1", optarg);
            break;
        case 't':
            bo.tok = tfm_bleu_tok_parse(optarg);
            if (!bo.tok || bo.tok == TFM_TOK_TOKENIZED)
                st = tfm_cli_usage_error("--tok: '%s': expected 13a, intl or none", optarg);
            tok_set = 1;
            break;
        case 'l': bo.lowercase = co.lowercase = 1; break;
        case OPT_SMOOTH:
            if (!(bo.smooth = tfm_bleu_smooth_parse(optarg)))
                st = tfm_cli_usage_error("--smooth: '%s': expected exp, none, floor or add-k",
                                         optarg);
            smooth_set = 1;
            break;
        case OPT_SMOOTH_VALUE:
            st = tfm_cli_double("--smooth-value", optarg, 0, 1e6, 0, &bo.smooth_value);
            smooth_value_set = 1;
            break;
        case OPT_TOKENIZED: tokenized = 1; break;
        case OPT_COMPOUND: bo.compound_split = 1; break;
        case OPT_CHAR_ORDER:
            if (!(st = tfm_cli_int("--chrf-char-order", optarg, 1, TFM_CHRF_MAX_ORDER, &v)))
                co.char_order = (int)v;
            chrf_set = 1;
            break;
        case OPT_WORD_ORDER:
            if (!(st = tfm_cli_int("--chrf-word-order", optarg, 0, TFM_CHRF_MAX_ORDER, &v)))
                co.word_order = (int)v;
            chrf_set = 1;
            break;
        case OPT_BETA:
            if (!(st = tfm_cli_int("--chrf-beta", optarg, 1, 100, &v)))
                co.beta = (int)v;
            chrf_set = 1;
            break;
        case OPT_WS: co.whitespace = 1, chrf_set = 1; break;
        case OPT_EPS: co.eps_smoothing = 1, chrf_set = 1; break;
        case 'p': fo.param = optarg; break;
        case 's': fo.source = optarg; break;
        case OPT_LINEARIZED: fo.linearized = 1; break;
        case 'v': fo.per_sentence = 1; break;
        case OPT_MAX_ERROR:
            if (!(st = tfm_cli_int("--max-error", optarg, 0, 1000000000, &v)))
                fo.max_error = (int)v;
            break;
        case 'j': json = 1; break;
        case OPT_CONFIDENCE: confidence = 1; break;
        case OPT_CONFIDENCE_N:
            if (!(st = tfm_cli_int("--confidence-n", optarg, 2, 100000, &v)))
                bootstrap = (int)v;
            bootstrap_set = 1;
            break;
        case OPT_SEED:
            if (!(st = tfm_cli_int("--seed", optarg, 0, 9223372036854775807LL, &v)))
                seed = (unsigned long long)v;
            seed_set = 1;
            break;
        case OPT_PAIRED_BS:
        case OPT_PAIRED_AR: {
            int t = c == OPT_PAIRED_BS ? TFM_PAIRED_BS : TFM_PAIRED_AR;
            if (paired && paired != t)
                st = tfm_cli_usage_error("--paired-bs and --paired-ar exclude each other");
            paired = t;
            break;
        }
        case OPT_PAIRED_BS_N:
            if (!(st = tfm_cli_int("--paired-bs-n", optarg, 2, 100000, &v)))
                bs_n = (int)v;
            bs_n_set = 1;
            break;
        case OPT_PAIRED_AR_N:
            if (!(st = tfm_cli_int("--paired-ar-n", optarg, 1, 1000000, &v)))
                ar_n = (int)v;
            ar_n_set = 1;
            break;
        case OPT_LINEARIZE:
        case OPT_RESTORE:
        case OPT_ONELINE: {
            int m = c == OPT_LINEARIZE ? MODE_LINEARIZE
                  : c == OPT_RESTORE   ? MODE_RESTORE : MODE_ONELINE;
            static const char *const name[] = {"", "--linearize", "--restore", "--oneline"};
            if (mode != MODE_SCORE && mode != m)
                st = tfm_cli_usage_error("%s and %s exclude each other",
                                         name[mode < m ? mode : m], name[mode < m ? m : mode]);
            mode = m;
            break;
        }
        case OPT_KEEP_TAGS: lo.keep_tags = fo.keep_tags = 1; break;
        case OPT_KEEP_FTAGS: lo.keep_function_tags = 1; break;
        case OPT_KEEP_WORDS: lo.keep_words = 1; break;
        case OPT_ROOT:
            if (!*optarg || strpbrk(optarg, " \t\n\r\f\v()"))
                st = tfm_cli_usage_error("--root: '%s': expected a label (no space or "
                                         "bracket)", optarg);
            fo.root = optarg;
            break;
        case 'q': quiet = 1; break;
        case 'h':
            free(refs);
            return tfm_cli_help(HELP);
        case OPT_VERSION:
            free(refs);
            return tfm_cli_version(TFM_VERSION);
        default: st = tfm_cli_usage(); break;
        }
        if (st) {
            free(refs);
            return st;
        }
    }
    if (argc - optind > 1 && !paired) {
        free(refs);
        return tfm_cli_usage_error("one input FILE at most ('%s' is extra%s)", argv[optind + 1],
                                   mode == MODE_SCORE && metric == MET_BLEU
                                       ? "; several systems are for --paired-bs or --paired-ar"
                                       : "");
    }
    /* after the loop, so that a --tok in any position meets --tokenized below */
    if (tokenized)
        bo.tok = TFM_TOK_TOKENIZED;
    const char *in = optind < argc ? argv[optind] : "-";
    const char *bad = NULL;
    if (mode == MODE_SCORE) {
        if (nrefs == 0)
            bad = "no reference: give -r REF";
        else if (bo.compound_split && bo.tok != TFM_TOK_TOKENIZED)
            bad = "--compound-split needs --tokenized";
        else if (bo.tok == TFM_TOK_TOKENIZED && tok_set)
            bad = "--tokenized and --tok exclude each other";
        else if (metric != MET_BLEU && (tok_set || smooth_set || bo.tok == TFM_TOK_TOKENIZED))
            bad = "--tok, --smooth and --tokenized are for --metric bleu";
        else if (smooth_value_set && bo.smooth != TFM_SMOOTH_FLOOR && bo.smooth != TFM_SMOOTH_ADDK)
            bad = "--smooth-value is for --smooth floor or add-k";
        else if (metric != MET_CHRF && chrf_set)
            bad = "--chrf-* options are for --metric chrf";
        else if (metric != MET_F1 && (fo.param || fo.source || fo.linearized ||
                                      fo.per_sentence || fo.max_error >= 0))
            bad = "--param, --source, --linearized, --per-sentence and --max-error are for "
                  "--metric f1";
        else if (metric == MET_F1 && (nrefs > 1 || bo.lowercase))
            bad = "--metric f1 takes one -r (the gold trees) and no --lowercase";
        else if (fo.source && fo.linearized)
            bad = "--source and --linearized exclude each other";
        else if ((fo.keep_tags || fo.root) && !fo.source && !fo.linearized)
            bad = "--keep-tags and --root are for --linearize, --restore or --metric f1 with "
                  "--source or --linearized";
        else if (lo.keep_function_tags || lo.keep_words)
            bad = "--keep-function-tags and --keep-words are for --linearize";
        else if (bootstrap_set && !confidence)
            bad = "--confidence-n is for --confidence";
        else if (seed_set && !confidence && !paired)
            bad = "--seed is for --confidence, --paired-bs or --paired-ar";
        else if (bs_n_set && paired != TFM_PAIRED_BS)
            bad = "--paired-bs-n is for --paired-bs";
        else if (ar_n_set && paired != TFM_PAIRED_AR)
            bad = "--paired-ar-n is for --paired-ar";
        else if (paired && confidence)
            bad = "--confidence is for one system; --paired-bs gives each system's interval";
        else if (paired && metric != MET_BLEU)
            bad = "--paired-bs and --paired-ar are for --metric bleu (chrF's and F1's tests "
                  "are not there yet)";
        else if (paired && argc - optind < 2)
            bad = "--paired-bs and --paired-ar need a BASELINE and at least one SYSTEM";
        else if (confidence && metric != MET_BLEU)
            bad = "--confidence is for --metric bleu (chrF's and F1's intervals are not "
                  "there yet)";
    } else if (nrefs || metric != MET_BLEU || json || confidence || bootstrap_set || seed_set ||
               paired || bs_n_set || ar_n_set || argc - optind > 1) {
        bad = "--linearize, --restore and --oneline take one FILE and no -r, --metric, "
              "--json, --confidence or --paired-*";
    } else if (mode == MODE_ONELINE && (fo.source || fo.root || lo.keep_tags ||
                                        lo.keep_function_tags || lo.keep_words)) {
        bad = "--oneline takes no --source, --root or --keep-* options";
    } else if (mode == MODE_RESTORE && !fo.source) {
        bad = "--restore needs --source FILE";
    } else if (mode == MODE_RESTORE && (lo.keep_tags || lo.keep_function_tags || lo.keep_words)) {
        bad = "--restore takes no --keep-tags, --keep-words or --keep-function-tags";
    } else if (lo.keep_tags && lo.keep_words) {
        bad = "--keep-tags and --keep-words exclude each other";
    } else if (mode == MODE_LINEARIZE && (fo.source || fo.root)) {
        bad = "--linearize takes no --source or --root";
    }
    if (bad) {
        free(refs);
        return tfm_cli_usage_error("%s", bad);
    }
    /* standard input is read once: by one of the inputs ("-", or /dev/stdin on a pipe) */
    char stdin_user[5][96];         /* two references, --param, --source, FILE */
    int nstdin = 0;
    for (int r = 0; r < nrefs && nstdin < 2; r++)
        if (tfm_cli_reads_stdin(refs[r])) {
            snprintf(stdin_user[nstdin], sizeof stdin_user[0], "%s (-r %.40s)",
                     nstdin ? "another reference" : "the references", refs[r]);
            nstdin++;
        }
    if (fo.param && tfm_cli_reads_stdin(fo.param))
        snprintf(stdin_user[nstdin++], sizeof stdin_user[0], "the parameter file "
                 "(--param %.40s)", fo.param);
    if (fo.source && tfm_cli_reads_stdin(fo.source))
        snprintf(stdin_user[nstdin++], sizeof stdin_user[0], "the source sentences "
                 "(--source %.40s)", fo.source);
    for (int k = optind, systems = 0; k < (argc > optind ? argc : optind + 1) && nstdin < 5;
         k++) {
        const char *f = k < argc ? argv[k] : in;
        if (tfm_cli_reads_stdin(f))
            snprintf(stdin_user[nstdin++], sizeof stdin_user[0], "%s (FILE %.40s)",
                     paired ? (systems++ ? "another system" : "a system")
                     : mode == MODE_SCORE   ? "the hypotheses"
                     : mode == MODE_RESTORE ? "the linearized trees" : "the trees",
                     strcmp(f, "-") == 0 && !paired ? "- or none" : f);
    }
    if (nstdin > 1) {
        free(refs);
        return tfm_cli_usage_error("standard input cannot feed both %s and %s: give a file "
                                   "for one", stdin_user[0], stdin_user[1]);
    }
    if (bo.tok == TFM_TOK_TOKENIZED && !smooth_set)
        bo.smooth = TFM_SMOOTH_NONE;    /* multi-bleu.perl */

    struct tfm_error err;
    int rc;
    if (mode == MODE_LINEARIZE) {
        rc = tfm_treebank_linearize(in, &lo, stdout, &err);
    } else if (mode == MODE_RESTORE) {
        rc = tfm_treebank_restore(in, fo.source, fo.root, stdout, &err);
    } else if (mode == MODE_ONELINE) {
        rc = tfm_treebank_oneline(in, stdout, &err);
    } else {
        struct tfm_score_opts so = {.out = stdout, .json = json, .version = SIG_VERSION,
                                    .warn = quiet ? NULL : warn,
                                    .bootstrap = confidence ? bootstrap : 0, .seed = seed,
                                    .keep_rows = paired != 0};
        struct tfm_text *rt = calloc((size_t)(nrefs ? nrefs : 1), sizeof *rt);
        rc = rt ? read_refs(rt, refs, nrefs, &err) : tfm_fail(&err, "out of memory");
        if (rc == 0 && paired) {
            rc = paired_files(&bo, &so, rt, nrefs, (const char *const *)argv + optind,
                              argc - optind, paired, paired == TFM_PAIRED_BS ? bs_n : ar_n,
                              seed, &err);
        } else if (rc == 0) {
            struct tfm_scorer *s = metric == MET_BLEU ? tfm_bleu_scorer(&bo, nrefs, &so, &err)
                                 : metric == MET_CHRF ? tfm_chrf_scorer(&co, nrefs, &so, &err)
                                                      : tfm_evalb_scorer(&fo, &so, &err);
            rc = s ? score_file(s, rt, in, &err) : -1;
            tfm_scorer_free(s);
        }
        for (int r = 0; rt && r < nrefs; r++)
            tfm_text_free(&rt[r]);
        free(rt);
    }
    if (rc)
        fprintf(stderr, PROG ": %s\n", err.msg);
    free(refs);
    return tfm_cli_close_stdout(0) ? 1 : rc ? 1 : 0;
}
