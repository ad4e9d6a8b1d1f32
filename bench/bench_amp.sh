#!/usr/bin/env bash
# Mixed-precision training throughput: mpitrain fp32 vs bf16 (sp-amp, O1;
# sp-amp-apex, O2) vs PyTorch fp32 and bf16 autocast, in the same run.
#
#   bench/bench_amp.sh [options] MPITRAIN DATA_DIR
#
# mlp: 784-1024-1024-10, SGD momentum 0.9, lr 0.05, batch 128 (bench_mlp.sh)
# cnn: conv 32, conv 64, hidden 128, SGD momentum 0.9, lr 0.02, batch 128
#      (bench_models.sh)                                          -> samples/s
# gpt: the fortunes example (inputs/fortunes-gpt.opts, bench_models.sh):
#      4 layers, 4 heads, embedding 128, block 64, AdamW, batch 32 -> tokens/s
# Five variants per model and configuration, run in turn R times (the order
# rotated by one each repeat): mpitrain -backend sp, sp-amp -amp_dtype bf16,
# sp-amp-apex -amp_dtype bf16, PyTorch fp32, PyTorch --amp bf16 (CPU
# autocast; each torch found: Debian's 1.13 and PyPI's 2.x by default, the
# tables taking the faster of them).  Medians; the ratios against the goals
# of issue 6 (bf16 >= 1.6x mpitrain's fp32 and >= 1.5x PyTorch's bf16
# autocast).  After each mpitrain run bench/gemm_shapes.c times the GEMM
# shapes of the step it recorded (-log_gemm_shapes; bf16 ones through the
# path mt_gemm_lowp takes on this CPU): the share of that limit per
# variant.  Builds gemm_shapes only.  See bench/README.md.
set -u

here=$(cd "$(dirname "$0")" && pwd)

repeats=3
pythons="/usr/bin/python3 /opt/torch2/bin/python"
models="mlp cnn gpt"
configs="1x1"
steps=""
warmup=""
setting=default
all_variants="mt-fp32 mt-amp mt-apex pt-fp32 pt-bf16"
variants=$all_variants
run_timeout=600
mt_data=""
goal_fp32=1.6
goal_torch=1.5
kernels=0
mt_extra=() # more mpitrain options (the --kernels runs' -log_view)

usage() {
	cat <<EOF
usage: $0 [options] MPITRAIN DATA_DIR
  MPITRAIN          mpitrain executable
  DATA_DIR          folder of fashion-mnist-train.h5 (mlp, cnn) and
                    fortunes-train.h5 (gpt); each is made with mt-data when
                    missing (Fashion-MNIST from dataset-fashion-mnist, fortunes
                    from /usr/share/games/fortunes as inputs/fortunes-gpt.opts says)
  -r N              repeats (default $repeats)
  --models "M.."    mlp, cnn, gpt (default "$models")
  --steps N         training steps per run for every model (default: mlp 300,
                    cnn 200, gpt 60); mpitrain runs N steps and times all but
                    its first 5, PyTorch times N steps after its warm-up
  --warmup N        untimed PyTorch steps first (default: mlp 30, cnn 20, gpt 10)
  --configs "C.."   RANKSxTHREADS list (default "$configs"; e.g. "1x1 1x2");
                    more than one rank runs ddp, ddp-amp, ddp-amp-apex and
                    PyTorch DDP (gloo) with the global batch split over the ranks
  --variants "V.."  subset of "$variants"
  --setting S       PyTorch setting, default or tuned (OpenMP OpenBLAS, see
                    bench/README.md; default $setting)
  --pythons "P.."   interpreters with torch and h5py; those that lack them
                    are left out (default "$pythons"); --python PY: one
  --mt-data PATH    data tool (default: mt-data beside MPITRAIN)
  --timeout S       limit for one run in seconds (default $run_timeout)
  --kernels         then one more run of each mpitrain variant with -log_view:
                    its step by kind of layer (mtLinear, mtGemm, mtAttention,
                    mtConvert, ...; doc/running.md), in ms a training step
Environment: MPIRUN (default mpirun), MPIRUN_ARGS (extra mpirun arguments),
BENCH_LOGS (a folder that receives every run's log at the end).
EOF
}

pos=()
while [ $# -gt 0 ]; do
	case "$1" in
	-r) repeats=$2; shift 2 ;;
	--models) models=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--warmup) warmup=$2; shift 2 ;;
	--configs) configs=$2; shift 2 ;;
	--variants) variants=$2; shift 2 ;;
	--setting) setting=$2; shift 2 ;;
	--python|--pythons) pythons=$2; shift 2 ;;
	--mt-data) mt_data=$2; shift 2 ;;
	--timeout) run_timeout=$2; shift 2 ;;
	--kernels) kernels=1; shift ;;
	-h|--help) usage; exit 0 ;;
	-*) echo "$0: unknown option $1" >&2; usage >&2; exit 2 ;;
	*) pos+=("$1"); shift ;;
	esac
done
[ ${#pos[@]} = 2 ] || { usage >&2; exit 2; }
mpitrain=${pos[0]}
datadir=${pos[1]}
[ -n "$mt_data" ] || mt_data=$(dirname "$mpitrain")/mt-data
mpirun=${MPIRUN:-mpirun}
for v in "$repeats" "$run_timeout" ${steps:+"$steps"} ${warmup:+"$warmup"}; do
	case "$v" in ''|*[!0-9]*) echo "$0: not a number: $v" >&2; exit 2 ;; esac
done
[ "$repeats" -ge 1 ] || { echo "$0: -r must be >= 1" >&2; exit 2; }
[ -z "$steps" ] || [ "$steps" -ge 6 ] || { echo "$0: --steps must be >= 6 (mpitrain times all but 5)" >&2; exit 2; }
for m in $models; do
	case "$m" in mlp|cnn|gpt) ;; *) echo "$0: unknown model $m" >&2; exit 2 ;; esac
done
for v in $variants; do
	case " $all_variants " in *" $v "*) ;; *) echo "$0: unknown variant $v" >&2; exit 2 ;; esac
done
case "$setting" in default|tuned) ;; *) echo "$0: --setting: default or tuned" >&2; exit 2 ;; esac
for c in $configs; do
	r=${c%x*}; t=${c#*x}
	case "$r$t" in ''|*[!0-9]*) echo "$0: bad configuration $c (want RANKSxTHREADS)" >&2; exit 2 ;; esac
	if [ "$r" -lt 1 ] || [ "$t" -lt 1 ]; then echo "$0: bad configuration $c" >&2; exit 2; fi
done
[ -x "$mpitrain" ] || { echo "$0: $mpitrain is not executable (build with scripts/build.sh)" >&2; exit 1; }
. "$here/lib.sh" # median, spread, pick_pythons, gemm_shapes_build, gemm_limit, limit_share
pys=() tvers=()
case " $variants " in *" pt-"*) pick_pythons "$pythons" h5py
	[ ${#pys[@]} -gt 0 ] || { echo "$0: no interpreter of \"$pythons\" imports torch and h5py" >&2; exit 1; } ;;
esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_amp.XXXXXX") || exit 1
# BENCH_LOGS=DIR keeps every run's log and GEMM-limit log there
trap '[ -z "${BENCH_LOGS:-}" ] || { mkdir -p "$BENCH_LOGS" && cp "$tmp"/log.* "$BENCH_LOGS"/; }; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
gs=""
if gemm_shapes_build "$tmp/gemm_shapes" 2>"$tmp/gemm_shapes.build"; then gs="$tmp/gemm_shapes"
else echo "# gemm_shapes did not build (no GEMM limit): $(head -n 1 "$tmp/gemm_shapes.build")"; fi

# ---- data (made as bench_mlp.sh and inputs/fortunes-gpt.opts say) ----------
data_file() { [ "$1" = gpt ] && echo "$datadir/fortunes-train.h5" || echo "$datadir/fashion-mnist-train.h5"; }
make_data() { # model
	local f g fortunes=/usr/share/games/fortunes files=()
	f=$(data_file "$1")
	[ -f "$f" ] && return 0
	[ -x "$mt_data" ] || { echo "# $f missing and no $mt_data"; return 1; }
	mkdir -p "$datadir" || return 1
	if [ "$1" = gpt ]; then
		[ -d "$fortunes" ] || { echo "# $f missing and no $fortunes (apt-get install fortunes)"; return 1; }
		echo "# making $f: $mt_data text DATA_DIR/fortunes.txt -out $datadir -name fortunes"
		for g in "$fortunes"/*; do # the opts file's list: no .dat, .u8 or off/
			case "$g" in *.dat|*.u8|*/off) ;; *) files+=("$g") ;; esac
		done
		cat "${files[@]}" >"$datadir/fortunes.txt" &&
			timeout "$run_timeout" "$mt_data" text "$datadir/fortunes.txt" -out "$datadir" -name fortunes >/dev/null
	else
		echo "# making $f: $mt_data fashion-mnist -out $datadir"
		timeout "$run_timeout" "$mt_data" fashion-mnist -out "$datadir" >/dev/null
	fi
	[ -f "$f" ] || { echo "# $mt_data did not make $f"; return 1; }
}
kept=""
for m in $models; do
	if make_data "$m"; then kept="$kept $m"; else echo "# $m skipped"; fi
done
models=${kept# }
[ -n "$models" ] || { echo "$0: no model has its data" >&2; exit 1; }

# ---- per-model settings -----------------------------------------------------
steps_of() { # model
	[ -n "$steps" ] && { echo "$steps"; return; }
	case "$1" in mlp) echo 300 ;; cnn) echo 200 ;; gpt) echo 60 ;; esac
}
warmup_of() {
	[ -n "$warmup" ] && { echo "$warmup"; return; }
	case "$1" in mlp) echo 30 ;; cnn) echo 20 ;; gpt) echo 10 ;; esac
}
batch_of() { [ "$1" = gpt ] && echo 32 || echo 128; }
unit() { [ "$1" = gpt ] && echo "tokens/s" || echo "samples/s"; }
mult() { [ "$1" = gpt ] && echo 64 || echo 1; } # samples/s -> tokens/s (gpt: x block)
mt_opts() { # model -> the mpitrain options of bench_mlp.sh / bench_models.sh
	case "$1" in
	mlp) echo -model mlp -mlp_hidden 1024,1024 -batch_size 128 -optimizer sgd -lr 0.05 -momentum 0.9 ;;
	cnn) echo -model cnn -cnn_channels 32,64 -cnn_kernel 3 -cnn_hidden 128 -batch_size 128 \
		-optimizer sgd -lr 0.02 -momentum 0.9 ;;
	gpt) echo -model gpt -gpt_layers 4 -gpt_heads 4 -gpt_embd 128 -gpt_block 64 -batch_size 32 \
		-optimizer adamw -lr 1e-3 -weight_decay 0.1 -weight_decay_skip_1d -lr_schedule cosine \
		-warmup_steps 100 -clip_grad_norm 1.0 ;;
	esac
}

# ---- one run ------------------------------------------------------------------
# Prints the figure in the model's unit, or nothing; the log stays in $tmp.
run_mpitrain() { # model ranks threads variant log [record]
	local m=$1 r=$2 t=$3 v=$4 log=$5 rec=${6:-} out backend amp=()
	case "$v" in
	mt-fp32) backend=sp ;;
	mt-amp) backend=sp-amp; amp=(-amp_dtype bf16) ;;
	mt-apex) backend=sp-amp-apex; amp=(-amp_dtype bf16) ;;
	esac
	[ "$r" -gt 1 ] && backend=ddp${backend#sp}
	out=$(mktemp -d "$tmp/out.XXXXXX")
	# shellcheck disable=SC2046,SC2086
	OMP_NUM_THREADS=$t timeout "$run_timeout" "$mpirun" -np "$r" --bind-to none --oversubscribe \
		-x OMP_NUM_THREADS ${MPIRUN_ARGS:-} \
		"$mpitrain" -backend "$backend" ${amp[@]+"${amp[@]}"} $(mt_opts "$m") \
		-data_train "$(data_file "$m")" -epochs 1 -max_train_steps_per_epoch "$(steps_of "$m")" \
		-max_val_steps_per_epoch 1 -threads "$t" -log_every 0 -checkpoint_at_end 0 \
		-output_dir "$out" ${rec:+-log_gemm_shapes "$rec"} ${mt_extra[@]+"${mt_extra[@]}"} >"$log" 2>&1
	rm -rf "$out"
	# a bf16 run must say so on its amp line
	[ ${#amp[@]} = 0 ] || grep -q '^amp: .*bf16 compute' "$log" || return 0
	sed -n 's/^RESULT mpitrain .*train_samples_per_s=\([0-9.eE+-]*\).*/\1/p' "$log" | tail -n 1 |
		awk -v k="$(mult "$m")" '{printf "%.1f\n", $1 * k}'
}

run_torch() { # model ranks threads variant@interpreter-index log
	local m=$1 r=$2 t=$3 v=${4%@*} py=${pys[${4#*@}]} log=$5 dtype=none b script args
	[ "$v" = pt-bf16 ] && dtype=bf16
	b=$(($(batch_of "$m") / r))
	if [ "$m" = mlp ]; then
		script=torch_mlp.py; args=(--hidden "1024,1024")
	else
		script=torch_models_bench.py; args=(--model "$m")
	fi
	timeout "$run_timeout" "$py" "$here/$script" "${args[@]}" --threads "$t" --ranks "$r" \
		--steps "$(steps_of "$m")" --warmup "$(warmup_of "$m")" --batch "$b" --setting "$setting" \
		--amp "$dtype" --data "$(data_file "$m")" >"$log" 2>&1
	sed -n "s/^RESULT torch .* amp=$dtype .*samples_per_s=\([0-9.eE+-]*\).*/\1/p" "$log" | tail -n 1 |
		awk -v k="$(mult "$m")" '{printf "%.1f\n", $1 * k}'
}

ratio() { # a b -> a/b or "-"
	{ [ "$1" = "-" ] || [ "$2" = "-" ]; } && { echo "-"; return; }
	awk -v a="$1" -v b="$2" 'BEGIN{if (b > 0) printf "%.2f\n", a/b; else print "-"}'
}
verdict() { # ratio goal
	[ "$1" = "-" ] && { echo "not measured"; return; }
	awk -v a="$1" -v g="$2" 'BEGIN{exit !(a >= g)}' && echo "met" || echo "NOT met"
}
times() { [ "$1" = "-" ] && echo "-" || echo "${1}x"; }
fail() {
	echo "#   $1 gave no figure; last lines of its log:" >&2
	tail -n 5 "$2" | sed 's/^/#     /' >&2
}
load() { cut -d' ' -f1-3 /proc/loadavg; }

# ---- header -------------------------------------------------------------------
echo "# bench_amp: $models; configs $configs; $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -n), $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# cpu bf16: $(grep -o -w -m1 -e avx512_bf16 -e amx_bf16 /proc/cpuinfo | sort -u | tr '\n' ' ')"
for k in "${!pys[@]}"; do echo "# torch ${tvers[$k]} (${pys[$k]}), setting $setting"; done
echo "# mpitrain: $mpitrain"
echo "# repeats $repeats; steps $(for m in $models; do printf '%s %s (torch +%s warm-up) ' "$m" "$(steps_of "$m")" "$(warmup_of "$m")"; done)"
echo "# variants: $variants"
load0=$(cut -d' ' -f1 /proc/loadavg)
echo "# load average before: $(load)"
if awk -v l="$load0" 'BEGIN{exit !(l > 0.5)}'; then
	echo "# WARNING: the machine is busy (load $load0): the figures will be noisy"
fi

# ---- runs ---------------------------------------------------------------------
# the PyTorch variants once per interpreter: pt-fp32@K, K its index in pys
vlist=()
for v in $variants; do
	case "$v" in pt-*) for k in "${!pys[@]}"; do vlist+=("$v@$k"); done ;; *) vlist+=("$v") ;; esac
done
nv=${#vlist[@]}
vname() { case "$1" in *@*) echo "torch${tvers[${1#*@}]}-${1%@*}" | sed 's/-pt-/-/' ;; *) echo "$1" ;; esac; }
for m in $models; do
	for c in $configs; do
		r=${c%x*}; t=${c#*x}
		for v in "${vlist[@]}"; do : >"$tmp/$m.$c.$v"; : >"$tmp/$m.$c.$v.limit"; done
		for i in $(seq 1 "$repeats"); do
			line="# $m $c run $i (load $(cut -d' ' -f1 /proc/loadavg)):"
			for k in $(seq 0 $((nv - 1))); do
				v=${vlist[$(((k + i - 1) % nv))]}
				log="$tmp/log.$m.$c.$v.$i"
				case "$v" in
				mt-*) rec=""; [ -n "$gs" ] && rec="$tmp/shapes.$m.$c.$v.$i"
					x=$(run_mpitrain "$m" "$r" "$t" "$v" "$log" "$rec")
					if [ -n "$rec" ] && [ -f "$rec" ]; then # the limit, right after the run
						lv=$(gemm_limit "$gs" "$rec" "$tmp/log.$m.$c.$v.limit.$i")
						if [ -n "$lv" ]; then echo "$lv" >>"$tmp/$m.$c.$v.limit"; else fail "gemm_shapes $v $m $c" "$tmp/log.$m.$c.$v.limit.$i"; fi
						[ -n "$x" ] && [ -n "$lv" ] && echo "$x $lv" >>"$tmp/$m.$c.$v.pairs"
						line="$line $v.gemm_limit_ms=${lv:-fail}"
					fi ;;
				pt-*) x=$(run_torch "$m" "$r" "$t" "$v" "$log")
					[ -f "$tmp/$m.$c.$v.blas" ] ||
						sed -n 's/^RESULT torch .* blas=\([^ ]*\).*/\1/p' "$log" >"$tmp/$m.$c.$v.blas" ;;
				esac
				if [ -n "$x" ]; then echo "$x" >>"$tmp/$m.$c.$v"; else fail "$v $m $c" "$log"; fi
				line="$line $(vname "$v")=${x:-fail}"
			done
			echo "$line"
		done
	done
done
echo "# load average after: $(load)"

# ---- tables -------------------------------------------------------------------
med1() { [ -f "$tmp/$1.$2.$3" ] && median "$tmp/$1.$2.$3" || echo "-"; }
# med MODEL CONFIG VARIANT: its median; a PyTorch variant's: the faster torch's
med() {
	case "$3" in
	pt-*) local k best="-" x
		for k in "${!pys[@]}"; do
			x=$(med1 "$1" "$2" "$3@$k")
			[ "$x" = "-" ] && continue
			if [ "$best" = "-" ] || awk -v a="$x" -v b="$best" 'BEGIN{exit !(a > b)}'; then best=$x; fi
		done
		echo "$best" ;;
	*) med1 "$@" ;;
	esac
}
# which torch gave med's figure
medwho() {
	local k
	[ "$4" = "-" ] && { echo "-"; return; }
	for k in "${!pys[@]}"; do [ "$(med1 "$1" "$2" "$3@$k")" = "$4" ] && { echo "torch${tvers[$k]}"; return; }; done
	echo "-"
}
fmt="%-5s %-5s | %9s %9s %9s | %9s %9s | %8s %9s | %8s %9s | %7s\n"
goals=0; met=0
for m in $models; do
	echo
	echo "# $m: $(unit "$m"), medians of $repeats"
	echo "# pt-fp32, pt-bf16: the faster torch ($(for k in "${!pys[@]}"; do printf '%s ' "torch${tvers[$k]}"; done| sed 's/ $//'); which: below)"
	# shellcheck disable=SC2059
	printf "$fmt" model conf mt-fp32 mt-amp mt-apex pt-fp32 pt-bf16 amp/fp32 apex/fp32 amp/pt16 apex/pt16 pt16/32
	for c in $configs; do
		f=$(med "$m" "$c" mt-fp32); a=$(med "$m" "$c" mt-amp); x=$(med "$m" "$c" mt-apex)
		p=$(med "$m" "$c" pt-fp32); q=$(med "$m" "$c" pt-bf16)
		# shellcheck disable=SC2059
		printf "$fmt" "$m" "$c" "$f" "$a" "$x" "$p" "$q" "$(ratio "$a" "$f")" "$(ratio "$x" "$f")" \
			"$(ratio "$a" "$q")" "$(ratio "$x" "$q")" "$(ratio "$q" "$p")"
		echo "#   $c: pt-fp32 $(medwho "$m" "$c" pt-fp32 "$p"), pt-bf16 $(medwho "$m" "$c" pt-bf16 "$q")"
	done
	for c in $configs; do
		f=$(med "$m" "$c" mt-fp32); q=$(med "$m" "$c" pt-bf16)
		for v in mt-amp mt-apex; do
			case " $variants " in *" $v "*) ;; *) continue ;; esac
			b=$(med "$m" "$c" "$v")
			r1=$(ratio "$b" "$f"); r2=$(ratio "$b" "$q")
			v1=$(verdict "$r1" "$goal_fp32"); v2=$(verdict "$r2" "$goal_torch")
			for vv in "$v1" "$v2"; do
				[ "$vv" = "not measured" ] && continue
				goals=$((goals + 1)); [ "$vv" = met ] && met=$((met + 1))
			done
			be=sp-amp; [ "$v" = mt-apex ] && be=sp-amp-apex
			[ "${c%x*}" -gt 1 ] && be=ddp${be#sp}
			echo "# $m $c $be bf16: $(times "$r1") mpitrain fp32 (goal >= $goal_fp32: $v1)," \
				"$(times "$r2") PyTorch bf16 (goal >= $goal_torch: $v2)"
		done
	done
done
echo
echo "# GEMM limit, same run: after each mpitrain run, gemm_shapes timed the GEMMs of its second step as"
echo "# mpitrain recorded them (-log_gemm_shapes: rank 0's shapes, every thread's calls; convolutions as"
echo "# their im2col GEMMs; bf16 ones as mt_gemm_lowp runs them here: $([ -n "$gs" ] && "$gs" -shapes /dev/null 2>/dev/null | sed -n 's/.*bf16 GEMM //p' | head -n 1)),"
echo "# on one thread, each shape at its best library (median over the runs). A rank of T threads: that / T."
echo "# share = limit / measured; per-run shares: each run's limit over that run's own ms/step."
printf "%-4s %-5s %-8s %18s %18s %8s %14s  %s\n" model conf variant "GEMM limit ms/step" "measured ms/step" share "limit min-max" "per-run shares"
for m in $models; do
	for c in $configs; do
		t=${c#*x}
		for v in "${vlist[@]}"; do
			case "$v" in mt-*) ;; *) continue ;; esac
			read -r lim ms sh <<<"$(limit_share "$(median "$tmp/$m.$c.$v.limit" %.4f)" "$t" "$(med1 "$m" "$c" "$v")" \
				"$(( $(batch_of "$m") * $(mult "$m") ))")"
			printf "%-4s %-5s %-8s %18s %18s %8s %14s  %s\n" "$m" "$c" "$v" "$lim" "$ms" "$sh" \
				"$(sort -g "$tmp/$m.$c.$v.limit" 2>/dev/null | awk 'NR==1{lo=$1} {hi=$1} END{if (NR) printf "%.2f-%.2f", lo, hi; else print "-"}')" \
				"$(run_shares "$tmp/$m.$c.$v.pairs" "$t" "$(( $(batch_of "$m") * $(mult "$m") ))")"
		done
	done
done
echo
echo "# goals met: $met of $goals (bf16 >= ${goal_fp32}x mpitrain fp32, >= ${goal_torch}x PyTorch bf16 autocast; per model, configuration and backend)"
echo
echo "# every run set (median, min-max over $repeats runs; PyTorch's BLAS):"
warn_blas=""
for m in $models; do
	for c in $configs; do
		for v in "${vlist[@]}"; do
			b="-"
			if [ -s "$tmp/$m.$c.$v.blas" ]; then
				b=$(cat "$tmp/$m.$c.$v.blas")
				case "$b" in openblas-* | torch-mkl) ;; *) [ "${v%@*}" = pt-fp32 ] && warn_blas=$b ;; esac
			fi
			printf "%-4s %-5s %-17s %12s %14s  %s\n" "$m" "$c" "$(vname "$v")" "$(med1 "$m" "$c" "$v")" \
				"$(spread "$tmp/$m.$c.$v")" "$b"
		done
	done
done
if [ -n "$warn_blas" ]; then
	echo "# WARNING: PyTorch fp32 ran on $warn_blas, not OpenBLAS: its fp32 matmuls use that BLAS"
	echo "#   (Debian's reference BLAS: ~35x slower for the MLP), so pt-fp32 and pt16/32 are not"
	echo "#   PyTorch's best; install libopenblas0-openmp for them. Its bf16 matmuls (autocast) go"
	echo "#   through oneDNN, not the BLAS."
fi

# ---- --kernels: one -log_view run of each mpitrain variant, by kind of layer
if [ "$kernels" = 1 ]; then
	echo "# kernels: one more run each with -log_view (rank 0's events; ms a training step over"
	echo "# the run's steps, validation's one step included; events nest: mtGemm counts inside mtLinear,"
	echo "# attention's per-head GEMMs only in mtAttention; a rank of several threads that splits"
	echo "# the batch logs no layer)"
	mt_extra=(-log_view)
	for m in $models; do
		for c in $configs; do
			r=${c%x*}; t=${c#*x}
			for v in $variants; do
				case "$v" in mt-*) ;; *) continue ;; esac
				log="$tmp/log.$m.$c.$v.kernels"
				run_mpitrain "$m" "$r" "$t" "$v" "$log" >/dev/null
				n=$(steps_of "$m")
				row=$(awk -v n="$n" '/^mt[A-Z][A-Za-z]* +[0-9]/ && $1 != "mtData" && $1 != "mtCheckpoint" &&
					$1 != "mtCommExposed" && $4 + 0 > 0 { printf " %s %.2f", substr($1, 3), $4 * 1000 / n }' "$log")
				echo "$m $c $v:${row:- (no -log_view table: see $log)}"
			done
		done
	done
	mt_extra=()
fi
