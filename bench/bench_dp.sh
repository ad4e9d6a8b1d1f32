#!/usr/bin/env bash
# The price of per-sample clipping: samples/s of -backend sp-dp (batched
# clipping where the model has it: the mlp) and of sp-dp -dp_grad_sample
# exact (one forward+backward per sample) against -backend sp on the same
# model, batch and data, in the same run (issue 8's goal: sp-dp >= 0.5x sp). Both on 1 rank x THREADS threads; sp-dp runs with a
# fixed noise multiplier (no target solve) and shuffle sampling, so both see
# the same fixed-size batches. Medians of R runs, interleaved.
#
#   bench/bench_dp.sh [-r R] [--threads T] [--steps N] [--models "mlp cnn"] MPITRAIN DATA_DIR
#
# mlp: 784-256-10 (the Fashion-MNIST DP recipe of validation/README.md), batch 512
# cnn: inputs/fashion-cnn.opts' network (conv 32, conv 64, hidden 128), batch 128
set -u
R=3 threads=2 steps=40 models="mlp cnn"
while [ $# -gt 0 ]; do
  case "$1" in
  -r) R=$2; shift 2 ;;
  --threads) threads=$2; shift 2 ;;
  --steps) steps=$2; shift 2 ;;
  --models) models=$2; shift 2 ;;
  -*) echo "$0: unknown option $1" >&2; exit 2 ;;
  *) break ;;
  esac
done
mt=${1:-./mpitrain}
data=${2:-./data}
[ -x "$mt" ] || { echo "$0: $mt is not executable" >&2; exit 2; }
[ -f "$data/fashion-mnist-train.h5" ] || { echo "$0: no $data/fashion-mnist-train.h5" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh" # median, spread

model_args() {
  case "$1" in
  mlp) echo "-model mlp -mlp_hidden 256 -batch_size 512 -lr 0.5" ;;
  cnn) echo "-model cnn -cnn_channels 32,64 -cnn_kernel 3 -cnn_hidden 128 -batch_size 128 -lr 0.02 -momentum 0.9" ;;
  esac
}

for i in $(seq "$R"); do
  for m in $models; do
    for v in sp sp-dp sp-dp-exact; do
      dp=() be=$v
      [ "$v" != sp ] && be=sp-dp dp=(-dp_noise_multiplier 1.0 -dp_max_grad_norm 1 -dp_sampling shuffle -dp_delta 1e-5)
      [ "$v" = sp-dp-exact ] && dp+=(-dp_grad_sample exact)
      # shellcheck disable=SC2046
      timeout 900 mpirun -np 1 --bind-to none "$mt" -backend "$be" $(model_args "$m") "${dp[@]}" \
        -data_train "$data/fashion-mnist-train.h5" -epochs 1 -max_train_steps_per_epoch "$steps" \
        -threads "$threads" -log_every 0 -checkpoint_at_end 0 -output_dir "$tmp/o" >"$tmp/log" 2>&1
      r=$(sed -n 's/^RESULT mpitrain train_samples_per_s=\([0-9.]*\).*/\1/p' "$tmp/log")
      [ -n "$r" ] || { echo "# $m $v failed:"; tail -3 "$tmp/log" | sed 's/^/#   /'; }
      echo "${r:-}" >>"$tmp/$m-$v"
      rm -rf "$tmp/o"
    done
  done
done
echo "# 1 rank x $threads threads, $steps steps, median of $R; load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-6s %12s %12s %8s %14s %8s\n" model "sp" "sp-dp" "dp/sp" "sp-dp exact" "exact/sp"
for m in $models; do
  a=$(grep . "$tmp/$m-sp" | median) b=$(grep . "$tmp/$m-sp-dp" | median)
  x=$(grep . "$tmp/$m-sp-dp-exact" | median)
  awk -v m="$m" -v a="$a" -v b="$b" -v x="$x" 'BEGIN { printf "%-6s %12s %12s %7.2fx %14s %7.2fx%s\n",
    m, a, b, (a > 0 ? b / a : 0), x, (a > 0 ? x / a : 0),
    (a > 0 && b / a >= 0.5 ? "" : "  (goal 0.5x not met)") }'
done
