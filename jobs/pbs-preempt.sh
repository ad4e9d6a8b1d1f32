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
# Where the batch system sends SIGTERM to mpirun too (to every process of
# the job, as Slurm does), mpirun exits 1 whatever the ranks return, relays
# none of their output after it and gives them 1 s (Open MPI 4.1,
# doc/checkpoints-and-jobs.md#signals): the script then goes by the
# checkpoint folder (OUTPUT_DIR/checkpoints/latest): a newer checkpoint than
# at the start means a resubmission goes on from there (status 75).
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
term=
trap 'term=1; echo "mpitrain-chain: SIGTERM, asking the ranks to checkpoint"; kill -USR1 "$run" 2>/dev/null' TERM
before=$(cat "$out/checkpoints/latest" 2>/dev/null)
mpirun -np "$np" "${MPITRAIN:-build/mpitrain}" -options_file "${MT_OPTIONS:-inputs/fashion-mlp.opts}" \
  -restart auto -output_dir "$out" &
run=$!
while kill -0 "$run" 2>/dev/null; do wait "$run"; done # wait returns early when the trap runs
wait "$run"
rc=$?
after=$(cat "$out/checkpoints/latest" 2>/dev/null)
if [ -n "$term" ] && [ "$rc" != 0 ] && [ "$rc" != 75 ] && [ -n "$after" ] && [ "$after" != "$before" ]; then
  echo "mpitrain-chain: mpirun exited $rc after SIGTERM (it reports 1 for a job it was told to end); this run's newest checkpoint is $after"
  rc=75
fi
[ "$rc" = 75 ] && echo "mpitrain-chain: checkpoint written; qsub this script again to resume"
exit "$rc"
