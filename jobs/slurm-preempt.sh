#!/bin/bash
# A preemption-safe run: 120 s before the time limit (Slurm may be some
# seconds late) Slurm sends SIGUSR1 to this batch shell, which forwards it to
# the ranks; they agree at the next step, write a checkpoint and exit with 75; the
# job then requeues itself and the next run resumes with -restart auto from
# the same output folder (runs/chain-<job name>). The log file is appended
# to, so it shows every run ("run N" is SLURM_RESTART_COUNT).
#   sbatch jobs/slurm-preempt.sh [more mpitrain options]
# Environment (sbatch passes the submitter's on): MPITRAIN (the program,
# default build/mpitrain), MT_OPTIONS (default inputs/fashion-mlp.opts),
# MT_RUNS (where the output folder goes, default runs).
# `scancel --signal=TERM JOB` (or USR1) signals the ranks directly: the same
# stop. Preemption sends SIGUSR1 only with PreemptParameters=send_user_signal;
# otherwise SIGTERM to every process of the job, GraceTime before SIGKILL
# (doc/checkpoints-and-jobs.md#signals).
# Note: a requeued job waits for Slurm's built-in requeue delay (about 120 s)
# before it starts again; `scontrol update JobId=ID StartTime=now` skips it.
#SBATCH --job-name=mpitrain-chain
#SBATCH --ntasks=2
#SBATCH --time=01:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=mpitrain-chain-%j.out
set -uo pipefail
out=${MT_RUNS:-runs}/chain-${SLURM_JOB_NAME}
echo "mpitrain-chain: job ${SLURM_JOB_ID} run ${SLURM_RESTART_COUNT:-0} on $(hostname), output $out"
# Only this shell gets the signal (B:); the ranks must get it too. Without
# --batch or --full, scancel signals the job's steps only, not this shell.
forward() {
  echo "mpitrain-chain: SIGUSR1, forwarding it to the ranks"
  scancel --signal=USR1 "$SLURM_JOB_ID"
}
trap forward USR1
srun --mpi=pmix "${MPITRAIN:-build/mpitrain}" -options_file "${MT_OPTIONS:-inputs/fashion-mlp.opts}" \
  -restart auto -output_dir "$out" "$@" &
step=$!
# wait returns early (status > 128) whenever the trap runs: wait again until
# srun has ended, then once more for its status, which bash keeps
while kill -0 "$step" 2>/dev/null; do wait "$step"; done
wait "$step"
rc=$?
if [ "$rc" = 75 ]; then
  echo "mpitrain-chain: checkpoint written, requeueing job ${SLURM_JOB_ID}"
  scontrol requeue "$SLURM_JOB_ID" || echo "mpitrain-chain: scontrol requeue failed; resubmit to resume" >&2
else
  echo "mpitrain-chain: mpitrain ended with status $rc"
fi
exit "$rc"
