/* backend_sim.c: a stand-in for a GPU on any machine (backend.h, tfm_backend_sim).
 *
 * The CPU backend's ops on memory the host cannot touch: every block comes from mmap with
 * no access, opened (mprotect) only while an op, an upload or a download runs, so host
 * code that reads or writes model memory directly dies with SIGSEGV at that line, as it
 * would read garbage on a GPU.  In the other direction every pointer an op is given must
 * lie in a block, or the process aborts naming the op and the argument: host memory passed
 * to a GPU op.  host_memory is 0, so callers take their device paths (uploads, downloads,
 * staging buffers).  Results are the CPU backend's, bit for bit.
 * What it cannot show: a GPU's speed, its asynchrony (ops here complete before they
 * return), or errors inside CUDA kernels (test_gpu_ops on a GPU does).
 * Slow (two mprotect calls per block per op): for tests and `--device sim`, not training.
 */
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct block {
    char *p;
    size_t len;
};

struct sim {
    struct tfm_backend *in;     /* the CPU backend doing the work */
    struct block *b;
    int n, cap;
};

static struct sim *SIM(struct tfm_backend *be) { return be->impl; }

static void protect(struct sim *s, int prot)
{
    for (int i = 0; i < s->n; i++)
        if (mprotect(s->b[i].p, s->b[i].len, prot)) {
            perror("tfm: sim backend: mprotect");
            abort();
        }
}

/* Abort unless p (when given) points into a block: an op was handed host memory. */
static void dev(const struct sim *s, const void *p, const char *arg, const char *op)
{
    if (!p)
        return;
    for (int i = 0; i < s->n; i++)
        if ((const char *)p >= s->b[i].p && (const char *)p < s->b[i].p + s->b[i].len)
            return;
    fprintf(stderr, "tfm: sim backend: %s: %s = %p is not device memory\n", op, arg, p);
    abort();
}

#define OPEN(be)                       \
    struct sim *s = SIM(be);           \
    protect(s, PROT_READ | PROT_WRITE)
#define CLOSE() protect(s, PROT_NONE)
#define DEV(p) dev(s, (p), #p, __func__)

static void *sim_alloc(struct tfm_backend *be, size_t bytes, struct tfm_error *err)
{
    struct sim *s = SIM(be);
    size_t len = bytes ? bytes : 1;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        struct block *b = realloc(s->b, (size_t)cap * sizeof *b);
        if (!b) {
            tfm_fail(err, "out of memory");
            return NULL;
        }
        s->b = b;
        s->cap = cap;
    }
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        tfm_fail(err, "sim: out of memory allocating %zu bytes", bytes);
        return NULL;
    }
    s->b[s->n++] = (struct block){p, len};
    return p;
}

static void sim_free(struct tfm_backend *be, void *p)
{
    struct sim *s = SIM(be);
    for (int i = 0; p && i < s->n; i++)
        if (s->b[i].p == p) {
            munmap(p, s->b[i].len);
            s->b[i] = s->b[--s->n];
            return;
        }
}

/* memmove between device and host (which sides are device memory: dev_dst, dev_src). */
static void move(struct tfm_backend *be, void *dst, int dev_dst, const void *src, int dev_src,
                 size_t bytes, const char *op)
{
    OPEN(be);
    if (dev_dst)
        dev(s, dst, "dst", op);
    if (dev_src)
        dev(s, src, "src", op);
    if (bytes && dst != src)
        memmove(dst, src, bytes);
    CLOSE();
}

static void sim_upload(struct tfm_backend *be, void *dst, const void *host, size_t bytes)
{
    move(be, dst, 1, host, 0, bytes, __func__);
}

static void sim_download(struct tfm_backend *be, void *host, const void *src, size_t bytes)
{
    move(be, host, 0, src, 1, bytes, __func__);
}

static void sim_download_act(struct tfm_backend *be, float *host, const void *src, size_t n)
{
    move(be, host, 0, src, 1, n * sizeof(float), __func__);
}

static void sim_upload_act(struct tfm_backend *be, void *dst, const float *host, size_t n)
{
    struct tfm_backend *in = SIM(be)->in;
    move(be, dst, 1, host, 0, n * sizeof(float), __func__);
    if (in->precision == TFM_PRECISION_BF16) {   /* round in place, as the CPU does */
        OPEN(be);
        DEV(dst);
        float *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = tfm_bf16_round(d[i]);
        CLOSE();
    }
}

static void sim_copy(struct tfm_backend *be, void *dst, const void *src, size_t bytes)
{
    move(be, dst, 1, src, 1, bytes, __func__);
}

static void sim_zero(struct tfm_backend *be, void *dst, size_t bytes)
{
    OPEN(be);
    DEV(dst);
    memset(dst, 0, bytes);
    CLOSE();
}

static void sim_sync(struct tfm_backend *be) { (void)be; }

static int sim_reserve(struct tfm_backend *be, int max_tq, int max_tk, struct tfm_error *err)
{
    return SIM(be)->in->reserve(SIM(be)->in, max_tq, max_tk, err);
}

/* Abort unless each of the n pointers d (the arguments named in `names`, "(a, b, c)") is
 * NULL or device memory. */
static void devs(const struct sim *s, const void *const *d, int n, const char *names,
                 const char *op)
{
    for (int i = 0; i < n; i++) {
        int j = 0;
        const char *p = names + 1;                  /* past "(" */
        for (; j < i && *p; p++)
            j += *p == ',';
        while (*p == ' ')
            p++;
        char name[64];
        size_t len = strcspn(p, ",)");
        snprintf(name, sizeof name, "%.*s", (int)len, p);
        dev(s, d[i], name, op);
    }
}

/* Each op of TFM_BACKEND_OPS: open the blocks, check that each pointer its list names is
 * device memory, run the CPU backend's op on the same arguments, close the blocks. */
#define SIM_LIST(...) __VA_ARGS__
#define SIM_CHECK(devlist)                                                              \
    OPEN(be);                                                                           \
    const void *const d_[] = {SIM_LIST devlist};                                        \
    devs(s, d_, (int)(sizeof d_ / sizeof *d_), #devlist, __func__);                     \
    struct tfm_backend *inner_ = s->in
#define SIM_OP_void(name, params, args, devlist)                                        \
    static void sim_##name params                                                       \
    {                                                                                   \
        SIM_CHECK(devlist);                                                             \
        {                                                                               \
            struct tfm_backend *be = inner_;    /* args name the CPU backend */         \
            be->name args;                                                              \
        }                                                                               \
        CLOSE();                                                                        \
    }
#define SIM_OP_double(name, params, args, devlist)                                      \
    static double sim_##name params                                                     \
    {                                                                                   \
        SIM_CHECK(devlist);                                                             \
        double r_;                                                                      \
        {                                                                               \
            struct tfm_backend *be = inner_;                                            \
            r_ = be->name args;                                                         \
        }                                                                               \
        CLOSE();                                                                        \
        return r_;                                                                      \
    }
#define SIM_OP(ret, name, params, args, devlist) SIM_OP_##ret(name, params, args, devlist)
TFM_BACKEND_OPS(SIM_OP)
#undef SIM_OP

/* Decoding's packed output layer, where the CPU backend has it (backend.h): the packing
 * and the logits, whose pointers are all device memory, so that decoding through sim keeps
 * the CPU's bits; not out_top, whose results go to host memory as no GPU op's do (the
 * model then selects the best tokens on the host, with the same bits). */
SIM_OP_void(out_pack, (struct tfm_backend *be, float *packed, const float *W, int V, int D),
            (be, packed, W, V, D), (packed, W))
SIM_OP_void(out_logits,
            (struct tfm_backend *be, float *y, const float *x, int N, const float *packed,
             int V, int D),
            (be, y, x, N, packed, V, D), (y, x, packed))

/* The CPU backend doing the work emulates bf16; the wrappers above stay as they are. */
static int sim_set_bf16(struct tfm_backend *be, int on, struct tfm_error *err)
{
    return tfm_backend_set_precision(
        SIM(be)->in, on ? TFM_PRECISION_BF16 : TFM_PRECISION_FP32, err);
}

static void sim_destroy(struct tfm_backend *be)
{
    if (!be)
        return;
    struct sim *s = SIM(be);
    if (s) {
        for (int i = 0; i < s->n; i++)
            munmap(s->b[i].p, s->b[i].len);
        free(s->b);
        if (s->in)
            s->in->destroy(s->in);
    }
    free(s);
    free(be);
}

struct tfm_backend *tfm_backend_sim(int threads, struct tfm_error *err)
{
    struct tfm_backend *be = calloc(1, sizeof *be);
    struct sim *s = calloc(1, sizeof *s);
    if (!be || !s) {
        free(be);
        free(s);
        tfm_fail(err, "out of memory");
        return NULL;
    }
    if (!(s->in = tfm_backend_cpu(threads, err))) {
        free(be);
        free(s);
        return NULL;
    }
    be->name = "sim";
    be->kind = TFM_BACKEND_SIM;
    be->precision = TFM_PRECISION_FP32;
    /* fp32 unless asked: the sim backend's bits are the CPU's at the same precision */
    be->auto_precision = TFM_PRECISION_FP32;
    be->act_size = sizeof(float);
    be->set_bf16 = sim_set_bf16;
    be->threads = s->in->threads;
    be->host_memory = 0;
    be->impl = s;
    be->alloc = sim_alloc;
    be->free = sim_free;
    be->upload = sim_upload;
    be->download = sim_download;
    be->copy = sim_copy;
    be->zero = sim_zero;
    be->download_act = sim_download_act;
    be->upload_act = sim_upload_act;
    be->sync = sim_sync;
    be->reserve = sim_reserve;
#define SIM_SET(ret, name, params, args, devlist) be->name = sim_##name;
    TFM_BACKEND_OPS(SIM_SET)
#undef SIM_SET
    if (s->in->out_pack) {
        be->out_pack_floats = s->in->out_pack_floats;
        be->out_pack = sim_out_pack;
        be->out_logits = sim_out_logits;
    }
    be->destroy = sim_destroy;
    return be;
}
