/* dist.h: data-parallel ranks: where this process sits, and the all-reduce among ranks.
 *
 * A run has W processes (launched by mpirun, srun or by hand with TFM_RANK and
 * TFM_WORLD_SIZE) and R ranks inside each process (threads, each on the CPU or on a GPU),
 * R*W ranks in all.  Every rank computes gradients on its own batches; tfm_comm_sum makes
 * every rank's buffer the element-wise sum over ranks.  The sum is taken in rank order
 * within a process, ((b0 + b1) + b2) + ..., then over the processes in process order;
 * it is the same bits on every rank and in every run, so training is deterministic for a
 * fixed R and W.
 * The in-process implementation (threads) and the one between processes (TCP sockets) are
 * here; NCCL would go here too, behind the same calls: nothing else in tfm knows how
 * ranks talk.
 * Not here: which batches a rank reads (batch.h shards at read time), the training loop.
 */
#ifndef TFM_DIST_H
#define TFM_DIST_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#include "error.h"

#define TFM_DIST_MAX_WORLD 65536
#define TFM_DIST_MAX_LOCAL 256

/* This process's place, from the environment: TFM_RANK/TFM_WORLD_SIZE, else
 * OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE, else PMI_RANK/PMI_SIZE (MPICH's and Intel
 * MPI's mpiexec), else SLURM_PROCID/SLURM_STEP_NUM_TASKS (set in a job step srun started;
 * a batch script or an salloc shell, which have SLURM_NTASKS of the whole job, is one
 * process), else 0/1. */
struct tfm_dist_env {
    int rank;
    int world;
    int local_rank;     /* among the processes of this node: TFM_LOCAL_RANK, else
                         * OMPI_COMM_WORLD_LOCAL_RANK, else MPI_LOCALRANKID, else
                         * SLURM_LOCALID, else 0 (which GPU) */
    char source[64];    /* which variables said so ("TFM_RANK", "none", ...) */
};
/* -1 with err, naming the variable, also for a bad value of one of the variables that only
 * several processes use (tfm_dist_env_check). */
int tfm_dist_env_read(struct tfm_dist_env *e, struct tfm_error *err);
/* The run's other variables, checked whatever the number of processes, so that a bad
 * value is an error on one process as on many, where it is read only by the latter:
 * TFM_RENDEZVOUS_TIMEOUT, TFM_JOIN_TIMEOUT, TFM_COLLECTIVE_TIMEOUT and TFM_STOP_TIMEOUT
 * (tfm_dist_env_seconds), TFM_BUCKET_MB (tfm_dist_env_bucket_mb), TFM_RUN_TOKEN (16 to
 * 256 characters) and TFM_MASTER_PORT (1 to 65535), each when set and not empty.  0, or
 * -1 with err. */
int tfm_dist_env_check(struct tfm_error *err);
/* TFM_BUCKET_MB: megabytes of gradients a sum takes, 25 when unset or empty; -1 with err
 * when it is not a number in (0, 65536]. */
int tfm_dist_env_bucket_mb(double *mb, struct tfm_error *err);

/* A communicator among nranks ranks of this process. */
struct tfm_comm;
struct tfm_comm *tfm_comm_threads(int nranks, struct tfm_error *err);
/* What the waits of a process on the others watch (tfm_comm_procs): stop, a flag that a
 * signal handler sets (NULL: none), and notes, where the connections dropped while joining
 * are noted (NULL: nowhere), each line after "prog: " (prog may be NULL). */
struct tfm_dist_watch {
    volatile sig_atomic_t *stop;
    FILE *notes;
    const char *prog;
};

/* A communicator among the world processes of a run, one rank each (rank = this process's):
 * a chain of TCP links between neighbours.  Its collectives take the local rank 0.
 *
 * Meeting.  The processes meet through process 0, which listens on TFM_MASTER_ADDR:
 * TFM_MASTER_PORT (that address only), or on a free port that it writes to the file
 * TFM_RENDEZVOUS (on a file system every process sees; on TFM_MASTER_ADDR when set, else
 * on every interface).  The others connect, retrying for TFM_RENDEZVOUS_TIMEOUT seconds
 * (default 300) from their start, and are told where their successor in the chain
 * listens; processes 2 and up listen for their predecessor on the address they reach
 * process 0 from.  Every connection starts with a hello in which each side proves that it
 * knows the run's secret, HMAC-SHA256 over both sides' fresh random challenges (never the
 * secret itself): TFM_RUN_TOKEN (16 to 256 characters, the same for every process;
 * required with TFM_MASTER_PORT), else 32 random bytes (getrandom) that process 0 writes,
 * in hex, into the rendezvous file "HOST PORT SECRET", created under a name no one can
 * guess with O_EXCL, O_NOFOLLOW and mode 0600 and renamed into place (removed once all
 * have joined, when it is still process 0's).  Process 0 refuses a file where another
 * run's process 0 answers a hello (two runs would share one file), and while it waits it
 * reads its file again: one removed it writes again, one written over ends the meeting.  The others read it only when it is a regular file of their own user with
 * no permission for others.  A connection whose hello is not complete within
 * TFM_JOIN_TIMEOUT seconds (default 10), that is not a tfm-train hello or that does not
 * prove the secret is dropped and noted on watch->notes, and the meeting goes on: several
 * hellos run at once, so none holds up the others.  One that proves the secret but claims
 * a rank already taken, or another number of processes, ends the meeting (two processes
 * were given one rank).  When watch->stop is set, the meeting ends within 0.1 s.
 *
 * Sums.  A process waits at most TFM_COLLECTIVE_TIMEOUT seconds (default 300) for a
 * neighbour that sends or takes nothing (which includes the time process 0 takes to
 * validate and write checkpoints between updates), then fails naming that neighbour;
 * once watch->stop is set, at most TFM_STOP_TIMEOUT seconds (default 30) from then.  A
 * process that fails or calls tfm_comm_abort closes its sockets, and its neighbours'
 * collectives fail saying which process left.  The traffic is not encrypted: the secret
 * keeps strangers out of the run, not off the network. */
struct tfm_comm *tfm_comm_procs(int rank, int world, const struct tfm_dist_watch *watch,
                                struct tfm_error *err);
/* A number of seconds from environment variable name: dflt when unset or empty; -1 with err
 * when it is not a number in (0, 1e7]. */
int tfm_dist_env_seconds(const char *name, double dflt, double *out, struct tfm_error *err);
/* Several ranks in each of several processes: the collectives of `local` (threads) then sum
 * over the local ranks in rank order, local rank 0 sums that over the processes, and every
 * local rank gets the result: ((b0 + b1) + (b2 + b3)) for 2 ranks in 2 processes, the
 * same bits on every rank (not those of 4 ranks in one process).  procs stays the
 * caller's to free, after local. */
void tfm_comm_stack(struct tfm_comm *local, struct tfm_comm *procs);
void tfm_comm_free(struct tfm_comm *c);
int tfm_comm_size(const struct tfm_comm *c);
/* Whether the processes of c met through a rendezvous file (TFM_RENDEZVOUS), which another
 * run may have been given too: a process that joined may be that run's. */
int tfm_comm_met_by_file(const struct tfm_comm *c);

/* Collectives: every rank calls each one, in the same order, with buffers of the same n.
 * They return 0, or -1 when a rank called tfm_comm_abort (every waiting rank is woken). */
int tfm_comm_sum_f32(struct tfm_comm *c, int rank, float *buf, size_t n, struct tfm_error *err);
int tfm_comm_sum_f64(struct tfm_comm *c, int rank, double *buf, size_t n, struct tfm_error *err);
int tfm_comm_barrier(struct tfm_comm *c, int rank, struct tfm_error *err);
/* A rank that fails calls this instead of the next collective, so the others do not wait
 * for it forever; their collectives fail from then on with why. */
void tfm_comm_abort(struct tfm_comm *c, const char *why);

/* Whether a rank called tfm_comm_abort (for waits outside this module, such as a GPU's). */
int tfm_comm_aborted(struct tfm_comm *c);

/* Run fn(rank, args[rank]) on nranks threads (rank 0 on the calling thread), wait for all.
 * Returns the number of ranks whose fn returned non-zero, or -1 if a thread could not be
 * started (comm, when not NULL, is then aborted so the started ranks stop). */
int tfm_dist_run(int nranks, int (*fn)(int rank, void *arg), void **args, struct tfm_comm *comm,
                 struct tfm_error *err);

#endif
