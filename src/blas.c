/* blas.c: OpenBLAS's kernels, chosen again where its own choice is below the CPU (see
 * blas.h). */
#include "blas.h"

#include <cblas.h>
#ifndef OPENBLAS_CONFIG_H
#error "cblas.h is not OpenBLAS's (the reference BLAS's has none of its functions): install libopenblas-dev (.ci/install-deps)"
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A DYNAMIC_ARCH OpenBLAS chooses its kernel table in gotoblas_dynamic_init (from
 * OPENBLAS_CORETYPE when set, else from cpuid) unless one is chosen already, and
 * gotoblas_dynamic_quit forgets the choice.  Both are exported by such a build and absent
 * from any other, hence weak. */
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

enum tfm_isa tfm_blas_cpu_isa(void)
{
#if defined(__GNUC__) && defined(__x86_64__)
    /* the compiler runtime's answers include the operating system's support (XCR0) for the registers */
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return TFM_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return TFM_ISA_AVX2;
    if (__builtin_cpu_supports("avx"))
        return TFM_ISA_AVX;
#endif
    return TFM_ISA_OLD;
}

/* OpenBLAS's x86 kernel tables below AVX2, by the names openblas_get_corename gives, and
 * the instruction set each is written for.  Every other x86 table is for AVX2 or newer. */
static const struct {
    const char *name;
    enum tfm_isa isa;
} older[] = {
    {"Unknown", TFM_ISA_OLD},     {"Katmai", TFM_ISA_OLD},      {"Coppermine", TFM_ISA_OLD},
    {"Northwood", TFM_ISA_OLD},   {"Prescott", TFM_ISA_OLD},    {"Banias", TFM_ISA_OLD},
    {"Atom", TFM_ISA_OLD},        {"Core2", TFM_ISA_OLD},       {"Penryn", TFM_ISA_OLD},
    {"Dunnington", TFM_ISA_OLD},  {"Nehalem", TFM_ISA_OLD},     {"Athlon", TFM_ISA_OLD},
    {"Opteron", TFM_ISA_OLD},     {"Opteron_SSE3", TFM_ISA_OLD}, {"Barcelona", TFM_ISA_OLD},
    {"Nano", TFM_ISA_OLD},        {"Bobcat", TFM_ISA_OLD},      {"Sandybridge", TFM_ISA_AVX},
    {"Bulldozer", TFM_ISA_AVX},   {"Piledriver", TFM_ISA_AVX},  {"Steamroller", TFM_ISA_AVX},
    {"Excavator", TFM_ISA_AVX},
};

/* The instruction set of the table core names, -1 for one not in the list (AVX2 or newer). */
static int older_isa(const char *core)
{
    for (size_t i = 0; i < sizeof older / sizeof *older; i++)
        if (strcasecmp(core, older[i].name) == 0)
            return (int)older[i].isa;
    return -1;
}

const char *tfm_blas_better_core(const char *took, enum tfm_isa cpu)
{
    static const char *const best[] = {NULL, "Sandybridge", "Haswell", "SkylakeX"};
    if (!took || (unsigned)cpu >= sizeof best / sizeof *best)
        return NULL;
    int isa = older_isa(took);
    return isa >= 0 && isa < (int)cpu ? best[cpu] : NULL;
}

const char *tfm_blas_choose(const char *core)
{
    if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit || !core)
        return NULL;
    /* OpenBLAS reads the name from the environment; the caller's value is put back */
    const char *was = getenv("OPENBLAS_CORETYPE");
    char *keep = was ? strdup(was) : NULL;
    if (was && !keep)
        return NULL;
    if (setenv("OPENBLAS_CORETYPE", core, 1) != 0) {
        free(keep);
        return NULL;
    }
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    if (keep)
        setenv("OPENBLAS_CORETYPE", keep, 1);
    else
        unsetenv("OPENBLAS_CORETYPE");
    free(keep);
    return openblas_get_corename();
}

static char fit_note[200];
static pthread_once_t fit_once = PTHREAD_ONCE_INIT;

/* "0.3.21" from "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Cooperlake MAX_THREADS=64" */
static void blas_version(char *out, size_t n)
{
    const char *cfg = openblas_get_config();
    snprintf(out, n, "?");
    if (cfg && strncmp(cfg, "OpenBLAS ", 9) == 0) {
        size_t len = strcspn(cfg + 9, " ");
        if (len)
            snprintf(out, n, "%.*s", (int)(len < 32 ? len : 32), cfg + 9);
    }
}

static void fit(void)
{
    char ver[40], took[32];
    blas_version(ver, sizeof ver);
    const char *name = openblas_get_corename();
    snprintf(took, sizeof took, "%s", name ? name : "Unknown");
    const char *user = getenv("OPENBLAS_CORETYPE");
    if (user && *user) {
        snprintf(fit_note, sizeof fit_note, "OpenBLAS %s: %s kernels (OPENBLAS_CORETYPE=%.32s)",
                 ver, took, user);
        return;
    }
    const char *want = tfm_blas_better_core(took, tfm_blas_cpu_isa());
    const char *now = want ? tfm_blas_choose(want) : NULL;
    int isa = now ? older_isa(now) : -1;
    if (now && isa >= 0 && isa <= older_isa(took)) {
        /* not known to this build (which then takes Prescott's): back to its own choice */
        tfm_blas_choose(took);
        now = NULL;
    }
    if (now)
        snprintf(fit_note, sizeof fit_note, "OpenBLAS %s: %s kernels (OpenBLAS had taken %s, "
                 "older than this CPU)", ver, now, took);
    else if (want)
        snprintf(fit_note, sizeof fit_note, "OpenBLAS %s: %s kernels, older than this CPU "
                 "(this build cannot take %s's: a newer OpenBLAS knows this CPU)",
                 ver, took, want);
    else
        snprintf(fit_note, sizeof fit_note, "OpenBLAS %s: %s kernels", ver, took);
}

const char *tfm_blas_fit(void)
{
    pthread_once(&fit_once, fit);
    return fit_note;
}
