#!/bin/bash
# A single mpitrain run under Slurm: sbatch jobs/slurm-single.sh [mpitrain options]
# from the repository root, after scripts/example.sh has built and prepared data.
#SBATCH --job-name=mpitrain
#SBATCH --ntasks=2
#SBATCH --time=00:30:00
#SBATCH --output=mpitrain-%j.out
set -euo pipefail
srun --mpi=pmix build/mpitrain -options_file inputs/fashion-mlp.opts \
  -output_dir "runs/slurm-${SLURM_JOB_ID}" "$@"
