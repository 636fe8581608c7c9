/* train_step.c: tfm's training throughput for bench_train.sh and the GPU report.
 *   train_step CONFIG B S T STEPS THREADS [DEVICE [SPLIT [PRECISION]]]
 * Builds the model of CONFIG (vocab 8000 unless the file sets it) on DEVICE (cpu, the
 * default; cuda: GPU 0, checked against the CPU first as the tools do; sim), trains STEPS
 * updates (forward, backward, Adam) on one random batch of B x S source and B x T target
 * tokens after one warm-up update, and prints
 *   tokens_per_s=X step_s=X cpu_s=X gflops=X sgemm_gflops=X peak_precision=P memory_mib=X
 *   loss=X device=D
 * PRECISION (auto, fp32, bf16; default: the config's) is tfm-config(5)'s precision; the
 * line ends with precision=P, the one the device computed in.
 * With SPLIT 1, SPLIT more updates follow with every op timed (op_timer.h), one line each:
 *   op NAME calls=N ms_per_step=X share=X%
 * step_s is wall-clock seconds per update, cpu_s the process CPU seconds per update (all
 * threads: on a loaded machine the steadier number; cpu_s / step_s near THREADS means
 * the threads did not wait).  gflops counts the matrix products of forward and backward
 * (3x the forward's 2*m*n*k); sgemm_gflops is the best n^3 product (n 2048 on the CPU,
 * 8192 on a GPU) of the backend's gemm in the precision the model computed in, which
 * peak_precision names: fp32, the backend's split or OpenBLAS's own threads on the same
 * number of threads; bf16, bf16 operands (rounded, act_size bytes each) with fp32
 * accumulation, the backend's gemm only (OpenBLAS has no bf16).  The peak the ops are held
 * to; the key keeps its name for the scripts that read it.
 *   train_step --blas-core
 * prints the name of the OpenBLAS kernels tfm multiplies with (src/blas.h), for the
 * scripts to give their PyTorch references the same ones.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "blas.h"
#include "config.h"
#include "device.h"
#include "model.h"
#include "op_timer.h"
#include "optim.h"

static double clock_s(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double now(void) { return clock_s(CLOCK_MONOTONIC); }

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--blas-core") == 0) {
        tfm_blas_fit();
        printf("%s\n", openblas_get_corename());
        return 0;
    }
    if (argc < 7 || argc > 10) {
        fprintf(stderr,
                "usage: train_step CONFIG B S T STEPS THREADS [DEVICE [SPLIT [PRECISION]]]\n"
                "       train_step --blas-core\n");
        return 2;
    }
    const char *device = argc > 7 ? argv[7] : "cpu";
    int split = argc > 8 ? atoi(argv[8]) : 0;
    struct tfm_error err;
    struct tfm_config c;
    tfm_config_defaults(&c);
    if (tfm_config_load(&c, argv[1], &err) < 0) {
        fprintf(stderr, "train_step: %s\n", err.msg);
        return 1;
    }
    if (c.vocab == 0)
        c.vocab = 8000;
    if (argc > 9) {
        char kv[64];
        snprintf(kv, sizeof kv, "precision=%s", argv[9]);
        if (tfm_config_set(&c, kv, "PRECISION", &err) < 0) {
            fprintf(stderr, "train_step: %s\n", err.msg);
            return 2;
        }
    }
    int B = atoi(argv[2]), S = atoi(argv[3]), T = atoi(argv[4]), steps = atoi(argv[5]);
    struct tfm_backend *be = NULL;
    if (strcmp(device, "cpu") == 0) {
        be = tfm_backend_cpu(atoi(argv[6]), &err);
    } else {
        struct tfm_gpus gpu;
        if (tfm_device_open_gpus(device, c.precision, atoi(argv[6]), 0, 1, &gpu, &err) == 0 &&
            gpu.count == 0)
            tfm_fail(&err, "no device: %s", gpu.note);
        if (gpu.count == 1) {
            be = gpu.be[0];
            fprintf(stderr, "train_step: %s\n", gpu.note);
        }
    }
    int64_t budget = (int64_t)B * (S > T ? S : T);
    if (c.tokens < budget)
        c.tokens = (int)budget;
    struct tfm_model *m = be ? tfm_model_create(&c, be, budget, &err) : NULL;
    if (!m) {
        fprintf(stderr, "train_step: %s\n", err.msg);
        return 1;
    }
    int32_t *src = malloc(sizeof(int32_t) * B * S), *tgt = malloc(sizeof(int32_t) * B * T);
    uint64_t r = 1;
    for (int i = 0; i < B * S; i++)
        src[i] = (i % S == S - 1) ? 3 : 4 + (int)((r = tfm_rng_mix(r)) % (uint64_t)(c.vocab - 4));
    for (int i = 0; i < B * T; i++)
        tgt[i] = (i % T == T - 1) ? 3 : 4 + (int)((r = tfm_rng_mix(r)) % (uint64_t)(c.vocab - 4));
    struct tfm_loss l;
    struct tfm_optim_stats st;
    double t0 = 0, c0 = 0;
    for (int s = 0; s <= steps; s++) {
        if (s == 1) {
            t0 = now();
            c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        }
        /* the trainer's step: the loss stays on the device until the optimizer's read */
        if (tfm_model_train_batch_dev(m, B, S, T, src, tgt, (uint64_t)s, &l, &err) < 0 ||
            tfm_optim_step(m, s + 1, l.tokens, &st, &err) < 0) {
            fprintf(stderr, "train_step: %s\n", err.msg);
            return 1;
        }
    }
    be->sync(be);
    double dt = (now() - t0) / steps;
    double dc = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / steps;
    /* matrix-product FLOPs of one forward (ns source, nt target rows) */
    double D = c.d_model, F = c.d_ff, V = c.vocab, N = c.layers, ns = B * S, nt = B * T;
    double fwd = N * (ns * (2 * 4 * D * D + 2 * 2 * D * F) + 2 * 2 * ns * S * D) +
                 N * (nt * (2 * 4 * D * D + 2 * 2 * D * D + 2 * 2 * D * F) + ns * 2 * 2 * D * D +
                      2 * 2 * nt * T * D + 2 * 2 * nt * S * D) +
                 nt * 2 * D * V;
    double flops = 3 * fwd;
    /* the product peak on the same device in the model's precision: OpenBLAS and the
     * backend's split on the CPU (fp32), the backend's gemm on device memory elsewhere.
     * gemm reads activations (backend.h, precision): at bf16, 2-byte bf16 values on a
     * GPU (upload_act rounds and packs them; fp32 bytes read as bf16 would be other
     * numbers, and half of them), bf16 values in fp32 words on the CPU's emulation. */
    const int h = be->precision == TFM_PRECISION_BF16;
    int n = be->kind == TFM_BACKEND_CUDA ? 8192 : 2048;
    size_t nn = (size_t)n * n;
    float *a = malloc(sizeof(float) * nn), *b = malloc(sizeof(float) * nn),
          *cc = malloc(sizeof(float) * nn);
    for (size_t i = 0; i < nn; i++) {
        float x = 0.001f * (float)(i % 1000);
        a[i] = b[i] = h ? tfm_bf16_round(x) : x;
    }
    float *da = a, *db = b, *dc_ = cc;
    if (!be->host_memory) {
        da = be->alloc(be, nn * be->act_size, &err);
        db = da ? be->alloc(be, nn * be->act_size, &err) : NULL;
        dc_ = db ? be->alloc(be, nn * be->act_size, &err) : NULL;
        if (!dc_) {
            fprintf(stderr, "train_step: %s\n", err.msg);
            return 1;
        }
        be->upload_act(be, da, a, nn);
        be->upload_act(be, db, b, nn);
    }
    double best = 1e30;
    for (int k = 0; k < 8; k++) {
        /* alternate: the backend's split, OpenBLAS's own threads (fp32 only) */
        int blas = k % 2 && be->host_memory && !h;
        if (blas)
            openblas_set_num_threads(be->threads);
        be->sync(be);
        double g0 = now();
        if (blas)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n,
                        0.0f, cc, n);
        else
            be->gemm(be, 0, 0, n, n, n, 1.0f, da, n, db, n, 0.0f, dc_, n);
        be->sync(be);
        double g = now() - g0;
        openblas_set_num_threads(1);
        best = g < best ? g : best;
    }
    if (!be->host_memory) {
        be->free(be, da);
        be->free(be, db);
        be->free(be, dc_);
    }
    printf("tokens_per_s=%.1f step_s=%.4f cpu_s=%.4f gflops=%.1f sgemm_gflops=%.1f "
           "peak_precision=%s memory_mib=%.1f loss=%.4f device=%s precision=%s\n",
           nt / dt, dt, dc, flops / dt * 1e-9, 2.0 * n * n * n / best * 1e-9,
           tfm_precision_name(h ? TFM_PRECISION_BF16 : TFM_PRECISION_FP32),
           tfm_model_memory(&c, budget) / 1048576.0, st.loss / l.tokens, be->name,
           tfm_precision_name(be->precision));
    if (split > 0) {
        op_timer_wrap(be);
        op_timer_reset();
        for (int s = 0; s < split; s++)
            if (tfm_model_train_batch(m, B, S, T, src, tgt, (uint64_t)(steps + 1 + s), &l,
                                      &err) < 0 ||
                tfm_optim_step(m, steps + 2 + s, l.tokens, &st, &err) < 0) {
                fprintf(stderr, "train_step: %s\n", err.msg);
                return 1;
            }
        op_timer_print(stdout, split);
    }
    free(a); free(b); free(cc); free(src); free(tgt);
    tfm_model_free(m);
    be->destroy(be);
    return 0;
}
