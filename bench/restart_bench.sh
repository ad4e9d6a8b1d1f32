#!/usr/bin/env bash
# Checkpoint write and restart of a >= 100 M-parameter model through mpitrain
# itself, against a raw write/read of the same bytes to the same disk in the
# same run. MLP 784-10000-10000-10 (108 M parameters; with SGD momentum the
# checkpoint holds 2 x 432 MB).
#   bench/restart_bench.sh [MPITRAIN [DATA_DIR [WORK_DIR]]]
# Prints, for 1 and 2 ranks: checkpoint write seconds and GB/s, raw write
# (dd + fsync) GB/s and the ratio; restart read seconds and the time from
# launch until the restored run is ready to step (plus one step's time).
set -euo pipefail
MT=${1:-build/mpitrain}
DATA=${2:-data}
W=${3:-$(mktemp -d /tmp/mt-restart-bench.XXXXXX)}
mkdir -p "$W"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -f "$DATA/fashion-mnist-train.h5" ] || "$(dirname "$MT")/mt-data" fashion-mnist -out "$DATA" >/dev/null
opts=(-model mlp -mlp_hidden 10000,10000 -data_train "$DATA/fashion-mnist-train.h5" -batch_size 64
  -lr 0.01 -momentum 0.9 -log_every 0 -checkpoint_keep 1)
for np in 1 2; do
  rm -rf "$W/np$np"
  backend=ddp
  log1=$W/np$np-write.log log2=$W/np$np-restart.log
  mpirun -np $np --bind-to none "$MT" "${opts[@]}" -backend $backend -epochs 1 -max_train_steps_per_epoch 2 \
    -output_dir "$W/np$np" >"$log1" 2>&1
  ck=$(ls "$W/np$np/checkpoints/"ckpt-*.h5)
  bytes=$(stat -c %s "$ck")
  wsec=$(sed -n 's/^checkpoint .*(\([0-9.]*\) s)$/\1/p' "$log1" | tail -1)
  # raw baseline: the same bytes, written and fsynced, then read back cold
  a=$(date +%s.%N)
  dd if=/dev/zero of="$W/raw.bin" bs=4M count=$((bytes / 4194304 + 1)) conv=fsync status=none
  b=$(date +%s.%N)
  rsec=$(echo "$b - $a" | bc)
  sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
  a=$(date +%s.%N)
  dd if="$W/raw.bin" of=/dev/null bs=4M status=none
  b=$(date +%s.%N)
  rread=$(echo "$b - $a" | bc)
  rm -f "$W/raw.bin"
  sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
  t0=$(date +%s.%N)
  mpirun -np $np --bind-to none "$MT" "${opts[@]}" -backend $backend -epochs 2 -max_train_steps_per_epoch 2 \
    -restart auto -checkpoint_at_end 0 -output_dir "$W/np$np" >"$log2" 2>&1
  t1=$(date +%s.%N)
  read_s=$(sed -n 's/.*read in \([0-9.]*\) s, ready \([0-9.]*\) s after launch.*/\1/p' "$log2")
  ready=$(sed -n 's/.*read in \([0-9.]*\) s, ready \([0-9.]*\) s after launch.*/\2/p' "$log2")
  awk -v np=$np -v by="$bytes" -v w="$wsec" -v rw="$rsec" -v rr="$rread" -v rd="$read_s" -v rdy="$ready" -v tot="$(echo "$t1 - $t0" | bc)" 'BEGIN {
    printf "%d rank(s): checkpoint %.0f MB: write %.2f s (%.2f GB/s) vs raw write+fsync %.2f s (%.2f GB/s): ratio %.2f\n", np, by/1e6, w, by/w/1e9, rw, by/rw/1e9, rw/w
    printf "            restart: read %.2f s (%.2f GB/s) vs raw cold read %.2f s: ratio %.2f; ready %.2f s after launch; whole restarted run (2 steps) %.2f s\n", rd, by/rd/1e9, rr, rr/rd, rdy, tot }'
done
