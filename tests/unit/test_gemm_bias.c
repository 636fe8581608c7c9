/* test_gemm_bias.c: the op gemm_bias (backend.h), a product with its bias and ReLU, on the
 * CPU backend and on the sim backend (the CPU's ops behind device memory; at bf16 packed in
 * 2 bytes, or in fp32 words with TFM_SIM_PACKED=0).
 *
 *  - Known answers: small integer matrices (exact in fp32 and bf16), every ta and tb, relu
 *    and not, ldc > N with the padding of C left as it was, the bias broadcast over rows
 *    (one value per column), a C full of NaN not read.
 *  - fp32 keeps the model's bits: relu 0 is gather + gemm with beta 1, relu 1 is gemm +
 *    bias_act, bit for bit, at sizes the CPU splits between threads (backend.h says so:
 *    the model's results at fp32 did not change when it moved to the op).
 *  - bf16 rounds once: the emulation's C is the fp32 op's C rounded once to bf16, bit for
 *    bit; and on a chosen case (below) that differs from rounding the product first and
 *    the biased value again (what gemm then bias_act would give at bf16).
 *  - The sim backend gives the CPU's bits at fp32 and at bf16, packed or not.
 */
#include "check.h"

#include "backend.h"

#include <stdint.h>

static uint64_t rs = 777;
static float frand(void)
{
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rs >> 40) / 16777216.0 * 2.0 - 1.0);
}

static struct tfm_backend *cpu, *cpu1, *sim, *simw;

static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* op(A) (M,K) from a row-major (M,K) matrix a: stored transposed (K,M) when ta. */
static void store(float *dst, const float *a, int rows, int cols, int t)
{
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            if (t)
                dst[(size_t)j * rows + i] = a[(size_t)i * cols + j];
            else
                dst[(size_t)i * cols + j] = a[(size_t)i * cols + j];
        }
}

/* ---- known answers ------------------------------------------------------------------------ */

static void test_known(void)
{
    struct tfm_error err;
    /* A (2,3), B (3,2), bias (2); A B = [[4, -6], [-2, 3]] */
    static const float a[6] = {1, 2, 0, -1, 0, 1}, b[6] = {2, 0, 1, -3, 0, 3};
    static const float bias[2] = {1, 2};
    static const float want[2][4] = {{5, -4, -1, 5}, {5, 0, 0, 5}};   /* [relu] */
    enum { M = 2, N = 2, K = 3, LDC = 3 };
    for (int prec = 0; prec < 2; prec++) {
        CHECK(tfm_backend_set_precision(cpu, prec ? TFM_PRECISION_BF16 : TFM_PRECISION_FP32,
                                        &err) == 0);
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int relu = 0; relu < 2; relu++) {
                    float A[6], B[6], C[M * LDC];
                    store(A, a, M, K, ta);
                    store(B, b, K, N, tb);
                    for (int i = 0; i < M * LDC; i++)
                        C[i] = NAN;                 /* not read; the padding stays */
                    cpu->gemm_bias(cpu, ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, bias,
                                   relu, C, LDC);
                    for (int i = 0; i < M; i++) {
                        for (int j = 0; j < N; j++)
                            CHECK(C[i * LDC + j] == want[relu][i * N + j]);
                        CHECK(isnan(C[i * LDC + N]));
                    }
                }
        /* K = 0: the bias alone, then the ReLU */
        float C[M * LDC], neg[2] = {-1, 2};
        cpu->gemm_bias(cpu, 0, 0, M, N, 0, NULL, 1, NULL, N, neg, 1, C, LDC);
        CHECK(C[0] == 0 && C[1] == 2 && C[LDC] == 0 && C[LDC + 1] == 2);
    }
    CHECK(tfm_backend_set_precision(cpu, TFM_PRECISION_FP32, &err) == 0);
}

/* ---- fp32: the sequences' bits ------------------------------------------------------------ */

struct prob {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float *A, *B, *bias;
};

/* Random operands for C (M,N) = op(A) op(B) + bias, C rows ldc apart (ldc >= N); values
 * rounded to bf16 (what the emulation's inputs hold), which fp32 takes as they are. */
static struct prob make(int ta, int tb, int M, int N, int K, int ldc)
{
    struct prob p = {ta, tb, M, N, K, ta ? M : K, tb ? K : N, ldc, NULL, NULL, NULL};
    size_t na = (size_t)M * K, nb = (size_t)K * N;
    p.A = malloc(na * sizeof(float));
    p.B = malloc(nb * sizeof(float));
    p.bias = malloc((size_t)N * sizeof(float));
    for (size_t i = 0; i < na; i++)
        p.A[i] = tfm_bf16_round(frand());
    for (size_t i = 0; i < nb; i++)
        p.B[i] = tfm_bf16_round(frand() * 0.1f);
    for (int i = 0; i < N; i++)
        p.bias[i] = tfm_bf16_round(frand() * 0.5f);
    return p;
}

static void unmake(struct prob *p)
{
    free(p->A);
    free(p->B);
    free(p->bias);
}

/* C (M rows, ldc apart), its padding NaN. */
static float *cmat(const struct prob *p)
{
    size_t n = (size_t)p->M * p->ldc;
    float *c = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        c[i] = NAN;
    return c;
}

static void run_op(struct tfm_backend *be, const struct prob *p, int relu, float *C)
{
    be->gemm_bias(be, p->ta, p->tb, p->M, p->N, p->K, p->A, p->lda, p->B, p->ldb, p->bias, relu,
                  C, p->ldc);
}

static void test_fp32_bits(void)
{
    for (struct tfm_backend **c = (struct tfm_backend *[]){cpu, cpu1, NULL}; *c; c++)
        for (int t = 0; t < 4; t++) {
            int ta = t & 1, tb = t >> 1;
            struct prob p = make(ta, tb, 203, 150, 96, 150);
            size_t n = (size_t)p.M * p.ldc;
            float *C1 = cmat(&p), *C2 = cmat(&p);
            /* relu 0: what linear() ran: the bias in C's rows, then the product added */
            run_op(*c, &p, 0, C1);
            (*c)->gather(*c, C2, p.ldc, p.bias, 0, NULL, p.M, p.N);
            (*c)->gemm(*c, ta, tb, p.M, p.N, p.K, 1.0f, p.A, p.lda, p.B, p.ldb, 1.0f, C2, p.ldc);
            CHECK(same_bits(C1, C2, n));
            /* relu 1: what the FFN ran: the product, then bias and ReLU */
            run_op(*c, &p, 1, C1);
            (*c)->gemm(*c, ta, tb, p.M, p.N, p.K, 1.0f, p.A, p.lda, p.B, p.ldb, 0.0f, C2, p.ldc);
            (*c)->bias_act(*c, C2, p.bias, p.M, p.N, 1);
            CHECK(same_bits(C1, C2, n));
            free(C1);
            free(C2);
            unmake(&p);
        }
}

/* ---- bf16: one rounding --------------------------------------------------------------------- */

/* The emulation's C is the fp32 op's C rounded once, bit for bit, with ldc > N (the
 * padding untouched) and both activations. */
static void test_bf16_once(void)
{
    struct tfm_error err;
    for (int t = 0; t < 4; t++)
        for (int relu = 0; relu < 2; relu++) {
            struct prob p = make(t & 1, t >> 1, 97, 130, 200, 133);
            size_t n = (size_t)p.M * p.ldc;
            float *C1 = cmat(&p), *C2 = cmat(&p);
            run_op(cpu, &p, relu, C1);
            for (size_t i = 0; i < n; i++)
                C1[i] = tfm_bf16_round(C1[i]);
            CHECK(tfm_backend_set_precision(cpu, TFM_PRECISION_BF16, &err) == 0);
            run_op(cpu, &p, relu, C2);
            CHECK(tfm_backend_set_precision(cpu, TFM_PRECISION_FP32, &err) == 0);
            CHECK(same_bits(C1, C2, n));
            free(C1);
            free(C2);
            unmake(&p);
        }
}

/* The chosen case: A (1,2) = [1, 1], B (2,1) = [1 + 2^-7; 2^-12], bias -1 (all bf16).
 * The sum 1 + 2^-7 + 2^-12 (exact in fp32) plus the bias is 2^-7 + 2^-12 = 2^-7 (1 +
 * 2^-5), a bf16 value: one rounding keeps it.  Rounding the sum first gives 1 + 2^-7 (the
 * nearer bf16: 2^-12 below half a unit, 2^-8), and then adding the bias 2^-7. */
static void test_bf16_chosen(void)
{
    struct tfm_error err;
    const float A[2] = {1, 1}, B[2] = {1 + 0x1p-7f, 0x1p-12f}, bias[1] = {-1};
    const float once = 0x1p-7f + 0x1p-12f, twice = 0x1p-7f;
    CHECK(tfm_bf16_round(once) == once && tfm_bf16_round(1 + 0x1p-7f + 0x1p-12f) == 1 + 0x1p-7f);
    CHECK(tfm_backend_set_precision(cpu, TFM_PRECISION_BF16, &err) == 0);
    for (int relu = 0; relu < 2; relu++) {
        float C = NAN, D = NAN;
        cpu->gemm_bias(cpu, 0, 0, 1, 1, 2, A, 2, B, 1, bias, relu, &C, 1);
        CHECK(C == once);
        /* the two ops, each rounding what it stores */
        cpu->gemm(cpu, 0, 0, 1, 1, 2, 1.0f, A, 2, B, 1, 0.0f, &D, 1);
        cpu->bias_act(cpu, &D, bias, 1, 1, relu);
        CHECK(D == twice && D != C);
    }
    CHECK(tfm_backend_set_precision(cpu, TFM_PRECISION_FP32, &err) == 0);
}

/* ---- the sim backend ------------------------------------------------------------------------ */

/* n activations of host floats on be's device (rounded to its precision). */
static float *up(struct tfm_backend *be, const float *h, size_t n)
{
    struct tfm_error err;
    float *d = be->alloc(be, (n ? n : 1) * be->act_size, &err);
    if (!d) {
        printf("# %s\n", err.msg);
        exit(1);
    }
    be->upload_act(be, d, h, n);
    return d;
}

/* The sim backend s against the CPU at precision pr: the same bits, C's padding included. */
static void sim_case(struct tfm_backend *s, enum tfm_precision pr)
{
    struct tfm_error err;
    CHECK(tfm_backend_set_precision(s, pr, &err) == 0);
    CHECK(tfm_backend_set_precision(cpu, pr, &err) == 0);
    for (int t = 0; t < 4; t++)
        for (int relu = 0; relu < 2; relu++) {
            struct prob p = make(t & 1, t >> 1, 61, 70, 90, 75);
            size_t na = (size_t)p.M * p.K, nb = (size_t)p.K * p.N, nc = (size_t)p.M * p.ldc;
            float *C = cmat(&p), *G = malloc(nc * sizeof(float));
            for (size_t i = 0; i < nc; i++)
                C[i] = (float)(i % 7);              /* the padding, on both sides */
            float *dA = up(s, p.A, na), *dB = up(s, p.B, nb), *db = up(s, p.bias, p.N),
                  *dC = up(s, C, nc);
            run_op(cpu, &p, relu, C);
            s->gemm_bias(s, p.ta, p.tb, p.M, p.N, p.K, dA, p.lda, dB, p.ldb, db, relu, dC,
                         p.ldc);
            s->download_act(s, G, dC, nc);
            CHECK(same_bits(G, C, nc));
            s->free(s, dA);
            s->free(s, dB);
            s->free(s, db);
            s->free(s, dC);
            free(C);
            free(G);
            unmake(&p);
        }
    CHECK(tfm_backend_set_precision(s, TFM_PRECISION_FP32, &err) == 0);
    CHECK(tfm_backend_set_precision(cpu, TFM_PRECISION_FP32, &err) == 0);
}

static void test_sim(void)
{
    sim_case(sim, TFM_PRECISION_FP32);
    sim_case(sim, TFM_PRECISION_BF16);
    CHECK(sim->act_size == 4);                      /* back at fp32 */
    sim_case(simw, TFM_PRECISION_BF16);
}

int main(void)
{
    struct tfm_error err;
    cpu = tfm_backend_cpu(2, &err);
    cpu1 = cpu ? tfm_backend_cpu(1, &err) : NULL;
    sim = cpu1 ? tfm_backend_sim(2, &err) : NULL;
    setenv("TFM_SIM_PACKED", "0", 1);               /* read when a sim backend is made */
    simw = sim ? tfm_backend_sim(2, &err) : NULL;
    unsetenv("TFM_SIM_PACKED");
    if (!simw) {
        printf("not ok 1 - backends: %s\n", err.msg);
        return 1;
    }
    t_run("gemm_bias: known answers (ta, tb, relu, ldc > N, K = 0; fp32 and bf16)",
          test_known);
    t_run("gemm_bias at fp32: gather + gemm, gemm + bias_act, bit for bit (1 and 2 threads)",
          test_fp32_bits);
    t_run("gemm_bias at bf16: the fp32 result rounded once", test_bf16_once);
    t_run("gemm_bias at bf16: one rounding is not two (a chosen case)", test_bf16_chosen);
    t_run("gemm_bias on the sim backend: the CPU's bits (fp32; bf16 packed and in words)",
          test_sim);
    sim->destroy(sim);
    simw->destroy(simw);
    cpu->destroy(cpu);
    cpu1->destroy(cpu1);
    return t_done();
}
