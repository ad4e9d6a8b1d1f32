#!/usr/bin/env bash
# The shared-memory all-reduce (-ddp_allreduce shm, src/comm/shm_reduce.c)
# against MPI_Allreduce: bus bandwidth at 1, 4, 16 and 64 MiB of floats on
# 2 ranks, each repetition timing every method once in turn (interleaved),
# medians of the slowest rank's times, the ratio from the same run
# (bench/shm_reduce.c says what each column is). Run it alone: another job
# on the machine's cores moves the figures by 2x and more.
#
#   bench/bench_shm_reduce.sh [-r R] [-np P] [BUILD_DIR]
#
# BUILD_DIR (default .) holds bench/shm_reduce (make bench/shm_reduce);
# SIZES (default 1,4,16,64) the sizes in MiB; MPIRUN_ARGS extra mpirun
# arguments. The transport is OpenMPI's default on one node (vader, with
# CMA single copy where the kernel allows it), as a job would get it.
set -u
R=11
NP=2
while [ $# -gt 0 ]; do
  case $1 in
  -r) R=$2; shift 2 ;;
  -np) NP=$2; shift 2 ;;
  *) break ;;
  esac
done
build=${1:-.}
bin=$build/bench/shm_reduce
[ -x "$bin" ] || { echo "bench_shm_reduce: no $bin (cd BUILD_DIR && make bench/shm_reduce)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "# $(date -u +%FT%TZ), $(nproc) cores, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# shellcheck disable=SC2086
timeout 900 mpirun -np "$NP" --oversubscribe --bind-to none ${MPIRUN_ARGS:-} "$bin" -reps "$R" \
  -sizes "${SIZES:-1,4,16,64}"
rc=$?
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $rc
