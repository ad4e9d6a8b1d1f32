#!/usr/bin/env bash
# Tokens/s of gpt text generation at batch 1, greedy, with a key/value cache:
# mpitrain (bench/generate_bench, src/models/gpt_generate.c) against PyTorch
# (bench/torch_generate.py: validation/torch_models.py's GPT, the same
# shapes, a cache of past keys and values in plain torch) on one thread
# each.
#
#   bench/bench_generate.sh [options] [GENERATE_BENCH]
#
# Models (vocabulary 256, tanh GELU, GPT-2's initialisation):
#   small  -gpt_layers 4 -gpt_embd 256 -gpt_heads 4 -gpt_block 256
#   large  -gpt_layers 8 -gpt_embd 512 -gpt_heads 8 -gpt_block 512 (25M parameters)
# Each repeat runs mpitrain and then every Python, alternately; each run
# generates NEW tokens after a PROMPT-byte prompt REPS times after one
# untimed run and reports the median of its runs. The table gives the
# medians over the repeats and mpitrain / torch of each repeat's pair
# (median), so a machine that slows down mid-bench slows both sides.
# Builds nothing: make -C build bench/generate_bench.
set -u

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh" # median, spread

repeats=5
runs=3
models="small large"
prompt=16
new=200
pythons="/opt/torch2/bin/python /usr/bin/python3"
run_timeout=900

usage() {
	cat <<EOF
usage: $0 [options] [GENERATE_BENCH]
  GENERATE_BENCH    the driver (default ./bench/generate_bench, built with
                    make bench/generate_bench in the build folder)
  -r N              repeats (default $repeats)
  --runs N          timed generations per run (default $runs; one untimed first)
  --models "M.."    small, large (default "$models")
  --prompt N        prompt bytes (default $prompt)
  --new N           new tokens (default $new)
  --pythons "P.."   interpreters with torch; those that lack it are left out
                    (default "$pythons")
  --timeout S       limit for one run (default $run_timeout)
EOF
}

pos=()
while [ $# -gt 0 ]; do
	case "$1" in
	-r) repeats=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--models) models=$2; shift 2 ;;
	--prompt) prompt=$2; shift 2 ;;
	--new) new=$2; shift 2 ;;
	--pythons) pythons=$2; shift 2 ;;
	--timeout) run_timeout=$2; shift 2 ;;
	-h|--help) usage; exit 0 ;;
	-*) echo "$0: unknown option $1" >&2; usage >&2; exit 2 ;;
	*) pos+=("$1"); shift ;;
	esac
done
driver=${pos[0]:-./bench/generate_bench}
for v in "$repeats" "$runs" "$prompt" "$new" "$run_timeout"; do
	case "$v" in ''|*[!0-9]*) echo "$0: not a number: $v" >&2; exit 2 ;; esac
done
[ -x "$driver" ] || { echo "$0: $driver is not executable (make -C build bench/generate_bench)" >&2; exit 1; }
shape() { # model -> layers embd heads block
	case "$1" in
	small) echo "4 256 4 256" ;;
	large) echo "8 512 8 512" ;;
	*) echo "$0: unknown model $1" >&2; exit 2 ;;
	esac
}
for m in $models; do shape "$m" >/dev/null || exit 2; done
pys=() vers=() # the interpreters with torch and their torch versions
for p in $pythons; do
	if v=$("$p" -c 'import torch; print(torch.__version__)' 2>/dev/null); then
		pys+=("$p") vers+=("$v")
	else echo "# $p: no torch, left out" >&2; fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_generate.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# one thread each: OMP_NUM_THREADS for mpitrain's OpenMP and oneDNN, the
# script sets torch's
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
field() { sed -n "s/^RESULT .* $1=\([0-9.eE+-]*\).*/\1/p" "$2"; }
run_mpitrain() { # model log -> median tokens/s of the run
	# shellcheck disable=SC2046
	timeout "$run_timeout" "$driver" $(shape "$1") "$prompt" "$new" "$runs" 0 >"$2" 2>&1
	field tokens_per_s "$2" | median - %.1f | grep -v '^-$'
}
run_torch() { # python model log
	local L C H T
	read -r L C H T <<<"$(shape "$2")"
	timeout "$run_timeout" "$1" "$here/torch_generate.py" --layers "$L" --embd "$C" --heads "$H" \
		--block "$T" --prompt "$prompt" --new "$new" --reps "$runs" --threads 1 >"$3" 2>&1
	field tokens_per_s "$3" | median - %.1f | grep -v '^-$'
}
fail() {
	echo "#   $1 gave no RESULT line; last lines of its log:" >&2
	tail -n 5 "$2" | sed 's/^/#     /' >&2
}

echo "# bench_generate: $models; $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -n), $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for i in "${!pys[@]}"; do echo "# torch$i: ${vers[$i]} (${pys[$i]})"; done
echo "# batch 1, greedy, prompt $prompt bytes, $new new tokens; $repeats repeats x $runs timed runs; 1 thread each"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for m in $models; do
	: >"$tmp/$m.mpitrain"
	for i in "${!pys[@]}"; do : >"$tmp/$m.torch$i"; : >"$tmp/$m.ratio$i"; done
	for r in $(seq 1 "$repeats"); do
		line="# $m run $r (load $(cut -d' ' -f1 /proc/loadavg)):"
		v=$(run_mpitrain "$m" "$tmp/log.$m.mpitrain.$r")
		[ -n "$v" ] && echo "$v" >>"$tmp/$m.mpitrain" || fail "mpitrain $m" "$tmp/log.$m.mpitrain.$r"
		line="$line mpitrain=${v:-fail}"
		for i in "${!pys[@]}"; do
			t=$(run_torch "${pys[$i]}" "$m" "$tmp/log.$m.torch$i.$r")
			[ -n "$t" ] && echo "$t" >>"$tmp/$m.torch$i" || fail "torch$i $m" "$tmp/log.$m.torch$i.$r"
			[ -n "$v" ] && [ -n "$t" ] && awk -v a="$v" -v b="$t" 'BEGIN{printf "%.3f\n", a / b}' >>"$tmp/$m.ratio$i"
			line="$line torch$i=${t:-fail}"
		done
		echo "$line"
	done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
printf "| model | mpitrain tokens/s (range) |"
for v in "${vers[@]}"; do printf " torch %s tokens/s (range) | mpitrain / torch %s |" "$v" "$v"; done
echo
printf "|---|---|"
for _ in "${pys[@]}"; do printf -- "---|---|"; done
echo
for m in $models; do
	read -r L C H T <<<"$(shape "$m")"
	printf "| %s (L %s, C %s, H %s, T %s) | %s (%s) |" "$m" "$L" "$C" "$H" "$T" \
		"$(median "$tmp/$m.mpitrain")" "$(spread "$tmp/$m.mpitrain")"
	for i in "${!pys[@]}"; do
		printf " %s (%s) | %s |" "$(median "$tmp/$m.torch$i")" "$(spread "$tmp/$m.torch$i")" \
			"$(median "$tmp/$m.ratio$i" %.2f)"
	done
	echo
done
