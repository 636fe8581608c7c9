/* output.c: atomic outputs (see output.h): where a path leads, the temporary beside it,
 * the rename, the registry of temporaries that a signal handler removes, and that of the
 * files mapped into memory, which SIGBUS names. */
#include "output.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/vfs.h>
#define PROC_SUPER_MAGIC 0x9fa0     /* <linux/magic.h> */
#endif

/* ---- the descriptors open when the program started -------------------------------- */

/* A path to one of this process's own descriptors (/dev/stdout, /dev/fd/N) means one the
 * caller gave it, a redirection of the shell: only those open at start may be written.
 * Recorded by a constructor, before main, because the tools open their inputs before
 * their outputs: when "-o /dev/fd/3" is opened, descriptor 3 may be an input the program
 * opened itself, and writing there would append to the input. */
enum { START_FDS = 1024 };
static unsigned char open_at_start[START_FDS / 8];

__attribute__((constructor)) static void record_open_fds(void)
{
    for (int fd = 0; fd < START_FDS; fd++)
        if (fcntl(fd, F_GETFD) != -1)
            open_at_start[fd / 8] |= (unsigned char)(1u << (fd % 8));
}

static int was_open_at_start(int fd)
{
    return fd >= 0 && fd < START_FDS && (open_at_start[fd / 8] >> (fd % 8) & 1);
}

/* ---- the registry of temporary files ---------------------------------------------- */

/* A fixed table a signal handler can walk without locks or allocation.  A slot goes
 * FREE -> TAKEN (filled by its owner) -> LIVE -> FREE when its owner is done with the
 * file, or LIVE -> REMOVING when the handler claims it: then the handler owns the path
 * until the process dies, and its owner must not free it.  The state changes are atomic
 * compare-and-swaps, so a handler on one thread and an owner on another never both act
 * on a slot.  pid is the process that made the file: a forked child inherits the table
 * but must not remove its parent's files. */
enum { SLOTS = 64 };
enum { FREE, TAKEN, LIVE, REMOVING };

static struct {
    atomic_int state;
    pid_t pid;
    const char *path;
} slots[SLOTS];

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler needs lock-free atomics");

/* Enter path (which must stay allocated until temp_forget): 1 + its slot, or 0 when the
 * table is full (the file is then left behind by a signal, as before). */
static int temp_remember(const char *path)
{
    for (int i = 0; i < SLOTS; i++) {
        int want = FREE;
        if (atomic_compare_exchange_strong(&slots[i].state, &want, TAKEN)) {
            slots[i].pid = getpid();
            slots[i].path = path;
            atomic_store(&slots[i].state, LIVE);
            return i + 1;
        }
    }
    return 0;
}

/* Take slot (1 + index, or 0: none) out of the table.  0, or -1 when a signal handler
 * is removing the file right now: the process is ending and the path must not be freed. */
static int temp_forget(int slot)
{
    if (slot <= 0)
        return 0;
    int want = LIVE;
    return atomic_compare_exchange_strong(&slots[slot - 1].state, &want, FREE) ? 0 : -1;
}

/* ---- the registry of files mapped into memory ------------------------------------- */

/* The regions the readers have mapped (stream.c), for SIGBUS to name the file whose map
 * the faulting address is in.  A fixed table as the temporaries' is: a slot goes FREE ->
 * TAKEN (filled) -> LIVE -> FREE, by compare-and-swap; the handler reads LIVE slots only.
 * A forked child inherits the maps and the table alike. */
enum { MAP_SLOTS = 64 };

static struct {
    atomic_int state;
    uintptr_t start;
    atomic_size_t len;      /* shrinks when the end of the map is unmapped */
    const char *path;
} maps[MAP_SLOTS];

_Static_assert(ATOMIC_LONG_LOCK_FREE == 2 && sizeof(size_t) == sizeof(long),
               "a signal handler needs a lock-free atomic size_t");

int tfm_output_mapped(const void *start, size_t len, const char *path)
{
    for (int i = 0; i < MAP_SLOTS; i++) {
        int want = FREE;
        if (atomic_compare_exchange_strong(&maps[i].state, &want, TAKEN)) {
            maps[i].start = (uintptr_t)start;
            atomic_store(&maps[i].len, len);
            maps[i].path = path;
            atomic_store(&maps[i].state, LIVE);
            return i + 1;
        }
    }
    return 0;
}

void tfm_output_mapped_shrink(int slot, size_t len)
{
    if (slot > 0 && slot <= MAP_SLOTS)
        atomic_store(&maps[slot - 1].len, len);
}

void tfm_output_mapped_forget(int slot)
{
    if (slot > 0 && slot <= MAP_SLOTS)
        atomic_store(&maps[slot - 1].state, FREE);
}

/* The path of the registered map that holds addr, or NULL.  Async-signal-safe. */
static const char *mapped_path(const void *addr)
{
    uintptr_t a = (uintptr_t)addr;
    for (int i = 0; i < MAP_SLOTS; i++)
        if (atomic_load(&maps[i].state) == LIVE && a >= maps[i].start &&
            a - maps[i].start < atomic_load(&maps[i].len))
            return maps[i].path;
    return NULL;
}

/* What SIGBUS says, made before it can come: "PROG: bus error: ..." when the address is
 * in no registered map, else bus_prog, the file's path, bus_file ("PROG: PATH: ..."). */
static char bus_text[256], bus_prog[64], bus_file[256];
static size_t bus_len;

/* Async-signal-safe: atomics, getpid, write, unlink, sigaction and raise only. */
static void on_signal(int sig)
{
    pid_t self = getpid();
    for (int i = 0; i < SLOTS; i++) {
        int want = LIVE;
        if (atomic_compare_exchange_strong(&slots[i].state, &want, REMOVING) &&
            slots[i].pid == self)
            unlink(slots[i].path);
    }
    /* die of the signal itself: it is blocked here, so it is delivered, with the default
     * action, as this handler returns (raise sends it to this thread) */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
    raise(sig);
}

/* SIGBUS: what it is said (one write: the line is not cut by another thread's), then
 * on_signal.  Async-signal-safe, as on_signal. */
static void on_bus_error(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    /* si_addr is the faulting address only for a fault the kernel raised (si_code > 0);
     * for a SIGBUS sent by kill(2) its bytes are the sender's pid and uid */
    const char *path = si && si->si_code > 0 ? mapped_path(si->si_addr) : NULL;
    if (path) {
        char line[sizeof bus_prog + PATH_MAX + sizeof bus_file];
        size_t n = 0;
        for (const char *p = bus_prog; *p; p++)
            line[n++] = *p;
        for (const char *p = path; *p && n < sizeof bus_prog + PATH_MAX; p++)
            line[n++] = *p;
        for (const char *p = bus_file; *p; p++)
            line[n++] = *p;
        if (write(STDERR_FILENO, line, n) < 0) {
            /* nothing more to say where stderr is gone */
        }
    } else if (bus_len && write(STDERR_FILENO, bus_text, bus_len) < 0) {
        /* as above */
    }
    on_signal(sig);
}

void tfm_output_catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    tfm_catch_stop_signals(&sa);
}

void tfm_output_catch_bus_error(const char *prog)
{
    /* The readers map regular files, and tfm-decode reads its weights in the checkpoint's
     * map for as long as it runs: a file truncated meanwhile faults at the next read of a
     * page past its new end.  on_signal dies of it as of the stop signals: the raised
     * SIGBUS is delivered, by its default action, as the handler returns, before the
     * faulting load could run again. */
    static const char advice[] = "replace a file in use by renaming a new one over it, as "
                                 "tfm-train and tfm-avg do\n";
    int n = snprintf(bus_text, sizeof bus_text, "%s: bus error: a file it had mapped into "
                     "memory (an input or a checkpoint) was truncated while in use; %s",
                     prog, advice);
    bus_len = n > 0 && (size_t)n < sizeof bus_text ? (size_t)n : 0;
    /* the file named when the address is in a registered map (tfm_output_mapped) */
    snprintf(bus_prog, sizeof bus_prog, "%s: ", prog);
    snprintf(bus_file, sizeof bus_file, ": bus error: the file was truncated while it was "
             "mapped into memory; %s", advice);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_bus_error;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

/* ---- where a path leads ----------------------------------------------------------- */

/* path's directory part ("." for none) into dir (PATH_MAX); 0, or -1 when too long. */
static int dir_of(const char *path, char *dir)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, PATH_MAX, ".");
    else if ((size_t)(slash - path) >= PATH_MAX)
        return -1;
    else
        snprintf(dir, PATH_MAX, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    return 0;
}

/* The descriptor N when path names one of this process's own descriptors, as
 * /dev/fd/N, /dev/stdout, /proc/self/fd/N, /proc/PID/fd/N and /proc/thread-self/fd/N do
 * (the directory leads to /proc/PID/fd or /proc/PID/task/TID/fd, PID this process's);
 * else -1.  A name with a leading zero is no entry of /proc, as the kernel reads it. */
static int own_fd(const char *path)
{
#ifdef __linux__
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    size_t len = strlen(name);
    if (len == 0 || len > 9 || strspn(name, "0123456789") != len || (len > 1 && name[0] == '0'))
        return -1;
    char dir[PATH_MAX], real[PATH_MAX], self[64];
    if (dir_of(path, dir) || !realpath(dir, real))
        return -1;
    size_t n = (size_t)snprintf(self, sizeof self, "/proc/%ld/", (long)getpid());
    if (strncmp(real, self, n) != 0)
        return -1;
    const char *rest = real + n;
    if (strncmp(rest, "task/", 5) == 0) {
        size_t d = strspn(rest + 5, "0123456789");
        if (d == 0 || rest[5 + d] != '/')
            return -1;
        rest += 5 + d + 1;
    }
    return strcmp(rest, "fd") == 0 ? atoi(name) : -1;
#else
    (void)path;
    return -1;
#endif
}

/* Whether path is an entry of /proc.  Its links (/proc/self/fd/N, where /dev/stdout and
 * /dev/fd/N lead) name open files, not places: what they lead to is written in place. */
static int in_proc(const char *path)
{
#ifdef __linux__
    char dir[PATH_MAX];
    if (dir_of(path, dir))
        return 0;
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

/* The end of path's chain of symbolic links (at most TFM_MAX_LINKS), as tfm_output_open
 * follows it: path itself when it is no link, a link's target when it names nothing yet.
 * Malloc'd; NULL when out of memory. */
static char *follow(const char *path)
{
    char *cur = strdup(path);
    for (int links = 0; cur && links < TFM_MAX_LINKS; links++) {
        struct stat st;
        if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode))
            return cur;
        char *next = link_target(cur, (size_t)st.st_size);
        if (!next)
            return cur;
        free(cur);
        cur = next;
    }
    return cur;
}

void tfm_output_where(const char *path, char *buf)
{
    char *end = follow(path);       /* a link to a file not there yet, followed */
    const char *p = end ? end : path;
    char dir[PATH_MAX], real[PATH_MAX];
    const char *slash = strrchr(p, '/');
    const char *base = slash ? slash + 1 : p;
    if (!realpath(p, buf) &&
        (dir_of(p, dir) || !realpath(dir, real) ||
         snprintf(buf, PATH_MAX, "%s/%s", strcmp(real, "/") ? real : "", base) >= PATH_MAX))
        snprintf(buf, PATH_MAX, "%s", path);
    free(end);
}

/* Whether descriptor fd, named by path, may be written: open when the program started,
 * still open, open for writing, not a directory.  0, or -1 with "PATH: reason". */
static int check_own_fd(const char *path, int fd, struct tfm_error *err)
{
    if (!was_open_at_start(fd))
        return tfm_fail(err, "%s: descriptor %d was not open when the program started",
                        path, fd);
    int fl = fcntl(fd, F_GETFL);
    if (fl == -1)
        return tfm_fail(err, "%s: descriptor %d is not open", path, fd);
    if ((fl & O_ACCMODE) == O_RDONLY)
        return tfm_fail(err, "%s: descriptor %d is not open for writing", path, fd);
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
        return tfm_fail(err, "%s: is a directory", path);
    return 0;
}

/* Follow the links at path to their end: *target (malloc'd) is the file to replace
 * through a temporary beside it (*old then the status of the file there now, with
 * st_mode 0 when there is none), or NULL when what path leads to is written in place: through
 * descriptor *fd when path names one of this process's own (else *fd is -1), or opened
 * again (*regular then says whether that is a regular file).  0, or -1 with
 * "PATH: reason". */
static int resolve(const char *path, char **target, int *regular, struct stat *old, int *fd,
                   struct tfm_error *err)
{
    *target = NULL;
    *regular = 0;
    old->st_mode = 0;
    *fd = -1;
    char *cur = strdup(path);
    if (!cur)
        return tfm_fail(err, "%s: out of memory", path);
    for (int links = 0;; links++) {
        struct stat st;
        int e;
        int n = own_fd(cur);
        if (n >= 0) {
            free(cur);
            if (check_own_fd(path, n, err))
                return -1;
            *fd = n;
            return 0;
        }
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
            if (S_ISREG(st.st_mode)) {
                *target = cur;
                *old = st;
            }
            else                        /* a device, a FIFO, a socket */
                free(cur);
            return 0;
        }
        if (links == TFM_MAX_LINKS) {
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
    if (temp_forget(o->slot) == 0)      /* else a signal handler is removing it */
        free(o->tmp);
    free(o->path);
    free(o->target);
    o->path = o->target = o->tmp = NULL;
    o->slot = 0;
    o->fd = -1;
    o->pending = 0;
}

/* The name of the temporary for target, malloc'd: "TARGET.tmp.PID" beside it (the form
 * tfm_checkpoint_clean looks for), or, when that last component would be longer than
 * the directory allows (NAME_MAX), ".tfm.tmp.PID.K" in the same directory, K counting
 * the short names this process has made, so that two outputs never share one. */
static char *temp_name(const char *target)
{
    static atomic_long shorts;
    long pid = (long)getpid();
    size_t n = strlen(target) + 64;
    char *tmp = malloc(n);
    if (!tmp)
        return NULL;
    int len = snprintf(tmp, n, "%s.tmp.%ld", target, pid);
    const char *slash = strrchr(tmp, '/');
    size_t base = (size_t)len - (slash ? (size_t)(slash + 1 - tmp) : 0);
    char dir[PATH_MAX];
    long max = dir_of(target, dir) ? -1 : pathconf(dir, _PC_NAME_MAX);
    if (max <= 0)
        max = NAME_MAX;
    if (base > (size_t)max) {
        int d = slash ? (int)(slash + 1 - tmp) : 0;
        snprintf(tmp + d, n - (size_t)d, ".tfm.tmp.%ld.%ld", pid, atomic_fetch_add(&shorts, 1));
    }
    return tmp;
}

/* Create the temporary at tmp, never through what is already there: a link planted at
 * that name is not followed.  A file there (a leftover of a killed process that had
 * this PID, or something planted) is removed, the name itself and never what a link
 * leads to, and the file created again.  The descriptor, or -1 with errno set
 * (*existed then says whether something was at that name). */
static int temp_create(const char *tmp, int *existed)
{
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    int fd = open(tmp, flags, 0666);
    *existed = fd < 0 && errno == EEXIST;
    if (*existed && unlink(tmp) == 0)
        fd = open(tmp, flags, 0666);
    return fd;
}

/* The file replaced keeps its permissions, so private output stays private, and its
 * owner and group where this process may give them (root may; anyone may keep their
 * own file in a group they belong to), as sed -i does; else the temporary's stay.  The
 * owner goes first: chown clears set-user-ID bits that chmod then puts back. */
static int keep_owner_mode(int fd, const struct stat *old)
{
    struct stat now;
    if (fstat(fd, &now) != 0)
        return -1;
    if ((now.st_uid != old->st_uid || now.st_gid != old->st_gid)
        && fchown(fd, old->st_uid, old->st_gid) != 0)
        (void)!fchown(fd, (uid_t)-1, old->st_gid);  /* if refused, the file stays ours */
    return fchmod(fd, old->st_mode & 07777);
}

int tfm_output_open(struct tfm_output *o, const char *path, struct tfm_error *err)
{
    memset(o, 0, sizeof *o);
    o->fd = -1;
    if (!*path)
        return tfm_fail(err, "an empty output path");
    int regular, own, existed = 0;
    struct stat old = {0};
    if (resolve(path, &o->target, &regular, &old, &own, err))
        return -1;
    if (!(o->path = strdup(path))) {
        output_free(o);
        return tfm_fail(err, "%s: out of memory", path);
    }
    if (own >= 0) {
        /* the descriptor itself, not the file opened again: its offset is the one the
         * shell shares with the commands around (`>`, `>>`, `{ ...; } > f`), and a
         * socket, which cannot be opened through /proc, works */
        o->fd = fcntl(own, F_DUPFD_CLOEXEC, 0);
    } else if (!o->target) {
        /* in place; a regular file here is an open file named through /proc.  A FIFO
         * without a reader yet is left pending (output.h); one with a reader is open
         * now, and blocks as a pipe does */
        struct stat st;
        int flags = O_WRONLY | O_CLOEXEC | (regular ? O_APPEND : 0);
        if (stat(path, &st) == 0 && S_ISFIFO(st.st_mode)) {
            o->fd = tfm_open_nowait(path, flags);
            if (o->fd < 0 && errno == ENXIO) {
                o->pending = 1;
                return 0;
            }
        } else {
            o->fd = open(path, flags);
        }
    } else {
        if (!(o->tmp = temp_name(o->target))) {
            output_free(o);
            return tfm_fail(err, "%s: out of memory", path);
        }
        /* in the registry before it exists: a signal in between leaves nothing */
        o->slot = temp_remember(o->tmp);
        o->fd = temp_create(o->tmp, &existed);
        if (o->fd >= 0 && old.st_mode && keep_owner_mode(o->fd, &old) != 0) {
            int e = errno;
            tfm_output_abort(o);
            return tfm_fail(err, "%s: %s", path, strerror(e));
        }
    }
    if (o->fd < 0) {
        int e = errno;
        if (existed)
            tfm_fail(err, "%s: the temporary %s: %s", path, o->tmp, strerror(e));
        else
            tfm_fail(err, "%s: %s", path, strerror(e));
        output_free(o);
        return -1;
    }
    return 0;
}

int tfm_open_nowait(const char *path, int flags)
{
    int fd = open(path, flags | O_NONBLOCK), fl;
    if (fd >= 0 && ((fl = fcntl(fd, F_GETFL)) == -1 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK))) {
        int e = errno;
        close(fd);
        errno = e;
        fd = -1;
    }
    return fd;
}

int tfm_output_fd(struct tfm_output *o, struct tfm_error *err)
{
    if (!o->pending)
        return o->fd;
    int fd;
    do
        fd = open(o->path, O_WRONLY | O_CLOEXEC);   /* waits for the reader */
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return tfm_fail(err, "%s: %s", o->path, strerror(errno));
    o->fd = fd;
    o->pending = 0;
    return fd;
}

int tfm_output_write(struct tfm_output *o, const void *p, size_t n, struct tfm_error *err)
{
    if (tfm_output_fd(o, err) < 0)
        return -1;
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
        /* a FIFO never written is opened all the same: its reader gets an empty file */
        int rc = tfm_output_fd(o, err) < 0 ? -1
                 : close(o->fd) ? tfm_fail(err, "%s: %s", o->path, strerror(errno)) : 0;
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
    /* renamed before it leaves the registry: a signal in between finds no file */
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
