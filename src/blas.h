/* blas.h: which kernels OpenBLAS multiplies with, and a better choice where its own is
 * below what the CPU runs.
 *
 * An OpenBLAS built for many CPUs (DYNAMIC_ARCH, as Debian ships it) picks its kernels as
 * it loads, from the CPU's vendor, family and model numbers.  A model newer than the
 * library is not in its table, and it falls back to its generic SSE3 kernels ("Prescott"):
 * OpenBLAS 0.3.21 on an Emerald Rapids Xeon (family 6, model 207, AVX-512) does, and its
 * sgemm then runs at about a quarter of its AVX-512 kernel's speed (base-size decoding 4x
 * slower; tfm-train(1), ENVIRONMENT).  The CPU backend therefore asks the CPU what it runs
 * and, where OpenBLAS took kernels for an older instruction set, has it choose again as
 * OPENBLAS_CORETYPE would: SkylakeX's kernels for AVX-512 (F, BW, DQ, VL), Haswell's for
 * AVX2 with FMA, Sandybridge's for AVX.  An OPENBLAS_CORETYPE the user set is left alone,
 * and so is any choice OpenBLAS made for this instruction set or a newer one.
 * Not here: the products themselves (backend_cpu.c).
 */
#ifndef TFM_BLAS_H
#define TFM_BLAS_H

/* The instruction sets the choice knows, in order. */
enum tfm_isa { TFM_ISA_OLD, TFM_ISA_AVX, TFM_ISA_AVX2, TFM_ISA_AVX512 };

/* What this CPU (and its operating system, which must save the registers) runs. */
enum tfm_isa tfm_blas_cpu_isa(void);

/* The kernels to ask OpenBLAS for, given the name of those it took (openblas_get_corename)
 * and the CPU's instruction set: a name OPENBLAS_CORETYPE knows, or NULL to keep them.
 * Only names of kernels for an instruction set older than the CPU's are replaced; names
 * not in the table (a newer library's) are kept. */
const char *tfm_blas_better_core(const char *took, enum tfm_isa cpu);

/* Makes the choice above once for the process (thread-safe; before the first product) and
 * returns a line for the logs: "OpenBLAS 0.3.21: SkylakeX kernels (OpenBLAS had taken
 * Prescott, older than this CPU)" or "OpenBLAS 0.3.21: Haswell kernels". */
const char *tfm_blas_fit(void);

/* Has OpenBLAS take the kernels `core` names (an OPENBLAS_CORETYPE value) now; returns the
 * name of those it then uses, which is not `core` where it does not know it.  NULL where
 * the BLAS cannot choose again (not a DYNAMIC_ARCH OpenBLAS).  Only before any product is
 * under way (tfm_blas_fit, and the tests). */
const char *tfm_blas_choose(const char *core);

#endif
