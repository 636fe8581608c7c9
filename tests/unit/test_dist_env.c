/* test_dist_env: a process's place from the launchers' variables (tfm_dist_env_read):
 * which launcher wins, garbage refused with the variable named, and Slurm's variables
 * read only in a job step that srun started. */
#include <stdarg.h>
#include <stdlib.h>

#include "check.h"
#include "dist.h"

static const char *const all_vars[] = {
    "TFM_RANK", "TFM_WORLD_SIZE", "TFM_LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS",
    "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
};

/* The environment holds exactly the NULL-ended name, value pairs given. */
static void env(const char *first, ...)
{
    for (size_t i = 0; i < sizeof all_vars / sizeof *all_vars; i++)
        unsetenv(all_vars[i]);
    va_list ap;
    va_start(ap, first);
    for (const char *k = first; k; k = va_arg(ap, const char *))
        setenv(k, va_arg(ap, const char *), 1);
    va_end(ap);
}

static void test_launchers(void)
{
    struct tfm_dist_env e;
    struct tfm_error err;
    env(NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), 0);
    CHECK_EQ_INT(e.rank, 0);
    CHECK_EQ_INT(e.world, 1);
    CHECK_EQ_INT(e.local_rank, 0);
    CHECK_STR(e.source, "none");
    env("TFM_RANK", "2", "TFM_WORLD_SIZE", "3", "TFM_LOCAL_RANK", "1", NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), 0);
    CHECK_EQ_INT(e.rank, 2);
    CHECK_EQ_INT(e.world, 3);
    CHECK_EQ_INT(e.local_rank, 1);
    CHECK_STR(e.source, "TFM_RANK");
    /* mpirun inside a Slurm job step: Open MPI's place, the innermost launcher's */
    env("OMPI_COMM_WORLD_RANK", "5", "OMPI_COMM_WORLD_SIZE", "8",
        "OMPI_COMM_WORLD_LOCAL_RANK", "1", "SLURM_PROCID", "0", "SLURM_NTASKS", "2",
        "SLURM_LOCALID", "0", "SLURM_STEP_NUM_TASKS", "2", NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), 0);
    CHECK_EQ_INT(e.rank, 5);
    CHECK_EQ_INT(e.world, 8);
    CHECK_EQ_INT(e.local_rank, 1);
    CHECK_STR(e.source, "OMPI_COMM_WORLD_RANK");
    /* a task of srun -n 4 */
    env("SLURM_PROCID", "3", "SLURM_NTASKS", "4", "SLURM_LOCALID", "1",
        "SLURM_STEP_NUM_TASKS", "4", NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), 0);
    CHECK_EQ_INT(e.rank, 3);
    CHECK_EQ_INT(e.world, 4);
    CHECK_EQ_INT(e.local_rank, 1);
    CHECK_STR(e.source, "SLURM_PROCID");
    /* MPICH's mpiexec (Hydra), alone and from the tasks of a Slurm step, one a node, that
     * start its processes: its place, not the node's task's */
    env("PMI_RANK", "6", "PMI_SIZE", "8", "MPI_LOCALRANKID", "2", NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), 0);
    CHECK_EQ_INT(e.rank, 6);
    CHECK_EQ_INT(e.world, 8);
    CHECK_EQ_INT(e.local_rank, 2);
    CHECK_STR(e.source, "PMI_RANK");
    env("PMI_RANK", "6", "PMI_SIZE", "8", "MPI_LOCALRANKID", "2", "SLURM_PROCID", "1",
        "SLURM_NTASKS", "2", "SLURM_LOCALID", "0", "SLURM_STEP_NUM_TASKS", "2", NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), 0);
    CHECK_EQ_INT(e.rank, 6);
    CHECK_EQ_INT(e.world, 8);
    CHECK_EQ_INT(e.local_rank, 2);
    CHECK_STR(e.source, "PMI_RANK");
    env("PMI_RANK", "8", "PMI_SIZE", "8", NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), -1);
    CHECK_STR(err.msg, "environment: PMI_RANK=8 outside PMI_SIZE=8");
    env("PMI_SIZE", "8", NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), -1);
    CHECK_STR(err.msg, "environment: PMI_SIZE is set but PMI_RANK is not");
}

/* sbatch --ntasks 4 runs its script once, with SLURM_PROCID 0 and SLURM_NTASKS 4: a
 * tfm-train started there is one process (it had waited for 3 others that never came);
 * salloc -n 4 gives its shell SLURM_NTASKS alone (an error before: "SLURM_NTASKS is set but
 * SLURM_PROCID is not"). */
static void test_slurm_outside_a_step(void)
{
    struct tfm_dist_env e;
    struct tfm_error err;
    env("SLURM_PROCID", "0", "SLURM_NTASKS", "4", "SLURM_LOCALID", "0", NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), 0);
    CHECK_EQ_INT(e.rank, 0);
    CHECK_EQ_INT(e.world, 1);
    CHECK_STR(e.source, "none");
    env("SLURM_NTASKS", "4", NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), 0);
    CHECK_EQ_INT(e.world, 1);
    env("SLURM_NTASKS", "4", "SLURM_LOCALID", "garbage", NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), 0);
    CHECK_EQ_INT(e.local_rank, 0);
    /* a step: its own tasks, though the job has more */
    env("SLURM_PROCID", "1", "SLURM_NTASKS", "4", "SLURM_STEP_NUM_TASKS", "2", NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), 0);
    CHECK_EQ_INT(e.rank, 1);
    CHECK_EQ_INT(e.world, 2);
    env("SLURM_NTASKS", "4", "SLURM_STEP_NUM_TASKS", "4", NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), -1);
    CHECK_STR(err.msg, "environment: SLURM_STEP_NUM_TASKS is set but SLURM_PROCID is not");
    env("SLURM_PROCID", "2", "SLURM_STEP_NUM_TASKS", "2", NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), -1);
    CHECK_STR(err.msg, "environment: SLURM_PROCID=2 outside SLURM_STEP_NUM_TASKS=2");
}

static void test_garbage(void)
{
    struct tfm_dist_env e;
    struct tfm_error err;
    static const struct {
        const char *rank, *world, *msg;
    } bad[] = {
        {"1", "1", "environment: TFM_RANK=1 outside TFM_WORLD_SIZE=1"},
        {"0", "0", "environment: TFM_RANK=0 outside TFM_WORLD_SIZE=0"},
        {"-1", "2", "environment TFM_RANK='-1': not an integer in [0, 65535]"},
        {"x", "2", "environment TFM_RANK='x': not an integer in [0, 65535]"},
        {"0", "2x", "environment TFM_WORLD_SIZE='2x': not an integer in [0, 65536]"},
        {"0", "65537", "environment TFM_WORLD_SIZE='65537': not an integer in [0, 65536]"},
        {"0", "99999999999999999999",
         "environment TFM_WORLD_SIZE='99999999999999999999': not an integer in [0, 65536]"},
        {"", "2", "environment TFM_RANK='': not an integer in [0, 65535]"},
        {"0", NULL, "environment: TFM_RANK is set but TFM_WORLD_SIZE is not"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (bad[i].world)
            env("TFM_RANK", bad[i].rank, "TFM_WORLD_SIZE", bad[i].world, NULL);
        else
            env("TFM_RANK", bad[i].rank, NULL);
        CHECK_EQ_INT(tfm_dist_env_read(&e, &err), -1);
        CHECK_STR(err.msg, bad[i].msg);
    }
    env("TFM_RANK", "0", "TFM_WORLD_SIZE", "2", "TFM_LOCAL_RANK", "-3", NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), -1);
    CHECK_STR(err.msg, "environment TFM_LOCAL_RANK='-3': not an integer in [0, 65535]");
    /* the largest run there may be */
    env("TFM_RANK", "65535", "TFM_WORLD_SIZE", "65536", NULL);
    CHECK_EQ_INT(tfm_dist_env_read(&e, &err), 0);
    CHECK_EQ_INT(e.rank, 65535);
    CHECK_EQ_INT(e.world, 65536);
}

int main(void)
{
    t_run("dist env: each launcher's variables, the first set wins", test_launchers);
    t_run("dist env: Slurm's variables outside an srun step place nothing",
          test_slurm_outside_a_step);
    t_run("dist env: garbage, out of range and half-set places are errors naming them",
          test_garbage);
    return t_done();
}
