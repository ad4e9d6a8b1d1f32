#!/bin/bash
# A single mpitrain run as a PBS job (OpenPBS/Torque syntax; on Slurm sites
# slurm-wlm-torque's qsub runs it too). qsub jobs/pbs-single.sh
# Environment (qsub -V, or -v NAME=...; slurm-wlm-torque's qsub passes the
# submitter's on): MPITRAIN (the program, default build/mpitrain), MT_OPTIONS
# (default inputs/fashion-mlp.opts), MT_RUNS (where output folders go,
# default runs).
#PBS -N mpitrain
#PBS -l nodes=1:ppn=2,walltime=00:30:00
#PBS -j oe
set -euo pipefail
cd "${PBS_O_WORKDIR:-$PWD}"
# ranks: PBS's count, else its node file's lines, else Slurm's (qsub over Slurm), else 2
np=${PBS_NP:-}
[ -n "$np" ] || { [ -f "${PBS_NODEFILE:-}" ] && np=$(wc -l <"$PBS_NODEFILE"); } || true
[ -n "$np" ] && [ "$np" -gt 0 ] 2>/dev/null || np=${SLURM_NTASKS:-2}
id=${PBS_JOBID:-${SLURM_JOB_ID:-$$}}
echo "mpitrain-pbs: job $id, $np ranks"
mpirun -np "$np" "${MPITRAIN:-build/mpitrain}" -options_file "${MT_OPTIONS:-inputs/fashion-mlp.opts}" \
  -output_dir "${MT_RUNS:-runs}/pbs-${id}"
