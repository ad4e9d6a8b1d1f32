#!/bin/bash
# A job array: element i takes its options from inputs/array/i.opts and writes
# to runs/array-<array job id>/<i>.
#   sbatch --array=0-2 jobs/slurm-array.sh [more mpitrain options]
#SBATCH --job-name=mpitrain-array
#SBATCH --ntasks=2
#SBATCH --time=00:30:00
#SBATCH --output=mpitrain-array-%A_%a.out
set -euo pipefail
i=${SLURM_ARRAY_TASK_ID:?run me with sbatch --array}
opts=inputs/array/$i.opts
[ -f "$opts" ] || { echo "mpitrain-array: $opts is missing" >&2; exit 1; }
srun --mpi=pmix build/mpitrain -options_file "$opts" \
  -output_dir "runs/array-${SLURM_ARRAY_JOB_ID}/$i" "$@"
