// cuda_attn_mm.cu: attention forward and backward through batched matrix products on the
// tensor cores (cuBLAS), with one row kernel for the softmax: the default at bf16
// (cuda_attn.cu chooses; semantics: struct tfm_attn in src/backend.h; reference:
// attn_*_heads in src/backend_cpu.c, which computes the same way, one head at a time).
//
// Status: compiled, never yet run on a GPU; test_gpu_ops's attention tests (both paths,
// at fp32 and bf16) are its first run.
//
// Why products and not a tensor-core FlashAttention kernel.  Translation sentences are
// short (tens of tokens, max_len 256), so the score matrices of a whole batch, B*H*Tq*Tk
// elements, fit the workspace: 12 bytes an element at bf16 for S, dP', P' and dS, which
// for the big model (16 heads) at 25000 tokens a side is 150 MB with sentences of 30
// tokens and 1.2 GB at most (every sentence 256 long: what reserve_step sets aside).
// Writing them out and reading them back should cost little beside a layer's other work
// (some 0.2 GB of traffic a forward with 30-token sentences: under 0.1 ms at an H100's
// bandwidth; not measured).  cuBLAS runs every product on the tensor cores, in tiles
// tuned for each GPU, which a hand-written kernel would have to match first; the kernels
// here are a softmax over rows.  The better end state is a fused tensor-core kernel
// (FlashAttention 2/3: the scores never leave the chip, no workspace, one pass): worth
// building when sentences are long or memory is short.  The online-softmax kernels of
// cuda_attn.cu stay as the fp32 reference.
//
// The products, per (sentence b, head h), row-major as backend.h states them:
//   forward:  S = scale Q K^T (fp32) -> softmax_fwd: P' (T), lse -> O = P' V (T)
//   backward: S = scale Q K^T, dP' = dO V^T (fp32) -> softmax_bwd: P' and dS (T) ->
//             dV = P'^T dO, dQ = scale dS K, dK = scale dS^T Q (T, overwritten: beta 0)
// with dS = P (g - D), g = dP' through the dropout (kept: dP' / (1-p), else 0), D_i =
// sum_j P_ij g_ij, as the CPU computes them.  Q, K, V, O and their gradients are the
// op's own matrices (head h at columns h*dk of each sentence's rows); S, dP', P' and dS
// are (B,H,Tq,Tk) in the workspace.
//
// One cublasGemmBatchedEx per product over all B*H heads, its pointer arrays written
// into the workspace by one small kernel (ptr_arrays) on the stream: no upload, no
// synchronization; when a product's matrices are not all 16-byte aligned, one strided
// call per head instead ("alignment" below).  Not cublasGemmStridedBatchedEx: a head's matrix lies at b*T*ld +
// h*dk, which is no single stride over (b,h), so that would take one call per head (H
// calls a product, 16 for the big model, 7 products a layer); the pointer arrays make
// each product one call of B*H problems.
//
// Precision: at bf16, Q, K, V, dO are read as bf16 and every product accumulates in fp32
// (CUBLAS_COMPUTE_32F); S and dP' are fp32; the row kernels compute in fp32 and store P'
// and dS rounded to bf16 (the inputs of the next products); O, dQ, dK, dV are rounded
// once by cuBLAS as it stores them.  The CPU's emulation rounds P' and dS at the same
// places (backend_cpu.c).  At fp32 (TFM_CUDA_ATTN=mm) everything is fp32, the products
// CUDA_R_32F with CUBLAS_COMPUTE_32F and the handle's math mode forbidding TF32
// (backend_cuda.cu).  Deterministic: cuBLAS with its fixed workspace, the row kernels'
// sums in a fixed order (reduce.cuh), no atomics.
#include "cuda.h"

#include <math.h>
#include <type_traits>

namespace {

#include "reduce.cuh"
#include "attn.cuh"

constexpr unsigned PTR_THREADS = 256;

// A matrix per (b,h) at base + b*bstride + h*hstride (elements of `size` bytes).
struct Mat {
    const void *base;
    int64_t bstride, hstride;
};

// The most matrices one call's products name: Q K V dO S dP' P' dS dQ dK dV (backward).
constexpr int MAX_MATS = 11;

struct Mats {
    Mat m[MAX_MATS];
    int size[MAX_MATS];   // bytes an element
    int count;
};

// arr[k*BH + b*H + h] = the address of matrix k for (b,h), k < count.
__global__ void ptr_arrays(const void **arr, Mats ms, int B, int H)
{
    const int64_t bh_n = (int64_t)B * H, total = bh_n * ms.count;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        int k = (int)(e / bh_n);
        int64_t bh = e % bh_n, b = bh / H, h = bh % H;
        const Mat &m = ms.m[k];
        arr[e] = (const char *)m.base + (b * m.bstride + h * m.hstride) * ms.size[k];
    }
}

// Forward, one block per score row r = (b*H + h)*Tq + i: lse_r = the log-sum-exp of its
// valid scores (row_log_sum_exp), P'_rj = dropout(exp(S_rj - lse_r)) for valid j, 0 for
// the rest (and the whole row when no key is valid: lse = -inf), the row's padding past Tk
// included (a product's kernel may load it with the valid keys, and must load zeros).
template <typename T>
__global__ void softmax_fwd(Shape s, int ld, const float *S, T *P, float *lse)
{
    const int64_t r = blockIdx.x;
    const int b = (int)(r / ((int64_t)s.H * s.Tq)), i = (int)(r % s.Tq);
    const int n = row_keys(s, key_limit(s, b), i);
    const float *sr = S + r * ld;
    T *pr = P + r * ld;
    const float L = n > 0 ? row_log_sum_exp(sr, n) : -INFINITY;
    const uint64_t e0 = (uint64_t)r * (uint64_t)s.Tk;
    for (int j = threadIdx.x; j < ld; j += blockDim.x)
        act_store(pr + j, j < n ? drop_at(s, e0 + j, expf(sr[j] - L)) : 0.0f);
    if (threadIdx.x == 0)
        lse[r] = L;
}

// Backward, one block per score row r: from S and dP' (fp32) and the forward's lse,
// P_j = exp(S_j - lse), g_j = dP'_j through the dropout, D = sum_j P_j g_j (valid j,
// each thread its strided j in order, then block_sum); stores P'_j (T) and dS_j = P_j
// (g_j - D) (T, without the scale), 0 past the valid keys and in the padding.
template <typename T>
__global__ void softmax_bwd(Shape s, int ld, const float *S, const float *dP, const float *lse,
                            T *P, T *dS)
{
    const int64_t r = blockIdx.x;
    const int b = (int)(r / ((int64_t)s.H * s.Tq)), i = (int)(r % s.Tq);
    const int n = row_keys(s, key_limit(s, b), i);
    const float *sr = S + r * ld, *gr = dP + r * ld;
    T *pr = P + r * ld, *dr = dS + r * ld;
    const float L = n > 0 ? lse[r] : 0.0f;   // finite when n > 0
    const uint64_t e0 = (uint64_t)r * (uint64_t)s.Tk;
    float d = 0;
    for (int j = threadIdx.x; j < n; j += blockDim.x)
        d += expf(sr[j] - L) * drop_at(s, e0 + j, gr[j]);
    d = block_sum(d);
    for (int j = threadIdx.x; j < ld; j += blockDim.x) {
        float pj = 0, ds = 0;
        if (j < n) {
            float P0 = expf(sr[j] - L);
            ds = P0 * (drop_at(s, e0 + j, gr[j]) - d);
            pj = drop_at(s, e0 + j, P0);
        }
        act_store(pr + j, pj);
        act_store(dr + j, ds);
    }
}

// Threads of a row kernel for rows of Tk: a warp for short rows, up to 256 (a multiple of
// 32, as block_reduce needs); one thread per 4 keys or so.  A function of Tk only, so a
// shape gives the same bits every time.
unsigned row_threads(int Tk)
{
    unsigned t = (unsigned)((Tk + 4 * 32 - 1) / (4 * 32)) * 32;
    return t < 32 ? 32 : t > 256 ? 256 : t;
}

// Score rows lie ld_scores(Tk) elements apart in the workspace: Tk rounded up to a multiple
// of 8, so that every score matrix and every row of one starts 32 bytes apart at fp32 and
// 16 at bf16 whatever Tk is (see "alignment" below).  The products' K and M stop at Tk;
// the row kernels still write P' and dS's padding, zeros, as a kernel may load a vector
// that reaches into it (never S's nor dP', which only cuBLAS writes and only up to Tk).
constexpr int SCORE_ALIGN = 8;

int64_t ld_scores(int tk) { return ((int64_t)tk + SCORE_ALIGN - 1) / SCORE_ALIGN * SCORE_ALIGN; }

// ---- the workspace ------------------------------------------------------------------------

size_t round256(size_t n) { return (n + 255) / 256 * 256; }

// Where things lie in the workspace of one call: the pointer arrays (MAX_MATS x bh), then
// S (fp32) and P' (act bytes an element), bh*Tq rows of ld_scores(Tk) elements each; the
// backward's dP' (fp32) and dS (act) after them.  (The forward's is the backward's first
// part.)
struct Layout {
    size_t ptrs, S, P, dP, dS, fwd, total;
};

Layout layout(int64_t bh, int64_t tq, int tk, size_t act)
{
    const size_t n = (size_t)bh * (size_t)tq * (size_t)ld_scores(tk);
    Layout l;
    l.ptrs = 0;
    l.S = round256((size_t)MAX_MATS * (size_t)bh * sizeof(void *));
    l.P = l.S + round256(n * sizeof(float));
    l.fwd = l.P + round256(n * act);
    l.dP = l.fwd;
    l.dS = l.dP + round256(n * sizeof(float));
    l.total = l.dS + round256(n * act);
    return l;
}

// ---- the products ----------------------------------------------------------------------------
//
// Alignment.  cuBLAS reads the pointer arrays of cublasGemmBatchedEx on the device, so it
// cannot see the matrices' addresses when it picks a kernel; its documentation asks that,
// with 16-bit operands (or a fast compute type), the matrices themselves be aligned, at
// best to 16 bytes, or it may fault with a misaligned address.  A head's matrix lies at
// base + (b*T*ld + h*dk) elements, aligned for every (b,h) only when the base, the row
// stride ld and the head width dk are (the model's: dk 64, ld a multiple of d_model; not
// an odd dk nor a test's odd ld).  So a product takes the pointer arrays only when every
// matrix it names (its A, B and C for every head) and every ld is 16-byte aligned, and
// otherwise H calls of cublasGemmStridedBatchedEx, one per head over the B sentences
// (stride T*ld; the score matrices' stride H*Tq*ld_scores), whose addresses and strides
// cuBLAS sees on the host and picks its kernels for.  Same products, same sums; the check
// is the same at fp32 (where cuBLAS asks nothing) so that both ways run at both precisions.

bool aligned16(int64_t bytes) { return bytes % 16 == 0; }

// Whether every (b,h) matrix of m, with rows ld apart, is 16-byte aligned.
bool mat_aligned(const Mat &m, int size, int ld, int B, int H)
{
    return aligned16((int64_t)(uintptr_t)m.base) && aligned16((int64_t)ld * size) &&
           (B == 1 || aligned16(m.bstride * size)) && (H == 1 || aligned16(m.hstride * size));
}

// One call's matrices and their pointer arrays (written when `arrays`).
struct Call {
    Mats ms;
    cudaDataType_t type[MAX_MATS];
    const void **arr;   // arr + k*bh: matrix k's array
    int B, H;
};

void add(Call &c, Mat m, size_t size, cudaDataType_t type)
{
    c.ms.m[c.ms.count] = m;
    c.ms.size[c.ms.count] = (int)size;
    c.type[c.ms.count] = type;
    c.ms.count++;
}

// The address of matrix k for (b,h) on the host, for the per-head calls.
const void *mat_at(const Call &c, int k, int64_t b, int64_t h)
{
    const Mat &m = c.ms.m[k];
    return (const char *)m.base + (b * m.bstride + h * m.hstride) * c.ms.size[k];
}

// Problems per cuBLAS call: a batched kernel may put the batch in a grid dimension that
// holds at most 65535 blocks, and cuBLAS versions have differed in splitting larger
// batches themselves; B*H passes it with short sentences (5000 sentences of 5 tokens, 16
// heads: 80000), so the calls take it in slices that never ask.
constexpr int64_t MAX_BATCH = 65535;

// For each of the B*H problems: C (M,N) = alpha op(A) op(B) (beta 0: C overwritten, not
// read), row-major as backend.h's gemm; A, B, C matrices ia, ib, ic of the call with rows
// lda, ldb, ldc apart.  cuBLAS is column-major: the operands swap places (backend_cuda.cu,
// "matrix products").  K > 0 (the callers handle K == 0).
void product(struct tfm_backend *be, const Call &c, int ta, int tb, int M, int N, int K,
             float alpha, int ia, int lda, int ib, int ldb, int ic, int ldc)
{
    const float beta = 0;
    const int B = c.B, H = c.H;
    const int64_t bh = (int64_t)B * H;
    if (mat_aligned(c.ms.m[ia], c.ms.size[ia], lda, B, H) &&
        mat_aligned(c.ms.m[ib], c.ms.size[ib], ldb, B, H) &&
        mat_aligned(c.ms.m[ic], c.ms.size[ic], ldc, B, H)) {
        for (int64_t at = 0; at < bh; at += MAX_BATCH) {
            const int n = (int)(bh - at < MAX_BATCH ? bh - at : MAX_BATCH);
            BLAS_CHECK(cublasGemmBatchedEx(CU(be)->blas, blas_op(tb), blas_op(ta), N, M, K, &alpha,
                                           c.arr + ib * bh + at, c.type[ib], ldb,
                                           c.arr + ia * bh + at, c.type[ia], lda, &beta,
                                           (void *const *)(c.arr + ic * bh + at), c.type[ic],
                                           ldc, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }
        return;
    }
    for (int h = 0; h < H; h++)
        for (int64_t b = 0; b < B; b += MAX_BATCH) {
            const int n = (int)(B - b < MAX_BATCH ? B - b : MAX_BATCH);
            BLAS_CHECK(cublasGemmStridedBatchedEx(
                CU(be)->blas, blas_op(tb), blas_op(ta), N, M, K, &alpha, mat_at(c, ib, b, h),
                c.type[ib], ldb, (long long)c.ms.m[ib].bstride, mat_at(c, ia, b, h),
                c.type[ia], lda, (long long)c.ms.m[ia].bstride, &beta,
                (void *)mat_at(c, ic, b, h), c.type[ic], ldc, (long long)c.ms.m[ic].bstride, n,
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }
}

// rows x cols elements of `size` bytes, ld apart, set to 0 (an output whose products
// have no terms: every key masked away by Tk == 0, or no query at all).
void zero_rows(struct tfm_backend *be, void *x, int64_t rows, int cols, int ld, size_t size)
{
    if (rows > 0 && cols > 0)
        CUDA_CHECK(cudaMemset2DAsync(x, (size_t)ld * size, 0, (size_t)cols * size,
                                     (size_t)rows, STREAM(be)));
}

// The pointer arrays of the call's matrices into the workspace at c.arr (count * bh
// pointers); array k at arr + k*bh.  Written whether or not a product uses them: one
// small launch.
void write_ptrs(struct tfm_backend *be, const Call &c)
{
    size_t total = (size_t)c.ms.count * (size_t)c.B * (size_t)c.H;
    ptr_arrays<<<tfm_cuda_blocks(total, PTR_THREADS), PTR_THREADS, 0, STREAM(be)>>>(
        c.arr, c.ms, c.B, c.H);
    LAUNCH_CHECK();
}

// A matrix in head layout: row t of sentence b at x + (b*T + t)*ld, head h at h*dk.
Mat head(const void *x, int T, int ld, int dk)
{
    return Mat{x, (int64_t)T * ld, (int64_t)dk};
}

// A (Tq,Tk) score matrix per (b,h) in the workspace, rows ld_scores(Tk) apart, (B,H,Tq)
// rows in order.
Mat score(const void *x, int H, int Tq, int Tk)
{
    const int64_t ld = ld_scores(Tk);
    return Mat{x, (int64_t)H * Tq * ld, (int64_t)Tq * ld};
}

template <typename T> cudaDataType_t dtype()
{
    return std::is_same<T, float>::value ? CUDA_R_32F : CUDA_R_16BF;
}

// A call over a's B*H heads, its pointer arrays at arr, with Q, K, V as matrices 0, 1, 2
// (the forward's and the backward's first three).
template <typename T>
Call qkv_call(const struct tfm_attn *a, const void **arr, const T *q, int ldq, const T *k,
              int ldk, const T *v, int ldv)
{
    Call c = {};
    c.B = a->B;
    c.H = a->H;
    c.arr = arr;
    add(c, head(q, a->Tq, ldq, a->dk), sizeof(T), dtype<T>());     // 0 Q
    add(c, head(k, a->Tk, ldk, a->dk), sizeof(T), dtype<T>());     // 1 K
    add(c, head(v, a->Tk, ldv, a->dk), sizeof(T), dtype<T>());     // 2 V
    return c;
}

template <typename T>
void fwd(struct tfm_backend *be, const struct tfm_attn *a, const T *q, int ldq, const T *k,
         int ldk, const T *v, int ldv, T *o, int ldo, float *lse)
{
    const int B = a->B, H = a->H, Tq = a->Tq, Tk = a->Tk, dk = a->dk;
    const int64_t bh = (int64_t)B * H;
    const int lds = (int)ld_scores(Tk);
    const size_t ts = sizeof(T);
    const cudaDataType_t tt = dtype<T>();
    Layout l = layout(bh, Tq, Tk, ts);
    char *w = (char *)tfm_cuda_work(be, l.fwd);
    float *S = (float *)(w + l.S);
    T *P = (T *)(w + l.P);
    Call c = qkv_call(a, (const void **)(w + l.ptrs), q, ldq, k, ldk, v, ldv);   // 0-2
    add(c, head(o, Tq, ldo, dk), ts, tt);                     // 3 O
    add(c, score(S, H, Tq, Tk), sizeof(float), CUDA_R_32F);   // 4 S
    add(c, score(P, H, Tq, Tk), ts, tt);                      // 5 P'
    if (Tk > 0) {
        write_ptrs(be, c);
        product(be, c, 0, 1, Tq, Tk, dk, a->scale, 0, ldq, 1, ldk, 4, lds);   // S = s Q K^T
    }
    softmax_fwd<T><<<(unsigned)(bh * Tq), row_threads(Tk), 0, STREAM(be)>>>(make_shape(a), lds,
                                                                             S, P, lse);
    LAUNCH_CHECK();
    if (Tk > 0)
        product(be, c, 0, 0, Tq, dk, Tk, 1.0f, 5, lds, 2, ldv, 3, ldo);       // O = P' V
    else
        zero_rows(be, o, (int64_t)B * Tq, H * dk, ldo, ts);
}

template <typename T>
void bwd(struct tfm_backend *be, const struct tfm_attn *a, const T *q, int ldq, const T *k,
         int ldk, const T *v, int ldv, const float *lse, const T *dout, int lddo, T *dq,
         int lddq, T *dk_, int lddk, T *dv, int lddv)
{
    const int B = a->B, H = a->H, Tq = a->Tq, Tk = a->Tk, dk = a->dk;
    const int64_t bh = (int64_t)B * H;
    const int lds = (int)ld_scores(Tk);
    const size_t ts = sizeof(T);
    const cudaDataType_t tt = dtype<T>();
    if (Tq == 0 || Tk == 0) {   // no score at all: every gradient is 0
        zero_rows(be, dq, (int64_t)B * Tq, H * dk, lddq, ts);
        zero_rows(be, dk_, (int64_t)B * Tk, H * dk, lddk, ts);
        zero_rows(be, dv, (int64_t)B * Tk, H * dk, lddv, ts);
        return;
    }
    Layout l = layout(bh, Tq, Tk, ts);
    char *w = (char *)tfm_cuda_work(be, l.total);
    float *S = (float *)(w + l.S), *dP = (float *)(w + l.dP);
    T *P = (T *)(w + l.P), *dS = (T *)(w + l.dS);
    Call c = qkv_call(a, (const void **)(w + l.ptrs), q, ldq, k, ldk, v, ldv);   // 0-2
    add(c, head(dout, Tq, lddo, dk), ts, tt);                 // 3 dO
    add(c, head(dq, Tq, lddq, dk), ts, tt);                   // 4 dQ
    add(c, head(dk_, Tk, lddk, dk), ts, tt);                  // 5 dK
    add(c, head(dv, Tk, lddv, dk), ts, tt);                   // 6 dV
    add(c, score(S, H, Tq, Tk), sizeof(float), CUDA_R_32F);   // 7 S
    add(c, score(dP, H, Tq, Tk), sizeof(float), CUDA_R_32F);  // 8 dP'
    add(c, score(P, H, Tq, Tk), ts, tt);                      // 9 P'
    add(c, score(dS, H, Tq, Tk), ts, tt);                     // 10 dS
    write_ptrs(be, c);

    product(be, c, 0, 1, Tq, Tk, dk, a->scale, 0, ldq, 1, ldk, 7, lds);      // S = s Q K^T
    product(be, c, 0, 1, Tq, Tk, dk, 1.0f, 3, lddo, 2, ldv, 8, lds);         // dP' = dO V^T
    softmax_bwd<T><<<(unsigned)(bh * Tq), row_threads(Tk), 0, STREAM(be)>>>(make_shape(a), lds,
                                                                             S, dP, lse, P, dS);
    LAUNCH_CHECK();
    product(be, c, 1, 0, Tk, dk, Tq, 1.0f, 9, lds, 3, lddo, 6, lddv);        // dV = P'^T dO
    product(be, c, 0, 0, Tq, dk, Tk, a->scale, 10, lds, 1, ldk, 4, lddq);    // dQ = s dS K
    product(be, c, 1, 0, Tk, dk, Tq, a->scale, 10, lds, 0, ldq, 5, lddk);    // dK = s dS^T Q
}

// The launches above give each score row a block: at most 2^31 - 1 of them; cuBLAS takes
// the B*H problems and the score rows' ld as ints.
bool fits(const struct tfm_attn *a)
{
    return (int64_t)a->B * a->H * a->Tq <= 2147483647 && (int64_t)a->B * a->H <= 2147483647 &&
           ld_scores(a->Tk) <= 2147483647;
}

}   // namespace

void tfm_cuda_attn_mm_fwd(struct tfm_backend *be, const struct tfm_attn *a, const float *q,
                          int ldq, const float *k, int ldk, const float *v, int ldv, float *o,
                          int ldo, float *lse)
{
    if ((int64_t)a->B * a->H * a->Tq <= 0 || a->dk <= 0)
        return;
    if (!fits(a))
        tfm_cuda_fail(__func__, "a launch", "grid too large", "too many score rows", __FILE__,
                      __LINE__);
    BY_ACT_TYPE(be, fwd<T>(be, a, act_ptr<T>(q), ldq, act_ptr<T>(k), ldk, act_ptr<T>(v), ldv,
                           act_ptr<T>(o), ldo, lse););
}

void tfm_cuda_attn_mm_bwd(struct tfm_backend *be, const struct tfm_attn *a, const float *q,
                          int ldq, const float *k, int ldk, const float *v, int ldv,
                          const float *lse, const float *dout, int lddo, float *dq, int lddq,
                          float *dk, int lddk, float *dv, int lddv)
{
    if ((int64_t)a->B * a->H <= 0 || a->dk <= 0)
        return;
    if (!fits(a))
        tfm_cuda_fail(__func__, "a launch", "grid too large", "too many score rows", __FILE__,
                      __LINE__);
    BY_ACT_TYPE(be, bwd<T>(be, a, act_ptr<T>(q), ldq, act_ptr<T>(k), ldk, act_ptr<T>(v), ldv,
                           lse, act_ptr<T>(dout), lddo, act_ptr<T>(dq), lddq, act_ptr<T>(dk),
                           lddk, act_ptr<T>(dv), lddv););
}

// The backward's workspace (the forward's is within it) when B*Tq <= rows (so B <= rows)
// and Tk <= max_tk (reserve): S, dP', P', dS of rows*H*ld_scores(max_tk) elements (B*H*Tq
// score rows of ld_scores(Tk) <= ld_scores(max_tk)), pointer arrays of rows*H heads.
size_t tfm_cuda_attn_mm_work(struct tfm_backend *be, int64_t rows, int H)
{
    int tk = CU(be)->max_tk;
    if (rows <= 0 || H <= 0 || tk <= 0)
        return 0;
    return layout(rows * H, 1, tk, be->act_size).total;
}
