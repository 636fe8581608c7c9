/* so_check.c: a shared object checked whole before dlopen, and the loader's cache read for
 * where a library is (so_check.h). */
#include "so_check.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__)
#define THIS_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define THIS_MACHINE EM_AARCH64
#elif defined(__powerpc64__)
#define THIS_MACHINE EM_PPC64
#else
#define THIS_MACHINE EM_NONE            /* not checked */
#endif

/* off + len, or the largest value when that overflows (a crafted header's). */
static unsigned long long end_of(unsigned long long off, unsigned long long len)
{
    return len > ~0ull - off ? ~0ull : off + len;
}

int tfm_so_whole(const char *path, char *bad, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        snprintf(bad, n, "%s: %s", path, strerror(errno));
        return -2;
    }
    struct stat st;
    Elf64_Ehdr eh;
    int rc = -2;
    if (fstat(fd, &st)) {
        snprintf(bad, n, "%s: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        snprintf(bad, n, "%s: not a regular file", path);
        rc = -1;
    } else if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh ||
               memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
        snprintf(bad, n, "%s: not a shared object (%lld bytes, no ELF header)", path,
                 (long long)st.st_size);
    } else if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_type != ET_DYN ||
               (THIS_MACHINE != EM_NONE && eh.e_machine != THIS_MACHINE) ||
               eh.e_phentsize != sizeof(Elf64_Phdr)) {
        snprintf(bad, n, "%s: not a 64-bit shared object for this machine", path);
    } else {
        /* every program header, and every segment's bytes in the file, inside the file */
        unsigned long long size = (unsigned long long)st.st_size;
        unsigned long long need = end_of(eh.e_phoff, eh.e_phnum * sizeof(Elf64_Phdr));
        rc = 0;
        for (int i = 0; i < eh.e_phnum && rc == 0 && need <= size; i++) {
            Elf64_Phdr ph;
            if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (Elf64_Off)i * sizeof ph)) !=
                (ssize_t)sizeof ph) {
                rc = -1;
                break;
            }
            if (end_of(ph.p_offset, ph.p_filesz) > size)
                need = end_of(ph.p_offset, ph.p_filesz);
        }
        /* the section headers, last in the file: a copy cut short loses them first */
        unsigned long long sh = end_of(eh.e_shoff,
                                       (unsigned long long)eh.e_shnum * eh.e_shentsize);
        if (eh.e_shnum > 0 && sh > need)
            need = sh;
        if (rc < 0 || need > size) {
            snprintf(bad, n, "%s: truncated (%llu bytes, its headers describe %llu or more)",
                     path, size, need);
            rc = -1;
        }
    }
    close(fd);
    return rc;
}

/* ---- the loader's cache ----------------------------------------------------------------
 *
 * glibc's layout (its elf/dl-cache.h), little-endian on the machines tfm runs on:
 *   old:  "ld.so-1.7.0" (11 bytes), 1 byte of padding, u32 nlibs, then nlibs entries of
 *         12 bytes (i32 flags, u32 key, u32 value); the new format may follow, at the next
 *         multiple of 8.
 *   new:  "glibc-ld.so.cache1.1" (20 bytes), u32 nlibs, u32 len_strings, u8 flags, 3 bytes
 *         of padding, u32 extension_offset, 3 u32 unused (48 bytes in all), then nlibs
 *         entries of 24 bytes (i32 flags, u32 key, u32 value, u32 osversion, u64 hwcap).
 * key (the library's name) and value (its path) are offsets of NUL-terminated strings from
 * the start of the new format's header.  An entry is this machine's when its flags are
 * libc6's (3) with the 64-bit ABI's bits of this machine (glibc's _dl_cache_check_flags). */

static const char OLD_MAGIC[] = "ld.so-1.7.0", NEW_MAGIC[] = "glibc-ld.so.cache1.1";
enum { OLD_HEAD = 16, OLD_ENTRY = 12, NEW_HEAD = 48, NEW_ENTRY = 24 };
static const size_t CACHE_MAX = (size_t)64 << 20;

#if defined(__x86_64__)
#define CACHE_FLAGS 0x0303              /* FLAG_ELF_LIBC6 | FLAG_X8664_LIB64 */
#elif defined(__aarch64__)
#define CACHE_FLAGS 0x0a03              /* FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64 */
#elif defined(__powerpc64__)
#define CACHE_FLAGS 0x0503              /* FLAG_ELF_LIBC6 | FLAG_POWERPC_LIB64 */
#else
#define CACHE_FLAGS -1                  /* any libc6 entry */
#endif

static uint32_t u32_at(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The NUL-terminated string at offset off of the len bytes at base, or NULL. */
static const char *string_at(const unsigned char *base, size_t len, uint32_t off)
{
    if (off >= len || !memchr(base + off, 0, len - off))
        return NULL;
    return (const char *)base + off;
}

/* The whole file into *buf (malloc'd), at most CACHE_MAX bytes; its size, or -1. */
static long long read_all(const char *path, unsigned char **buf)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -1;
    struct stat st;
    long long got = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
        (unsigned long long)st.st_size <= CACHE_MAX &&
        (*buf = malloc((size_t)st.st_size))) {
        size_t size = (size_t)st.st_size, at = 0;
        while (at < size) {
            ssize_t r = pread(fd, *buf + at, size - at, (off_t)at);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            at += (size_t)r;
        }
        if (at == size) {
            got = (long long)size;
        } else {
            free(*buf);
            *buf = NULL;
        }
    }
    close(fd);
    return got;
}

int tfm_so_cache_each(const char *cache, const char *name,
                      int (*fn)(const char *path, void *ctx), void *ctx)
{
    unsigned char *buf = NULL;
    long long got = read_all(cache, &buf);
    if (got < 0)
        return -1;
    size_t size = (size_t)got, at = 0;
    int rc = -1;
    if (size >= OLD_HEAD && memcmp(buf, OLD_MAGIC, sizeof OLD_MAGIC - 1) == 0) {
        uint64_t old = (uint64_t)OLD_HEAD + (uint64_t)u32_at(buf + 12) * OLD_ENTRY;
        at = (size_t)((old + 7) / 8 * 8);
        if (old > size || at > size)
            goto done;
    }
    if (size - at < NEW_HEAD || memcmp(buf + at, NEW_MAGIC, sizeof NEW_MAGIC - 1) != 0)
        goto done;
    const unsigned char *base = buf + at;
    size_t len = size - at;
    uint32_t nlibs = u32_at(base + 20);
    if ((uint64_t)NEW_HEAD + (uint64_t)nlibs * NEW_ENTRY > len)
        goto done;
    rc = 0;
    for (uint32_t i = 0; i < nlibs && rc == 0; i++) {
        const unsigned char *e = base + NEW_HEAD + (size_t)i * NEW_ENTRY;
        const char *key = string_at(base, len, u32_at(e + 4));
        const char *value = string_at(base, len, u32_at(e + 8));
        if (!key || !value) {
            rc = -1;
            break;
        }
        int32_t flags = (int32_t)u32_at(e);
        int mine = CACHE_FLAGS == -1 ? (flags & 0xff) == 3 : flags == CACHE_FLAGS;
        if (mine && strcmp(key, name) == 0)
            rc = fn(value, ctx);
    }
done:
    free(buf);
    return rc;
}

/* ---- the libraries a shared object needs ------------------------------------------------ */

/* n bytes at offset off of fd into buf: 0, or -1 when the file has fewer. */
static int read_at(int fd, void *buf, size_t n, unsigned long long off)
{
    size_t at = 0;
    while (at < n) {
        ssize_t r = pread(fd, (char *)buf + at, n - at, (off_t)(off + at));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        at += (size_t)r;
    }
    return 0;
}

/* src with every $ORIGIN and ${ORIGIN} replaced by origin, into dst (n bytes): 0, or -1 when
 * it does not fit. */
static int expand_origin(const char *src, const char *origin, char *dst, size_t n)
{
    size_t w = 0;
    while (*src) {
        const char *rest = NULL;
        if (strncmp(src, "$ORIGIN", 7) == 0)
            rest = src + 7;
        else if (strncmp(src, "${ORIGIN}", 9) == 0)
            rest = src + 9;
        const char *piece = rest ? origin : src;
        size_t len = rest ? strlen(origin) : 1;
        if (w + len >= n)
            return -1;
        memcpy(dst + w, piece, len);
        w += len;
        src = rest ? rest : src + 1;
    }
    dst[w] = 0;
    return 0;
}

int tfm_so_needed(const char *path, char *needed, size_t n, char *search, size_t m,
                  int *is_rpath)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -1;
    int rc = -1;
    Elf64_Ehdr eh;
    Elf64_Phdr *ph = NULL;
    Elf64_Dyn *dyn = NULL;
    char *str = NULL;
    *is_rpath = 0;
    if (n < 1 || m < 1 || read_at(fd, &eh, sizeof eh, 0) ||
        memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 ||
        !(ph = malloc((size_t)eh.e_phnum * sizeof *ph)) ||
        read_at(fd, ph, (size_t)eh.e_phnum * sizeof *ph, eh.e_phoff))
        goto done;
    /* the dynamic section, and the file offset of its string table's address */
    const Elf64_Phdr *dp = NULL;
    for (int i = 0; i < eh.e_phnum; i++)
        if (ph[i].p_type == PT_DYNAMIC)
            dp = &ph[i];
    size_t nd = dp ? (size_t)(dp->p_filesz / sizeof *dyn) : 0;
    if (!dp || nd == 0 || nd > 65536 || !(dyn = malloc(nd * sizeof *dyn)) ||
        read_at(fd, dyn, nd * sizeof *dyn, dp->p_offset))
        goto done;
    unsigned long long strtab = 0, strsz = 0, off = ~0ull;
    for (size_t i = 0; i < nd && dyn[i].d_tag != DT_NULL; i++) {
        if (dyn[i].d_tag == DT_STRTAB)
            strtab = dyn[i].d_un.d_ptr;
        else if (dyn[i].d_tag == DT_STRSZ)
            strsz = dyn[i].d_un.d_val;
    }
    for (int i = 0; i < eh.e_phnum; i++)
        if (ph[i].p_type == PT_LOAD && strtab >= ph[i].p_vaddr &&
            strtab - ph[i].p_vaddr < ph[i].p_filesz &&
            strsz <= ph[i].p_filesz - (strtab - ph[i].p_vaddr))
            off = ph[i].p_offset + (strtab - ph[i].p_vaddr);
    if (off == ~0ull || strsz == 0 || strsz > ((size_t)16 << 20) || !(str = malloc(strsz + 1)) ||
        read_at(fd, str, strsz, off))
        goto done;
    str[strsz] = 0;
    /* the names, and the search path: DT_RUNPATH, else DT_RPATH */
    char origin[4096];
    snprintf(origin, sizeof origin, "%s", path);
    char *slash = strrchr(origin, '/');
    if (slash)
        *(slash == origin ? slash + 1 : slash) = 0;
    else
        snprintf(origin, sizeof origin, ".");
    size_t w = 0;
    const char *runpath = NULL, *rpath = NULL;
    rc = 0;
    for (size_t i = 0; i < nd && dyn[i].d_tag != DT_NULL && rc == 0; i++) {
        unsigned long long v = dyn[i].d_un.d_val;
        if (dyn[i].d_tag != DT_NEEDED && dyn[i].d_tag != DT_RUNPATH && dyn[i].d_tag != DT_RPATH)
            continue;
        if (v >= strsz) {
            rc = -1;
            break;
        }
        if (dyn[i].d_tag == DT_RUNPATH) {
            runpath = str + v;
        } else if (dyn[i].d_tag == DT_RPATH) {
            rpath = str + v;
        } else {
            size_t len = strlen(str + v);
            if (w + len + 2 > n)
                rc = -1;
            else
                memcpy(needed + w, str + v, len + 1), w += len + 1;
        }
    }
    needed[w < n ? w : n - 1] = 0;
    if (rc == 0) {
        *is_rpath = !runpath && rpath;
        rc = expand_origin(runpath ? runpath : rpath ? rpath : "", origin, search, m);
    }
done:
    free(str);
    free(dyn);
    free(ph);
    close(fd);
    return rc;
}
