/* test_so_check.c: a shared object is checked whole before dlopen maps it (a copy cut
 * short would end the process with SIGBUS), and the loader's cache is read for where a
 * library is: both layouts glibc writes, this machine's entries only, and crafted caches
 * (counts and offsets past the end, names without their NUL) refused, not read past; and
 * the libraries a shared object needs are read from its dynamic section. */
#include "check.h"
#include "so_check.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <sys/stat.h>
#include <zlib.h>

static char dir[] = "/tmp/tfm-so-check.XXXXXX";

/* A whole shared object of this machine's (zlib's, which the tests link) and its size. */
static const char *real_so(long *size)
{
    static Dl_info info;
    if (!dladdr((void *)zlibVersion, &info) || !info.dli_fname)
        return NULL;
    FILE *f = fopen(info.dli_fname, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fclose(f);
    return info.dli_fname;
}

/* The first n bytes of src into dst (n < 0: all of it). */
static int copy_head(const char *src, const char *dst, long n)
{
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    int ok = in && out;
    for (long i = 0; ok && (n < 0 || i < n); i++) {
        int c = fgetc(in);
        if (c == EOF)
            break;
        ok = fputc(c, out) != EOF;
    }
    if (in)
        fclose(in);
    if (out && fclose(out))
        ok = 0;
    return ok ? 0 : -1;
}

static void test_whole(void)
{
    long size = 0;
    const char *so = real_so(&size);
    if (!so) {
        t_skip("dladdr finds no path for zlib");
        return;
    }
    char bad[PATH_MAX + 128], cut[PATH_MAX], txt[PATH_MAX], fifo[PATH_MAX];
    CHECK_EQ_INT(tfm_so_whole(so, bad, sizeof bad), 0);
    snprintf(cut, sizeof cut, "%s/cut.so", dir);
    CHECK(copy_head(so, cut, 3000) == 0);
    CHECK_EQ_INT(tfm_so_whole(cut, bad, sizeof bad), -1);
    CHECK(strstr(bad, "truncated (3000 bytes, its headers describe") != NULL);
    snprintf(txt, sizeof txt, "%s/text.so", dir);
    FILE *f = fopen(txt, "w");
    CHECK(f && fputs("not a library\n", f) >= 0 && fclose(f) == 0);
    CHECK_EQ_INT(tfm_so_whole(txt, bad, sizeof bad), -2);
    CHECK(strstr(bad, "no ELF header") != NULL);
    snprintf(fifo, sizeof fifo, "%s/fifo.so", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK_EQ_INT(tfm_so_whole(fifo, bad, sizeof bad), -1);      /* not a wait for a writer */
    CHECK(strstr(bad, "not a regular file") != NULL);
    char none[PATH_MAX];
    snprintf(none, sizeof none, "%s/none.so", dir);
    CHECK_EQ_INT(tfm_so_whole(none, bad, sizeof bad), -2);
}

/* The libraries zlib needs (the C library), its search path (none), and nothing from a
 * copy cut short or a text file. */
static void test_needed(void)
{
    long size = 0;
    const char *so = real_so(&size);
    if (!so) {
        t_skip("dladdr finds no path for zlib");
        return;
    }
    char needed[4096], search[4096], cut[PATH_MAX], txt[PATH_MAX];
    int rp = -1, libc = 0, names = 0;
    CHECK_EQ_INT(tfm_so_needed(so, needed, sizeof needed, search, sizeof search, &rp), 0);
    for (const char *p = needed; *p; p += strlen(p) + 1) {
        printf("# %s needs %s\n", so, p);
        libc |= strncmp(p, "libc.so", 7) == 0;
        names++;
    }
    CHECK(libc);
    CHECK(names >= 1);
    CHECK_EQ_INT(rp, 0);
    CHECK_EQ_INT(tfm_so_needed(so, needed, 4, search, sizeof search, &rp), -1);  /* no room */
    snprintf(cut, sizeof cut, "%s/cut.so", dir);
    CHECK_EQ_INT(tfm_so_needed(cut, needed, sizeof needed, search, sizeof search, &rp), -1);
    snprintf(txt, sizeof txt, "%s/text.so", dir);
    CHECK_EQ_INT(tfm_so_needed(txt, needed, sizeof needed, search, sizeof search, &rp), -1);
}

/* ---- crafted caches ---- */

struct entry {
    int32_t flags;
    const char *key, *value;
};

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> 8 * i);
}

/* A cache of glibc's new format with these entries into path; with old, behind an old
 * header of one entry (as glibc before 2.32 wrote it).  Returns the bytes written. */
static size_t write_cache(const char *path, const struct entry *e, int n, int old)
{
    static unsigned char buf[8192];
    memset(buf, 0, sizeof buf);
    size_t at = 0;
    if (old) {
        memcpy(buf, "ld.so-1.7.0", 11);
        put32(buf + 12, 1);
        at = 16 + 12;
        at = (at + 7) / 8 * 8;
    }
    unsigned char *h = buf + at;
    memcpy(h, "glibc-ld.so.cache1.1", 20);
    put32(h + 20, (uint32_t)n);
    size_t str = 48 + 24 * (size_t)n;
    for (int i = 0; i < n; i++) {
        unsigned char *x = h + 48 + 24 * i;
        put32(x, (uint32_t)e[i].flags);
        put32(x + 4, (uint32_t)str);
        strcpy((char *)h + str, e[i].key);
        str += strlen(e[i].key) + 1;
        put32(x + 8, (uint32_t)str);
        strcpy((char *)h + str, e[i].value);
        str += strlen(e[i].value) + 1;
    }
    put32(h + 24, (uint32_t)(str - 48 - 24 * (size_t)n));
    FILE *f = fopen(path, "wb");
    size_t len = at + str;
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f))
        return 0;
    return len;
}

struct seen {
    int n;
    char paths[4][128];
    int stop_at;                /* return 7 at this visit (1-based; 0: never) */
};

static int note(const char *path, void *ctx)
{
    struct seen *s = ctx;
    if (s->n < 4)
        snprintf(s->paths[s->n], sizeof s->paths[0], "%s", path);
    return ++s->n == s->stop_at ? 7 : 0;
}

#if defined(__x86_64__)
#define MINE 0x0303
#elif defined(__aarch64__)
#define MINE 0x0a03
#elif defined(__powerpc64__)
#define MINE 0x0503
#else
#define MINE 0x0003
#endif

static void test_cache(void)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/ld.so.cache", dir);
    const struct entry e[] = {
        {MINE, "libcuda.so.1", "/opt/hw/glibc-hwcaps/x86-64-v3/libcuda.so.1"},
        {MINE, "libcudart.so.13", "/opt/x/libcudart.so.13"},
        {0x0003, "libcuda.so.1", "/lib32/libcuda.so.1"},       /* 32-bit: not this one */
        {MINE, "libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
    };
    for (int old = 0; old < 2; old++) {
        CHECK(write_cache(path, e, 4, old) > 0);
        struct seen s = {0};
        CHECK_EQ_INT(tfm_so_cache_each(path, "libcuda.so.1", note, &s), 0);
        CHECK_EQ_INT(s.n, 2);
        CHECK_STR(s.paths[0], e[0].value);
        CHECK_STR(s.paths[1], e[3].value);
        struct seen t = {.stop_at = 1};
        CHECK_EQ_INT(tfm_so_cache_each(path, "libcuda.so.1", note, &t), 7);
        CHECK_EQ_INT(t.n, 1);
        struct seen u = {0};
        CHECK_EQ_INT(tfm_so_cache_each(path, "libcuda.so", note, &u), 0);   /* whole names */
        CHECK_EQ_INT(u.n, 0);
    }
    /* crafted: too many entries, a name's offset past the end, a name without its NUL */
    size_t len = write_cache(path, e, 4, 0);
    FILE *f = fopen(path, "r+b");
    unsigned char n4[4];
    put32(n4, 100000);
    CHECK(f && fseek(f, 20, SEEK_SET) == 0 && fwrite(n4, 1, 4, f) == 4 && fclose(f) == 0);
    struct seen s = {0};
    CHECK_EQ_INT(tfm_so_cache_each(path, "libcuda.so.1", note, &s), -1);
    write_cache(path, e, 4, 0);
    put32(n4, (uint32_t)len + 5);
    f = fopen(path, "r+b");
    CHECK(f && fseek(f, 48 + 24 * 3 + 8, SEEK_SET) == 0 && fwrite(n4, 1, 4, f) == 4 &&
          fclose(f) == 0);
    CHECK_EQ_INT(tfm_so_cache_each(path, "libcuda.so.1", note, &s), -1);
    write_cache(path, e, 4, 0);
    CHECK(truncate(path, (off_t)len - 1) == 0);         /* the last value's NUL gone */
    CHECK_EQ_INT(tfm_so_cache_each(path, "libcuda.so.1", note, &s), -1);
    write_cache(path, e, 1, 1);
    CHECK(truncate(path, 20) == 0);                     /* an old header, no new one */
    CHECK_EQ_INT(tfm_so_cache_each(path, "libcuda.so.1", note, &s), -1);
    f = fopen(path, "w");
    CHECK(f && fputs("not a cache\n", f) >= 0 && fclose(f) == 0);
    CHECK_EQ_INT(tfm_so_cache_each(path, "libcuda.so.1", note, &s), -1);
    char none[PATH_MAX];
    snprintf(none, sizeof none, "%s/none", dir);
    CHECK_EQ_INT(tfm_so_cache_each(none, "libcuda.so.1", note, &s), -1);
}

/* This machine's own cache, where it has one: libz.so.1 is listed there, and whole. */
static int first_path(const char *path, void *ctx)
{
    snprintf(ctx, PATH_MAX, "%s", path);
    return 1;
}

static void test_system_cache(void)
{
    char found[PATH_MAX] = "", bad[PATH_MAX + 128], a[PATH_MAX], b[PATH_MAX];
    long size;
    const char *so = real_so(&size);
    if (access("/etc/ld.so.cache", R_OK) != 0 || !so) {
        t_skip("no /etc/ld.so.cache here");
        return;
    }
    int rc = tfm_so_cache_each("/etc/ld.so.cache", "libz.so.1", first_path, found);
    if (rc == 0) {
        t_skip("libz.so.1 is not in this machine's cache");
        return;
    }
    CHECK_EQ_INT(rc, 1);
    printf("# libz.so.1 => %s\n", found);
    CHECK_EQ_INT(tfm_so_whole(found, bad, sizeof bad), 0);
    /* the same file as the one loaded, unless a search path came first (a build linked
     * against libraries of its own prefix) */
    if (!getenv("LD_LIBRARY_PATH") && realpath(found, a) && realpath(so, b) && strcmp(a, b))
        printf("# the loaded zlib is %s, not the cache's\n", b);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    t_run("tfm_so_whole: whole, cut short, text, FIFO, absent", test_whole);
    t_run("tfm_so_needed: a library's DT_NEEDED names; none from a cut or text file",
          test_needed);
    t_run("tfm_so_cache_each: both layouts, this machine's entries, crafted caches refused",
          test_cache);
    t_run("tfm_so_cache_each: this machine's /etc/ld.so.cache", test_system_cache);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    return t_done();
}
