#!/bin/bash
# A single mpitrain run as a PBS job (OpenPBS/Torque syntax; on Slurm sites
# slurm-wlm-torque's qsub runs it too). qsub jobs/pbs-single.sh
#PBS -N mpitrain
#PBS -l nodes=1:ppn=2,walltime=00:30:00
#PBS -j oe
set -euo pipefail
cd "${PBS_O_WORKDIR:-$PWD}"
np=$(wc -l < "${PBS_NODEFILE:-/dev/null}" 2>/dev/null || echo 2)
[ "$np" -gt 0 ] || np=2
mpirun -np "$np" build/mpitrain -options_file inputs/fashion-mlp.opts \
  -output_dir "runs/pbs-${PBS_JOBID:-$$}"
