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
// synchronization.  Not cublasGemmStridedBatchedEx: a head's matrix lies at b*T*ld +
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

// The attention shape as the row kernels see it.
struct Rows {
    int H, Tq, Tk;
    const int32_t *klen;   // (B) device, or NULL
    int causal;
    float p, inv;          // dropout and its scale (tfm_dropout_scale)
    uint64_t key;
};

// Valid keys of query row i of sentence b: attn_keys in backend_cpu.c.
__device__ __forceinline__ int valid_keys(const Rows &s, int b, int i)
{
    int n = s.klen ? s.klen[b] : s.Tk;
    n = n < s.Tk ? n : s.Tk;
    if (s.causal && i + 1 < n)
        n = i + 1;
    return n < 0 ? 0 : n;
}

// x through the dropout of score element e (the flat index of (B,H,Tq,Tk)).
__device__ __forceinline__ float dropped(const Rows &s, uint64_t e, float x)
{
    if (s.p > 0)
        return tfm_dropout_keep(s.key, e, s.p) ? x * s.inv : 0.0f;
    return x;
}

// Forward, one block per score row r = (b*H + h)*Tq + i: lse_r = the log-sum-exp of its
// valid scores (row_log_sum_exp), P'_rj = dropout(exp(S_rj - lse_r)) for valid j, 0 for
// the rest (and the whole row when no key is valid: lse = -inf).
template <typename T>
__global__ void softmax_fwd(Rows s, const float *S, T *P, float *lse)
{
    const int64_t r = blockIdx.x;
    const int b = (int)(r / ((int64_t)s.H * s.Tq)), i = (int)(r % s.Tq);
    const int n = valid_keys(s, b, i);
    const float *sr = S + r * s.Tk;
    T *pr = P + r * s.Tk;
    const float L = n > 0 ? row_log_sum_exp(sr, n) : -INFINITY;
    const uint64_t e0 = (uint64_t)r * (uint64_t)s.Tk;
    for (int j = threadIdx.x; j < s.Tk; j += blockDim.x)
        act_store(pr + j, j < n ? dropped(s, e0 + j, expf(sr[j] - L)) : 0.0f);
    if (threadIdx.x == 0)
        lse[r] = L;
}

// Backward, one block per score row r: from S and dP' (fp32) and the forward's lse,
// P_j = exp(S_j - lse), g_j = dP'_j through the dropout, D = sum_j P_j g_j (valid j,
// each thread its strided j in order, then block_sum); stores P'_j (T) and dS_j = P_j
// (g_j - D) (T, without the scale), 0 past the valid keys.
template <typename T>
__global__ void softmax_bwd(Rows s, const float *S, const float *dP, const float *lse, T *P,
                            T *dS)
{
    const int64_t r = blockIdx.x;
    const int b = (int)(r / ((int64_t)s.H * s.Tq)), i = (int)(r % s.Tq);
    const int n = valid_keys(s, b, i);
    const float *sr = S + r * s.Tk, *gr = dP + r * s.Tk;
    T *pr = P + r * s.Tk, *dr = dS + r * s.Tk;
    const float L = n > 0 ? lse[r] : 0.0f;   // finite when n > 0
    const uint64_t e0 = (uint64_t)r * (uint64_t)s.Tk;
    float d = 0;
    for (int j = threadIdx.x; j < n; j += blockDim.x)
        d += expf(sr[j] - L) * dropped(s, e0 + j, gr[j]);
    d = block_sum(d);
    for (int j = threadIdx.x; j < s.Tk; j += blockDim.x) {
        float pj = 0, ds = 0;
        if (j < n) {
            float P0 = expf(sr[j] - L);
            ds = P0 * (dropped(s, e0 + j, gr[j]) - d);
            pj = dropped(s, e0 + j, P0);
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

Rows make_rows(const struct tfm_attn *a)
{
    Rows s;
    s.H = a->H;
    s.Tq = a->Tq;
    s.Tk = a->Tk;
    s.klen = a->klen;
    s.causal = a->causal;
    s.p = a->dropout;
    s.inv = tfm_dropout_scale(a->dropout);
    s.key = a->key;
    return s;
}

// ---- the workspace ------------------------------------------------------------------------

size_t round256(size_t n) { return (n + 255) / 256 * 256; }

// Where things lie in the workspace of one call: the pointer arrays (MAX_MATS x bh), then
// S (fp32) and P' (act bytes an element), bh*Tq*Tk elements each; the backward's dP'
// (fp32) and dS (act) after them.  (The forward's is the backward's first part.)
struct Layout {
    size_t ptrs, S, P, dP, dS, fwd, total;
};

Layout layout(int64_t bh, int64_t tq, int64_t tk, size_t act)
{
    const size_t n = (size_t)bh * (size_t)tq * (size_t)tk;
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

#define BLAS_CHECK(x)                                                                    \
    do {                                                                                 \
        cublasStatus_t s_ = (x);                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                 \
            tfm_cuda_fail(__func__, #x, cublasGetStatusName(s_), cublasGetStatusString(s_), \
                          __FILE__, __LINE__);                                           \
    } while (0)

cublasOperation_t op(int t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

// For each of the count problems: C (M,N) = alpha op(A) op(B) (beta 0: C overwritten, not
// read), row-major as backend.h's gemm, A, B, C the pointer arrays; at, bt, ct their
// types.  cuBLAS is column-major: the operands swap places (backend_cuda.cu, "matrix
// products").  K == 0: C = 0, row by row (cuBLAS is not asked to define that case).
void batched(struct tfm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
             const void *const *A, cudaDataType_t at, int lda, const void *const *B,
             cudaDataType_t bt, int ldb, void *const *C, cudaDataType_t ct, int ldc, int count)
{
    const float beta = 0;
    BLAS_CHECK(cublasGemmBatchedEx(CU(be)->blas, op(tb), op(ta), N, M, K, &alpha, B, bt, ldb,
                                   A, at, lda, &beta, C, ct, ldc, count, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
}

// rows x cols elements of `size` bytes, ld apart, set to 0 (an output whose products
// have no terms: every key masked away by Tk == 0, or no query at all).
void zero_rows(struct tfm_backend *be, void *x, int64_t rows, int cols, int ld, size_t size)
{
    if (rows > 0 && cols > 0)
        CUDA_CHECK(cudaMemset2DAsync(x, (size_t)ld * size, 0, (size_t)cols * size,
                                     (size_t)rows, STREAM(be)));
}

// The pointer arrays of ms into the workspace at arr (count * bh pointers); array k at
// arr + k*bh.
void write_ptrs(struct tfm_backend *be, const void **arr, const Mats &ms, int B, int H)
{
    size_t total = (size_t)ms.count * (size_t)B * (size_t)H;
    ptr_arrays<<<tfm_cuda_blocks(total, PTR_THREADS), PTR_THREADS, 0, STREAM(be)>>>(arr, ms,
                                                                                     B, H);
    LAUNCH_CHECK();
}

// A matrix in head layout: row t of sentence b at x + (b*T + t)*ld, head h at h*dk.
Mat head(const void *x, int T, int ld, int dk)
{
    return Mat{x, (int64_t)T * ld, (int64_t)dk};
}

// A (Tq,Tk) score matrix per (b,h) in the workspace, (B,H,Tq,Tk) contiguous.
Mat score(const void *x, int H, int Tq, int Tk)
{
    return Mat{x, (int64_t)H * Tq * Tk, (int64_t)Tq * Tk};
}

void add(Mats &ms, Mat m, size_t size)
{
    ms.m[ms.count] = m;
    ms.size[ms.count] = (int)size;
    ms.count++;
}

template <typename T> cudaDataType_t dtype()
{
    return std::is_same<T, float>::value ? CUDA_R_32F : CUDA_R_16BF;
}

template <typename T>
void fwd(struct tfm_backend *be, const struct tfm_attn *a, const T *q, int ldq, const T *k,
         int ldk, const T *v, int ldv, T *o, int ldo, float *lse)
{
    const int B = a->B, H = a->H, Tq = a->Tq, Tk = a->Tk, dk = a->dk, bh = B * H;
    const size_t ts = sizeof(T);
    const cudaDataType_t tt = dtype<T>();
    Layout l = layout(bh, Tq, Tk, ts);
    char *w = (char *)tfm_cuda_work(be, l.fwd);
    float *S = (float *)(w + l.S);
    T *P = (T *)(w + l.P);
    Mats ms = {};
    add(ms, head(q, Tq, ldq, dk), ts);                    // 0 Q
    add(ms, head(k, Tk, ldk, dk), ts);                    // 1 K
    add(ms, head(v, Tk, ldv, dk), ts);                    // 2 V
    add(ms, head(o, Tq, ldo, dk), ts);                    // 3 O
    add(ms, score(S, H, Tq, Tk), sizeof(float));          // 4 S
    add(ms, score(P, H, Tq, Tk), ts);                     // 5 P'
    const void **arr = (const void **)(w + l.ptrs);
    write_ptrs(be, arr, ms, B, H);
    auto at = [&](int i) { return arr + (size_t)i * bh; };
    auto out = [&](int i) { return (void *const *)(arr + (size_t)i * bh); };

    if (Tk > 0)
        batched(be, 0, 1, Tq, Tk, dk, a->scale, at(0), tt, ldq, at(1), tt, ldk, out(4),
                CUDA_R_32F, Tk, bh);
    Rows s = make_rows(a);
    softmax_fwd<T><<<(unsigned)((int64_t)bh * Tq), row_threads(Tk), 0, STREAM(be)>>>(s, S, P,
                                                                                     lse);
    LAUNCH_CHECK();
    if (Tk > 0)
        batched(be, 0, 0, Tq, dk, Tk, 1.0f, at(5), tt, Tk, at(2), tt, ldv, out(3), tt, ldo, bh);
    else
        zero_rows(be, o, (int64_t)B * Tq, H * dk, ldo, ts);
}

template <typename T>
void bwd(struct tfm_backend *be, const struct tfm_attn *a, const T *q, int ldq, const T *k,
         int ldk, const T *v, int ldv, const float *lse, const T *dout, int lddo, T *dq,
         int lddq, T *dk_, int lddk, T *dv, int lddv)
{
    const int B = a->B, H = a->H, Tq = a->Tq, Tk = a->Tk, dk = a->dk, bh = B * H;
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
    Mats ms = {};
    add(ms, head(q, Tq, ldq, dk), ts);                    // 0 Q
    add(ms, head(k, Tk, ldk, dk), ts);                    // 1 K
    add(ms, head(v, Tk, ldv, dk), ts);                    // 2 V
    add(ms, head(dout, Tq, lddo, dk), ts);                // 3 dO
    add(ms, head(dq, Tq, lddq, dk), ts);                  // 4 dQ
    add(ms, head(dk_, Tk, lddk, dk), ts);                 // 5 dK
    add(ms, head(dv, Tk, lddv, dk), ts);                  // 6 dV
    add(ms, score(S, H, Tq, Tk), sizeof(float));          // 7 S
    add(ms, score(dP, H, Tq, Tk), sizeof(float));         // 8 dP'
    add(ms, score(P, H, Tq, Tk), ts);                     // 9 P'
    add(ms, score(dS, H, Tq, Tk), ts);                    // 10 dS
    const void **arr = (const void **)(w + l.ptrs);
    write_ptrs(be, arr, ms, B, H);
    auto at = [&](int i) { return arr + (size_t)i * bh; };
    auto out = [&](int i) { return (void *const *)(arr + (size_t)i * bh); };

    batched(be, 0, 1, Tq, Tk, dk, a->scale, at(0), tt, ldq, at(1), tt, ldk, out(7), CUDA_R_32F,
            Tk, bh);                                                        // S = scale Q K^T
    batched(be, 0, 1, Tq, Tk, dk, 1.0f, at(3), tt, lddo, at(2), tt, ldv, out(8), CUDA_R_32F,
            Tk, bh);                                                        // dP' = dO V^T
    Rows s = make_rows(a);
    softmax_bwd<T><<<(unsigned)((int64_t)bh * Tq), row_threads(Tk), 0, STREAM(be)>>>(s, S, dP,
                                                                                     lse, P, dS);
    LAUNCH_CHECK();
    batched(be, 1, 0, Tk, dk, Tq, 1.0f, at(9), tt, Tk, at(3), tt, lddo, out(6), tt, lddv,
            bh);                                                            // dV = P'^T dO
    batched(be, 0, 0, Tq, dk, Tk, a->scale, at(10), tt, Tk, at(1), tt, ldk, out(4), tt, lddq,
            bh);                                                            // dQ = scale dS K
    batched(be, 1, 0, Tk, dk, Tq, a->scale, at(10), tt, Tk, at(0), tt, ldq, out(5), tt, lddk,
            bh);                                                            // dK = scale dS^T Q
}

// The launches above give each score row a block: at most 2^31 - 1 of them.
bool fits(const struct tfm_attn *a)
{
    return (int64_t)a->B * a->H * a->Tq <= 2147483647 && (int64_t)a->B * a->H <= 2147483647;
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
// and Tk <= max_tk (reserve): S, dP', P', dS of rows*H*max_tk elements, pointer arrays of
// rows*H heads.
size_t tfm_cuda_attn_mm_work(struct tfm_backend *be, int64_t rows, int H)
{
    int tk = CU(be)->max_tk;
    if (rows <= 0 || H <= 0 || tk <= 0)
        return 0;
    return layout(rows * H, 1, tk, be->act_size).total;
}
