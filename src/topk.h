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

/* Fill top_y/top_id (k) with the k largest values of y[v] = z[v] - l over v < V (the
 * same float subtraction log_softmax does), skipping ids in ban[0..nban) and values
 * that are not > -inf (NaN included); id -1 and -inf pad the list when fewer qualify.
 * bmax, if not NULL, holds the maximum of each run of `bsize` entries of z (a multiple of
 * TFM_TOPK_BLOCK), so that whole runs are skipped without reading them. */
TFM_TOPK_INLINE void tfm_topk_row(const float *z, float l, int V, int k, const int32_t *ban,
                                  int nban, const float *bmax, int bsize, float *top_y,
                                  int32_t *top_id)
{
    int n = 0;
    for (int v0 = 0; v0 < V; v0 += TFM_TOPK_BLOCK) {
        int v1 = V - v0 < TFM_TOPK_BLOCK ? V : v0 + TFM_TOPK_BLOCK;
        if (n == k && bmax && v0 % bsize == 0 && !(bmax[v0 / bsize] - l > top_y[k - 1])) {
            v0 += bsize - TFM_TOPK_BLOCK;           /* the whole run */
            continue;
        }
        if (n == k) {
            /* fl(m - l) >= fl(z - l) for every z <= m: rounding is monotone */
            float bm = tfm_run_max(z + v0, v1 - v0);
            if (!(bm - l > top_y[k - 1]))
                continue;
        }
        for (int v = v0; v < v1; v++) {
            float y = z[v] - l;
            if (!(y > -INFINITY) || (n == k && !(y > top_y[k - 1])))
                continue;
            int banned = 0;
            for (int b = 0; b < nban; b++)
                banned |= ban[b] == v;
            if (banned)
                continue;
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
    for (; n < k; n++) {
        top_y[n] = -INFINITY;
        top_id[n] = -1;
    }
}

#endif
