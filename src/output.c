/* output.c: atomic outputs (see output.h): where a path leads, the temporary beside it,
 * and the rename. */
#include "output.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/vfs.h>
#define PROC_SUPER_MAGIC 0x9fa0     /* <linux/magic.h> */
#endif

/* Links followed before giving up with ELOOP, as the kernel's own limit. */
#define MAX_LINKS 40

/* ---- where a path leads ----------------------------------------------------------- */

/* Whether path is an entry of /proc.  Its links (/proc/self/fd/N, where /dev/stdout and
 * /dev/fd/N lead) name open files, not places: what they lead to is written in place. */
static int in_proc(const char *path)
{
#ifdef __linux__
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if ((size_t)(slash - path) >= sizeof dir)
        return 0;
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    struct statfs fs;
    return statfs(dir, &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC;
#else
    (void)path;
    return 0;
#endif
}

/* The target of the link at path, as a path usable from here (a relative target is
 * relative to the link's directory), malloc'd; NULL with errno set. */
static char *link_target(const char *path, size_t size_hint)
{
    size_t cap = size_hint + 1 > 256 ? size_hint + 1 : 256;
    for (;;) {
        char *t = malloc(cap);
        if (!t)
            return NULL;
        ssize_t n = readlink(path, t, cap);
        if (n < 0) {
            free(t);
            return NULL;
        }
        if ((size_t)n < cap) {
            t[n] = '\0';
            const char *slash = strrchr(path, '/');
            if (t[0] == '/' || !slash)
                return t;
            size_t dir = (size_t)(slash - path) + 1, len = (size_t)n + 1;
            char *joined = malloc(dir + len);
            if (joined) {
                memcpy(joined, path, dir);
                memcpy(joined + dir, t, len);
            }
            free(t);
            return joined;
        }
        free(t);                        /* the link grew as it was read: again, larger */
        cap *= 2;
    }
}

/* Follow the links at path to their end: *target (malloc'd) is the file to replace
 * through a temporary beside it, or NULL when what path leads to is written in place
 * (*regular then says whether that is a regular file).  0, or -1 with "PATH: reason". */
static int resolve(const char *path, char **target, int *regular, struct tfm_error *err)
{
    *target = NULL;
    *regular = 0;
    char *cur = strdup(path);
    if (!cur)
        return tfm_fail(err, "%s: out of memory", path);
    for (int links = 0;; links++) {
        struct stat st;
        int e;
        if (in_proc(cur)) {
            free(cur);
            if (stat(path, &st) != 0)
                return tfm_fail(err, "%s: %s", path, strerror(errno));
            if (S_ISDIR(st.st_mode))
                return tfm_fail(err, "%s: is a directory", path);
            *regular = S_ISREG(st.st_mode);
            return 0;
        }
        if (lstat(cur, &st) != 0) {
            e = errno;
            if (e == ENOENT) {          /* a new file (its directory is checked on open) */
                *target = cur;
                return 0;
            }
            free(cur);
            return tfm_fail(err, "%s: %s", path, strerror(e));
        }
        if (S_ISDIR(st.st_mode)) {
            free(cur);
            return tfm_fail(err, "%s: is a directory", path);
        }
        if (!S_ISLNK(st.st_mode)) {
            if (S_ISREG(st.st_mode))
                *target = cur;
            else                        /* a device, a FIFO, a socket */
                free(cur);
            return 0;
        }
        if (links == MAX_LINKS) {
            free(cur);
            return tfm_fail(err, "%s: %s", path, strerror(ELOOP));
        }
        char *next = link_target(cur, (size_t)st.st_size);
        e = errno;
        free(cur);
        if (!next)
            return tfm_fail(err, "%s: %s", path, strerror(e));
        cur = next;
    }
}

/* ---- outputs ---------------------------------------------------------------------- */

static void output_free(struct tfm_output *o)
{
    free(o->tmp);
    free(o->path);
    free(o->target);
    o->path = o->target = o->tmp = NULL;
    o->fd = -1;
}

int tfm_output_open(struct tfm_output *o, const char *path, struct tfm_error *err)
{
    memset(o, 0, sizeof *o);
    o->fd = -1;
    if (!*path)
        return tfm_fail(err, "an empty output path");
    int regular;
    if (resolve(path, &o->target, &regular, err))
        return -1;
    if (!(o->path = strdup(path))) {
        output_free(o);
        return tfm_fail(err, "%s: out of memory", path);
    }
    if (!o->target) {
        /* in place; a regular file here is an open file named through /proc */
        o->fd = open(path, O_WRONLY | O_CLOEXEC | (regular ? O_APPEND : 0));
    } else {
        size_t n = strlen(o->target) + 32;
        if (!(o->tmp = malloc(n))) {
            output_free(o);
            return tfm_fail(err, "%s: out of memory", path);
        }
        snprintf(o->tmp, n, "%s.tmp.%ld", o->target, (long)getpid());
        o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    }
    if (o->fd < 0) {
        int e = errno;
        output_free(o);
        return tfm_fail(err, "%s: %s", path, strerror(e));
    }
    return 0;
}

int tfm_output_write(struct tfm_output *o, const void *p, size_t n, struct tfm_error *err)
{
    const char *s = p;
    while (n > 0) {
        ssize_t k = write(o->fd, s, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return tfm_fail(err, "%s: write error: %s", o->path, strerror(errno));
        s += k;
        n -= (size_t)k;
    }
    return 0;
}

int tfm_output_commit(struct tfm_output *o, struct tfm_error *err)
{
    if (!o->tmp) {                       /* in place: a device, a FIFO, an open file */
        int rc = close(o->fd) ? tfm_fail(err, "%s: %s", o->path, strerror(errno)) : 0;
        output_free(o);
        return rc;
    }
    const char *what = "fsync";
    if (fsync(o->fd) && errno != EINVAL)
        goto fail;
    what = "close";
    int fd = o->fd;
    o->fd = -1;
    if (close(fd))
        goto fail;
    what = "rename";
    if (rename(o->tmp, o->target))
        goto fail;
    output_free(o);
    return 0;
fail:
    tfm_fail(err, "%s: %s: %s", o->path, what, strerror(errno));
    tfm_output_abort(o);
    return -1;
}

void tfm_output_abort(struct tfm_output *o)
{
    if (o->fd >= 0)
        close(o->fd);
    if (o->tmp)
        unlink(o->tmp);
    output_free(o);
}
