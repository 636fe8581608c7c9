/* tfm-train: train a Transformer on a batch stream (man/tfm-train.1).  Options, config,
 * device and signals here; the loop is tfm_train_run (src/train.c). */
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "cli.h"
#include "config.h"
#include "device.h"
#include "dist.h"
#include "progress.h"
#include "train.h"
#include "util.h"

static const char USAGE[] =
    "usage: tfm-train -c CONFIG [--set KEY=VALUE]... -o DIR [--valid FILE] [--valid-every N]\n"
    "                 [--valid-bleu] [--early-stop N] [--max-steps N] [--max-time DUR]\n"
    "                 [--save-every DUR|N]... [--keep N] [--update-freq K] [--resume]\n"
    "                 [--device cpu|cuda|sim|auto] [--threads N] [--ranks R] [--max-memory SIZE]\n"
    "                 [--print-config] [--log FILE] [--report-every N] [--progress] [--quiet]\n"
    "                 [FILE]\n";

static const char HELP[] =
    "Train on the batch stream FILE (default stdin); checkpoints go to DIR.\n"
    "  -c, --config FILE      config file (configs/*.conf; keys in tfm-config(5))\n"
    "  -s, --set KEY=VALUE    override one config key (repeatable)\n"
    "  -o, --output DIR       checkpoint directory: DIR/step-NNNNNN.tfm, DIR/last.tfm\n"
    "  -V, --valid FILE       validation batch stream: loss and perplexity\n"
    "      --valid-every N    updates between validations (default 1000; 0: at the end)\n"
    "      --valid-bleu       also BLEU of greedy translations of the validation set\n"
    "      --early-stop N     stop after N validations without a better BLEU (with\n"
    "                         --valid-bleu) or perplexity\n"
    "  -n, --max-steps N      stop after update N (config key max_steps)\n"
    "  -t, --max-time DUR     stop after DUR of training in this run (90s, 10m, 2h)\n"
    "  -S, --save-every DUR|N checkpoint every DUR of time or every N updates (default 10m)\n"
    "  -k, --keep N           keep the newest N checkpoints (default all)\n"
    "  -u, --update-freq K    accumulate K batches per update (default 1)\n"
    "  -r, --resume           continue from the newest checkpoint of DIR\n"
    "  -d, --device D         cpu, cuda, sim or auto (default auto)\n"
    "  -j, --threads N        CPU threads in all (default: online CPUs)\n"
    "  -R, --ranks R          data-parallel ranks in this process, one per GPU\n"
    "                         (default: every GPU, or 1 on the CPU)\n"
    "  -p, --print-config     print the effective config and exit\n"
    "  -l, --log FILE         append one tab-separated line per report to FILE\n"
    "      --report-every N   updates between progress reports (default 100)\n"
    "      --max-memory SIZE  memory the run may use (512M, 8G; default: physical)\n"
    "  -P, --progress         progress lines on stderr even when it is not a terminal\n"
    "  -q, --quiet            no progress lines or notes\n"
    "  -h, --help             this help\n"
    "      --version          print the version\n";

static volatile sig_atomic_t stop_signal;
/* from a stop signal to a forced exit (TFM_STOP_GRACE, default 120 s; zero: none) */
static struct itimerval stop_grace = {.it_value = {.tv_sec = 120}};

/* SIGINT, SIGTERM, SIGHUP: the loop saves and stops at the end of the update.  A
 * computation that never ends (a stuck library, a hung peer) must not make the signal
 * ineffective: a second signal kills (SA_RESETHAND), and after stop_grace seconds the
 * alarm below ends the process. */
static void on_signal(int sig)
{
    stop_signal = sig;
    if (stop_grace.it_value.tv_sec || stop_grace.it_value.tv_usec)
        setitimer(ITIMER_REAL, &stop_grace, NULL);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "tfm-train: still busy long after the stop signal "
                              "(TFM_STOP_GRACE); exiting without saving\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(128 + (stop_signal ? (int)stop_signal : SIGTERM));
}

/* The checkpoint directory's lock, when this main took it (--resume without -c: before
 * the checkpoint that gives the config is read); released at exit. */
static struct tfm_ckpt_lock *dir_lock;

static void unlock_dir(void)
{
    tfm_checkpoint_unlock(dir_lock);
    dir_lock = NULL;
}

static int all_digits(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

enum { OPT_VERSION = 1000, OPT_REPORT, OPT_VALID_EVERY, OPT_MAX_MEMORY, OPT_VALID_BLEU, OPT_EARLY_STOP };

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},      {"set", required_argument, NULL, 's'},
        {"output", required_argument, NULL, 'o'},      {"valid", required_argument, NULL, 'V'},
        {"max-steps", required_argument, NULL, 'n'},   {"max-time", required_argument, NULL, 't'},
        {"save-every", required_argument, NULL, 'S'},  {"keep", required_argument, NULL, 'k'},
        {"update-freq", required_argument, NULL, 'u'}, {"resume", no_argument, NULL, 'r'},
        {"device", required_argument, NULL, 'd'},      {"threads", required_argument, NULL, 'j'},
        {"ranks", required_argument, NULL, 'R'},       {"print-config", no_argument, NULL, 'p'},
        {"log", required_argument, NULL, 'l'},         {"progress", no_argument, NULL, 'P'},
        {"quiet", no_argument, NULL, 'q'},             {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {"report-every", required_argument, NULL, OPT_REPORT},
        {"valid-every", required_argument, NULL, OPT_VALID_EVERY},
        {"valid-bleu", no_argument, NULL, OPT_VALID_BLEU},
        {"early-stop", required_argument, NULL, OPT_EARLY_STOP},
        {"max-memory", required_argument, NULL, OPT_MAX_MEMORY},
        {NULL, 0, NULL, 0},
    };
    struct tfm_train_opts o;
    tfm_train_defaults(&o);
    const char *config_path = NULL, *device = "auto";
    /* --set values, kept to the end (a global: every early return may leave it) */
    static const char **sets;
    sets = calloc((size_t)argc, sizeof *sets);
    int nsets = 0, print_config = 0, progress = 0, quiet = 0, save_given = 0, ranks_given = 0, c;
    int64_t max_steps = -1, save_steps = -1, keep = -1;
    long long v;
    if (!sets) {
        fprintf(stderr, "tfm-train: out of memory\n");
        return 1;
    }
    o.save_every_sec = 0;
    tfm_cli_init("tfm-train", USAGE, argv);
    while ((c = getopt_long(argc, argv, "c:s:o:V:n:t:S:k:u:rd:j:R:pl:Pqh", opts, NULL)) != -1) {
        switch (c) {
        case 'c': config_path = optarg; break;
        case 's': sets[nsets++] = optarg; break;
        case 'o': o.out_dir = optarg; break;
        case 'V': o.valid_path = optarg; break;
        case 'n':
            if (tfm_cli_int("--max-steps", optarg, 0, INT32_MAX, &v))
                return 2;
            max_steps = v;
            break;
        case 't':
            if (tfm_duration_parse(optarg, &o.max_time))
                return tfm_cli_usage_error("--max-time: '%s' is not a duration (90s, 10m, 2h)",
                                           optarg);
            if (o.max_time == 0)
                return tfm_cli_usage_error("--max-time: '%s': no time to train; omit the option "
                                           "for no time limit", optarg);
            break;
        case 'S':
            save_given = 1;
            if (all_digits(optarg)) {
                if (tfm_cli_int("--save-every", optarg, 0, INT32_MAX, &v))
                    return 2;
                save_steps = v;
            } else if (tfm_duration_parse(optarg, &o.save_every_sec)) {
                return tfm_cli_usage_error("--save-every: '%s' is neither a number of updates "
                                           "nor a duration (90s, 10m, 2h)", optarg);
            } else if (!strpbrk(optarg, "smhd")) {  /* '1.5': neither updates nor seconds */
                return tfm_cli_usage_error("--save-every: '%s': a number of updates is whole, "
                                           "a duration has a unit (%ss, %sm)", optarg, optarg,
                                           optarg);
            }
            break;
        case 'k':
            if (tfm_cli_int("--keep", optarg, 0, 1000000, &v))
                return 2;
            keep = v;
            break;
        case 'u':
            if (tfm_cli_int("--update-freq", optarg, 1, 65536, &v))
                return 2;
            o.update_freq = (int)v;
            break;
        case 'r': o.resume = 1; break;
        case 'd':
            if (!tfm_device_name_ok(optarg))
                return tfm_cli_usage_error("--device: '%s': expected " TFM_DEVICE_NAMES,
                                           optarg);
            device = optarg;
            break;
        case 'j':
            if (tfm_cli_int("--threads", optarg, 1, 4096, &v))
                return 2;
            o.threads = (int)v;
            break;
        case 'R':
            if (tfm_cli_int("--ranks", optarg, 1, TFM_DIST_MAX_LOCAL, &v))
                return 2;
            o.ranks = (int)v;
            ranks_given = 1;
            break;
        case 'p': print_config = 1; break;
        case 'l': o.log_path = optarg; break;
        case 'P': progress = 1; break;
        case 'q': quiet = 1; break;
        case 'h': return tfm_cli_help(HELP);
        case OPT_VERSION: return tfm_cli_version(TFM_VERSION);
        case OPT_REPORT:
            if (tfm_cli_int("--report-every", optarg, 1, INT64_MAX, &v))
                return 2;
            o.report_every = v;
            break;
        case OPT_VALID_EVERY:
            if (tfm_cli_int("--valid-every", optarg, 0, INT64_MAX, &v))
                return 2;
            o.valid_every = v;
            break;
        case OPT_MAX_MEMORY:
            if (tfm_cli_size("--max-memory", optarg, &o.memory_limit))
                return 2;
            break;
        case OPT_VALID_BLEU: o.valid_bleu = 1; break;
        case OPT_EARLY_STOP:
            if (tfm_cli_int("--early-stop", optarg, 1, 1000000, &v))
                return 2;
            o.early_stop = (int)v;
            break;
        default: return tfm_cli_usage();
        }
    }
    if (optind < argc - 1)
        return tfm_cli_usage_error("one batch stream at most (got %d)", argc - optind);
    if ((o.valid_bleu || o.early_stop) && !o.valid_path)
        return tfm_cli_usage_error("%s needs --valid FILE",
                                   o.valid_bleu ? "--valid-bleu" : "--early-stop");
    o.train_path = optind < argc ? argv[optind] : "-";
    if (strcmp(o.train_path, "-") == 0 && !print_config && isatty(0))
        return tfm_cli_usage_error("no batch stream: give FILE or a pipe (tfm-batch ... |)");
    if (!save_given)
        o.save_every_sec = 600;     /* the paper's 10 minutes */
    if (!o.out_dir && !print_config)
        return tfm_cli_usage_error("-o DIR is required (where checkpoints go)");
    /* - is standard output elsewhere; checkpoints go to files of a directory */
    if (o.out_dir && strcmp(o.out_dir, "-") == 0)
        return tfm_cli_usage_error("-o -: checkpoints are files of a directory, not a stream: "
                                   "give its path");

    if (config_path && !print_config && tfm_cli_names_stdin(config_path) &&
        tfm_cli_names_stdin(o.train_path))
        return tfm_cli_usage_error("-c %s: standard input cannot feed both the config and the "
                                   "batch stream (give FILE)", config_path);
    if (o.valid_path && tfm_cli_reads_stdin(o.valid_path))
        return tfm_cli_usage_error("--valid %s: standard input is read once; the validation "
                                   "batches are read again at every validation (give a "
                                   "regular file)", o.valid_path);

    /* processes: --ranks R each (default 1), on the GPUs of its place on the node; the
     * place first, for process 0 takes the directory's lock below */
    struct tfm_error err;
    struct tfm_dist_env env = {.rank = 0, .world = 1};
    if (!print_config && tfm_dist_env_read(&env, &err))
        return tfm_cli_fail(&err, 1);

    /* the config: defaults, then the file (or the checkpoint resumed), then overrides */
    struct tfm_config cfg;
    tfm_config_defaults(&cfg);
    if (config_path) {
        if (tfm_config_load(&cfg, config_path, &err)) {
            return tfm_cli_fail(&err, 1);
        }
    } else if (o.resume && o.out_dir) {
        /* The lock of the directory before its newest checkpoint is read: a second run
         * there is refused before it reads one (man page).  Process 0 holds it for the
         * run (tfm_train_run uses it, o.lock); --print-config writes nothing and takes
         * none; a directory that is not there holds no checkpoint. */
        struct stat st;
        if (!print_config && env.rank == 0 && stat(o.out_dir, &st) == 0 &&
            S_ISDIR(st.st_mode)) {
            if (!(dir_lock = tfm_checkpoint_lock(o.out_dir, &err)))
                return tfm_cli_fail(&err, 1);
            atexit(unlock_dir);
            o.lock = dir_lock;
        }
        char path[4096];
        int found = tfm_checkpoint_find_last(o.out_dir, path, sizeof path, &err);
        /* its config only: the run loads and checks all of it before training */
        struct tfm_checkpoint *ck =
            found > 0 ? tfm_checkpoint_load(path, TFM_CKPT_SKIP_OPTIMIZER, &err) : NULL;
        if (found < 0 || (found > 0 && (!ck || tfm_checkpoint_config(ck, &cfg, &err)))) {
            tfm_checkpoint_free(ck);
            return tfm_cli_fail(&err, 1);
        }
        tfm_checkpoint_free(ck);
        if (!found) {
            fprintf(stderr, "tfm-train: %s: no checkpoint to resume and no -c CONFIG\n", o.out_dir);
            return 2;
        }
    } else {
        return tfm_cli_usage_error("-c CONFIG is required (unless --resume finds a checkpoint)");
    }
    for (int i = 0; i < nsets; i++)
        if (tfm_config_set(&cfg, sets[i], "--set", &err)) {
            return tfm_cli_fail(&err, 2);
        }
    free(sets);
    if (max_steps >= 0)
        cfg.max_steps = (int)max_steps;
    if (save_steps >= 0)
        cfg.save_every = (int)save_steps;
    if (keep >= 0)
        cfg.keep = (int)keep;
    /* relations between keys (heads dividing d_model...), printed or trained; the
     * vocabulary may still come from the stream */
    if (tfm_config_check(&cfg, 0, &err)) {
        fprintf(stderr, "tfm-train: config: %s\n", err.msg);
        return 1;
    }
    if (print_config) {
        char *text = tfm_config_format(&cfg);
        if (!text || fputs(text, stdout) < 0 || fflush(stdout) || ferror(stdout) || fclose(stdout)) {
            perror("tfm-train: write error");
            free(text);
            return 1;
        }
        free(text);
        return 0;
    }

    /* where: device and ranks */
    FILE *notes = quiet ? NULL : stderr;
    o.notes = notes;
    o.progress = !quiet && (progress || isatty(2)) ? stderr : NULL;
    if (env.world > 1) {
        o.world = env.world;
        o.world_rank = env.rank;
        if (env.rank != 0) {            /* process 0 reports for the run */
            notes = NULL;
            o.notes = NULL;
            o.progress = NULL;
            o.log_path = NULL;
        }
    }
    struct tfm_gpus gpu;
    if (tfm_device_open_gpus(device, cfg.precision, o.threads,
                             env.world > 1 ? env.local_rank * o.ranks : 0,
                             env.world > 1 || ranks_given ? o.ranks : 0, &gpu, &err)) {
        if (env.world > 1)      /* its GPUs follow from its place on the node */
            tfm_error_prefix(&err, "process %d of %d, local rank %d", env.rank, env.world,
                             env.local_rank);
        return tfm_cli_fail(&err, 1);
    }
    if (notes)
        fprintf(notes, "tfm-train: %s\n", gpu.note);
    else if (!quiet && gpu.fallback)    /* a fallback is never silent */
        fprintf(stderr, "tfm-train: process %d of %d: %s\n", env.rank, env.world, gpu.note);
    if (gpu.count) {
        o.backends = gpu.be;
        o.ranks = gpu.count;
    }

    const char *grace = getenv("TFM_STOP_GRACE");
    if (grace && *grace) {      /* seconds, a fraction allowed, as every time limit */
        double g;
        if (tfm_parse_double(grace, &g) || !(g >= 0 && g <= 1e7)) {
            fprintf(stderr, "tfm-train: TFM_STOP_GRACE=%s: expected seconds from 0 (none) to "
                    "1e7\n", grace);
            return 1;           /* as every bad environment value: not a command-line usage */
        }
        stop_grace.it_value.tv_sec = (time_t)g;
        stop_grace.it_value.tv_usec = (suseconds_t)((g - (double)(time_t)g) * 1e6);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART | SA_RESETHAND;    /* a second signal kills */
    sigemptyset(&sa.sa_mask);
    tfm_catch_stop_signals(&sa);    /* SIGHUP, a closed terminal: save and stop too */
    /* A closed stderr (`2>&1 | head`) must not kill training: writes to it fail instead,
     * and the work goes on to its checkpoint. */
    signal(SIGPIPE, SIG_IGN);
    o.stop = &stop_signal;

    struct tfm_train_result res;
    int failed = tfm_train_run(&cfg, &o, &res, &err);
    for (int i = 0; i < gpu.count; i++)
        gpu.be[i]->destroy(gpu.be[i]);
    if (failed) {
        /* launchers merge the processes' standard errors: the others say whose it is
         * (process 0 reports for the run, and says nothing of the kind) */
        if (env.world > 1 && env.rank != 0)
            tfm_error_prefix(&err, "process %d of %d", env.rank, env.world);
        /* a run the signal cut short (joining, or a peer silent after it) says so */
        return tfm_cli_fail(&err, stop_signal ? 128 + (int)stop_signal : 1);
    }
    if (notes && res.step == res.start_step)  /* no update: no checkpoint of it either */
        fprintf(notes, "tfm-train: %s at update %lld, before this run's first update: nothing "
                "trained%s%s\n", tfm_train_end_name(res.end), (long long)res.step,
                res.last_checkpoint[0] ? "; last checkpoint " : ", no checkpoint written",
                res.last_checkpoint);
    else if (notes)
        fprintf(notes, "tfm-train: %s at update %lld; last checkpoint %s\n",
                tfm_train_end_name(res.end),
                (long long)res.step, res.last_checkpoint[0] ? res.last_checkpoint : "(none)");
    if (res.end == TFM_TRAIN_STOPPED && stop_signal)   /* 0: a signal to another process */
        return 128 + (int)stop_signal;
    return 0;
}
