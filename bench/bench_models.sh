#!/usr/bin/env bash
# Side-by-side training throughput of mpitrain and PyTorch on the cnn and gpt
# models (the PyTorch twins of validation/torch_models.py).
#
#   bench/bench_models.sh [options] [MPITRAIN [DATA_DIR]]
#
# cnn: Fashion-MNIST, conv 32, conv 64 (3x3, padding 1, ReLU, 2x2 max-pool),
#      hidden 128, SGD momentum 0.9, lr 0.02, batch 128       -> samples/s
# gpt: the fortunes example (inputs/fortunes-gpt.opts): 4 layers, 4 heads,
#      embedding 128, block 64, AdamW, batch 32               -> tokens/s
# For each model and configuration (ranks x threads) mpitrain and every
# PyTorch setting of every torch found (Debian's 1.13 and PyPI's 2.x by
# default) run alternately R times; after each mpitrain run,
# bench/gemm_shapes.c times the GEMM shapes of the step it recorded
# (-log_gemm_shapes; convolutions as im2col GEMMs): the limit the %lim
# columns are shares of. The tables report medians.  Builds gemm_shapes
# only.  See bench/README.md.
set -u

here=$(cd "$(dirname "$0")" && pwd)

repeats=3
pythons="/usr/bin/python3 /opt/torch2/bin/python"
models="cnn gpt"
steps_cnn=200
steps_gpt=60
warmup_cnn=20
warmup_gpt=10
settings="default blas1"
configs="1x1 1x2 2x1"
peak=""
run_timeout=600
baseline=""
goal_cnn=2.0
goal_gpt=1.3

usage() {
	cat <<EOF
usage: $0 [options] [MPITRAIN [DATA_DIR]]
  MPITRAIN          mpitrain executable (default ./mpitrain)
  DATA_DIR          folder of fashion-mnist-train.h5 and fortunes-train.h5
                    (default ./data; see scripts/example.sh, inputs/fortunes-gpt.opts)
  -r N              repeats per configuration (default $repeats)
  --pythons "P.."   interpreters with torch and h5py, each a column per
                    setting; those that lack them are left out
                    (default "$pythons"); --python PY: one
  --models "M.."    cnn, gpt (default "$models")
  --steps-cnn N     timed steps per run (default $steps_cnn); mpitrain runs N
                    steps and times all but its first 5
  --steps-gpt N     the same for gpt (default $steps_gpt)
  --warmup-cnn N    untimed PyTorch steps first (default $warmup_cnn)
  --warmup-gpt N    (default $warmup_gpt)
  --settings "S.."  PyTorch settings: default blas1 tuned tuned1 (default "$settings")
  --configs "C.."   RANKSxTHREADS list (default "$configs")
  --peak GFLOPS     a core's fp32 peak: the reference line adds what it allows
                    (default none: a constant is one machine's, not this one's);
                    %lim is the share of the GEMM limit measured in the run
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
	--models) models=$2; shift 2 ;;
	--steps-cnn) steps_cnn=$2; shift 2 ;;
	--steps-gpt) steps_gpt=$2; shift 2 ;;
	--warmup-cnn) warmup_cnn=$2; shift 2 ;;
	--warmup-gpt) warmup_gpt=$2; shift 2 ;;
	--settings) settings=$2; shift 2 ;;
	--configs) configs=$2; shift 2 ;;
	--peak) peak=$2; shift 2 ;;
	--timeout) run_timeout=$2; shift 2 ;;
	--baseline) baseline=$2; shift 2 ;;
	-h|--help) usage; exit 0 ;;
	-*) echo "$0: unknown option $1" >&2; usage >&2; exit 2 ;;
	*) pos+=("$1"); shift ;;
	esac
done
mpitrain=${pos[0]:-./mpitrain}
datadir=${pos[1]:-./data}
mpirun=${MPIRUN:-mpirun}
for v in "$repeats" "$steps_cnn" "$steps_gpt" "$warmup_cnn" "$warmup_gpt" "$run_timeout"; do
	case "$v" in ''|*[!0-9]*) echo "$0: not a number: $v" >&2; exit 2 ;; esac
done
for m in $models; do
	case "$m" in cnn|gpt) ;; *) echo "$0: unknown model $m" >&2; exit 2 ;; esac
done
[ -x "$mpitrain" ] || { echo "$0: $mpitrain is not executable (build with scripts/build.sh)" >&2; exit 1; }
[ "$settings" = none ] && settings=""
[ -z "$baseline" ] || [ -x "$baseline" ] || { echo "$0: --baseline $baseline is not executable" >&2; exit 1; }
. "$here/lib.sh" # median, spread, pick_pythons, gemm_shapes_build, gemm_limit, flop_ref, limit_share
pys=() tvers=()
[ -z "$settings" ] || pick_pythons "$pythons" h5py
[ -z "$settings" ] || [ ${#pys[@]} -gt 0 ] || { echo "$0: no interpreter of \"$pythons\" imports torch and h5py" >&2; exit 1; }
systems=() # interpreter index:setting, named by torch version
for k in "${!pys[@]}"; do for s in $settings; do systems+=("$k:$s"); done; done
sysname() { echo "torch${tvers[${1%%:*}]}-${1#*:}"; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_models.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
gs=""
if gemm_shapes_build "$tmp/gemm_shapes" 2>"$tmp/gemm_shapes.build"; then gs="$tmp/gemm_shapes"
else echo "# gemm_shapes did not build (no GEMM limit): $(head -n 1 "$tmp/gemm_shapes.build")"; fi

# ---- per-model settings ------------------------------------------------------
# FLOP per sample trained (forward 2 x MACs, backward twice that):
#  cnn: MACs conv1 28*28*32*9, conv2 14*14*64*32*9, fc 3136*128 + 128*10;
#       less the input gradient of conv1 (nobody computes it): 24.99 MFLOP.
#  gpt: per token 6 x (12 L C^2 + C V) + 12 L T C (attention with the full
#       T x T score matrix, PaLM's convention) = 5.31 MFLOP; a sample is T tokens.
data_file() { [ "$1" = cnn ] && echo "$datadir/fashion-mnist-train.h5" || echo "$datadir/fortunes-train.h5"; }
flops_per_unit() { # model -> FLOP per sample (cnn) or per token (gpt)
	if [ "$1" = cnn ]; then
		awk 'BEGIN{m = 28*28*32*9 + 14*14*64*32*9 + 3136*128 + 128*10; printf "%.0f", 6*m - 2*28*28*32*9}'
	else
		awk 'BEGIN{L=4; C=128; V=256; T=64; printf "%.0f", 6*(12*L*C*C + C*V) + 12*L*T*C}'
	fi
}
unit() { [ "$1" = cnn ] && echo "samples/s" || echo "tokens/s"; }
per_step() { [ "$1" = cnn ] && echo 128 || echo $((32 * 64)); } # units per global step
mult() { [ "$1" = cnn ] && echo 1 || echo 64; } # samples/s -> unit/s (gpt: x block)

run_mpitrain() { # model ranks threads log [record]
	local model=$1 r=$2 t=$3 log=$4 rec=${5:-} backend=sp out
	[ "$r" -gt 1 ] && backend=ddp
	out=$(mktemp -d "$tmp/out.XXXXXX")
	local opts
	if [ "$model" = cnn ]; then
		opts=(-model cnn -cnn_channels "32,64" -cnn_kernel 3 -cnn_hidden 128
			-epochs 1 -max_train_steps_per_epoch "$steps_cnn" -batch_size 128
			-optimizer sgd -lr 0.02 -momentum 0.9)
	else # inputs/fortunes-gpt.opts, without validation
		opts=(-model gpt -gpt_layers 4 -gpt_heads 4 -gpt_embd 128 -gpt_block 64
			-epochs 1 -max_train_steps_per_epoch "$steps_gpt" -batch_size 32
			-optimizer adamw -lr 1e-3 -weight_decay 0.1 -weight_decay_skip_1d
			-lr_schedule cosine -warmup_steps 100 -clip_grad_norm 1.0)
	fi
	# shellcheck disable=SC2086
	OMP_NUM_THREADS=$t timeout "$run_timeout" "$mpirun" -np "$r" --bind-to none --oversubscribe \
		-x OMP_NUM_THREADS ${MPIRUN_ARGS:-} \
		"$mpitrain" -backend "$backend" "${opts[@]}" -data_train "$(data_file "$model")" \
		-max_val_steps_per_epoch 1 -threads "$t" -log_every 0 -checkpoint_at_end 0 \
		-output_dir "$out" ${rec:+-log_gemm_shapes "$rec"} >"$log" 2>&1
	rm -rf "$out"
	sed -n 's/^RESULT mpitrain .*train_samples_per_s=\([0-9.eE+-]*\).*/\1/p' "$log" | tail -n 1 |
		awk -v k="$(mult "$model")" '{printf "%.1f\n", $1 * k}'
}

run_torch() { # model ranks threads system log
	local model=$1 r=$2 t=$3 s=${4#*:} py=${pys[${4%%:*}]} log=$5 steps warmup b
	if [ "$model" = cnn ]; then steps=$steps_cnn; warmup=$warmup_cnn; b=$((128 / r))
	else steps=$steps_gpt; warmup=$warmup_gpt; b=$((32 / r)); fi
	timeout "$run_timeout" "$py" "$here/torch_models_bench.py" --model "$model" \
		--threads "$t" --ranks "$r" --steps "$steps" --warmup "$warmup" --batch "$b" \
		--setting "$s" --data "$(data_file "$model")" >"$log" 2>&1
	sed -n 's/^RESULT torch .*samples_per_s=\([0-9.eE+-]*\).*/\1/p' "$log" | tail -n 1 |
		awk -v k="$(mult "$model")" '{printf "%.1f\n", $1 * k}'
}

gt() { awk -v a="$1" -v b="$2" 'BEGIN{exit !(a > b)}'; }
fail() {
	echo "#   $1 gave no RESULT line; last lines of its log:" >&2
	tail -n 5 "$2" | sed 's/^/#     /' >&2
}
load() { cut -d' ' -f1-3 /proc/loadavg; }

# ---- header -------------------------------------------------------------------
echo "# bench_models: $models; $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -n), $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for k in "${!pys[@]}"; do echo "# torch ${tvers[$k]} (${pys[$k]}), settings: $settings"; done
echo "# mpitrain: $mpitrain"
echo "# repeats $repeats; steps cnn $steps_cnn (torch +$warmup_cnn warm-up), gpt $steps_gpt (torch +$warmup_gpt); global batch split over the ranks"
echo "# load average before: $(load)"

# ---- runs ---------------------------------------------------------------------
for m in $models; do
	for c in $configs; do
		r=${c%x*}; t=${c#*x}
		case "$r$t" in ''|*[!0-9]*) echo "$0: bad configuration $c" >&2; exit 2 ;; esac
		: >"$tmp/$m.$c.mpitrain"
		: >"$tmp/$m.$c.baseline"
		: >"$tmp/$m.$c.limit"
		for s in "${systems[@]}"; do : >"$tmp/$m.$c.$(sysname "$s")"; done
		for i in $(seq 1 "$repeats"); do
			line="# $m $c run $i (load $(cut -d' ' -f1 /proc/loadavg)):"
			log="$tmp/log.$m.$c.mpitrain.$i"
			rec=""; [ -n "$gs" ] && rec="$tmp/shapes.$m.$c.$i"
			v=$(run_mpitrain "$m" "$r" "$t" "$log" "$rec")
			if [ -n "$v" ]; then echo "$v" >>"$tmp/$m.$c.mpitrain"; else fail "mpitrain $m $c" "$log"; fi
			line="$line mpitrain=${v:-fail}"
			if [ -n "$rec" ] && [ -f "$rec" ]; then # the limit, right after the run
				lv=$(gemm_limit "$gs" "$rec" "$tmp/log.$m.$c.limit.$i")
				if [ -n "$lv" ]; then echo "$lv" >>"$tmp/$m.$c.limit"; else fail "gemm_shapes $m $c" "$tmp/log.$m.$c.limit.$i"; fi
				[ -n "$v" ] && [ -n "$lv" ] && echo "$v $lv" >>"$tmp/$m.$c.pairs"
				line="$line gemm_limit_ms=${lv:-fail}"
			fi
			if [ -n "$baseline" ]; then
				log="$tmp/log.$m.$c.baseline.$i"
				v=$(mpitrain=$baseline run_mpitrain "$m" "$r" "$t" "$log")
				if [ -n "$v" ]; then echo "$v" >>"$tmp/$m.$c.baseline"; else fail "baseline $m $c" "$log"; fi
				line="$line baseline=${v:-fail}"
			fi
			for s in "${systems[@]}"; do
				n=$(sysname "$s")
				log="$tmp/log.$m.$c.$n.$i"
				v=$(run_torch "$m" "$r" "$t" "$s" "$log")
				if [ -n "$v" ]; then echo "$v" >>"$tmp/$m.$c.$n"; else fail "$n $m $c" "$log"; fi
				line="$line $n=${v:-fail}"
			done
			echo "$line"
		done
	done
done
echo "# load average after: $(load)"

# ---- tables -------------------------------------------------------------------
fmt="%-4s %-6s | %10s %5s | %10s %5s %-18s | %8s\n"
share() { limit_share "$(median "$tmp/$1.$2.limit" %.4f)" "$3" "$4" "$(per_step "$1")" | cut -d' ' -f3; } # model config threads rate
for m in $models; do
	f=$(flops_per_unit "$m")
	echo
	echo "# $m: $(unit "$m"); for reference: $(flop_ref "$f" "$([ "$m" = cnn ] && echo sample || echo token)" "$peak");" \
		"%lim: share of the GEMM limit measured in this run"
	# shellcheck disable=SC2059
	printf "$fmt" model config mpitrain "%lim" torch "%lim" system mt/torch
	mt2="-"; t2="-"; t2c=""; mt2c=""
	for c in $configs; do
		r=${c%x*}; t=${c#*x}
		mt=$(median "$tmp/$m.$c.mpitrain")
		best="-"; bests="-"
		for s in "${systems[@]}"; do
			v=$(median "$tmp/$m.$c.$(sysname "$s")")
			[ "$v" = "-" ] && continue
			if [ "$best" = "-" ] || gt "$v" "$best"; then best=$v; bests=$(sysname "$s"); fi
		done
		ratio="-"
		[ "$mt" != "-" ] && [ "$best" != "-" ] && ratio=$(awk -v a="$mt" -v b="$best" 'BEGIN{printf "%.2f", a/b}')
		# shellcheck disable=SC2059
		printf "$fmt" "$m" "$c" "$mt" "$(share "$m" "$c" "$t" "$mt")" "$best" "$(share "$m" "$c" "$t" "$best")" "$bests" "$ratio"
		# the goal compares the best of each side on the whole machine (all configs)
		if [ "$mt" != "-" ] && { [ "$mt2" = "-" ] || gt "$mt" "$mt2"; }; then mt2=$mt; mt2c=$c; fi
		if [ "$best" != "-" ] && { [ "$t2" = "-" ] || gt "$best" "$t2"; }; then t2=$best; t2c="$c $bests"; fi
	done
	goal=$goal_cnn; [ "$m" = gpt ] && goal=$goal_gpt
	if [ "$mt2" != "-" ] && [ "$t2" != "-" ]; then
		br=$(awk -v a="$mt2" -v b="$t2" 'BEGIN{printf "%.2f", a/b}')
		awk -v a="$br" -v g="$goal" 'BEGIN{exit !(a >= g)}' && verdict="met" || verdict="NOT met"
		echo "# $m best: mpitrain $mt2 ($mt2c) / PyTorch $t2 ($t2c) = $br; goal >= $goal: $verdict"
	fi
done
echo
echo "# GEMM limit, same run: after each mpitrain run, gemm_shapes timed the GEMMs of its second step"
echo "# as mpitrain recorded them (-log_gemm_shapes: rank 0's shapes, every thread's calls; each"
echo "# convolution pass as its im2col GEMM: the im2col-GEMM limit), on one thread, each shape at its"
echo "# best library (median over the runs). A rank of T threads: that / T (its threads split the"
echo "# calls); ranks run at once, each its own. share = limit / measured; per-run shares: each"
echo "# run's limit over that run's own ms/step."
printf "%-4s %-7s %18s %18s %8s %14s  %s\n" model config "GEMM limit ms/step" "measured ms/step" share "limit min-max" "per-run shares"
for m in $models; do
	for c in $configs; do
		t=${c#*x}
		read -r lim ms sh <<<"$(limit_share "$(median "$tmp/$m.$c.limit" %.4f)" "$t" "$(median "$tmp/$m.$c.mpitrain")" "$(per_step "$m")")"
		printf "%-4s %-7s %18s %18s %8s %14s  %s\n" "$m" "$c" "$lim" "$ms" "$sh" \
			"$(sort -g "$tmp/$m.$c.limit" 2>/dev/null | awk 'NR==1{lo=$1} {hi=$1} END{if (NR) printf "%.2f-%.2f", lo, hi; else print "-"}')" \
			"$(run_shares "$tmp/$m.$c.pairs" "$t" "$(per_step "$m")")"
	done
done
echo
echo "# every run set (median, min-max over $repeats runs):"
for m in $models; do
	for c in $configs; do
		printf "%-4s %-5s %-18s %10s %14s\n" "$m" "$c" mpitrain "$(median "$tmp/$m.$c.mpitrain")" "$(spread "$tmp/$m.$c.mpitrain")"
		for s in "${systems[@]}"; do
			n=$(sysname "$s")
			printf "%-4s %-5s %-18s %10s %14s\n" "$m" "$c" "$n" "$(median "$tmp/$m.$c.$n")" "$(spread "$tmp/$m.$c.$n")"
		done
	done
done
if [ -n "$baseline" ]; then
	echo
	echo "# mpitrain against the baseline $baseline, interleaved in the same run:"
	printf "%-4s %-7s %10s %14s %10s %14s %8s\n" model config mpitrain "min-max" baseline "min-max" ratio
	for m in $models; do
		for c in $configs; do
			a=$(median "$tmp/$m.$c.mpitrain"); b=$(median "$tmp/$m.$c.baseline"); ratio="-"
			[ "$a" != "-" ] && [ "$b" != "-" ] && ratio=$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", a/b}')
			printf "%-4s %-7s %10s %14s %10s %14s %8s\n" "$m" "$c" "$a" "$(spread "$tmp/$m.$c.mpitrain")" \
				"$b" "$(spread "$tmp/$m.$c.baseline")" "$ratio"
		done
	done
fi
