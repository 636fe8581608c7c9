/* cli.h: the command-line code the mains in bin/ share: their usage errors and the range
 * checked parsing of numeric flags.
 *
 * This is the one src/ module that writes to stderr: it exists for the mains, whose job
 * that is.  Library code never prints and never exits (src/error.h); it never calls this.
 * Messages are "PROG: message" followed by the usage text, and the functions return 2 (the
 * usage exit status), so a main can `return tfm_cli_...(...)` or test for nonzero.
 * The state (program name, usage text) is process-global: set once by tfm_cli_init.
 */
#ifndef TFM_CLI_H
#define TFM_CLI_H

/* Program name for messages ("tfm-batch") and the usage text printed after a usage error
 * (the synopsis, ending in a newline; NULL: none).  Both must outlive every other call.
 * argv, main's (or NULL): its argv[0] becomes prog, since getopt names argv[0] in its own
 * messages ("tfm-cat: invalid option -- 'x'", not the path the tool was run by; glibc's
 * getopt does not use program_invocation_name, which is set too).
 * Call it first: it also holds standard descriptors that were closed at start on
 * /dev/null (unreadable standard input, unwritable outputs), so that the tool's own files
 * never take their numbers, and has a mapped file truncated in use said as such
 * (tfm_output_catch_bus_error). */
void tfm_cli_init(const char *prog, const char *usage, char **argv);

struct tfm_error;

/* A failure the library reported: "PROG: MESSAGE\n" on stderr (standard output flushed
 * first, so that what was printed comes before it); returns status. */
int tfm_cli_fail(const struct tfm_error *err, int status);

/* Flush and close standard output; 0, or 1 after "PROG: write error: REASON" (a closed
 * pipe, a full disk) unless reported is set (the caller said so already). */
int tfm_cli_close_stdout(int reported);

/* --help: the usage text and then help on standard output; --version: "PROG VERSION".
 * Both return tfm_cli_close_stdout(0): a failed write is an error, not a silent 0. */
int tfm_cli_help(const char *help);
int tfm_cli_version(const char *version);

/* "PROG: MESSAGE\n" (printf-style) and the usage text on stderr; returns 2. */
int tfm_cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The usage text alone on stderr (after getopt has named a bad option); returns 2. */
int tfm_cli_usage(void);

/* Numbers are written plainly: white space before or after one is refused by every
 * parser here (and by tfm_duration_parse), never skipped. */

/* An integer flag FLAG (as written in messages: "--beam") with value S in [lo, hi]: 0 and
 * *v set, or 2 after "PROG: FLAG: 'S': expected an integer from LO to HI" and the usage. */
int tfm_cli_int(const char *flag, const char *s, long long lo, long long hi, long long *v);

/* A finite number in [lo, hi], or (lo, hi] when open_lo: 0 and *v set, or 2 after
 * "PROG: FLAG: 'S': expected a number in [LO, HI]" (or "(LO, HI]") and the usage. */
int tfm_cli_double(const char *flag, const char *s, double lo, double hi, int open_lo,
                   double *v);

/* A size in bytes: a positive number with an optional unit K, M, G or T (powers of 1024):
 * 0 and *v set, or 2 after "PROG: FLAG: 'S' is not a size (512M, 8G)" and the usage. */
int tfm_cli_size(const char *flag, const char *s, double *v);

/* A path given to FLAG: 0, or 2 after "PROG: FLAG: an empty path" and the usage.  An empty
 * output path is refused here, before any work, rather than when the output is opened. */
int tfm_cli_path(const char *flag, const char *s);

/* Would writing the output path out, FLAG's (not "-"), replace the regular file that the
 * input in ("-": standard input) reads?  By identity (device and inode: a link to the file
 * is the file); an output not there yet is no input.  0 when not, or 2 after "PROG: FLAG
 * 'OUT' is the KIND IN: the PRODUCT would replace it" (IN "on standard input" for "-")
 * and the usage. */
int tfm_cli_output_not_input(const char *flag, const char *out, const char *kind,
                             const char *in, const char *product);

/* Does input path read standard input: "-", or a name of the pipe, FIFO, socket or
 * terminal open on descriptor 0 (/dev/stdin, /proc/self/fd/0, the FIFO's own path)?  Two
 * readers of one of those would each take part of its bytes.  (A regular file on
 * descriptor 0 opened again by name is read from its start, a reader of its own.) */
int tfm_cli_reads_stdin(const char *path);

/* Does input path name the file open on descriptor 0, whatever it is: "-", or by identity
 * (device and inode) the pipe, FIFO, terminal or regular file there (/dev/stdin, the
 * file's own name)?  For two inputs that must not be one file even when it is a regular
 * file, which each reader would read from its start: tfm-tokenize's model and text.  A
 * character device that is not a terminal (/dev/null) gives each reader its own bytes: 0. */
int tfm_cli_names_stdin(const char *path);

/* Do input paths a and b ("-": standard input) name one file that is not a regular file
 * or a directory: a pipe, FIFO, socket or device, by identity (device and inode: a FIFO's
 * path and /dev/fd/N open on it are one)?  Such a file is a stream read once: two readers
 * would each take part of its bytes, or the second wait for ever for a writer gone.  (A
 * regular file named twice is read twice, each reader from its start.) */
int tfm_cli_same_stream(const char *a, const char *b);

/* Is the output path given to FLAG a terminal (a character device that is a tty, as
 * /dev/tty or /dev/stdout on one)?  0 when not, or 2 after "PROG: FLAG: 'PATH' is a
 * terminal: refusing to write a binary stream to it" and the usage.  For the tools that
 * write only streams; standard output ("-") is for the caller to test with isatty. */
int tfm_cli_not_terminal(const char *flag, const char *path);

/* Do output paths a and b ("-": standard output) name one file, so that writing both
 * would leave one of the outputs only?  Files that exist are compared by identity (device
 * and inode: a hard or symbolic link to a file is that file); a path that does not exist
 * yet by its resolved absolute path ("./out.tfm" and "out.tfm" are one).  A character
 * device (/dev/null) keeps nothing to overwrite: it is never one output with another. */
int tfm_cli_same_output(const char *a, const char *b);

#endif
