// attn.cuh: what the attention kernels of cuda_attn.cu (online softmax) and cuda_attn_mm.cu
// (tensor-core products) share, so that both paths mask and drop exactly the same weights:
// the shape (struct tfm_attn of src/backend.h, plus the dropout's scale), the keys a query
// row sees, and the dropout of one attention weight.  Included inside each file's
// anonymous namespace, after reduce.cuh where that is included.

// The attention shape as the kernels see it.
struct Shape {
    int B, H, Tq, Tk, dk;
    const int32_t *klen;   // (B) device, or NULL
    int causal;
    float scale;
    float p, inv;          // dropout probability (p <= 0: none) and 1 / (1 - p)
    uint64_t key;
};

inline Shape make_shape(const struct tfm_attn *a)
{
    Shape s;
    s.B = a->B;
    s.H = a->H;
    s.Tq = a->Tq;
    s.Tk = a->Tk;
    s.dk = a->dk;
    s.klen = a->klen;
    s.causal = a->causal;
    s.scale = a->scale;
    s.p = a->dropout;
    s.inv = tfm_dropout_scale(a->dropout);   // as on the CPU
    s.key = a->key;
    return s;
}

// Keys of sentence b that exist: min(klen[b], Tk), at least 0.
__device__ __forceinline__ int key_limit(const Shape &s, int b)
{
    int n = s.klen ? s.klen[b] : s.Tk;
    n = n < s.Tk ? n : s.Tk;
    return n < 0 ? 0 : n;
}

// Valid keys of query row i (j < row_keys) given the sentence's key_limit kl: attn_keys
// in backend_cpu.c.
__device__ __forceinline__ int row_keys(const Shape &s, int kl, int i)
{
    return s.causal && i + 1 < kl ? i + 1 : kl;
}

// x through the dropout of attention weight e, the flat index ((b*H + h)*Tq + i)*Tk + j of
// (B,H,Tq,Tk): x / (1 - p) where kept, else 0; x itself without dropout.
__device__ __forceinline__ float drop_at(const Shape &s, uint64_t e, float x)
{
    if (s.p > 0)
        return tfm_dropout_keep(s.key, e, s.p) ? x * s.inv : 0.0f;
    return x;
}
