#!/usr/bin/env bash
# Sets everything up and runs the example job: the Fashion-MNIST MLP on 2 MPI
# ranks with -backend ddp (options in inputs/fashion-mlp.opts), printing the
# test accuracy. Extra arguments are passed to mpitrain (e.g. -epochs 1).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash scripts/deps.sh
bash scripts/build.sh build
[ -f data/fashion-mnist-test.h5 ] || build/mt-data fashion-mnist -out data
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np 2 --oversubscribe --bind-to none build/mpitrain -options_file inputs/fashion-mlp.opts "$@"
