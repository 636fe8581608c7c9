/* test_packed.c: the model on a backend that stores activations as 2-byte bf16 (act_size
 * 2), against the CPU's bf16 emulation (bf16 values in fp32 words, act_size 4).
 *
 * The sim backend at bf16 stores every activation as bf16 bits, as a GPU does, and runs
 * the CPU's emulated ops on fp32 copies of them (backend_sim.c), so its results are the
 * CPU's bit for bit exactly when the model sizes, steps through and reads its activations
 * in act_size units (backend.h, precision): an activation pointer moved with float
 * arithmetic (qkv + D, the rows of an output chunk, a position of the decoder's cache)
 * lands on other elements at act_size 2, and the bits below differ.  Compared, for each
 * shape: the losses of three training batches (dropout on every site), the gradients of
 * the third, the master weights and Adam's moments after three updates, an evaluation,
 * teacher-forced log-probabilities, the attention weights, incremental decoding steps
 * with rows copied between steps, and the ids and scores of greedy and beam search.
 * Shapes: post-norm with sinusoids and tied embeddings; pre-norm with learned positions
 * and untied embeddings, heads of 8 and a d_ff that is no multiple of d_model; and a
 * vocabulary of 27000 whose output layer runs in two chunks of rows (310 + 10).
 * Also: the sim's act_size per precision, its conversions (upload_act rounds to nearest
 * even, download_act gives the bf16 back; 2 bytes an element), TFM_SIM_PACKED=0 (bf16 in
 * fp32 words: act_size 4, the same bits), and the abort of an op whose activations run
 * past the end of their block.
 */
#include "check.h"

#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>

#include "beam.h"
#include "decode.h"
#include "model.h"
#include "optim.h"

struct shape {
    const char *name;
    int layers, d_model, heads, d_ff, vocab, max_len, tokens;
    int norm, pos, tie;
    int B, S, T;            /* the batch: B pairs of up to S source, T target tokens */
    int Bd;                 /* sentences decoded: more than tokens / S, so that the
                             * encoder runs in groups (tfm_decoder_encode) */
};

static const struct shape shapes[] = {
    {"post-norm, sinusoids, tied", 2, 16, 2, 32, 23, 12, 64, TFM_NORM_POST, TFM_POS_SINUSOID,
     1, 4, 7, 6, 12},
    {"pre-norm, learned positions, untied", 2, 24, 3, 40, 37, 12, 64, TFM_NORM_PRE,
     TFM_POS_LEARNED, 0, 5, 6, 7, 15},
    {"a vocabulary of 27000: two output chunks", 1, 8, 2, 16, 27000, 10, 320, TFM_NORM_POST,
     TFM_POS_SINUSOID, 1, 40, 6, 8, 60},
};

static void config(struct tfm_config *c, const struct shape *s)
{
    tfm_config_defaults(c);
    c->layers = s->layers;
    c->d_model = s->d_model;
    c->heads = s->heads;
    c->d_ff = s->d_ff;
    c->vocab = s->vocab;
    c->max_len = s->max_len;
    c->tokens = s->tokens;
    c->norm = s->norm;
    c->pos = s->pos;
    c->tie = s->tie;
    c->dropout = 0.1;
    c->attn_dropout = 0.1;
    c->relu_dropout = 0.1;
    c->label_smoothing = 0.1;
    c->seed = 3;
    c->precision = TFM_PRECISION_BF16;
}

/* A padded batch of B pairs: sentence b has S - b % 3 source and T - b % 2 target tokens
 * (sentence 0 none of padding, for the attention weights), eos last; tgt may be NULL. */
static void batch(const struct shape *s, int B, int32_t *src, int32_t *tgt)
{
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < s->S; i++) {
            int n = s->S - b % 3;
            src[b * s->S + i] = i < n - 1 ? 4 + (b * 7 + i * 13) % (s->vocab - 4)
                                          : i == n - 1 ? TFM_EOS : TFM_PAD;
        }
        for (int i = 0; tgt && i < s->T; i++) {
            int n = s->T - b % 2;
            tgt[b * s->T + i] = i < n - 1 ? 4 + (b * 11 + i * 5 + 1) % (s->vocab - 4)
                                          : i == n - 1 ? TFM_EOS : TFM_PAD;
        }
    }
}

/* Everything compared, in one list of floats and doubles per backend. */
struct run {
    double d[256];          /* losses, hypotheses' log-probabilities */
    int nd;
    float *f;               /* gradients, parameters, moments, log-probabilities, ... */
    size_t nf, cap;
    int32_t *ids;           /* decoded ids, hypothesis lengths */
    size_t ni, icap;
    int failed;
};

static void put(struct run *r, const float *x, size_t n)
{
    if (r->nf + n > r->cap) {
        r->cap = (r->nf + n) * 2;
        r->f = realloc(r->f, r->cap * sizeof *r->f);
    }
    memcpy(r->f + r->nf, x, n * sizeof *x);
    r->nf += n;
}

static void put_ids(struct run *r, const int32_t *x, size_t n)
{
    if (r->ni + n > r->icap) {
        r->icap = (r->ni + n) * 2 + 16;
        r->ids = realloc(r->ids, r->icap * sizeof *r->ids);
    }
    memcpy(r->ids + r->ni, x, n * sizeof *x);
    r->ni += n;
}

static int ok(struct run *r, int rc, const struct tfm_error *err)
{
    if (rc) {
        printf("# %s\n", err->msg);
        r->failed = 1;
    }
    return rc == 0;
}

static void hyps(struct run *r, const struct tfm_hyps *h)
{
    for (int64_t i = 0; i < h->n; i++) {
        int32_t len = (int32_t)(h->offsets[i + 1] - h->offsets[i]);
        put_ids(r, &len, 1);
        put_ids(r, h->ids + h->offsets[i], (size_t)len);
        put(r, &h->score[i], 1);
        if (r->nd < 256)
            r->d[r->nd++] = h->logp[i];
    }
}

/* The whole exercise of shape s on be. */
static void exercise(struct tfm_backend *be, const struct shape *s, struct run *r)
{
    struct tfm_error err;
    struct tfm_config c;
    config(&c, s);
    memset(r, 0, sizeof *r);
    int B = s->B, S = s->S, T = s->T, V = s->vocab, Bd = s->Bd;
    int32_t *src = malloc((size_t)B * S * sizeof *src), *tgt = malloc((size_t)B * T * sizeof *tgt);
    int32_t *dsrc = malloc((size_t)Bd * S * sizeof *dsrc);
    batch(s, B, src, tgt);
    batch(s, Bd, dsrc, NULL);
    struct tfm_model *m = tfm_model_create(&c, be, 0, &err);
    if (!ok(r, !m, &err))
        goto done;
    int64_t n = tfm_model_count(m);
    int64_t nh = (int64_t)(B * T > 2 * Bd ? B * T : 2 * Bd) * V;
    float *host = malloc((size_t)(n > nh ? n : nh) * sizeof *host);
    struct tfm_loss l;
    for (int step = 1; step <= 3; step++) {
        if (!ok(r, tfm_model_train_batch(m, B, S, T, src, tgt, (uint64_t)step, &l, &err), &err))
            goto free_host;
        r->d[r->nd++] = l.loss;
        r->d[r->nd++] = l.nll;
        if (step == 3) {
            tfm_model_download(m, TFM_GRADS, host);
            put(r, host, (size_t)n);
        }
        if (!ok(r, tfm_optim_step(m, step, l.tokens, NULL, &err), &err))
            goto free_host;
    }
    tfm_model_download(m, TFM_PARAMS, host);
    put(r, host, (size_t)n);
    tfm_model_download(m, TFM_ADAM_M, host);
    put(r, host, (size_t)n);
    tfm_model_download(m, TFM_ADAM_V, host);
    put(r, host, (size_t)n);
    if (!ok(r, tfm_model_eval_batch(m, B, S, T, src, tgt, &l, &err), &err))
        goto free_host;
    r->d[r->nd++] = l.loss;
    if (!ok(r, tfm_model_logprobs(m, B, S, T, src, tgt, host, &err), &err))
        goto free_host;
    put(r, host, (size_t)B * T * V);
    /* attention weights of sentence 0 (no padding) */
    int N = s->layers, H = s->heads;
    float *att = malloc((size_t)N * H * (T * S + S * S + T * T) * sizeof *att);
    if (!ok(r, tfm_model_attention(m, S, T, src, tgt, att, att + N * H * T * S,
                                   att + N * H * (T * S + S * S), &err), &err)) {
        free(att);
        goto free_host;
    }
    put(r, att, (size_t)N * H * (T * S + S * S + T * T));
    free(att);
    /* incremental decoding: Bd rows, then 2 Bd (each row copied), three steps */
    struct tfm_decoder *d = tfm_decoder_create(m, Bd, S, 2 * Bd, 3, &err);
    if (ok(r, !d, &err) && ok(r, tfm_decoder_encode(d, Bd, S, dsrc, &err), &err)) {
        int32_t *last = malloc(2 * (size_t)Bd * sizeof *last);
        int32_t *rows = malloc(2 * (size_t)Bd * sizeof *rows);
        for (int i = 0; i < 2 * Bd; i++) {
            last[i] = TFM_BOS;
            rows[i] = i % Bd;
        }
        int R = Bd;
        for (int t = 0; t < 3 && !r->failed; t++) {
            if (!ok(r, tfm_decoder_step(d, R, last, rows, host, &err), &err))
                break;
            put(r, host, (size_t)R * V);
            if (t == 0) {           /* every row kept twice: rows share their cache */
                if (!ok(r, tfm_decoder_select(d, 2 * Bd, rows, &err), &err))
                    break;
                R = 2 * Bd;
            }
            for (int i = 0; i < R; i++)
                last[i] = 4 + (i * 3 + t) % (V - 4);
        }
        free(last);
        free(rows);
    }
    tfm_decoder_free(d);
    /* greedy and beam search */
    for (int beam = 1; beam <= 3; beam += 2) {
        struct tfm_beam_opts o;
        struct tfm_hyps h;
        tfm_beam_defaults(&o);
        o.beam = beam;
        int rc = tfm_decode_sources(m, Bd, S, dsrc, &o, 4, &h, &err);
        if (ok(r, rc, &err))
            hyps(r, &h);
        tfm_hyps_free(&h);
    }
free_host:
    free(host);
done:
    tfm_model_free(m);
    free(src);
    free(tgt);
    free(dsrc);
}

static void run_free(struct run *r)
{
    free(r->f);
    free(r->ids);
}

/* The sim at bf16 stores 2 bytes an activation and gives the CPU's bits, shape by shape. */
static void test_shapes(void)
{
    struct tfm_error err;
    struct tfm_backend *cpu = tfm_backend_cpu(2, &err), *sim = tfm_backend_sim(2, &err);
    CHECK(cpu && sim);
    if (!cpu || !sim)
        return;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        struct run a, b;
        exercise(cpu, &shapes[i], &a);
        CHECK(cpu->act_size == 4 && cpu->precision == TFM_PRECISION_BF16);
        exercise(sim, &shapes[i], &b);
        CHECK(sim->act_size == 2 && sim->precision == TFM_PRECISION_BF16);
        CHECK(!a.failed && !b.failed);
        size_t df = 0, di = 0;
        while (df < a.nf && df < b.nf && memcmp(&a.f[df], &b.f[df], sizeof *a.f) == 0)
            df++;
        while (di < a.ni && di < b.ni && a.ids[di] == b.ids[di])
            di++;
        int same = a.nd == b.nd && memcmp(a.d, b.d, sizeof a.d) == 0 && a.nf == b.nf &&
                   df == a.nf && a.ni == b.ni && di == a.ni;
        printf("# %s: %d losses, %zu floats, %zu ids: %s", shapes[i].name, a.nd, a.nf, a.ni,
               same ? "the same bits\n" : "");
        if (!same)
            printf("first loss %.9g / %.9g, floats differ from %zu (of %zu / %zu), ids from "
                   "%zu\n", a.d[0], b.d[0], df, a.nf, b.nf, di);
        CHECK(same);
        CHECK(a.nd >= 9 && a.ni > 0);
        run_free(&a);
        run_free(&b);
    }
    cpu->destroy(cpu);
    sim->destroy(sim);
}

/* act_size follows the precision; upload_act rounds, download_act converts back; the
 * device holds the bf16 bits, 2 bytes each. */
static void test_conversions(void)
{
    struct tfm_error err;
    struct tfm_backend *sim = tfm_backend_sim(1, &err);
    CHECK(sim && sim->act_size == 4);
    if (!sim)
        return;
    CHECK(tfm_backend_set_precision(sim, TFM_PRECISION_BF16, &err) == 0);
    CHECK(sim->act_size == 2);
    /* 1 + 2^-8 is a tie: to 1 (even); 1 + 3 * 2^-8: up; -0.1: nearest; inf, -0 */
    const float in[6] = {1.00390625f, 1.01171875f, -0.1f, INFINITY, -0.0f, 3.0f};
    const uint16_t want[6] = {0x3f80, 0x3f82, 0xbdcd, 0x7f80, 0x8000, 0x4040};
    void *p = sim->alloc(sim, 6 * 2, &err);
    float out[6];
    uint16_t raw[6];
    sim->upload_act(sim, p, in, 6);
    sim->download(sim, raw, p, sizeof raw);
    sim->download_act(sim, out, p, 6);
    CHECK(memcmp(raw, want, sizeof raw) == 0);
    int same = 1;
    for (int i = 0; i < 6; i++)
        same &= out[i] == tfm_bf16_float(want[i]) && signbit(out[i]) == signbit(in[i]);
    CHECK(same);
    /* an op on the packed values: y = 2x, stored packed */
    void *y = sim->alloc(sim, 6 * 2, &err);
    sim->zero(sim, y, 6 * 2);
    sim->axpy(sim, y, 2.0f, p, 6);
    sim->download_act(sim, out, y, 6);
    CHECK(out[0] == 2.0f && out[1] == 2.03125f && out[5] == 6.0f);
    sim->free(sim, p);
    sim->free(sim, y);
    CHECK(tfm_backend_set_precision(sim, TFM_PRECISION_FP32, &err) == 0);
    CHECK(sim->act_size == 4);
    sim->destroy(sim);
}

/* TFM_SIM_PACKED=0: bf16 in fp32 words (act_size 4), the same bits as packed. */
static void test_words(void)
{
    struct tfm_error err;
    struct tfm_backend *sim = tfm_backend_sim(2, &err);
    setenv("TFM_SIM_PACKED", "0", 1);
    struct tfm_backend *words = tfm_backend_sim(2, &err);
    unsetenv("TFM_SIM_PACKED");
    CHECK(sim && words);
    if (!sim || !words)
        return;
    struct run a, b;
    exercise(sim, &shapes[0], &a);
    exercise(words, &shapes[0], &b);
    CHECK(sim->act_size == 2 && words->act_size == 4);
    CHECK(!a.failed && !b.failed && a.nf == b.nf && a.ni == b.ni);
    CHECK(memcmp(a.d, b.d, sizeof a.d) == 0 && memcmp(a.f, b.f, a.nf * sizeof *a.f) == 0 &&
          memcmp(a.ids, b.ids, a.ni * sizeof *a.ids) == 0);
    run_free(&a);
    run_free(&b);
    sim->destroy(sim);
    words->destroy(words);
}

/* An op handed more activations than its block holds aborts, naming the op. */
static void test_overrun(void)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct tfm_error err;
        if (!freopen("/dev/null", "w", stderr))
            _exit(2);
        struct tfm_backend *sim = tfm_backend_sim(1, &err);
        tfm_backend_set_precision(sim, TFM_PRECISION_BF16, &err);
        void *x = sim->alloc(sim, 64 * 2, &err);     /* 64 activations in a page */
        sim->dropout(sim, x, x, 64, 0, 1);          /* fine */
        sim->dropout(sim, x, x, 4096, 0, 1);        /* runs past the block: abort */
        _exit(0);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
}

int main(void)
{
    t_run("sim at bf16 (2-byte activations) = the CPU's emulation, bit for bit: training, "
          "evaluation, log-probabilities, attention, decoding, greedy and beam search",
          test_shapes);
    t_run("sim at bf16: act_size 2, upload_act rounds, download_act converts", test_conversions);
    t_run("TFM_SIM_PACKED=0: bf16 in fp32 words, the same bits", test_words);
    t_run("sim at bf16: activations past the end of a block abort", test_overrun);
    return t_done();
}
