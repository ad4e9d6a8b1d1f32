#!/bin/bash
# A single mpitrain run under Slurm: sbatch jobs/slurm-single.sh [mpitrain options]
# from the repository root, after scripts/example.sh has built and prepared data.
# Environment (sbatch passes the submitter's on): MPITRAIN (the program,
# default build/mpitrain), MT_OPTIONS (default inputs/fashion-mlp.opts),
# MT_RUNS (where output folders go, default runs).
#SBATCH --job-name=mpitrain
#SBATCH --ntasks=2
#SBATCH --time=00:30:00
#SBATCH --output=mpitrain-%j.out
set -euo pipefail
srun --mpi=pmix "${MPITRAIN:-build/mpitrain}" -options_file "${MT_OPTIONS:-inputs/fashion-mlp.opts}" \
  -output_dir "${MT_RUNS:-runs}/slurm-${SLURM_JOB_ID}" "$@"
