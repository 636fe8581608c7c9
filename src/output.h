/* output.h: files that appear whole or not at all.
 *
 * A regular file (or a path that does not exist yet) is written as "PATH.tmp.PID" beside
 * it and renamed over PATH by tfm_output_commit, after fsync, so a reader never sees half
 * an output and a killed writer leaves the old file untouched.  The temporary is created
 * anew (O_EXCL), never through a link or a file already at its name, and gets the
 * permission bits of the file it replaces; other hard links to that file keep the old
 * contents.  When "PATH.tmp.PID" would be too long a name, it is ".tfm.tmp.PID.K" in
 * the same directory.  A symbolic link is followed to its end and that file is replaced
 * (created beside it, renamed onto it): the link stays and points at the new file.
 *
 * A path to one of the process's own descriptors (/dev/stdout, /dev/stderr, /dev/fd/N,
 * /proc/self/fd/N) is written through that descriptor, duplicated, as the shell's `>`
 * or `>>` to it would be: at its offset, shared with the commands around it (a group of
 * commands writing one file), and a socket works.  Only a descriptor open when the
 * program started may be named so (an input opened since is refused, never appended
 * to).  Anything else (a device such as /dev/null, a FIFO, a terminal, another entry of
 * /proc) is written in place, opened again: renaming a file over it would replace the
 * device, or the link, instead of writing to it; a regular file reached through /proc
 * is appended to.  A FIFO is opened without waiting for its reader: when it has none yet,
 * the open that waits for one is left to the first write (or tfm_output_fd), so that a
 * process which writes a tool's input and only then reads its output through FIFOs gets
 * both.  Every tool's output path goes through here.
 *
 * The temporary files open at any moment are kept in a registry that a signal handler can
 * read: a tool that calls tfm_output_catch_signals has them removed when SIGINT, SIGTERM
 * or SIGHUP ends it.  Nothing is caught unless a tool asks (tfm-train has its own
 * handling: it finishes the update and saves).
 */
#ifndef TFM_OUTPUT_H
#define TFM_OUTPUT_H

#include <stddef.h>

#include "error.h"

/* Symbolic links followed before giving up with ELOOP, as the kernel's own limit; the
 * same for tfm_output_where, so that what one follows the other does. */
#define TFM_MAX_LINKS 40

struct tfm_output {
    int fd;
    char *path;     /* as given */
    char *target;   /* what tmp is renamed onto: path, or the end of its links */
    char *tmp;      /* the temporary file beside target, or NULL when writing in place */
    int slot;       /* 1 + tmp's place in the registry of temporaries; 0: not there */
    int pending;    /* a FIFO that had no reader yet: fd is -1, opened on first use */
};

/* Open path for writing.  Returns 0, or -1 with "PATH: reason" (an empty path, a
 * directory, a loop of links, an unwritable directory). */
int tfm_output_open(struct tfm_output *o, const char *path, struct tfm_error *err);
/* The descriptor to write, after waiting for a FIFO's reader (see above); -1 with
 * "PATH: reason" when that open fails. */
int tfm_output_fd(struct tfm_output *o, struct tfm_error *err);

/* open(2) of path with flags, without waiting for a FIFO's other end, the descriptor then
 * made blocking: the descriptor, or -1 with errno (ENXIO: a FIFO opened for writing that
 * has no reader yet). */
int tfm_open_nowait(const char *path, int flags);
/* fsync, close and rename into place.  Returns 0 or -1 (and removes the temporary). */
int tfm_output_commit(struct tfm_output *o, struct tfm_error *err);
/* Close and remove the temporary.  Safe to call twice or after a failed open. */
void tfm_output_abort(struct tfm_output *o);
/* Write all n bytes (retrying short writes).  Returns 0 or -1 with "PATH: write error". */
int tfm_output_write(struct tfm_output *o, const void *p, size_t n, struct tfm_error *err);

/* For the mains of tools that write outputs: on SIGINT, SIGTERM or SIGHUP remove every
 * temporary file this process has open, then die of the signal (exit status 128 + the
 * signal, as seen by a shell).  The handler runs on whichever thread takes the signal; a
 * forked child removes nothing of its parent's.  A signal ignored when the process started
 * (nohup, a background job) stays ignored. */
void tfm_output_catch_signals(void);
/* The same for SIGBUS, which a mapped file (an input stream, the checkpoint whose weights
 * tfm-decode reads in place) raises when it is truncated while in use, after a message
 * on stderr that says so, as from prog, naming the file when the faulting address is in
 * a map entered below ("PROG: PATH: bus error: ...", else "PROG: bus error: a file it
 * had mapped ...").  Every tool's tfm_cli_init calls it. */
void tfm_output_catch_bus_error(const char *prog);
/* The files mapped into memory, so that SIGBUS names the one truncated ("PROG: PATH: bus
 * error: the file was truncated while it was mapped into memory; ..."): a fixed table the
 * handler looks the faulting address up in, without locks or allocation.  Enter the map
 * [start, start + len) of the file path (which must stay allocated until forgotten):
 * 1 + its slot, or 0 when the table is full (a fault there is then said without the
 * name).  Shrink it when its end is unmapped; forget it before unmapping the rest. */
int tfm_output_mapped(const void *start, size_t len, const char *path);
void tfm_output_mapped_shrink(int slot, size_t len);
void tfm_output_mapped_forget(int slot);

/* Where output path leads, into buf (PATH_MAX): made absolute, its directories and its
 * chain of symbolic links (at most TFM_MAX_LINKS, as tfm_output_open follows it) resolved;
 * a file that does not exist (yet) is its directory's real path and its name.  What cannot
 * be resolved is left as given. */
void tfm_output_where(const char *path, char *buf);

#endif
