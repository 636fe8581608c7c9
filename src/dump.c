/* dump.c: a tfm stream as text (see dump.h and man/tfm-cat.1).
 *
 *   stream NAME version 1
 *   meta kind=tokens                 one line per header key, "kind" first
 *   meta spm.size=238123
 *   record 2 tokens.offsets i64 [3] 24 bytes at 1216
 *   	0 5 12                          with --values: a row of the last dimension a line
 *   end 4 records
 *   stream NAME version 1 at byte 4416   the next stream of a concatenation (cat a b):
 *   meta kind=tokens                 its header, records and end the same way
 */
#include "dump.h"

#include <inttypes.h>
#include <string.h>

float tfm_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float tfm_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);               /* inf, nan */
    } else if (exp == 0) {
        if (man == 0) {
            u = sign;                                        /* zero */
        } else {                                             /* subnormal: normalize */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            u = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else {
        u = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void print_value(FILE *out, int dtype, const void *data, int64_t i)
{
    switch (dtype) {
    case TFM_U8: fprintf(out, "%u", ((const uint8_t *)data)[i]); break;
    case TFM_U16: fprintf(out, "%u", ((const uint16_t *)data)[i]); break;
    case TFM_I32: fprintf(out, "%" PRId32, ((const int32_t *)data)[i]); break;
    case TFM_I64: fprintf(out, "%" PRId64, ((const int64_t *)data)[i]); break;
    case TFM_F16: fprintf(out, "%.9g", tfm_f16_to_f32(((const uint16_t *)data)[i])); break;
    case TFM_BF16: fprintf(out, "%.9g", tfm_bf16_to_f32(((const uint16_t *)data)[i])); break;
    case TFM_F32: fprintf(out, "%.9g", ((const float *)data)[i]); break;
    }
}

static void print_header(FILE *out, const struct tfm_header *h)
{
    fprintf(out, "meta kind=%s\n", h->kind);
    for (int i = 0; i < h->nmeta; i++)
        fprintf(out, "meta %s=%s\n", h->keys[i], h->values[i]);
}

struct dump_state {
    FILE *out;
    const char *name;
    uint64_t n;         /* records of the current stream before its end record */
};

/* The next stream of a concatenation begins: end the last one, print its header. */
static int next_stream(void *ctx, const struct tfm_header *h, uint64_t member, uint64_t offset,
                       struct tfm_error *err)
{
    struct dump_state *d = ctx;
    (void)member;
    fprintf(d->out, "end %" PRIu64 " records\n", d->n + 1);
    fprintf(d->out, "stream %s version %d at byte %" PRIu64 "\n", d->name, TFM_STREAM_VERSION,
            offset);
    print_header(d->out, h);
    d->n = h->spm ? 2 : 1;
    return ferror(d->out) ? tfm_fail(err, "write error") : 0;
}

int tfm_dump(struct tfm_reader *r, FILE *out, int flags, struct tfm_error *err)
{
    const struct tfm_header *h = tfm_reader_header(r);
    fprintf(out, "stream %s version %d\n", tfm_reader_name(r), TFM_STREAM_VERSION);
    print_header(out, h);
    if (ferror(out))
        return tfm_fail(err, "write error");
    struct tfm_record rec;
    int k;
    /* With the header only, the records are still read and checked, printing nothing: a
     * damaged stream fails as it does without -H. */
    int header_only = flags & TFM_DUMP_HEADER;
    struct dump_state d = {out, tfm_reader_name(r), h->spm ? 2 : 1};
    if (!header_only)
        tfm_reader_on_member(r, next_stream, &d);
    while ((k = tfm_reader_next(r, &rec, err)) == 1) {
        if (header_only)
            continue;
        fprintf(out, "record %" PRIu64 " %s %s [", rec.index, rec.name, tfm_dtype_name(rec.dtype));
        for (int d = 0; d < rec.rank; d++)
            fprintf(out, d ? ",%" PRId64 : "%" PRId64, rec.dims[d]);
        fprintf(out, "] %zu bytes at %" PRIu64 "\n", rec.nbytes, rec.offset);
        d.n = rec.index + 1;
        if ((flags & TFM_DUMP_VALUES) && rec.count > 0) {
            int64_t row = rec.rank ? rec.dims[rec.rank - 1] : 1;
            for (int64_t i = 0; i < rec.count; i++) {
                fputc(i % row ? ' ' : '\t', out);
                print_value(out, rec.dtype, rec.data, i);
                if ((i + 1) % row == 0)
                    fputc('\n', out);
            }
        }
        if (ferror(out))
            return tfm_fail(err, "write error");
    }
    tfm_reader_on_member(r, NULL, NULL);
    if (k < 0)
        return -1;
    if (header_only)
        return 0;
    fprintf(out, "end %" PRIu64 " records\n", d.n + 1);
    return ferror(out) ? tfm_fail(err, "write error") : 0;
}
