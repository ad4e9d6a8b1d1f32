#!/usr/bin/env bash
# Side-by-side training throughput of mpitrain and PyTorch on the same MLP.
#
#   bench/bench_mlp.sh [options] [MPITRAIN [DATA_DIR]]
#
# Model: 784-1024-1024-10, ReLU, softmax cross-entropy, SGD momentum 0.9,
# lr 0.05, batch 128, fp32, Fashion-MNIST.  For each configuration
# (ranks x threads) mpitrain and every PyTorch setting of every torch found
# (Debian's 1.13 and PyPI's 2.x by default) run alternately R times; after
# each mpitrain run, bench/gemm_shapes.c times the GEMM shapes of the step
# it recorded (-log_gemm_shapes): the limit the shares are of. The tables
# report medians.  Builds gemm_shapes only.  See bench/README.md.
set -u

here=$(cd "$(dirname "$0")" && pwd)

repeats=5
pythons="/usr/bin/python3 /opt/torch2/bin/python"
steps=300
warmup=30
settings="default tuned"
configs="1x1 1x2 2x1"
per_rank_batch=0
peak=""
run_timeout=600
baseline=""
mt_data=""
hidden="1024,1024"
batch=128

usage() {
	cat <<EOF
usage: $0 [options] [MPITRAIN [DATA_DIR]]
  MPITRAIN          mpitrain executable (default ./mpitrain); if it is missing
                    only PyTorch runs
  DATA_DIR          folder of fashion-mnist-train.h5 (default ./data); made
                    with mt-data when missing
  -r N              repeats per configuration (default $repeats)
  --pythons "P.."   interpreters with torch, each a column per setting; those
                    that lack it are left out (default "$pythons")
  --python PY       one interpreter (--pythons PY)
  --steps N         training steps per rank timed by PyTorch and the cap
                    -max_train_steps_per_epoch of mpitrain (default $steps)
  --warmup N        untimed PyTorch steps first (default $warmup)
  --settings "S.."  PyTorch settings to try: default, tuned (default "$settings")
  --configs "C.."   RANKSxTHREADS list (default "$configs")
  --batch N         global batch, split over the ranks (default $batch)
  --per-rank-batch  $batch samples per rank per step on both sides (mpitrain
                    -batch_size $batch*RANKS); default: global batch $batch,
                    i.e. $batch/RANKS per rank, as mpitrain's -batch_size means
  --peak GFLOPS     a core's fp32 peak: the reference line adds what it allows
                    (default none: a constant is one machine's, not this one's);
                    the %lim columns are shares of the measured GEMM limit
  --mt-data PATH    data tool (default: mt-data beside MPITRAIN)
  --timeout S       limit for one run in seconds (default $run_timeout)
  --baseline PATH   a second mpitrain (e.g. built from the commit before a
                    change), run right after MPITRAIN in every repeat: its
                    medians and MPITRAIN/baseline in a table of their own
                    (--settings none leaves PyTorch out)
Environment: MPIRUN (default mpirun), MPIRUN_ARGS (extra mpirun arguments).
EOF
}

pos=()
while [ $# -gt 0 ]; do
	case "$1" in
	-r) repeats=$2; shift 2 ;;
	--python|--pythons) pythons=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--warmup) warmup=$2; shift 2 ;;
	--settings) settings=$2; shift 2 ;;
	--configs) configs=$2; shift 2 ;;
	--batch) batch=$2; shift 2 ;;
	--per-rank-batch) per_rank_batch=1; shift ;;
	--peak) peak=$2; shift 2 ;;
	--mt-data) mt_data=$2; shift 2 ;;
	--timeout) run_timeout=$2; shift 2 ;;
	--baseline) baseline=$2; shift 2 ;;
	-h|--help) usage; exit 0 ;;
	-*) echo "$0: unknown option $1" >&2; usage >&2; exit 2 ;;
	*) pos+=("$1"); shift ;;
	esac
done
mpitrain=${pos[0]:-./mpitrain}
datadir=${pos[1]:-./data}
[ -n "$mt_data" ] || mt_data=$(dirname "$mpitrain")/mt-data
mpirun=${MPIRUN:-mpirun}
for v in "$repeats" "$steps" "$warmup" "$run_timeout" "$batch"; do
	case "$v" in ''|*[!0-9]*) echo "$0: not a number: $v" >&2; exit 2 ;; esac
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_mlp.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# ---- data ------------------------------------------------------------------
h5="$datadir/fashion-mnist-train.h5"
if [ ! -f "$h5" ]; then
	if [ -x "$mt_data" ]; then
		echo "# converting Fashion-MNIST: $mt_data fashion-mnist -out $datadir"
		mkdir -p "$datadir"
		"$mt_data" fashion-mnist -out "$datadir" || { echo "$0: $mt_data failed" >&2; exit 1; }
	fi
fi
if [ -f "$h5" ]; then
	torch_data=(--data "$h5")
else
	echo "# $h5 missing and no $mt_data: PyTorch reads the IDX files, mpitrain is skipped"
	torch_data=()
fi

have_mt=0
if [ -x "$mpitrain" ] && [ -f "$h5" ]; then
	have_mt=1
	if [ "$(id -u)" = 0 ]; then
		export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	fi
elif [ ! -x "$mpitrain" ]; then
	echo "# $mpitrain not found: PyTorch only"
fi

[ "$settings" = none ] && settings=""
[ -z "$baseline" ] || [ -x "$baseline" ] || { echo "$0: --baseline $baseline is not executable" >&2; exit 1; }
. "$here/lib.sh" # median, spread, pick_pythons, gemm_shapes_build, gemm_limit, flop_ref, limit_share
pys=() tvers=()
[ -z "$settings" ] || pick_pythons "$pythons"
[ -z "$settings" ] || [ ${#pys[@]} -gt 0 ] || { echo "$0: no interpreter of \"$pythons\" imports torch" >&2; exit 1; }
# the PyTorch systems: interpreter index and setting, named by torch version
systems=()
for k in "${!pys[@]}"; do for s in $settings; do systems+=("$k:$s"); done; done
sysname() { echo "torch${tvers[${1%%:*}]}-${1#*:}"; }
gs=""
if [ $have_mt = 1 ]; then
	if gemm_shapes_build "$tmp/gemm_shapes" 2>"$tmp/gemm_shapes.build"; then gs="$tmp/gemm_shapes"
	else echo "# gemm_shapes did not build (no GEMM limit): $(head -n 1 "$tmp/gemm_shapes.build")"; fi
fi

# ---- one run of each -------------------------------------------------------
# Prints samples/s or nothing; the full log stays in $tmp.
run_mpitrain() { # ranks threads log [record]
	local r=$1 t=$2 log=$3 rec=${4:-} backend=sp out b=$batch
	[ "$r" -gt 1 ] && backend=ddp
	[ "$per_rank_batch" = 1 ] && b=$((batch * r))
	out=$(mktemp -d "$tmp/out.XXXXXX")
	# shellcheck disable=SC2086
	OMP_NUM_THREADS=$t timeout "$run_timeout" "$mpirun" -np "$r" --bind-to none --oversubscribe \
		-x OMP_NUM_THREADS ${MPIRUN_ARGS:-} \
		"$mpitrain" -backend "$backend" -model mlp -mlp_hidden "$hidden" \
		-data_train "$h5" -epochs 1 -max_train_steps_per_epoch "$steps" \
		-max_val_steps_per_epoch 1 -batch_size "$b" -optimizer sgd \
		-lr 0.05 -momentum 0.9 -threads "$t" -log_every 0 -output_dir "$out" \
		${rec:+-log_gemm_shapes "$rec"} >"$log" 2>&1
	rm -rf "$out"
	sed -n 's/^RESULT mpitrain .*train_samples_per_s=\([0-9.eE+-]*\).*/\1/p' "$log" | tail -n 1
}

run_torch() { # ranks threads system log
	local r=$1 t=$2 s=${3#*:} py=${pys[${3%%:*}]} log=$4 b=$((batch / $1))
	[ "$per_rank_batch" = 1 ] && b=$batch
	timeout "$run_timeout" "$py" "$here/torch_mlp.py" --threads "$t" --ranks "$r" \
		--steps "$steps" --warmup "$warmup" --batch "$b" --hidden "$hidden" \
		--setting "$s" ${torch_data[@]+"${torch_data[@]}"} >"$log" 2>&1
	sed -n 's/^RESULT torch .*samples_per_s=\([0-9.eE+-]*\).*/\1/p' "$log" | tail -n 1
}

fail() { # what log
	echo "#   $1 gave no RESULT line; last lines of its log:" >&2
	tail -n 5 "$2" | sed 's/^/#     /' >&2
}

# ---- header ----------------------------------------------------------------
echo "# bench_mlp: MLP 784-$(echo "$hidden" | tr , -)-10, batch $batch, SGD momentum 0.9, lr 0.05, fp32"
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -n), $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
load0=$(cut -d' ' -f1 /proc/loadavg)
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if awk -v l="$load0" 'BEGIN{exit !(l > 0.5)}'; then
	echo "# WARNING: the machine is busy (load $load0): the figures will be noisy, 2-thread runs most"
fi
for k in "${!pys[@]}"; do echo "# torch ${tvers[$k]} (${pys[$k]}), settings: $settings"; done
echo "# mpitrain: $([ $have_mt = 1 ] && echo "$mpitrain" || echo skipped), data: ${h5}$([ -f "$h5" ] || echo ' (IDX fallback)')"
echo "# repeats $repeats, $steps steps per run (PyTorch: +$warmup warm-up steps), $([ $per_rank_batch = 1 ] && echo "batch $batch per rank" || echo "global batch $batch (split over the ranks)")"

# ---- runs ------------------------------------------------------------------
# Repeats outside, configurations inside: every configuration of repeat i
# runs within minutes of the others, so the ratios to 1x1 taken per repeat
# see the same machine.
for c in $configs; do
	r=${c%x*}; t=${c#*x}
	case "$r$t" in ''|*[!0-9]*) echo "$0: bad configuration $c (want RANKSxTHREADS)" >&2; exit 2 ;; esac
	: >"$tmp/$c.mpitrain"
	: >"$tmp/$c.mtrep"
	: >"$tmp/$c.blrep"
	: >"$tmp/$c.baseline"
	: >"$tmp/$c.limit"
	for s in "${systems[@]}"; do : >"$tmp/$c.$(sysname "$s")"; done
done
for i in $(seq 1 "$repeats"); do
	for c in $configs; do
		r=${c%x*}; t=${c#*x}
		line="# $c run $i (load $(cut -d' ' -f1 /proc/loadavg)):"
		if [ $have_mt = 1 ]; then
			log="$tmp/log.$c.mpitrain.$i"
			rec=""; [ -n "$gs" ] && rec="$tmp/shapes.$c.$i"
			v=$(run_mpitrain "$r" "$t" "$log" "$rec")
			if [ -n "$v" ]; then echo "$v" >>"$tmp/$c.mpitrain"; echo "$i $v" >>"$tmp/$c.mtrep"; else fail "mpitrain $c" "$log"; fi
			line="$line mpitrain=${v:-fail}"
			if [ -n "$rec" ] && [ -f "$rec" ]; then # the limit, right after the run
				lv=$(gemm_limit "$gs" "$rec" "$tmp/log.$c.limit.$i")
				if [ -n "$lv" ]; then echo "$lv" >>"$tmp/$c.limit"; else fail "gemm_shapes $c" "$tmp/log.$c.limit.$i"; fi
				[ -n "$v" ] && [ -n "$lv" ] && echo "$v $lv" >>"$tmp/$c.pairs"
				line="$line gemm_limit_ms=${lv:-fail}"
			fi
			if [ -n "$baseline" ]; then
				log="$tmp/log.$c.baseline.$i"
				v=$(mpitrain=$baseline run_mpitrain "$r" "$t" "$log")
				if [ -n "$v" ]; then echo "$v" >>"$tmp/$c.baseline"; echo "$i $v" >>"$tmp/$c.blrep"; else fail "baseline $c" "$log"; fi
				line="$line baseline=${v:-fail}"
			fi
		fi
		for s in "${systems[@]}"; do
			n=$(sysname "$s")
			log="$tmp/log.$c.$n.$i"
			v=$(run_torch "$r" "$t" "$s" "$log")
			if [ -n "$v" ]; then
				echo "$v" >>"$tmp/$c.$n"
				[ -f "$tmp/$c.blas-$n" ] || sed -n 's/^RESULT torch .*blas=\([^ ]*\).*/\1/p' "$log" >"$tmp/$c.blas-$n"
			else
				fail "$n $c" "$log"
			fi
			line="$line $n=${v:-fail}"
		done
		echo "$line"
	done
done

# ---- tables ----------------------------------------------------------------
# Model FLOPs per sample: forward 2*weights, backward twice that, less the
# input gradient of the first layer, which nobody needs.
flops=$(echo "$hidden" | awk -F, -v nin=784 -v nout=10 '{
	w = 0; p = nin
	for (i = 1; i <= NF; i++) { w += p * $i; p = $i }
	w += p * nout
	printf "%.0f", 6 * w - 2 * nin * $1 }')
echo
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# for reference: $(flop_ref "$flops" sample "$peak")"
echo "# %lim: the share of the GEMM limit measured in this run (below), limit ms/step over measured ms/step"
echo
gb() { [ "$per_rank_batch" = 1 ] && echo $((batch * $1)) || echo "$batch"; } # global batch at R ranks
share() { limit_share "$(median "$tmp/$1.limit" %.4f)" "$2" "$3" "$(gb "$4")" | cut -d' ' -f3; } # config threads samples/s ranks
# shellcheck disable=SC2059
fmt="%-6s %5s %7s | %9s %5s %6s | %9s %5s %-18s | %8s\n"
# per-repeat ratio of a configuration's mpitrain figure to 1x1's of the
# same repeat, the median over the repeats ("-" without 1x1)
vs1x1() { # config [mtrep|blrep]
	local k=${2:-mtrep}
	[ -s "$tmp/1x1.$k" ] || { echo "-"; return; }
	awk 'NR == FNR { one[$1] = $2; next } ($1 in one) && one[$1] > 0 { print $2 / one[$1] }' \
		"$tmp/1x1.$k" "$tmp/$1.$k" | median - "%.2f"
}
# shellcheck disable=SC2059
printf "$fmt" config ranks threads mpitrain "%lim" "x1x1" "torch" "%lim" system "mt/torch"
for c in $configs; do
	r=${c%x*}; t=${c#*x}
	mt=$(median "$tmp/$c.mpitrain")
	best="-"; bests="-"
	for s in "${systems[@]}"; do
		m=$(median "$tmp/$c.$(sysname "$s")")
		[ "$m" = "-" ] && continue
		if [ "$best" = "-" ] || awk -v a="$m" -v b="$best" 'BEGIN{exit !(a > b)}'; then
			best=$m; bests=$(sysname "$s")
		fi
	done
	ratio="-"
	[ "$mt" != "-" ] && [ "$best" != "-" ] && ratio=$(awk -v a="$mt" -v b="$best" 'BEGIN{printf "%.2f", a/b}')
	# shellcheck disable=SC2059
	printf "$fmt" "$c" "$r" "$t" "$mt" "$(share "$c" "$t" "$mt" "$r")" "$(vs1x1 "$c")" "$best" "$(share "$c" "$t" "$best" "$r")" "$bests" "$ratio"
done
echo
echo "# GEMM limit, same run: after each mpitrain run, gemm_shapes timed the GEMMs of its second step"
echo "# as mpitrain recorded them (-log_gemm_shapes: rank 0's shapes, every thread's calls), on one"
echo "# thread, each shape at its best library (median over the runs). A rank of T threads: that / T"
echo "# (its threads split the calls); ranks run at once, each its own: one rank's is the step's."
echo "# So the limit is every core at the GEMM speed one core gets alone. share = limit / measured;"
echo "# per-run shares: each run's limit over that run's own ms/step."
printf "%-7s %18s %18s %8s %14s  %s\n" config "GEMM limit ms/step" "measured ms/step" "share" "limit min-max" "per-run shares"
for c in $configs; do
	r=${c%x*}; t=${c#*x}
	read -r lim ms sh <<<"$(limit_share "$(median "$tmp/$c.limit" %.4f)" "$t" "$(median "$tmp/$c.mpitrain")" "$(gb "$r")")"
	printf "%-7s %18s %18s %8s %14s  %s\n" "$c" "$lim" "$ms" "$sh" \
		"$(sort -g "$tmp/$c.limit" 2>/dev/null | awk 'NR==1{lo=$1} {hi=$1} END{if (NR) printf "%.2f-%.2f", lo, hi; else print "-"}')" \
		"$(run_shares "$tmp/$c.pairs" "$t" "$(gb "$r")")"
done
echo
echo "# every system (median, min-max over $repeats runs, BLAS actually loaded):"
printf "%-7s %-18s %10s %14s  %s\n" config system "samples/s" "min-max" blas
for c in $configs; do
	if [ $have_mt = 1 ]; then
		printf "%-7s %-18s %10s %14s  %s\n" "$c" mpitrain "$(median "$tmp/$c.mpitrain")" "$(spread "$tmp/$c.mpitrain")" "-"
	fi
	for s in "${systems[@]}"; do
		n=$(sysname "$s")
		printf "%-7s %-18s %10s %14s  %s\n" "$c" "$n" "$(median "$tmp/$c.$n")" \
			"$(spread "$tmp/$c.$n")" "$(cat "$tmp/$c.blas-$n" 2>/dev/null || echo '?')"
	done
done
if [ -n "$baseline" ] && [ $have_mt = 1 ]; then
	echo
	echo "# mpitrain against the baseline $baseline, interleaved in the same run (samples/s):"
	printf "%-7s %10s %14s %6s %10s %14s %6s %8s\n" config mpitrain "min-max" x1x1 baseline "min-max" x1x1 ratio
	for c in $configs; do
		a=$(median "$tmp/$c.mpitrain"); b=$(median "$tmp/$c.baseline"); ratio="-"
		[ "$a" != "-" ] && [ "$b" != "-" ] && ratio=$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", a/b}')
		printf "%-7s %10s %14s %6s %10s %14s %6s %8s\n" "$c" "$a" "$(spread "$tmp/$c.mpitrain")" \
			"$(vs1x1 "$c")" "$b" "$(spread "$tmp/$c.baseline")" "$(vs1x1 "$c" blrep)" "$ratio"
	done
fi
