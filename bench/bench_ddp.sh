#!/usr/bin/env bash
# ddp communication at 2 ranks on an MLP big enough for it to matter
# (784-4096-4096-10, 20 M parameters, 80 MB of gradient per step):
# mpitrain with -ddp_overlap 0, -ddp_overlap 1 -ddp_comm_thread 0 (MPI_Test's
# progress), -ddp_overlap 1 -ddp_comm_thread 1 and the last two with
# -ddp_allreduce shm (the shared-memory window; step time, exposed
# communication share, and without overlap the all-reduce bus bandwidth
# achieved in training; -ddp_shard_optimizer 0 throughout: its default,
# auto, would fold the sum into the optimizer's step, bench_zero.sh), an
# MPI_Allreduce
# microbenchmark of the same gradient in the same run (bench/allreduce), and
# PyTorch DDP (gloo) on the same model, batch (BATCH/2 per rank) and data.
# Medians of R runs, interleaved.
#
#   bench/bench_ddp.sh [-r R] [MPITRAIN [DATA_DIR]]
#
# Environment: MPIRUN_ARGS (extra mpirun arguments, e.g. a simulated host's
# --mca settings), PYTHON (default /usr/bin/python3), HIDDEN (4096,4096),
# STEPS (mpitrain steps, default 60), BATCH (global, default 128).
set -u
here=$(cd "$(dirname "$0")" && pwd)
R=3
if [ "${1:-}" = -r ]; then R=$2; shift 2; fi
mt=${1:-./mpitrain}
data=${2:-./data}
py=${PYTHON:-/usr/bin/python3}
hidden=${HIDDEN:-4096,4096}
steps=${STEPS:-60}
batch=${BATCH:-128}
ar=$(dirname "$mt")/bench/allreduce
# the microbenchmark is an EXTRA_PROGRAM of the build tree: made on demand
# (its row stays empty where it cannot be)
[ -x "$ar" ] || make -C "$(dirname "$mt")" bench/allreduce >/dev/null 2>&1 ||
  echo "# bench/allreduce is not built and could not be made in $(dirname "$mt"): no MPI_Allreduce row" >&2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi() { timeout 900 mpirun -np 2 --oversubscribe --bind-to none ${MPIRUN_ARGS:-} "$@"; }
. "$here/lib.sh" # median, spread

for i in $(seq "$R"); do
  for ov in 0 1 t s0 st; do
    case $ov in
    0) flags="-ddp_overlap 0 -ddp_allreduce mpi" ;;
    1) flags="-ddp_overlap 1 -ddp_comm_thread 0 -ddp_allreduce mpi" ;;
    t) flags="-ddp_overlap 1 -ddp_comm_thread 1 -ddp_allreduce mpi" ;;
    s0) flags="-ddp_overlap 0 -ddp_allreduce shm -ddp_shard_optimizer 0" ;;
    st) flags="-ddp_overlap 1 -ddp_comm_thread 1 -ddp_allreduce shm -ddp_shard_optimizer 0" ;;
    esac
    # shellcheck disable=SC2086
    mpi "$mt" -backend ddp -model mlp -mlp_hidden "$hidden" -data_train "$data/fashion-mnist-train.h5" \
      -batch_size "$batch" -epochs 1 -max_train_steps_per_epoch "$steps" -lr 0.05 -momentum 0.9 \
      -threads 1 -log_every 0 $flags -checkpoint_at_end 0 -output_dir "$tmp/o" >"$tmp/log" 2>&1
    sed -n 's/^RESULT mpitrain train_samples_per_s=\([0-9.]*\).*/\1/p' "$tmp/log" >>"$tmp/rate$ov"
    # "epoch 1/1 time: ... exposed comm E% ..." and "gradient all-reduce (rank 0):
    # S s (W s of it waiting for the slowest rank), P% of training, M MB, bus
    # bandwidth B GB/s" (B: bytes over the time spent in the all-reduce calls
    # and waits, overlapped or not, less W: without overlap a barrier before
    # the reduction takes the ranks' skew out of the transfer's time)
    e=$(sed -n 's/^epoch .* time: .* exposed comm \([0-9.]*\)%.*/\1/p' "$tmp/log" | tail -1)
    bw=$(sed -n 's/.*all-reduce (rank 0): .* bus bandwidth \([0-9.]*\) GB\/s.*/\1/p' "$tmp/log")
    echo "${e:-nan} ${bw:-nan}" >>"$tmp/comm$ov"
    grep -q RESULT "$tmp/log" || { echo "mpitrain failed:"; tail -5 "$tmp/log"; }
  done
  if [ -x "$ar" ]; then
    mb=$(grep -m1 "^  batch" "$tmp/log" >/dev/null; awk -v h="$hidden" 'BEGIN { n = split(h, d, ","); p = 784;
      t = 0; for (i = 1; i <= n; i++) { t += p * d[i] + d[i]; p = d[i] } t += p * 10 + 10; printf "%.1f", t * 4 / 1048576 }')
    mpi "$ar" "$mb" >"$tmp/ar" 2>&1
    awk '/^# gradient/ { g = 1; next } g && $1 == 16.0 { print $3 }' "$tmp/ar" >>"$tmp/micro"
  fi
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 timeout 900 "$py" "$here/torch_mlp.py" --ranks 2 --threads 1 \
    --hidden "$hidden" --batch $((batch / 2)) --steps "$steps" --warmup 5 --setting tuned \
    --data "$data/fashion-mnist-train.h5" >"$tmp/tlog" 2>&1
  sed -n 's/^RESULT torch .*samples_per_s=\([0-9.]*\).*/\1/p' "$tmp/tlog" >>"$tmp/torch"
  grep -q RESULT "$tmp/tlog" || { echo "torch failed:"; tail -3 "$tmp/tlog"; }
done
r0=$(median "$tmp/rate0") r1=$(median "$tmp/rate1") rt=$(median "$tmp/ratet") tr=$(median "$tmp/torch")
e0=$(cut -d' ' -f1 "$tmp/comm0" | median) e1=$(cut -d' ' -f1 "$tmp/comm1" | median)
et=$(cut -d' ' -f1 "$tmp/commt" | median)
b0=$(cut -d' ' -f2 "$tmp/comm0" | median - %.2f)
rs0=$(median "$tmp/rates0") rst=$(median "$tmp/ratest")
es0=$(cut -d' ' -f1 "$tmp/comms0" | median) est=$(cut -d' ' -f1 "$tmp/commst" | median)
bs0=$(cut -d' ' -f2 "$tmp/comms0" | median - %.2f)
mb=$(median "$tmp/micro" %.2f)
echo "# MLP 784-$hidden-10, batch $batch, 2 ranks x 1 thread, $steps steps, median of $R; load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-22s %12s %10s %14s\n" run samples/s exposed% "allreduce GB/s"
printf "%-22s %12s %10s %14s\n" "mpitrain overlap 0" "$r0" "$e0" "$b0"
printf "%-22s %12s %10s %14s\n" "mpitrain overlap 1" "$r1" "$e1" "-"
printf "%-22s %12s %10s %14s\n" "mpitrain comm thread" "$rt" "$et" "-"
printf "%-22s %12s %10s %14s\n" "shm overlap 0" "$rs0" "$es0" "$bs0"
printf "%-22s %12s %10s %14s\n" "shm comm thread" "$rst" "$est" "-"
printf "%-22s %12s %10s %14s\n" "MPI_Allreduce micro" "-" "-" "${mb:--}"
printf "%-22s %12s\n" "PyTorch DDP (gloo)" "${tr:--}"
awk -v a="$r0" -v b="$r1" -v c="$rt" -v t="$tr" -v m="$mb" -v x0="$b0" 'BEGIN {
  if (t > 0) printf "ratio vs PyTorch DDP: overlap 0 %.2fx, overlap 1 %.2fx, comm thread %.2fx\n", a / t, b / t, c / t
  if (m > 0) printf "training all-reduce (overlap 0) / microbenchmark (16 MiB buckets): %.0f%%\n", 100 * x0 / m }'
