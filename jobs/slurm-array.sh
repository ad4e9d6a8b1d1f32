#!/bin/bash
# A job array: element i takes its options from inputs/array/i.opts and writes
# to runs/array-<array job id>/<i>.
#   sbatch --array=0-2 jobs/slurm-array.sh [more mpitrain options]
# Environment (sbatch passes the submitter's on): MPITRAIN (the program,
# default build/mpitrain), MT_ARRAY_DIR (the folder of <i>.opts, default
# inputs/array), MT_RUNS (where output folders go, default runs).
#SBATCH --job-name=mpitrain-array
#SBATCH --ntasks=2
#SBATCH --time=00:30:00
#SBATCH --output=mpitrain-array-%A_%a.out
set -euo pipefail
i=${SLURM_ARRAY_TASK_ID:?run me with sbatch --array}
opts=${MT_ARRAY_DIR:-inputs/array}/$i.opts
[ -f "$opts" ] || { echo "mpitrain-array: $opts is missing" >&2; exit 1; }
echo "mpitrain-array: element $i of array job ${SLURM_ARRAY_JOB_ID} (job ${SLURM_JOB_ID}), options $opts"
srun --mpi=pmix "${MPITRAIN:-build/mpitrain}" -options_file "$opts" \
  -output_dir "${MT_RUNS:-runs}/array-${SLURM_ARRAY_JOB_ID}/$i" "$@"
