#!/usr/bin/env bash
# fsdp against ddp on gpt: training throughput (tokens/s) of every sharding
# strategy at 2 and 4 ranks, the share of the step spent waiting for
# communication, and the memory table (parameters, gradients, optimizer
# state and the gathered units per rank, measured; the ZeRO bound
# total/N + largest unit) for N = 1, 2, 4. Medians of R runs, interleaved.
#
#   bench/bench_fsdp.sh [-r R] [MPITRAIN]
#
# Environment: GPT ("-gpt_layers 6 -gpt_heads 4 -gpt_embd 256 -gpt_block 64"),
# BATCH (global, 16), STEPS (20), TEXT (a text file for byte tokens,
# default the GPL-3 of base-files).
set -u
here=$(cd "$(dirname "$0")" && pwd)
R=3
if [ "${1:-}" = -r ]; then R=$2; shift 2; fi
mt=${1:-./mpitrain}
mtdata=$(dirname "$mt")/mt-data
gpt=${GPT:--gpt_layers 6 -gpt_heads 4 -gpt_embd 256 -gpt_block 64}
batch=${BATCH:-16}
steps=${STEPS:-20}
text=${TEXT:-/usr/share/common-licenses/GPL-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$here/lib.sh" # median, spread
"$mtdata" text "$text" -out "$tmp" -name t -val_fraction 0.05 >/dev/null || exit 1

# NAME NP BACKEND OPTIONS...
configs=(
  "sp1 1 sp"
  "ddp2 2 ddp"
  "full2 2 fsdp -fsdp_sharding_strategy full_shard"
  "full2-pf0 2 fsdp -fsdp_sharding_strategy full_shard -fsdp_prefetch 0"
  "sgo2 2 fsdp -fsdp_sharding_strategy shard_grad_op"
  "noshard2 2 fsdp -fsdp_sharding_strategy no_shard"
  "ddp4 4 ddp"
  "full4 4 fsdp -fsdp_sharding_strategy full_shard"
  "full4-pf0 4 fsdp -fsdp_sharding_strategy full_shard -fsdp_prefetch 0"
  "sgo4 4 fsdp -fsdp_sharding_strategy shard_grad_op"
  "hybrid4 4 fsdp -fsdp_sharding_strategy hybrid_shard -fsdp_node_size 2"
  "noshard4 4 fsdp -fsdp_sharding_strategy no_shard"
)
for i in $(seq "$R"); do
  for c in "${configs[@]}"; do
    set -- $c
    name=$1 np=$2
    shift 2
    # shellcheck disable=SC2086
    timeout 900 mpirun -np "$np" --oversubscribe --bind-to none "$mt" -model gpt $gpt \
      -data_train "$tmp/t-train.h5" -batch_size "$batch" -epochs 1 -max_train_steps_per_epoch "$steps" \
      -optimizer adamw -lr 1e-3 -threads 1 -log_every 0 -checkpoint_at_end 0 -backend "$@" \
      -output_dir "$tmp/o" >"$tmp/log" 2>&1 || { echo "$name failed:"; tail -5 "$tmp/log"; continue; }
    sed -n 's/.* \([0-9.]*\) tokens\/s.*/\1/p' "$tmp/log" | tail -1 >>"$tmp/tok.$name"
    sed -n 's/.*exposed comm \([0-9.]*\)%.*/\1/p' "$tmp/log" | tail -1 >>"$tmp/exp.$name"
    grep '^memory per rank (measured' "$tmp/log" >"$tmp/mem.$name"
  done
done

mib() { sed -n "s/.*$2 \([0-9.]*\).*/\1/p" "$tmp/mem.$1"; }
echo "gpt ($gpt), global batch $batch, $steps steps, medians of $R runs"
printf '%-10s %3s %10s %8s %8s | %7s %7s %7s %9s %9s %8s %8s\n' config N tokens/s vs_ddp exposed% \
  params grads optim gathered unitgrads total bound
for c in "${configs[@]}"; do
  set -- $c
  name=$1 np=$2
  tok=$(median "$tmp/tok.$name")
  ref=$(median "$tmp/tok.ddp$np")
  [ "$np" = 1 ] && ref=$tok
  ratio=$(awk -v a="$tok" -v b="$ref" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
  printf '%-10s %3s %10s %8s %8s | %7s %7s %7s %9s %9s %8s %8s\n' "$name" "$np" "$tok" "$ratio" \
    "$(median "$tmp/exp.$name")" "$(mib "$name" "ranks): parameters")" "$(mib "$name" "MiB, gradients")" \
    "$(mib "$name" "optimizer state")" "$(mib "$name" "in training)")" \
    "$(mib "$name" "gradients (peak)")" "$(mib "$name" "; total")" "$(mib "$name" "gradient)")"
done
echo "memory columns: MiB per rank (largest over ranks); gathered/unitgrads: peak resident pages of"
echo "fsdp's views in training (evaluation and saving gather the whole model); bound: ZeRO's"
echo "(parameters + gradients + optimizer state) / N + the largest unit's parameters and gradient;"
echo "pf0: -fsdp_prefetch 0 (one unit at a time)"
