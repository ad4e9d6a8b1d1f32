#!/bin/bash
# Predictions over data shards, one array element per shard: element i
# takes the i-th shard and writes its predictions next to it
# (part-007.h5 -> part-007.pred.h5), each one file written collectively by
# the element's ranks (-mode predict, doc/running.md).
#   sbatch --array=0-$((NSHARDS - 1)) jobs/slurm-predict-array.sh MODEL.h5 [more mpitrain options]
# The shards: the lines of the file MT_SHARD_LIST (one path a line), else
# the files matching the glob MT_SHARDS (default data/shard-*.h5), sorted,
# but the *.pred.h5 that the elements write.
# Environment (sbatch passes the submitter's on): MPITRAIN (the program,
# default build/mpitrain); MT_DRY_RUN=1 prints the command instead of
# running it.
#SBATCH --job-name=mpitrain-predict
#SBATCH --ntasks=2
#SBATCH --time=00:30:00
#SBATCH --output=mpitrain-predict-%A_%a.out
set -euo pipefail
i=${SLURM_ARRAY_TASK_ID:?run me with sbatch --array=0-N (N + 1 shards)}
model=${1:?usage: sbatch --array=0-N jobs/slurm-predict-array.sh MODEL.h5 [mpitrain options]}
shift
if [ -n "${MT_SHARD_LIST:-}" ]; then
  mapfile -t shards < <(grep -v '^[[:space:]]*$' "$MT_SHARD_LIST")
else
  shopt -s nullglob
  # shellcheck disable=SC2206 # the glob is meant to expand
  all=(${MT_SHARDS:-data/shard-*.h5})
  shopt -u nullglob
  # the outputs are never shards: an element that starts after another has
  # finished would see its shard.pred.h5 and number the shards differently
  shards=()
  for f in "${all[@]}"; do [[ "$f" == *.pred.h5 ]] || shards+=("$f"); done
fi
n=${#shards[@]}
if [ "$i" -ge "$n" ]; then
  echo "mpitrain-predict: element $i, but there are $n shards (${MT_SHARD_LIST:-${MT_SHARDS:-data/shard-*.h5}})" >&2
  exit 1
fi
in=${shards[$i]}
out=${in%.h5}.pred.h5
cmd=(srun --mpi=pmix "${MPITRAIN:-build/mpitrain}" -mode predict -model_file "$model" -data "$in"
  -predictions "$out" "$@")
echo "mpitrain-predict: element $i of array job ${SLURM_ARRAY_JOB_ID:-?}: $in -> $out"
if [ "${MT_DRY_RUN:-0}" = 1 ]; then
  printf '%q ' "${cmd[@]}"
  echo
  exit 0
fi
exec "${cmd[@]}"
