#!/bin/bash
# A preemption-safe run: 120 s before the time limit (or when the job is
# preempted) Slurm sends SIGUSR1 to this batch shell, which forwards it to the
# ranks; they agree at the next step, write a checkpoint and exit with 75; the
# job then requeues itself and the next run resumes with -restart auto.
#   sbatch jobs/slurm-preempt.sh [more mpitrain options]
#SBATCH --job-name=mpitrain-chain
#SBATCH --ntasks=2
#SBATCH --time=01:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=mpitrain-chain-%j.out
set -uo pipefail
out=runs/chain-${SLURM_JOB_NAME}
echo "mpitrain-chain: job ${SLURM_JOB_ID} run ${SLURM_RESTART_COUNT:-0}"
# the batch shell gets the signal (B:); the ranks must get it too
trap 'echo "mpitrain-chain: SIGUSR1, forwarding"; scancel --signal=USR1 "$SLURM_JOB_ID"' USR1
srun --mpi=pmix build/mpitrain -options_file inputs/fashion-mlp.opts -restart auto \
  -output_dir "$out" "$@" &
step=$!
# wait returns early when the trap runs; wait again for srun itself
while true; do
  wait "$step"
  rc=$?
  kill -0 "$step" 2>/dev/null || break
done
if [ "$rc" = 75 ]; then
  echo "mpitrain-chain: checkpoint written, requeueing"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$rc"
