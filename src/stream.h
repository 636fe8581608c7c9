/* stream.h: the tfm tensor stream, the one format of every tfm file and pipe.
 *
 * A stream is a preamble and a sequence of self-delimiting records, each a named, typed,
 * shaped tensor with a CRC32 of its payload.  Record 0 is the header ("tfm.header": the
 * stream's kind and key=value metadata); record 1 may carry the SentencePiece model
 * ("tfm.spm"); the last record is "tfm.end" (the number of records before it), so a
 * stream cut at a record boundary is detected.  The byte layout is in man/tfm.5; this
 * module is the only code that knows it.
 *
 * Readers work on pipes (no seeking) and memory-map regular files, so the payloads of a
 * checkpoint are used in place.  Every field is validated before anything is allocated.
 * Streams written one after another (cat a.tfm b.tfm) are read as one, as gzip reads its
 * members: after an end record, more input must be another stream of the same kind, with
 * the same vocabulary (tfm.spm byte for byte) and the same TFM_SAME_KEYS; its records
 * follow the first stream's.  Anything else after an end record is an error, and so is
 * any input after a checkpoint's end.
 * Writers to a path go through output.h ("PATH.tmp.PID" renamed on tfm_writer_close;
 * links followed, devices written in place), so an output appears whole or not at all;
 * "-" is stdout.
 */
#ifndef TFM_STREAM_H
#define TFM_STREAM_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define TFM_STREAM_VERSION 1
#define TFM_MAX_RANK 8
#define TFM_MAX_NAME 255
#define TFM_ALIGN 64
/* Largest decoded payload a reader accepts (bytes).  Bounds what a crafted header can
 * make a reader allocate; a real tensor larger than this is a bug. */
#define TFM_MAX_PAYLOAD ((uint64_t)1 << 36)
/* Most key=value pairs in a header, and the longest key and value. */
#define TFM_MAX_META 64
#define TFM_MAX_KEY 63
#define TFM_MAX_VALUE 4095
/* The most kind can hold (struct tfm_header), and so the longest header text there is:
 * "kind=K\n" and TFM_MAX_META lines "key=value\n".  A header record claiming more is
 * refused before its payload is read (or inflated). */
#define TFM_MAX_KIND 31
/* The largest SentencePiece model read, from a .model file or a tfm.spm record (real
 * ones are a few MiB, mostly the normalizer's character map). */
#define TFM_MAX_SPM ((uint64_t)1 << 30)
#define TFM_MAX_HEADER_TEXT (5 + TFM_MAX_KIND + 1 + TFM_MAX_META * (TFM_MAX_KEY + TFM_MAX_VALUE + 2))

enum tfm_dtype {
    TFM_U8 = 1,
    TFM_U16 = 2,
    TFM_I32 = 3,
    TFM_I64 = 4,
    TFM_F16 = 5,
    TFM_BF16 = 6,
    TFM_F32 = 7,
};

/* Bytes per element, or 0 for a value that is not a dtype. */
size_t tfm_dtype_size(int dtype);
/* "u8", "i32", "f32", ... or "?" */
const char *tfm_dtype_name(int dtype);
/* The dtype named s, or 0. */
int tfm_dtype_parse(const char *s);

/* Header keys a stream that follows another (a concatenation) must share with the first:
 * they say how the ids are to be read. */
#define TFM_SAME_KEYS {"vocab.size", "bos", "eos", "src.bos", "targets"}

/* What a stream holds (the header's "kind" key). */
#define TFM_KIND_TOKENS "tokens"           /* ragged sentences: tokens.offsets + tokens.ids */
#define TFM_KIND_BATCHES "batches"         /* padded batches: batch.index, batch.src, batch.tgt */
#define TFM_KIND_CHECKPOINT "checkpoint"   /* config, parameters, optimizer and run state */
#define TFM_KIND_HYPOTHESES "hypotheses"   /* decoder output: token chunks + hyp.index/score */
#define TFM_KIND_ATTENTION "attention"     /* attention weights per sentence (attention.h) */

/* The header: kind, key=value metadata, and the embedded SentencePiece model (may be
 * absent: spm == NULL).  Keys are [A-Za-z0-9_.-]+, values any bytes but '\n' and NUL. */
struct tfm_header {
    char kind[TFM_MAX_KIND + 1];
    int nmeta;
    char *keys[TFM_MAX_META];
    char *values[TFM_MAX_META];
    void *spm;          /* serialized SentencePiece ModelProto, or NULL */
    size_t spm_size;
};

void tfm_header_init(struct tfm_header *h, const char *kind);
void tfm_header_free(struct tfm_header *h);
/* Deep copy of src into dst (dst uninitialized). Returns 0 or -1 (out of memory). */
int tfm_header_copy(struct tfm_header *dst, const struct tfm_header *src, struct tfm_error *err);
/* Set (add or replace) a key. Returns 0, or -1 with a message on a bad key or value. */
int tfm_header_set(struct tfm_header *h, const char *key, const char *value,
                   struct tfm_error *err);
int tfm_header_setf(struct tfm_header *h, struct tfm_error *err, const char *key,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The value of key, or NULL. */
const char *tfm_header_get(const struct tfm_header *h, const char *key);
/* The value of key as a non-negative decimal integer, or -1 when absent or not one. */
int64_t tfm_header_int(const struct tfm_header *h, const char *key);
/* Copy spm bytes into the header (replacing any).  Sets "spm.crc32" and "spm.size". */
int tfm_header_set_spm(struct tfm_header *h, const void *spm, size_t n, struct tfm_error *err);
/* The CRC32 of the embedded SentencePiece model, identifying a vocabulary (0 if none). */
uint32_t tfm_header_vocab_id(const struct tfm_header *h);

/* One record as read.  name and data stay valid until the next tfm_reader_next or
 * tfm_reader_close; data is aligned to TFM_ALIGN bytes. */
struct tfm_record {
    const char *name;
    int dtype;
    int rank;
    int64_t dims[TFM_MAX_RANK];
    int64_t count;      /* number of elements: product of dims (1 for rank 0) */
    size_t nbytes;      /* count * dtype size */
    const void *data;
    uint64_t index;     /* record number in its stream; 0 is the header */
    uint64_t offset;    /* byte offset of the record's start in the input */
    uint64_t member;    /* which stream of a concatenation holds it: 0 the first */
    int mapped;         /* data points into the memory-mapped file and stays valid (read
                         * only) until tfm_reader_close; else only until the next read */
};

struct tfm_reader;

/* Open path ("-" or NULL: stdin), check the preamble, read the header (and the embedded
 * vocabulary).  NULL on failure with a message that starts with the file's name. */
struct tfm_reader *tfm_reader_open(const char *path, struct tfm_error *err);
/* The same, but reading from a pipe gives up waiting for input (for a FIFO's writer, for
 * the header, and for every record after it) once *stop is non-zero (a signal's flag),
 * with "Interrupted system call" (EINTR) as the error.  stop NULL: wait as long as it
 * takes. */
struct tfm_reader *tfm_reader_open_stop(const char *path, volatile sig_atomic_t *stop,
                                        struct tfm_error *err);
/* Same on an open descriptor; name is used in messages.  The reader does not close fd. */
struct tfm_reader *tfm_reader_open_fd(int fd, const char *name, struct tfm_error *err);
/* Does this descriptor's next input begin with the stream magic?  For tools that accept
 * either a stream or text: peeks at most 8 bytes, which tfm_reader_open_fd then uses. */
struct tfm_reader *tfm_reader_open_peeked(int fd, const char *name, const void *peek,
                                          size_t npeek, struct tfm_error *err);
int tfm_is_stream_magic(const void *buf, size_t n);

/* The header of the first stream (of a concatenation: they share kind and vocabulary). */
const struct tfm_header *tfm_reader_header(const struct tfm_reader *r);
/* The header of the stream now being read: of a concatenation, the one that holds the
 * record last returned (or an empty stream after it). */
const struct tfm_header *tfm_reader_member_header(const struct tfm_reader *r);
const char *tfm_reader_name(const struct tfm_reader *r);
/* The next record: 1 and fills rec; 0 at the last "tfm.end" of the input (every stream
 * complete and verified, nothing after it); -1 on any error, with
 * "FILE: record N 'NAME': at byte OFF: reason" ("FILE: stream S, record N ..." in the
 * S-th stream of a concatenation, S > 1).  Records of a following stream come after
 * those of the first; its header and vocabulary records are checked, not returned. */
int tfm_reader_next(struct tfm_reader *r, struct tfm_record *rec, struct tfm_error *err);
/* Read the next record and require its name, dtype and rank (dtype or rank < 0: any),
 * and that it be in the same stream as the record before it (it continues a group). */
int tfm_reader_expect(struct tfm_reader *r, struct tfm_record *rec, const char *name,
                      int dtype, int rank, struct tfm_error *err);
/* Fill err with "FILE: record N 'NAME': at byte OFF: <fmt>" for a problem the caller
 * found in the record just read (a wrong shape, say).  Returns -1. */
int tfm_reader_fail(const struct tfm_reader *r, const struct tfm_record *rec,
                    struct tfm_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Pass over the records whose name skip(name, ctx) accepts (never the tfm.* ones): they
 * are not returned, and their payload is neither verified nor, from a file, read.  Their
 * headers are checked and they count toward the end record's total.  NULL: none. */
void tfm_reader_skip(struct tfm_reader *r, int (*skip)(const char *name, void *ctx), void *ctx);
/* Call fn when a following stream of a concatenation begins, after its header and
 * vocabulary were checked and before any of its records is returned: with its header,
 * its number (1 for the second stream) and the byte offset of its preamble.  fn returns
 * 0, or -1 with err set to stop reading (tfm_reader_next then fails with that error). */
void tfm_reader_on_member(struct tfm_reader *r,
                          int (*fn)(void *ctx, const struct tfm_header *h, uint64_t member,
                                    uint64_t offset, struct tfm_error *err),
                          void *ctx);
/* For a reader done reading whose caller keeps reading the data of mapped records: give
 * the map's pages from end (rounded up to a page) on back, with the address space they
 * hold (a checkpoint's Adam moments, passed over).  Nothing on a reader that maps nothing
 * or for an end outside its map. */
void tfm_reader_unmap_after(struct tfm_reader *r, const void *end);
void tfm_reader_close(struct tfm_reader *r);

/* Writer flags. */
#define TFM_DEFLATE 1       /* deflate each record's payload (level 6) where it pays */

struct tfm_writer;

/* Open path ("-" or NULL: stdout) and write the preamble, header and vocabulary.  A path
 * is written as a temporary file beside it and appears on tfm_writer_close. */
struct tfm_writer *tfm_writer_open(const char *path, const struct tfm_header *h, int flags,
                                   struct tfm_error *err);
/* The same on an output already open (output.h; NULL: stdout), which the writer takes
 * over (*out is left empty: tfm_output_abort on it does nothing): tfm_writer_close
 * commits it, tfm_writer_abort (or a failure here) gives it up.
 * A tool that must not learn only after its work that an output path cannot be written
 * opens the output first and the writer when it has something to write. */
struct tfm_output;
struct tfm_writer *tfm_writer_open_output(struct tfm_output *out, const struct tfm_header *h,
                                          int flags, struct tfm_error *err);
/* Write one record.  dims has rank entries; data has product(dims) * size(dtype) bytes. */
int tfm_writer_put(struct tfm_writer *w, const char *name, int dtype, int rank,
                   const int64_t *dims, const void *data, struct tfm_error *err);
/* Write "tfm.end", flush, fsync and rename into place.  Frees w whatever happens. */
int tfm_writer_close(struct tfm_writer *w, struct tfm_error *err);
/* Give up: remove the temporary file, free w.  Safe on NULL. */
void tfm_writer_abort(struct tfm_writer *w);
/* The name messages give the output (the path it was opened with, or "<stdout>"). */
const char *tfm_writer_name(const struct tfm_writer *w);
/* Bytes written so far. */
uint64_t tfm_writer_offset(const struct tfm_writer *w);

/* Inflate the zlib data in[0..m) into out[0..n), handing zlib at most step bytes of either
 * at a time (0: as much as its 32-bit counts hold), so a payload past 4 GiB inflates whole.
 * Z_OK when the data ends exactly at n bytes with no input left over; else a zlib error
 * (Z_BUF_ERROR for data cut short or longer than n bytes, Z_DATA_ERROR for data that is
 * corrupt or followed by more input), and *produced says how many bytes came out. */
int tfm_inflate(void *out, size_t n, const void *in, size_t m, size_t step, size_t *produced);

/* zlib's CRC32 (the checksum of every record). */
uint32_t tfm_crc32(uint32_t crc, const void *buf, size_t n);

#endif
