/* topk.h: the k best entries of a row of log-probabilities, as a search needs them.
 *
 * The order is that of a scan in id order keeping a candidate only when it is strictly
 * better than the worst kept one: best value first, ties by smaller id.  The CPU
 * backend's log_softmax_top and the host path for other backends (model.c) both use
 * tfm_topk_row, so both give the same list for the same row.
 */
#ifndef TFM_TOPK_H
#define TFM_TOPK_H

#include <math.h>
#include <stdint.h>

/* Entries scanned as a block: one vectorized maximum decides whether the block can hold
 * a candidate at all (after the first blocks of a row it almost never can). */
#define TFM_TOPK_BLOCK 32

/* Inlined into each of the CPU backend's per-ISA clones of its caller. */
#if defined(__GNUC__)
#define TFM_TOPK_INLINE static inline __attribute__((always_inline))
#else
#define TFM_TOPK_INLINE static inline
#endif

/* The largest value of z[0..n) that is not NaN (-inf if none): what a scan keeping z[v]
 * when z[v] > the best so far finds (a maximum does not depend on the order).  Written in
 * 16 lanes of element-wise steps, which GCC vectorizes also inside other loops, where an
 * `omp simd` max reduction stayed scalar. */
TFM_TOPK_INLINE float tfm_run_max(const float *z, int n)
{
    float m[16];
    for (int l = 0; l < 16; l++)
        m[l] = -INFINITY;
    int v = 0;
    for (; v + 16 <= n; v += 16)
        for (int l = 0; l < 16; l++)
            m[l] = z[v + l] > m[l] ? z[v + l] : m[l];
    for (int w = 8; w; w >>= 1)         /* the lanes folded in halves */
        for (int l = 0; l < w; l++)
            m[l] = m[l + w] > m[l] ? m[l + w] : m[l];
    float bm = m[0];
    for (; v < n; v++)
        bm = z[v] > bm ? z[v] : bm;
    return bm;
}

/* Lists longer than this are kept as a heap (tfm_topk_heap_push) instead of sorted by
 * insertion, whose shifts cost O(k) a candidate: a beam of 4096 over 8000 tokens spent
 * nearly all its time moving entries. */
#define TFM_TOPK_INSERT_MAX 64

/* Is (ya, ia) worse than (yb, ib)?  Smaller value, or the same value and a larger id: the
 * order in which a list keeps the best first, ties by smaller id. */
TFM_TOPK_INLINE int tfm_topk_worse(float ya, int32_t ia, float yb, int32_t ib)
{
    return ya < yb || (ya == yb && ia > ib);
}

/* Restore the heap y/id[0..n) (the worst at the root) below position p. */
TFM_TOPK_INLINE void tfm_topk_sift(float *y, int32_t *id, int n, int p)
{
    float py = y[p];
    int32_t pi = id[p];
    for (;;) {
        int c = 2 * p + 1;
        if (c >= n)
            break;
        if (c + 1 < n && tfm_topk_worse(y[c + 1], id[c + 1], y[c], id[c]))
            c++;
        if (!tfm_topk_worse(y[c], id[c], py, pi))
            break;
        y[p] = y[c];
        id[p] = id[c];
        p = c;
    }
    y[p] = py;
    id[p] = pi;
}

/* Add (v, i) to the heap y/id[0..*n) of at most k entries, the worst at the root: appended
 * while there is room, else in place of the root (the caller has checked that it beats
 * the root). */
TFM_TOPK_INLINE void tfm_topk_heap_push(float *y, int32_t *id, int *n, int k, float v,
                                        int32_t i)
{
    if (*n == k) {
        y[0] = v;
        id[0] = i;
        tfm_topk_sift(y, id, k, 0);
        return;
    }
    int p = (*n)++;
    while (p > 0) {
        int q = (p - 1) / 2;
        if (!tfm_topk_worse(v, i, y[q], id[q]))
            break;
        y[p] = y[q];
        id[p] = id[q];
        p = q;
    }
    y[p] = v;
    id[p] = i;
}

/* The heap y/id[0..n) as a list, best first (ties by smaller id). */
TFM_TOPK_INLINE void tfm_topk_heap_sort(float *y, int32_t *id, int n)
{
    for (int m = n - 1; m > 0; m--) {           /* the worst left goes to the end */
        float ty = y[0];
        int32_t ti = id[0];
        y[0] = y[m];
        id[0] = id[m];
        y[m] = ty;
        id[m] = ti;
        tfm_topk_sift(y, id, m, 0);
    }
}

/* Fill top_y/top_id (k) with the k largest values of y[v] = z[v] - l over v < V (the
 * same float subtraction log_softmax does), skipping ids in ban[0..nban) and values
 * that are not > -inf (NaN included); id -1 and -inf pad the list when fewer qualify.
 * bmax, if not NULL, holds the maximum of each run of `bsize` entries of z (a multiple of
 * TFM_TOPK_BLOCK), so that whole runs are skipped without reading them.  Up to
 * TFM_TOPK_INSERT_MAX entries the list is kept sorted by insertion; a longer one is a heap
 * whose root, the worst kept, plays the part of the list's last entry, sorted at the end:
 * the same entries in the same order (the k best by value, ties by smaller id). */
TFM_TOPK_INLINE void tfm_topk_row(const float *z, float l, int V, int k, const int32_t *ban,
                                  int nban, const float *bmax, int bsize, float *top_y,
                                  int32_t *top_id)
{
    int n = 0, heap = k > TFM_TOPK_INSERT_MAX;
    /* the worst entry kept: the list's last, or the heap's root */
    const float *worst = heap ? top_y : top_y + k - 1;
    for (int v0 = 0; v0 < V; v0 += TFM_TOPK_BLOCK) {
        int v1 = V - v0 < TFM_TOPK_BLOCK ? V : v0 + TFM_TOPK_BLOCK;
        if (n == k && bmax && v0 % bsize == 0 && !(bmax[v0 / bsize] - l > *worst)) {
            v0 += bsize - TFM_TOPK_BLOCK;           /* the whole run */
            continue;
        }
        if (n == k) {
            /* fl(m - l) >= fl(z - l) for every z <= m: rounding is monotone */
            float bm = tfm_run_max(z + v0, v1 - v0);
            if (!(bm - l > *worst))
                continue;
        }
        for (int v = v0; v < v1; v++) {
            float y = z[v] - l;
            /* ids come in increasing order: one that only ties the worst is worse */
            if (!(y > -INFINITY) || (n == k && !(y > *worst)))
                continue;
            int banned = 0;
            for (int b = 0; b < nban; b++)
                banned |= ban[b] == v;
            if (banned)
                continue;
            if (heap) {
                tfm_topk_heap_push(top_y, top_id, &n, k, y, v);
                continue;
            }
            int p = n < k ? n++ : k - 1;
            while (p > 0 && top_y[p - 1] < y) {
                top_y[p] = top_y[p - 1];
                top_id[p] = top_id[p - 1];
                p--;
            }
            top_y[p] = y;
            top_id[p] = v;
        }
    }
    if (heap)
        tfm_topk_heap_sort(top_y, top_id, n);
    for (; n < k; n++) {
        top_y[n] = -INFINITY;
        top_id[n] = -1;
    }
}

#endif
