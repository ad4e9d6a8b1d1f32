#!/usr/bin/env bash
# -ddp_shard_optimizer 1 (ZeRO stage 1 inside a node; what its default,
# auto, picks here) against 0 (a copy of everything per rank, PyTorch
# DDP's way) on bench_mlp.sh's MLP (784-1024-1024-10, SGD momentum 0.9, Fashion-MNIST):
#
#   bench/bench_zero.sh [-r N] [--steps N] [--batch N] [MPITRAIN [DATA_DIR]]
#
# Each repeat runs, in this order, 1 rank x 1 thread (sp), 2 ranks x 1
# thread (ddp -ddp_shard_optimizer 0) and the same with 1, so the three see
# the same machine; prints every run's samples/s with its epoch line's
# exposed-communication and optimizer shares, then the medians and the
# medians of the per-repeat ratios (2x1 / 1x1, zero1 / 1x1, zero1 / 2x1).
# Run it alone: two MPI jobs on the 2 cores slow each other. See
# bench/README.md.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh" # median

repeats=5 steps=400 batch=128
while [ $# -gt 0 ]; do
	case "$1" in
	-r) repeats=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--batch) batch=$2; shift 2 ;;
	-h|--help) sed -n '2,13p' "$0"; exit 0 ;;
	-*) echo "$0: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
done
mpitrain=${1:-./mpitrain}
h5=${2:-./data}/fashion-mnist-train.h5
[ -x "$mpitrain" ] || { echo "$0: $mpitrain is not executable" >&2; exit 1; }
[ -f "$h5" ] || { echo "$0: $h5 not found (make it with mt-data)" >&2; exit 1; }
for v in "$repeats" "$steps" "$batch"; do
	case "$v" in ''|*[!0-9]*) echo "$0: '$v' is not a positive integer" >&2; exit 2 ;; esac
done
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
tmp=$(mktemp -d /tmp/bench_zero.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

run() { # ranks log [options...]: prints samples/s, or nothing
	local r=$1 log=$2 backend=sp
	shift 2
	[ "$r" -gt 1 ] && backend=ddp
	OMP_NUM_THREADS=1 timeout 600 "${MPIRUN:-mpirun}" -np "$r" --bind-to none --oversubscribe \
		-x OMP_NUM_THREADS "$mpitrain" -backend "$backend" -model mlp -mlp_hidden 1024,1024 \
		-data_train "$h5" -epochs 1 -max_train_steps_per_epoch "$steps" \
		-max_val_steps_per_epoch 1 -batch_size "$batch" -optimizer sgd -lr 0.05 -momentum 0.9 \
		-threads 1 -log_every 0 -checkpoint_at_end 0 -output_dir "$tmp/out" "$@" >"$log" 2>&1
	rm -rf "$tmp/out"
	sed -n 's/^RESULT mpitrain .*train_samples_per_s=\([0-9.eE+-]*\).*/\1/p' "$log" | tail -n 1
}
ratio() { awk -v x="$1" -v y="$2" 'BEGIN { printf "%.4f\n", x / y }'; }
shares() { grep -o 'exposed comm [0-9.]*% optimizer [0-9.]*%' "$1" | head -n 1; }

echo "# bench_zero: $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $mpitrain; batch $batch, $steps steps, $repeats repeats"
for i in $(seq "$repeats"); do
	a=$(run 1 "$tmp/a.log")
	b=$(run 2 "$tmp/b.log" -ddp_shard_optimizer 0)
	z=$(run 2 "$tmp/z.log" -ddp_shard_optimizer 1)
	[ -n "$a" ] && [ -n "$b" ] && [ -n "$z" ] || {
		echo "$0: a run failed; its log:" >&2
		for f in a b z; do tail -n 3 "$tmp/$f.log" >&2; done
		exit 1
	}
	echo "$a" >>"$tmp/a" && echo "$b" >>"$tmp/b" && echo "$z" >>"$tmp/z"
	ratio "$b" "$a" >>"$tmp/rba" && ratio "$z" "$a" >>"$tmp/rza" && ratio "$z" "$b" >>"$tmp/rzb"
	echo "# run $i (load $(cut -d' ' -f1 /proc/loadavg)): 1x1 $a | 2x1 $b ($(shares "$tmp/b.log")) | 2x1 zero1 $z ($(shares "$tmp/z.log"))"
done
echo "samples/s medians: 1x1 $(median "$tmp/a") | 2x1 -ddp_shard_optimizer 0 $(median "$tmp/b") | 2x1 -ddp_shard_optimizer 1 $(median "$tmp/z")"
echo "per-repeat ratios, medians: 2x1/1x1 $(median "$tmp/rba" %.2f) | zero1/1x1 $(median "$tmp/rza" %.2f) | zero1/2x1 $(median "$tmp/rzb" %.3f)"
