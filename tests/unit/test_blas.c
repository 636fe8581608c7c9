/* test_blas: OpenBLAS's kernels chosen again where its own choice is older than the CPU
 * (src/blas.h): the rule, the switch itself with products checked against double sums
 * under each kernel table the CPU runs, and what the process ends up using. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "blas.h"
#include "check.h"
#include "util.h"

static void test_rule(void)
{
    /* below the CPU: the best table for what it runs */
    CHECK_STR(tfm_blas_better_core("Prescott", TFM_ISA_AVX512), "SkylakeX");
    CHECK_STR(tfm_blas_better_core("Prescott", TFM_ISA_AVX2), "Haswell");
    CHECK_STR(tfm_blas_better_core("prescott", TFM_ISA_AVX2), "Haswell");   /* any case */
    CHECK_STR(tfm_blas_better_core("Unknown", TFM_ISA_AVX2), "Haswell");
    CHECK_STR(tfm_blas_better_core("Nehalem", TFM_ISA_AVX), "Sandybridge");
    CHECK_STR(tfm_blas_better_core("Sandybridge", TFM_ISA_AVX2), "Haswell");
    CHECK_STR(tfm_blas_better_core("Excavator", TFM_ISA_AVX512), "SkylakeX");
    /* OpenBLAS's choice for the CPU's instruction set or a newer one stays: AVX2 kernels on
     * an AVX-512 CPU are its own decision (Zen 4), not a fallback */
    CHECK(tfm_blas_better_core("Haswell", TFM_ISA_AVX512) == NULL);
    CHECK(tfm_blas_better_core("Zen", TFM_ISA_AVX512) == NULL);
    CHECK(tfm_blas_better_core("SkylakeX", TFM_ISA_AVX512) == NULL);
    CHECK(tfm_blas_better_core("Cooperlake", TFM_ISA_AVX512) == NULL);
    CHECK(tfm_blas_better_core("Sandybridge", TFM_ISA_AVX) == NULL);
    CHECK(tfm_blas_better_core("Prescott", TFM_ISA_OLD) == NULL);
    /* a name a newer OpenBLAS may give is not second-guessed */
    CHECK(tfm_blas_better_core("Zen5", TFM_ISA_AVX512) == NULL);
    CHECK(tfm_blas_better_core(NULL, TFM_ISA_AVX512) == NULL);
}

/* Creating a CPU backend makes the choice, before its first product. */
static void test_backend(void)
{
    struct tfm_error err;
    struct tfm_backend *be = tfm_backend_cpu(1, &err);
    CHECK(be != NULL);
    if (!be)
        return;
    const char *user = getenv("OPENBLAS_CORETYPE");
    if (!user || !*user)
        CHECK(tfm_blas_better_core(openblas_get_corename(), tfm_blas_cpu_isa()) == NULL);
    be->destroy(be);
}

/* What the process uses after the backend's choice: never a table older than the CPU,
 * unless the user named one. */
static void test_fit(void)
{
    const char *note = tfm_blas_fit();
    CHECK(strncmp(note, "OpenBLAS ", 9) == 0);
    CHECK(tfm_blas_fit() == note);                     /* once */
    const char *core = openblas_get_corename();
    CHECK(core && strstr(note, core));
    const char *user = getenv("OPENBLAS_CORETYPE");
    if (user && *user)
        CHECK(strstr(note, "OPENBLAS_CORETYPE=") != NULL);
    else
        CHECK(tfm_blas_better_core(core, tfm_blas_cpu_isa()) == NULL);
    printf("# %s\n", note);
}

/* C = A B (row-major, m x k times k x n) through sgemm, against sums in double. */
static double gemm_error(int m, int n, int k)
{
    uint64_t r = (uint64_t)(m * 7919 + n * 31 + k);
    float *a = malloc(sizeof *a * m * k), *b = malloc(sizeof *b * k * n);
    float *c = malloc(sizeof *c * m * n);
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        return 1e30;
    }
    for (int i = 0; i < m * k; i++)
        a[i] = (float)((double)tfm_rng_below(&r, 1 << 24) / (1 << 23) - 1);
    for (int i = 0; i < k * n; i++)
        b[i] = (float)((double)tfm_rng_below(&r, 1 << 24) / (1 << 23) - 1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f,
                c, n);
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int p = 0; p < k; p++) {
                s += (double)a[i * k + p] * b[p * n + j];
                mag += fabs((double)a[i * k + p] * b[p * n + j]);
            }
            /* fp32 summation of k terms: within k units of rounding of the magnitudes */
            double e = fabs(c[i * n + j] - s) / (mag * k * 0x1p-24 + 1e-30);
            worst = e > worst ? e : worst;
        }
    free(a);
    free(b);
    free(c);
    return worst;
}

static int products_right(void)
{
    /* odd sizes reach every edge of the kernels' tiles; 512 x 2048 is a base layer's */
    static const int shapes[][3] = {{1, 1, 1}, {67, 131, 53}, {100, 512, 512}, {7, 2048, 512},
                                    {33, 512, 2048}};
    int ok = 1;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        double e = gemm_error(shapes[i][0], shapes[i][1], shapes[i][2]);
        if (!(e <= 1)) {
            printf("#   %s: %d x %d x %d: error %.3g of the bound\n",
                   openblas_get_corename(), shapes[i][0], shapes[i][1], shapes[i][2], e);
            ok = 0;
        }
    }
    return ok;
}

static void test_choose(void)
{
    char was[32];
    snprintf(was, sizeof was, "%s", openblas_get_corename());
    if (!tfm_blas_choose(was)) {
        t_skip("this BLAS cannot choose its kernels again (not a DYNAMIC_ARCH OpenBLAS)");
        return;
    }
    const char *user = getenv("OPENBLAS_CORETYPE");
    char *keep = user ? strdup(user) : NULL;
    static const struct {
        const char *core;
        enum tfm_isa needs;
    } tables[] = {{"Prescott", TFM_ISA_OLD}, {"Sandybridge", TFM_ISA_AVX},
                  {"Haswell", TFM_ISA_AVX2}, {"SkylakeX", TFM_ISA_AVX512}};
    enum tfm_isa cpu = tfm_blas_cpu_isa();
    setenv("OPENBLAS_CORETYPE", "Nehalem", 1);          /* the caller's value survives */
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
        if (tables[i].needs > cpu)
            continue;
        const char *now = tfm_blas_choose(tables[i].core);
        CHECK_STR(now, tables[i].core);
        CHECK_STR(getenv("OPENBLAS_CORETYPE"), "Nehalem");
        CHECK(products_right());
    }
    unsetenv("OPENBLAS_CORETYPE");
    CHECK_STR(tfm_blas_choose(was), was);               /* back to where it was */
    CHECK(getenv("OPENBLAS_CORETYPE") == NULL);
    CHECK(products_right());
    if (keep)
        setenv("OPENBLAS_CORETYPE", keep, 1);
    free(keep);
}

int main(void)
{
    t_run("a table older than the CPU is replaced by the CPU's best, nothing else", test_rule);
    t_run("a CPU backend's creation makes the choice", test_backend);
    t_run("the process multiplies with a table the CPU's age, or the user's", test_fit);
    t_run("each table the CPU runs, chosen in turn, multiplies right", test_choose);
    return t_done();
}
