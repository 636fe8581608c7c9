/* output.c: atomic outputs (see output.h). */
#include "output.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void output_free(struct tfm_output *o)
{
    free(o->path);
    free(o->tmp);
    o->path = o->tmp = NULL;
    o->fd = -1;
}

int tfm_output_open(struct tfm_output *o, const char *path, struct tfm_error *err)
{
    memset(o, 0, sizeof *o);
    o->fd = -1;
    struct stat st;
    int in_place = stat(path, &st) == 0 && !S_ISREG(st.st_mode);
    if (in_place && S_ISDIR(st.st_mode))
        return tfm_fail(err, "%s: is a directory", path);
    o->path = strdup(path);
    if (!o->path)
        return tfm_fail(err, "%s: out of memory", path);
    if (in_place) {
        o->fd = open(path, O_WRONLY | O_CLOEXEC);
    } else {
        size_t n = strlen(path) + 32;
        if (!(o->tmp = malloc(n))) {
            output_free(o);
            return tfm_fail(err, "%s: out of memory", path);
        }
        snprintf(o->tmp, n, "%s.tmp.%ld", path, (long)getpid());
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
    if (!o->tmp) {                       /* in place: a device or FIFO */
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
    if (rename(o->tmp, o->path))
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
