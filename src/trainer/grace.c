/* The time a launcher leaves a stopped run: from the SIGTERM that asks the
 * ranks to checkpoint to the SIGKILL that ends them (measured with Open MPI
 * 4.1 and Slurm 22.05: doc/checkpoints-and-jobs.md, "Signals"), and the
 * warning when a checkpoint takes longer, so that a job's owner learns it
 * from the first checkpoint, not from a lost one. */
#include "trainer/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Slurm's KillWait in seconds (scontrol show config: "KillWait = 30 sec"),
 * 0 when scontrol does not answer. */
static double slurm_killwait(void) {
  FILE *p = popen("timeout 10 scontrol show config 2>/dev/null", "r");
  if (!p) return 0;
  char line[512];
  double kw = 0;
  while (fgets(line, sizeof(line), p)) {
    char *eq = strchr(line, '=');
    if (!strncmp(line, "KillWait", 8) && line[8] == ' ' && eq) kw = atof(eq + 1);
  }
  pclose(p);
  return kw;
}

double mt_signal_grace(const mt_config *c, char *from, size_t n) {
  snprintf(from, n, "-signal_grace");
  if (c->signal_grace > 0) return c->signal_grace;
  double g = 0;
  if (getenv("OMPI_COMM_WORLD_SIZE")) {
    /* mpirun on SIGTERM: SIGCONT to the ranks, SIGTERM after this many
     * seconds (default 1), SIGKILL as many seconds later; exit status 1 */
    const char *v = getenv("OMPI_MCA_odls_base_sigkill_timeout");
    g = v && atof(v) > 0 ? atof(v) : 1.0;
    snprintf(from, n, "mpirun (odls_base_sigkill_timeout %g)", g);
  }
  if (getenv("SLURM_JOB_ID")) {
    const double kw = slurm_killwait();
    if (kw > 0 && (g == 0 || kw < g)) {
      g = kw;
      snprintf(from, n, "Slurm (KillWait %g)", kw);
    }
  }
  return g;
}

void mt_signal_grace_check(const mt_trainer *t, double seconds) {
  static int checked;
  if (checked || t->comm->rank != 0) return;
  checked = 1; /* the first checkpoint of the run */
  char from[96];
  const double grace = mt_signal_grace(t->cfg, from, sizeof(from));
  if (grace <= 0) return;
  if (seconds <= grace) { /* what a stop by SIGTERM may take, once per run */
    printf("signals: %s leaves %g s from SIGTERM to SIGKILL; the first checkpoint took %.2f s\n",
           from, grace, seconds);
    return;
  }
  fprintf(stderr,
          "mpitrain: warning: the checkpoint took %.2f s, more than the %g s that %s leaves "
          "between SIGTERM and SIGKILL: a SIGTERM (scancel, a time limit, kill of mpirun) would "
          "kill the ranks during the write; have the ranks signalled earlier with SIGUSR1 "
          "(sbatch --signal=USR1@T or B:USR1@T, T above %.1f s plus a step; kill -USR1 of "
          "mpirun, which passes it on) or checkpoint periodically (-checkpoint_every_minutes)\n",
          seconds, grace, from, seconds);
}
