/* gen_pairs: synthetic parallel token streams for bench_batch.sh.
 *
 *   gen_pairs N SEED SRC.tfm TGT.tfm
 *
 * N pairs; source lengths 1 + Gamma(3, 8.7) (mean about 27 tokens), and one pair in
 * 2000 an outlier of 100 to 400 tokens (some over tfm-batch's --max-len 256); target
 * length the source's times a ratio around 1.1 (sd 0.15); ids uniform in [4, 32000).
 * Both streams carry the same stand-in vocabulary record and no eos.  Written chunk by
 * chunk, so the generator itself holds one chunk.  Prints on stdout:
 *     pairs N src_tokens A tgt_tokens B data_bytes D
 * where D is what tfm-batch holds of the token data: 4 bytes an id and 8 an offset
 * (N+1 offsets) for each stream.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "corpus.h"
#include "stream.h"

static uint64_t state;
static uint64_t next(void)     /* splitmix64 */
{
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static double unif(void) { return ((double)(next() >> 11) + 0.5) / 9007199254740992.0; }
static double normal(void) { return sqrt(-2 * log(unif())) * cos(6.283185307179586 * unif()); }

int main(int argc, char **argv)
{
    if (argc != 5) {
        fputs("usage: gen_pairs N SEED SRC.tfm TGT.tfm\n", stderr);
        return 2;
    }
    long long n = atoll(argv[1]);
    state = (uint64_t)atoll(argv[2]);
    struct tfm_error err;
    struct tfm_header h;
    tfm_header_init(&h, TFM_KIND_TOKENS);
    const char vocab[] = "synthetic vocabulary of gen_pairs: 32000 ids";
    if (n < 1 || tfm_header_set_spm(&h, vocab, sizeof vocab, &err) ||
        tfm_header_set(&h, "vocab.size", "32000", &err) ||
        tfm_header_set(&h, "producer", "gen_pairs", &err)) {
        fputs("gen_pairs: bad N or header\n", stderr);
        return 2;
    }
    struct tfm_writer *ws = tfm_writer_open(argv[3], &h, 0, &err);
    struct tfm_writer *wt = ws ? tfm_writer_open(argv[4], &h, 0, &err) : NULL;
    tfm_header_free(&h);
    if (!ws || !wt) {
        fprintf(stderr, "gen_pairs: %s\n", err.msg);
        return 1;
    }
    struct tfm_corpus cs, ct;
    tfm_corpus_init(&cs);
    tfm_corpus_init(&ct);
    int32_t ids[2048];
    long long ts = 0, tt = 0;
    for (long long i = 0; i < n; i++) {
        double g = -8.7 * log(unif() * unif() * unif());
        int ls = 1 + (int)g;
        if (next() % 2000 == 0)
            ls = 100 + (int)(next() % 301);
        if (ls > 400)
            ls = 400;
        int lt = (int)lround(ls * (1.1 + 0.15 * normal()));
        if (lt < 1)
            lt = 1;
        if (lt > 400)
            lt = 400;
        for (int j = 0; j < ls; j++)
            ids[j] = 4 + (int32_t)(next() % 31996);
        if (tfm_corpus_push(&cs, ids, ls, &err))
            goto fail;
        for (int j = 0; j < lt; j++)
            ids[j] = 4 + (int32_t)(next() % 31996);
        if (tfm_corpus_push(&ct, ids, lt, &err))
            goto fail;
        ts += ls;
        tt += lt;
        if (cs.n == TFM_CHUNK_SENTS || i == n - 1) {
            if (tfm_corpus_write(ws, &cs, &err) || tfm_corpus_write(wt, &ct, &err))
                goto fail;
            cs.n = ct.n = 0;    /* keep the buffers */
        }
    }
    if (tfm_writer_close(ws, &err) || tfm_writer_close(wt, &err)) {
        fprintf(stderr, "gen_pairs: %s\n", err.msg);
        return 1;
    }
    printf("pairs %lld src_tokens %lld tgt_tokens %lld data_bytes %lld\n", n, ts, tt,
           4 * (ts + tt) + 16 * (n + 1));
    tfm_corpus_free(&cs);
    tfm_corpus_free(&ct);
    return 0;
fail:
    fprintf(stderr, "gen_pairs: %s\n", err.msg);
    return 1;
}
