#!/usr/bin/env bash
# Does ddp's overlap (-ddp_overlap 1: a bucket's MPI_Iallreduce starts during
# the backward pass) hide communication when the ranks talk over a network?
#
#   bench/bench_multihost.sh [options] [MPITRAIN [DATA_DIR]]
#
# Two simulated hosts (network namespaces on a bridge, tests/multihost/
# hosts.sh; needs root), one rank on each, Open MPI over TCP only. The link is
# left as it is or capped per host and direction with tc tbf; for each cap,
# ddp runs with the overlap off, on (buckets driven by MPI_Test between
# layers) and on with a communication thread (-ddp_comm_thread 1). Model: MLP 784-1024-1024-10 on Fashion-MNIST, global batch 128
# (64 per rank), SGD momentum 0.9, 1 thread per rank. Reports the median of
# R runs of: training samples/s (RESULT line), the exposed communication
# share of the last epoch ("epoch N/N time: ... exposed comm X%"; also in
# ms per step) and the all-reduce share of training ("gradient all-reduce (rank 0): ... X% of
# training", which also counts the time spent starting and testing requests
# during the backward pass). Builds nothing. See bench/README.md.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)

repeats=3
steps=50
epochs=2
caps="none 1gbit 200mbit"
variants="0 1 t"
run_timeout=300
mt_data=""
keep=""

usage() {
  cat <<EOF
usage: $0 [options] [MPITRAIN [DATA_DIR]]
  MPITRAIN          mpitrain executable (default ./mpitrain)
  DATA_DIR          folder of fashion-mnist-train.h5 (default ./data); made
                    with mt-data when missing
  -r N              runs per configuration (default $repeats)
  --steps N         -max_train_steps_per_epoch (default $steps)
  --epochs N        epochs per run (default $epochs; the last one is reported)
  --caps "C.."      link caps: none or a tc rate (default "$caps")
  --variants "V.."  OVERLAP or OVERLAP:BUCKET_MB (default "$variants";
                    OVERLAP 0, 1 (-ddp_overlap 1 -ddp_comm_thread 0: the
                    MPI_Test path), or t (-ddp_overlap 1 -ddp_comm_thread 1);
                    without a bucket size mpitrain's defaults, 16 MiB buckets
                    and a 1 MiB first one)
  --mt-data PATH    data tool (default: mt-data beside MPITRAIN)
  --timeout S       limit for one run in seconds (default $run_timeout)
  --keep DIR        keep every run's log in DIR
Environment: MPIRUN (default mpirun).
EOF
}

pos=()
while [ $# -gt 0 ]; do
  case "$1" in
  -r) repeats=$2; shift 2 ;;
  --steps) steps=$2; shift 2 ;;
  --epochs) epochs=$2; shift 2 ;;
  --caps) caps=$2; shift 2 ;;
  --variants) variants=$2; shift 2 ;;
  --mt-data) mt_data=$2; shift 2 ;;
  --timeout) run_timeout=$2; shift 2 ;;
  --keep) keep=$2; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  -*) echo "unknown option $1" >&2; usage >&2; exit 2 ;;
  *) pos+=("$1"); shift ;;
  esac
done
mpitrain=${pos[0]:-./mpitrain}
data=${pos[1]:-./data}
[ -x "$mpitrain" ] || { echo "no mpitrain at $mpitrain" >&2; exit 2; }
mpitrain=$(cd "$(dirname "$mpitrain")" && pwd)/$(basename "$mpitrain")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

. "$top/tests/multihost/hosts.sh"
mh_usable || { echo "cannot simulate hosts here: $MH_WHY" >&2; exit 2; }

if [ ! -f "$data/fashion-mnist-train.h5" ]; then
  [ -n "$mt_data" ] || mt_data=$(dirname "$mpitrain")/mt-data
  mkdir -p "$data" && "$mt_data" fashion-mnist -out "$data" >/dev/null ||
    { echo "no $data/fashion-mnist-train.h5 and $mt_data fashion-mnist failed" >&2; exit 2; }
fi
data=$(cd "$data" && pwd)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mt-bench-mh.XXXXXX") || exit 2
cleanup() {
  trap - EXIT INT TERM
  mh_down
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
[ -n "$keep" ] && mkdir -p "$keep"

mh_up "$tmp/hosts" 2 || { echo "could not set up 2 simulated hosts: $MH_WHY" >&2; exit 2; }

opts=(-backend ddp -model mlp -mlp_hidden 1024,1024 -data_train "$data/fashion-mnist-train.h5"
  -epochs "$epochs" -max_train_steps_per_epoch "$steps" -batch_size 128 -optimizer sgd -lr 0.05
  -momentum 0.9 -threads 1 -log_every 0 -comm_timeout 120)
echo "# $(date -u '+%F %T') UTC, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# mpirun -np 2 on 2 simulated hosts (see tests/multihost/hosts.sh: btl tcp,self, --bind-to none,"
echo "#   --map-by node, mpi_yield_when_idle 1) $mpitrain ${opts[*]} -ddp_overlap O [-ddp_bucket_mb B] -output_dir TMP"
echo "# caps: $caps (tc tbf on each host's egress, burst 1mb); variants: $variants; $repeats runs each"

# run CAP VARIANT REP: one training run; appends "sps exposed share busbw
# step_ms exposed_ms other" to $tmp/CAP_VARIANT (or reports the failure).
# From the last epoch's lines: step_ms = batch / its samples/s, exposed_ms =
# its exposed comm share of that, other = the share of the epoch in none of
# the phases (data, forward, backward, exposed comm, optimizer, ...): mostly
# the small per-step all-reduce that agrees on the loss and the step, where
# rank 0 waits for a rank that is still finishing its part of the reduction.
run() {
  local cap=$1 v=$2 ov=${2%%:*} b= log
  [ "$v" != "$ov" ] && b=${v#*:}
  log=$tmp/$cap-${v/:/b}-$3.log
  local extra=(-ddp_overlap "$ov")
  [ "$ov" = 1 ] && extra=(-ddp_overlap 1 -ddp_comm_thread 0)
  [ "$ov" = t ] && extra=(-ddp_overlap 1 -ddp_comm_thread 1)
  [ -n "$b" ] && extra+=(-ddp_bucket_mb "$b" -ddp_first_bucket_mb "$b")
  rm -rf "$tmp/out"
  mh_mpirun 2 "$run_timeout" "$mpitrain" "${opts[@]}" "${extra[@]}" -output_dir "$tmp/out" >"$log" 2>&1
  local rc=$?
  [ -n "$keep" ] && cp "$log" "$keep/"
  local sps exp share bw esps step ems other tline
  sps=$(sed -n 's/^RESULT mpitrain train_samples_per_s=//p' "$log")
  tline=$(grep "^epoch $epochs/$epochs time:" "$log" | sed 's/;.*//')
  exp=$(echo "$tline" | grep -o 'exposed comm [0-9.]*%' | grep -o '[0-9.]*')
  other=$(echo "$tline" | grep -o '[0-9.]*%' | tr -d % | awk '{ s += $1 } END { if (NR) printf "%.1f", 100 - s }')
  esps=$(sed -n "s/^epoch $epochs\/$epochs done: .*, \([0-9.]*\) samples\/s.*/\1/p" "$log")
  step=$(awk -v r="$esps" 'BEGIN { if (r > 0) printf "%.1f", 128000 / r }')
  ems=$(awk -v s="$step" -v e="$exp" 'BEGIN { if (s != "" && e != "") printf "%.1f", s * e / 100 }')
  share=$(grep -o 'gradient all-reduce (rank 0): .*' "$log" | sed -n 's/.*, \([0-9.]*\)% of training.*/\1/p')
  bw=$(grep -o 'bus bandwidth [0-9.]* GB/s' "$log" | grep -o '[0-9.]*')
  if [ "$rc" != 0 ] || [ -z "$sps" ]; then
    echo "# $cap overlap $v run $3 failed (exit $rc):"
    tail -n 8 "$log" | sed 's/^/#   | /'
    return
  fi
  echo "$sps ${exp:-0} ${share:-0} ${bw:-0} ${step:-0} ${ems:-0} ${other:-0}" >>"$tmp/$cap-$v"
  printf '# %-8s overlap %-4s run %d: %6.0f samples/s, %s ms/step, exposed comm %s%% = %s ms, all-reduce %s%% of training, other %s%%, bus %s GB/s\n' \
    "$cap" "$v" "$3" "$sps" "${step:-?}" "${exp:-?}" "${ems:-?}" "${share:-?}" "${other:-?}" "${bw:-?}"
}

for rep in $(seq 1 "$repeats"); do
  for cap in $caps; do
    if [ "$cap" = none ]; then mh_uncap; else mh_cap "$cap" || { echo "tc failed: $MH_WHY" >&2; exit 2; }; fi
    for v in $variants; do run "$cap" "$v" "$rep"; done
  done
done
mh_uncap

# med FILE COLUMN: the median of a column
med() {
  awk -v c="$2" '{ print $c }' "$1" | sort -g | awk '{ a[NR] = $1 } END {
    if (NR == 0) { print "-"; exit }
    if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
range() {
  awk -v c="$2" '{ print $c }' "$1" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.0f-%.0f", lo, hi }'
}

echo
echo "# load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-8s %-7s %-7s | %9s %11s | %7s | %8s %7s | %10s | %6s | %8s\n' link overlap bucket samples/s "(min-max)" ms/step \
  exposed% "(ms)" allreduce% other% "bus GB/s"
for cap in $caps; do
  for v in $variants; do
    f=$tmp/$cap-$v
    ov=${v%%:*} b=default
    [ "$v" != "$ov" ] && b="${v#*:} MiB"
    [ -s "$f" ] || { printf '%-8s %-8s %-7s | no successful run\n' "$cap" "$ov" "$b"; continue; }
    printf '%-8s %-7s %-7s | %9.0f %11s | %7s | %8s %7s | %10s | %6s | %8s\n' "$cap" "$ov" "$b" "$(med "$f" 1)" \
      "($(range "$f" 1))" "$(med "$f" 5)" "$(med "$f" 2)" "($(med "$f" 6))" "$(med "$f" 3)" "$(med "$f" 7)" "$(med "$f" 4)"
  done
done
