#!/usr/bin/env bash
# GEMMs at the MLP's exact shapes, library against library (bench/gemm_shapes.c).
#
#   bench/bench_gemm.sh [options]
#
# Builds bench/gemm_shapes.c against Debian's oneDNN (with libxsmm when its
# header is installed) and, with --dnnl3 PREFIX, a second binary against the
# oneDNN 3.x found there (PyPI's onednn-devel: PREFIX/include, PREFIX/lib).
# The two cannot share a process (same symbols), so the binaries run
# alternately R times, each timing every shape with every library of its
# own (and "pack", src/nn/gemm_pack.c, mpitrain's own AVX2 kernel, in the
# first binary, and "mt": what mt_gemm runs built --with-gemm=pack, our
# kernel for 'N','N' at M <= 384, N >= 512, K >= 256, dnnl_sgemm
# for the rest); the table reports the medians over all runs, GFLOP/s per shape, the
# model's GEMM time per step and each library's time over dnnl_sgemm's
# (oneDNN 2.x) in the same run. Everything runs on one core (taskset).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

repeats=7
dnnl3=""
batch="64,128"
hidden="1024,1024"
in=784
out=10
cpu=0
ms=20
cc=${CC:-cc}

usage() {
	cat <<EOF
usage: $0 [options]
  -r N             runs of each binary, alternating (default $repeats)
  --dnnl3 PREFIX   also a binary against oneDNN 3.x in PREFIX (include/, lib/),
                   e.g. a venv after 'pip install onednn-devel'
  --batch LIST     batch sizes (default $batch)
  --hidden LIST    hidden sizes (default $hidden); --in N (784), --out N (10)
  --cpu N          the core everything runs on (default $cpu)
  --ms MS          milliseconds of calls per timing (default $ms)
Environment: CC (default cc).
EOF
}
while [ $# -gt 0 ]; do
	case "$1" in
	-r) repeats=$2; shift 2 ;;
	--dnnl3) dnnl3=$2; shift 2 ;;
	--batch) batch=$2; shift 2 ;;
	--hidden) hidden=$2; shift 2 ;;
	--in) in=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--cpu) cpu=$2; shift 2 ;;
	--ms) ms=$2; shift 2 ;;
	-h|--help) usage; exit 0 ;;
	*) echo "$0: unknown option $1" >&2; usage >&2; exit 2 ;;
	esac
done
case "$repeats" in ''|*[!0-9]*|0) echo "$0: -r: not a positive number: $repeats" >&2; exit 2 ;; esac

work=$(mktemp -d "${TMPDIR:-/tmp}/bench_gemm.XXXXXX")
trap 'rm -rf "$work"' EXIT
flags=(-std=c11 -O2 -march=native -fopenmp-simd -Wall -Wextra -Werror -I"$here/../src")
pack="$here/../src/nn/gemm_pack.c"
bins=()
CC=$cc gemm_shapes_build "$work/gs2" ||
	{ echo "$0: cannot build gemm_shapes against the system oneDNN" >&2; exit 1; }
bins+=(gs2)
if [ -n "$dnnl3" ]; then
	[ -f "$dnnl3/include/oneapi/dnnl/dnnl.h" ] || { echo "$0: --dnnl3: no $dnnl3/include/oneapi/dnnl/dnnl.h" >&2; exit 2; }
	# RPATH, not RUNPATH: libdnnl.so.3's own dependencies (the SYCL and
	# compiler runtimes of PyPI's build) live in the same folder
	"$cc" "${flags[@]}" -I"$dnnl3/include" "$here/gemm_shapes.c" "$pack" -o "$work/gs3" \
		-L"$dnnl3/lib" -Wl,--disable-new-dtags,-rpath,"$dnnl3/lib" -ldnnl -lpthread -lm ||
		{ echo "$0: cannot build gemm_shapes against $dnnl3" >&2; exit 1; }
	bins+=(gs3)
fi
# PyPI's oneDNN is a SYCL build: its CPU engine is the OpenCL CPU device of
# the same venv
[ -n "$dnnl3" ] && [ -f "$dnnl3/lib/libintelocl.so" ] && export OCL_ICD_FILENAMES="$dnnl3/lib/libintelocl.so"
export OMP_NUM_THREADS=1

echo "# $(date -u '+%F %T') $(uname -n): $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
echo "# load before: $(uptime | sed 's/.*load/load/')"
for r in $(seq "$repeats"); do
	for b in "${bins[@]}"; do
		tag=${b#gs}
		libs=sgemm,matmul,xsmm,fused,pack,mt
		[ "$b" = gs3 ] && libs=sgemm,matmul,fused
		timeout 600 taskset -c "$cpu" "$work/$b" -raw -tag "$tag" -batch "$batch" -hidden "$hidden" \
			-in "$in" -out "$out" -reps 1 -ms "$ms" -libs "$libs" >>"$work/raw" ||
			{ echo "$0: $b failed (run $r)" >&2; exit 1; }
	done
done
echo "# load after:  $(uptime | sed 's/.*load/load/')"
v2=$("$work/gs2" -batch 1 -hidden 1 -in 1 -out 1 -reps 1 -ms 0.01 -libs sgemm | sed -n '1s/,.*//p')
echo "# v2 = $v2${dnnl3:+, v3 = $(OCL_ICD_FILENAMES=${OCL_ICD_FILENAMES:-} "$work/gs3" -batch 1 -hidden 1 -in 1 -out 1 -reps 1 -ms 0.01 -libs sgemm | sed -n '1s/,.*//p')}"
echo "# $repeats runs per binary, alternating, 1 core ($cpu); GFLOP/s = median over runs"
echo "# fused = matmul primitive with bias + ReLU post-ops; unfused = sgemm + bias and ReLU passes (forward only)"
# raw TAG B shape lib seconds flops -> per (B, shape, lib) median
awk '$1 == "raw" { k = $3 " " $4 " " $2 ":" $5; n[k]++; v[k, n[k]] = $6; fl[$3 " " $4] = $7; if (!(($3 " " $4) in order)) order[$3 " " $4] = ++o
	lib[$2 ":" $5] = 1 }
	END {
		nl = 0
		split("2:sgemm 2:matmul 2:xsmm 3:sgemm 3:matmul 2:pack 2:mt 2:fused 2:unfused 3:fused 3:unfused", want, " ")
		for (i = 1; i in want; i++) if (want[i] in lib) cols[++nl] = want[i]
		for (k in n) {
			m = n[k]; for (i = 1; i <= m; i++) a[i] = v[k, i]
			for (i = 2; i <= m; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
			med[k] = m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
		}
		# shapes in first-seen order per batch
		ns = 0; for (s in order) sh[++ns] = s
		for (i = 2; i <= ns; i++) { x = sh[i]; for (j = i - 1; j >= 1 && order[sh[j]] > order[x]; j--) sh[j + 1] = sh[j]; sh[j + 1] = x }
		lastb = ""
		for (i = 1; i <= ns + 1; i++) {
			split(sh[i], p, " ")
			if (i > ns || p[1] != lastb) {
				if (lastb != "") {
					printf "%-14s", "step ms"; for (c = 1; c <= nl; c++) printf " %9s", (tot_ok[c] ? sprintf("%.3f", tot[c] * 1e3) : "-"); printf "\n"
					printf "%-14s", "x 2:sgemm"; for (c = 1; c <= nl; c++) printf " %9s", (tot_ok[c] && tot[1] > 0 ? sprintf("%.3f", tot[c] / tot[1]) : "-"); printf "\n"
				}
				if (i > ns) break
				lastb = p[1]
				printf "\nbatch %s, GFLOP/s\n%-14s", lastb, "shape"; for (c = 1; c <= nl; c++) printf " %9s", cols[c]; printf "\n"
				for (c = 1; c <= nl; c++) { tot[c] = 0; tot_ok[c] = 1 }
			}
			printf "%-14s", p[2]
			for (c = 1; c <= nl; c++) {
				k = sh[i] " " cols[c]
				if (k in med) { printf " %9.1f", fl[sh[i]] / med[k] * 1e-9; tot[c] += med[k] }
				else { printf " %9s", "-"; if (cols[c] !~ /fused/) tot_ok[c] = 0 }
			}
			printf "\n"
		}
	}' "$work/raw"
echo "# step ms: the model's GEMMs per step (the sum of the medians; fused/unfused: the forward GEMMs only)"
