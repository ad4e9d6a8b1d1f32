# Helpers shared by the bench scripts (sourced, not run).

# median [FILE|-] [FORMAT]: the median of the numbers in FILE (standard input
# when - or absent), the mean of the middle two for an even count, printed
# with FORMAT (default %.1f); "-" when there are none.
median() {
	sort -g "${1:--}" 2>/dev/null | awk -v f="${2:-%.1f}" '{v[NR]=$1} END {
		if (NR == 0) { print "-"; exit }
		if (NR % 2) printf f "\n", v[(NR+1)/2]
		else printf f "\n", (v[NR/2] + v[NR/2+1]) / 2 }'
}

# spread [FILE|-]: "min-max" of the numbers in FILE, "-" when there are none.
spread() {
	sort -g "${1:--}" 2>/dev/null | awk 'NR==1{lo=$1} {hi=$1} END{if (NR) printf "%.0f-%.0f", lo, hi; else print "-"}'
}

# pick_pythons "P.." [MODULES]: the interpreters among P that import torch
# (and MODULES, "h5py" or "h5py, numpy") into the array pys, their torch
# versions (major.minor) into tvers; the others are named on stderr.
pick_pythons() {
	pys=() tvers=()
	local p v
	for p in $1; do
		if v=$("$p" -c "import torch${2:+, $2}; print(torch.__version__)" 2>/dev/null); then
			v=${v%%+*}
			pys+=("$p") tvers+=("$(echo "$v" | cut -d. -f1-2)")
		else
			echo "# $p cannot import torch${2:+, $2}: left out" >&2
		fi
	done
}

# gemm_shapes_build BIN: builds bench/gemm_shapes.c (with mpitrain's own
# kernel, src/nn/gemm_pack.c, mt_gemm's src/nn/gemm_matmul.c, and libxsmm
# where its header is installed)
# against the system oneDNN, as bench_gemm.sh does. Environment: CC;
# GEMM_SHAPES_ARCH (default -march=native);
# GEMM_SHAPES, a gemm_shapes built elsewhere (scripts/gpu_bundle.sh's, on
# a node without oneDNN's headers), copied instead.
gemm_shapes_build() {
	local d xs=() xl=()
	if [ -n "${GEMM_SHAPES:-}" ]; then cp "$GEMM_SHAPES" "$1"; return; fi
	d=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	if [ -f /usr/include/libxsmm.h ]; then xs=(-DHAVE_XSMM); xl=(-lxsmm -lblas -ldl); fi
	"${CC:-cc}" -std=c11 -O2 "${GEMM_SHAPES_ARCH:--march=native}" -fopenmp-simd -Wall -Wextra -Werror -I"$d/../src" \
		"${xs[@]}" "$d/gemm_shapes.c" "$d/../src/nn/gemm_pack.c" "$d/../src/nn/gemm_matmul.c" -o "$1" -ldnnl "${xl[@]}" -lpthread -lm
}

# gemm_limit BIN RECORD LOG: the GEMMs of one training step as mpitrain
# -log_gemm_shapes RECORD recorded them, timed by gemm_shapes on one thread
# at the best library of each shape: prints that step time in ms, or
# nothing when it failed (its output in LOG). Unbound, like the bench
# scripts' mpitrain runs (mpirun --bind-to none).
gemm_limit() {
	OMP_NUM_THREADS=1 timeout 900 "$1" -shapes "$2" -reps 5 -ms 10 >"$3" 2>&1 || return 0
	sed -n 's/^LIMIT ms_per_step=\([0-9.eE+-]*\).*/\1/p' "$3"
}

# flop_ref FLOPS UNIT [PEAK]: the reference line's "N.NN MFLOP per UNIT",
# and with a core's peak (GFLOP/s, --peak) the UNITs a second it allows.
flop_ref() {
	awk -v f="$1" -v u="$2" -v p="${3:-}" 'BEGIN {
		printf "%.2f MFLOP per %s", f / 1e6, u
		if (p != "") printf ", at --peak %s GFLOP/s %.0f %ss/s per core", p, p * 1e9 / f, u }'
}

# limit_share LIMIT_MS THREADS SAMPLES_PER_S BATCH: "LIMIT_MS/THREADS
# measured_ms share" for a run of global batch BATCH at SAMPLES_PER_S, the
# limit of a rank of THREADS threads splitting the recorded calls ("-" for
# what is missing).
limit_share() {
	awk -v l="$1" -v t="$2" -v r="$3" -v b="$4" 'BEGIN {
		lim = (l == "-" || l == "") ? "-" : sprintf("%.3f", l / t)
		ms = (r == "-" || r == "" || r <= 0) ? "-" : sprintf("%.3f", 1000 * b / r)
		sh = (lim == "-" || ms == "-") ? "-" : sprintf("%.0f%%", 100 * lim / ms)
		print lim, ms, sh }'
}

# run_shares FILE THREADS UNITS_PER_STEP: the share of each run's own
# limit, from FILE's lines "RATE LIMIT_MS" (one per run that gave both),
# comma-separated; "-" when there are none.
run_shares() {
	awk -v t="$2" -v b="$3" '$1 > 0 { s = s (NR > 1 ? "," : "") sprintf("%.0f%%", 100 * ($2 / t) / (1000 * b / $1)) }
		END { print (s == "" ? "-" : s) }' "$1" 2>/dev/null || echo "-"
}
