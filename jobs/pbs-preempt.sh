#!/bin/bash
# A checkpointing PBS job: on SIGTERM (qdel, walltime) mpitrain writes a
# checkpoint and exits with 75; resubmitting the same script resumes with
# -restart auto. qsub jobs/pbs-preempt.sh
#PBS -N mpitrain-chain
#PBS -l nodes=1:ppn=2,walltime=01:00:00
#PBS -j oe
set -uo pipefail
cd "${PBS_O_WORKDIR:-$PWD}"
trap 'kill -TERM "$run" 2>/dev/null' TERM
mpirun -np 2 build/mpitrain -options_file inputs/fashion-mlp.opts -restart auto \
  -output_dir runs/pbs-chain &
run=$!
wait "$run"; rc=$?
kill -0 "$run" 2>/dev/null && { wait "$run"; rc=$?; }
[ "$rc" = 75 ] && echo "mpitrain-chain: checkpoint written; qsub this script again to resume"
exit "$rc"
