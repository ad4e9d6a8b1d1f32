#!/bin/bash
# A checkpointing PBS job: on SIGTERM (qdel, walltime) this shell has
# mpirun pass SIGUSR1 to the ranks, which agree at the next step, write a
# checkpoint and exit with 75; submitting the same script again resumes with
# -restart auto from the same output folder. qsub jobs/pbs-preempt.sh
# Environment (qsub -V, or -v NAME=...; slurm-wlm-torque's qsub passes the
# submitter's on): MPITRAIN (the program, default build/mpitrain), MT_OPTIONS
# (default inputs/fashion-mlp.opts), MT_RUNS (where the output folder goes,
# default runs).
# Note: the site's kill delay (PBS kill_delay) must leave time for the write.
#PBS -N mpitrain-chain
#PBS -l nodes=1:ppn=2,walltime=01:00:00
#PBS -j oe
set -uo pipefail
cd "${PBS_O_WORKDIR:-$PWD}" || exit 1
np=${PBS_NP:-}
[ -n "$np" ] || { [ -f "${PBS_NODEFILE:-}" ] && np=$(wc -l <"$PBS_NODEFILE"); } || true
[ -n "$np" ] && [ "$np" -gt 0 ] 2>/dev/null || np=${SLURM_NTASKS:-2}
out=${MT_RUNS:-runs}/pbs-chain
echo "mpitrain-chain: $np ranks, output $out"
# mpirun passes SIGUSR1 on to the ranks (a SIGTERM would make it end them)
trap 'echo "mpitrain-chain: SIGTERM, asking the ranks to checkpoint"; kill -USR1 "$run" 2>/dev/null' TERM
mpirun -np "$np" "${MPITRAIN:-build/mpitrain}" -options_file "${MT_OPTIONS:-inputs/fashion-mlp.opts}" \
  -restart auto -output_dir "$out" &
run=$!
while kill -0 "$run" 2>/dev/null; do wait "$run"; done # wait returns early when the trap runs
wait "$run"
rc=$?
[ "$rc" = 75 ] && echo "mpitrain-chain: checkpoint written; qsub this script again to resume"
exit "$rc"
