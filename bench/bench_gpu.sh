#!/usr/bin/env bash
# gpt on one GPU: tokens/s and model-FLOP utilisation (MFU) of
# `mpitrain -device cuda` (fp32, and bf16 GEMMs with -backend sp-amp) against
# the device's dense bf16 peak, beside bench/cuda_gpt, the same model's
# kernels alone (no trainer, no data), for the same shape, and beside the
# peer, PyTorch on the same GPU (bench/torch_gpt_cuda.py: the model's twin in
# fp32, bf16 autocast, and bf16 with PyTorch's fused flash attention), when
# $PYTHON (default python3) imports a torch that sees the GPU. The ratios at
# the end are mpitrain's rate over the peer's. Needs a CUDA build and a GPU;
# without one it says so and exits 0.
#
#   bench/bench_gpu.sh [-r 3] [--layers 6] [--heads 6] [--embd 384]
#                      [--block 256] [--batch 16] [--steps 40] [--peak TFLOPS]
#                      MPITRAIN_BUILD_DIR
#
# Data: byte tokens (V = 256) of the licence texts every Debian system has,
# repeated to 4 MB, made with mt-data text. The model FLOPs per token are
# the project's (gpt_flops in src/models/gpt_t.h):
# 6 (12 L C^2 + V C) + 6 L T C. MFU = FLOPs per token x tokens/s / peak;
# peak: --peak, else the dense bf16 figure of a known device (H100/H200 SXM
# 989, H100 PCIe 756, A100 312, L40S 362), else no MFU. Medians of -r runs;
# mpitrain's rate is its `RESULT ... train_samples_per_s` (steps after the
# first 5) times T.
set -u
repeats=3 L=6 NH=6 C=384 T=256 B=16 steps=40 peak=""
while [ $# -gt 1 ]; do
  case $1 in
    -r) repeats=$2; shift 2 ;;
    --layers) L=$2; shift 2 ;;
    --heads) NH=$2; shift 2 ;;
    --embd) C=$2; shift 2 ;;
    --block) T=$2; shift 2 ;;
    --batch) B=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --peak) peak=$2; shift 2 ;;
    *) echo "usage: $0 [-r N] [--layers L] [--heads H] [--embd C] [--block T] [--batch B] [--steps N] [--peak TFLOPS] BUILD_DIR" >&2; exit 2 ;;
  esac
done
build=${1:?usage: $0 [options] BUILD_DIR}
[ "$steps" -gt 5 ] 2>/dev/null || { echo "--steps: more than 5 (the first 5 are not timed)" >&2; exit 2; }
mt=$build/mpitrain
[ -x "$mt" ] || { echo "no $mt" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
if [ -z "$name" ] || ! grep -q 'MT_HAVE_CUDA 1' "$build/config.h" 2>/dev/null; then
  echo "skipped: no CUDA device or a build without CUDA (${name:-no nvidia-smi})"
  exit 0
fi
if [ -z "$peak" ]; then
  case $name in
    *H100*PCIe*) peak=756 ;; *H100*|*H200*) peak=989 ;; *A100*) peak=312 ;; *L40S*) peak=362 ;;
  esac
fi

for i in $(seq 1 40); do cat /usr/share/common-licenses/*; done | head -c 4000000 >"$work/text.txt"
"$build/mt-data" text "$work/text.txt" -out "$work" -name lic -val_fraction 0.01 >/dev/null ||
  { echo "mt-data text failed" >&2; exit 1; }

V=256
fpt=$(awk -v L="$L" -v C="$C" -v V="$V" -v T="$T" 'BEGIN {printf "%.6g", 6 * (12 * L * C * C + V * C) + 6 * L * T * C}')
median() { sort -g | awk '{a[NR] = $1} END {if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }

run_mt() { # BACKEND -> tokens/s
  "$mt" -device cuda -backend "$1" -model gpt -gpt_layers "$L" -gpt_heads "$NH" -gpt_embd "$C" \
    -gpt_block "$T" -data_train "$work/lic-train.h5" -batch_size "$B" -epochs 1 \
    -max_train_steps_per_epoch "$steps" -optimizer adamw -lr 3e-4 -log_every 0 \
    -checkpoint_at_end 0 -output_dir "$work/out" 2>&1 |
    sed -n 's/^RESULT mpitrain train_samples_per_s=\([0-9.]*\).*/\1/p' | awk -v T="$T" '{print $1 * T}'
}
run_kernels() { # PREC -> tokens/s
  "$build/bench/cuda_gpt" -B "$B" -T "$T" -C "$C" -L "$L" -NH "$NH" -V "$V" -prec "$1" \
    -steps "$steps" -adamw 1 2>&1 | sed -n 's/^RESULT cuda_gpt tokens_per_s=\([0-9.]*\).*/\1/p'
}

echo "# $name; gpt L=$L heads=$NH C=$C T=$T V=$V batch $B; $fpt FLOPs/token; peak ${peak:-?} TFLOP/s; median of $repeats"
run_torch() { # AMP ATTN -> tokens/s
  "${PYTHON:-python3}" "$(dirname "$0")/torch_gpt_cuda.py" --layers "$L" --heads "$NH" --embd "$C" \
    --block "$T" --batch "$B" --warmup 5 --steps $((steps - 5)) --amp "$1" --attn "$2" 2>&1 |
    sed -n 's/^RESULT torch_gpt_cuda .*tokens_per_s=\([0-9.]*\).*/\1/p'
}
variants=("mpitrain sp (fp32)" "mpitrain sp-amp (bf16)" "kernels fp32" "kernels bf16")
if "${PYTHON:-python3}" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  variants+=("torch fp32" "torch bf16" "torch bf16 flash-attn")
  echo "# peer: torch $("${PYTHON:-python3}" -c 'import torch; print(torch.__version__)')"
else
  echo "# peer: none (${PYTHON:-python3} has no torch that sees the GPU)"
fi
declare -A rates
printf '%-28s %12s %8s\n' variant tokens/s MFU
for v in "${variants[@]}"; do
  : >"$work/rates"
  for r in $(seq 1 "$repeats"); do
    case $v in
      "mpitrain sp (fp32)") run_mt sp ;;
      "mpitrain sp-amp (bf16)") run_mt sp-amp ;;
      "kernels fp32") run_kernels fp32 ;;
      "kernels bf16") run_kernels bf16 ;;
      "torch fp32") run_torch none twin ;;
      "torch bf16") run_torch bf16 twin ;;
      "torch bf16 flash-attn") run_torch bf16 sdpa ;;
    esac >>"$work/rates"
  done
  rate=$(median <"$work/rates")
  rates[$v]=$rate
  mfu=-
  [ -n "$rate" ] && [ -n "$peak" ] && mfu=$(awk -v f="$fpt" -v r="$rate" -v p="$peak" 'BEGIN {printf "%.1f%%", 100 * f * r / (p * 1e12)}')
  printf '%-28s %12s %8s\n' "$v" "${rate:-failed}" "$mfu"
done
ratio() { # LABEL MPITRAIN_VARIANT TORCH_VARIANT
  local a=${rates[$2]:-} b=${rates[$3]:-}
  [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" -v l="$1" 'BEGIN {printf "%-48s %6.2fx\n", l, a / b}'
}
ratio "mpitrain/torch, fp32:" "mpitrain sp (fp32)" "torch fp32"
ratio "mpitrain/torch, bf16 (the same attention):" "mpitrain sp-amp (bf16)" "torch bf16"
ratio "mpitrain/torch, bf16 (torch's flash attention):" "mpitrain sp-amp (bf16)" "torch bf16 flash-attn"
exit 0
