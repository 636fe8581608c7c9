/* so_check.h: looking at a shared object before dlopen maps it, and finding where the
 * dynamic loader would take a library from (for cuda_load.c, which must not let a damaged
 * driver library end the process).
 *
 * dlopen maps each segment as the program headers describe it and reads it in place: a
 * file cut short (a copy or an install interrupted) ends the process with SIGBUS, not an
 * error, and a FIFO makes it wait in open(2) for a writer.  These functions only read.
 *
 * Not here: loading anything (cuda_load.c).
 */
#ifndef TFM_SO_CHECK_H
#define TFM_SO_CHECK_H

#include <stddef.h>

/* Whether path is a whole 64-bit shared object of this machine: 0; -1 with "PATH: REASON"
 * in bad (n bytes) when it is one cut short (its program headers, a segment's bytes or its
 * section headers lie past its end) or no regular file; -2 with it when it is no such
 * object at all or cannot be opened (the loader passes over those in a search).  Opened
 * without waiting, so a FIFO is only looked at. */
int tfm_so_whole(const char *path, char *bad, size_t n);

/* The loader's cache file (glibc's ld.so.cache: /etc/ld.so.cache), read whole (at most
 * 64 MiB): fn(path, ctx) for each entry that names library `name` (libcuda.so.1) for this
 * machine's 64-bit libraries, in the cache's order (the loader takes the first that
 * loads; entries of glibc-hwcaps subdirectories included), until fn returns non-zero.
 * Both layouts glibc writes are read: the new format alone (glibc 2.32 on) or after the
 * old one.  Returns fn's non-zero result (a positive one tells itself from -1); 0 when
 * every entry was seen; -1 when the file cannot be read or is not such a cache (counts or
 * offsets past its end, a name without its terminating NUL). */
int tfm_so_cache_each(const char *cache, const char *name,
                      int (*fn)(const char *path, void *ctx), void *ctx);

/* The dynamic section of shared object path (whole, as tfm_so_whole says): the names of
 * the libraries it needs (DT_NEEDED), in its order, each ended by a NUL, with an empty name
 * after the last, into needed (n bytes); its search path (DT_RUNPATH, else DT_RPATH; ""
 * without either), with $ORIGIN and ${ORIGIN} replaced by path's directory, into search (m
 * bytes), and *is_rpath 1 when it was DT_RPATH (searched before LD_LIBRARY_PATH, where
 * DT_RUNPATH comes after it).  0; -1 when it cannot be read or does not fit. */
int tfm_so_needed(const char *path, char *needed, size_t n, char *search, size_t m,
                  int *is_rpath);

#endif
