#!/usr/bin/env bash
# Runs the GPU tests and benchmarks from a bundle made by
# scripts/gpu_bundle.sh, on a GPU node, from the source tree's root:
#
#   scripts/gpu_run.sh BUNDLE.tar.xz [STEP...]
#
# Steps (default: units train bench): units (the CUDA unit tests and the
# NCCL id test), train (tests/test_gpu_train.sh), bench (bench/bench_gpu.sh
# at its default shape), bigbench (bench_gpu.sh at GPT-2 small's widths,
# T = 1024, batch 8), memcheck (compute-sanitizer over short -device cuda
# runs), cpuamp (bench/bench_amp.sh on the node's CPU: bf16 against fp32
# and the node's PyTorch, 1 rank x 1 thread; GPU nodes' CPUs often have
# AVX512_BF16 or AMX; the data is synthetic, of Fashion-MNIST's shape, unless
# MT_BENCH_DATA names a folder of bench_amp.sh's files; MT_CPUAMP_REPEATS,
# _STEPS, _MODELS and _VARIANTS: its -r, --steps, --models and --variants; --kernels adds each
# mpitrain variant's step by kind of layer, -log_view's events), cpuunits
# (the CPU unit tests whose bf16 paths take the node's bf16 instructions:
# test_gemm_matmul, test_amp, test_layout, test_bf16_layers), dnnlv (a short sp-amp bf16 run
# of each model under ONEDNN_VERBOSE: the primitives oneDNN chose on the
# node's CPU, their implementations and time a step, largest first), attn
# (bench/attn_parts: one gpt attention layer's time by part, fp32 against
# bf16 with dense head operands, strided, and converted, on one thread),
# swap (gemm_shapes over bench/forward_swap.shapes: the linear forward of
# 64-256 rows as called and as its transpose, fp32 and bf16, one thread).
# The CUDA runtime, cuBLAS and NCCL (of the CUDA major version the
# build used) are looked for under
# /usr/local/cuda* and the site-packages of $PYTHON (default python3; also
# the benchmarks' PyTorch peer, run without the bundle's libraries).
# The bundle is unpacked into a new folder under ${TMPDIR:-/tmp}, removed
# at the end.
set -u
bundle=${1:?usage: $0 BUNDLE.tar.xz [STEP...]}
shift
MT=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-gpu.XXXXXX") || exit 1
trap 'rm -rf "$MT"' EXIT
tar -C "$MT" -xJf "$bundle" || { echo "cannot unpack $bundle" >&2; exit 1; }
export MT
[ -d /etc/openmpi ] || cp -a "$MT/etc/openmpi" /etc/ 2>/dev/null || true
py=${PYTHON:-python3}
site=$(env -u LD_LIBRARY_PATH "$py" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
# the libraries the bundle left to the node: the CUDA runtime, cuBLAS and
# NCCL of the build's CUDA major version
need=$(LD_LIBRARY_PATH=$MT/lib ldd "$MT/build/mpitrain" | awk '/not found/ {print $1}')
cl=""
for n in $need; do
  f=$(find /usr/local/cuda*/ $site /usr/lib -name "$n" 2>/dev/null | head -1)
  [ -n "$f" ] || { echo "no $n on this node" >&2; exit 1; }
  cl="$cl:$(dirname "$f")"
done
# the peer's python without the bundle's libraries
printf '#!/bin/bash\nexec env -u LD_LIBRARY_PATH %q "$@"\n' "$py" >"$MT/python"
chmod +x "$MT/python"
export LD_LIBRARY_PATH=$MT/lib$cl PATH=$MT/usr/bin:$PATH PYTHON=$MT/python
export OPAL_PREFIX=$MT/usr PMIX_PREFIX=$MT/usr/lib/x86_64-linux-gnu/pmix2 PMIX_MCA_pcompress_base_silence_warning=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export top_srcdir=$PWD top_builddir=$MT/build
status=0
step() { # LABEL LIMIT COMMAND...
  local t=$2 rc
  echo "=== $1"
  shift 2
  timeout -k 5 "$t" "$@"
  rc=$?
  echo "=== exit $rc"
  [ $rc = 0 ] || [ $rc = 77 ] || status=1
}
memcheck() { # compute-sanitizer over short runs of each model and precision
  local w cs v bad=0
  nvidia-smi -L 2>/dev/null | grep -q '^GPU' || { echo "skipped: no GPU"; return 77; }
  w=$(mktemp -d)
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  "$MT/build/tests/mkdata" synth "$w/t.h5" 256 32 4 1 >/dev/null &&
    "$MT/build/tests/mkdata" synth "$w/i.h5" 128 64 4 3 image >/dev/null &&
    "$MT/build/mt-data" text /usr/share/common-licenses/GPL-3 -out "$w" -name g -val_fraction 0.1 >/dev/null ||
    return 1
  local all=(-device cuda -log_every 0 -checkpoint_at_end 0 -epochs 1 -max_train_steps_per_epoch 4
    -max_val_steps_per_epoch 1 -output_dir "$w/o")
  for v in "mlp -backend sp" "mlp -backend sp-amp -amp_dtype fp16" "mlp -backend sp-amp-apex" \
    "cnn -backend sp" "gpt -backend sp-amp" \
    "mlp -backend fsdp -fsdp_sharding_strategy shard_grad_op -fsdp_cpu_offload -optimizer adamw"; do
    set -- $v
    local m=$1 margs
    shift
    case $m in
      mlp) margs=(-model mlp -mlp_hidden 16 -data_train "$w/t.h5" -data_val "$w/t.h5" -batch_size 16) ;;
      cnn) margs=(-model cnn -cnn_channels 4,8 -cnn_hidden 16 -cnn_batchnorm 1 -cnn_dropout 0.25
        -data_train "$w/i.h5" -data_val "$w/i.h5" -batch_size 16) ;;
      gpt) margs=(-model gpt -gpt_layers 2 -gpt_heads 2 -gpt_embd 32 -gpt_block 16
        -data_train "$w/g-train.h5" -data_val "$w/g-val.h5" -batch_size 8 -val_batch_size 8) ;;
    esac
    echo "--- memcheck: $m $*"
    "$cs" --tool memcheck --error-exitcode 9 --print-limit 5 "$MT/build/mpitrain" "${margs[@]}" "$@" \
      "${all[@]}" 2>&1 | grep -E '^=========|^error' | tail -5
    [ "${PIPESTATUS[0]}" = 0 ] || bad=1
  done
  rm -rf "$w"
  return $bad
}
dnnlv() { # oneDNN's primitives in a few sp-amp steps of each model, by time
  local w m margs steps=6
  w=$(mktemp -d)
  "$MT/build/tests/mkdata" synth "$w/t.h5" 2048 784 10 1 image >/dev/null &&
    "$MT/build/mt-data" text /usr/share/common-licenses/GPL-3 -out "$w" -name g -val_fraction 0.1 >/dev/null ||
    return 1
  for m in mlp cnn gpt; do
    case $m in
      mlp) margs=(-model mlp -mlp_hidden 1024,1024 -data_train "$w/t.h5" -batch_size 128) ;;
      cnn) margs=(-model cnn -cnn_channels 32,64 -cnn_kernel 3 -cnn_hidden 128 -data_train "$w/t.h5" -batch_size 128) ;;
      gpt) margs=(-model gpt -gpt_layers 4 -gpt_heads 4 -gpt_embd 128 -gpt_block 64 -data_train "$w/g-train.h5"
        -batch_size 32 -optimizer adamw) ;;
    esac
    echo "--- $m sp-amp bf16, $steps steps: kind impl problem | calls/step ms/step (the largest 25)"
    OMP_NUM_THREADS=1 ONEDNN_VERBOSE=1 "$MT/build/mpitrain" "${margs[@]}" -backend sp-amp -amp_dtype bf16 \
      -threads 1 -epochs 1 -max_train_steps_per_epoch $steps -max_val_steps_per_epoch 0 -log_every 0 \
      -checkpoint_at_end 0 -output_dir "$w/o" 2>&1 |
      awk -F, -v n=$steps '$1 ~ /verbose$/ && $2 == "exec" {k = $4 " " $5 " " $(NF-1); c[k]++; t[k] += $NF}
        END {for (k in t) printf "%10.3f %6.1f  %s\n", t[k] / n, c[k] / n, k}' | sort -rn | head -25 >"$w/p"
    # without AVX-512 oneDNN 2.6 has no brgemm matmul: the mlp's and gpt's
    # GEMMs are then dnnl_sgemm calls (or mpitrain's own kernels), not
    # primitives, and print nothing under ONEDNN_VERBOSE
    if [ -s "$w/p" ]; then cat "$w/p"
    else echo "    (no oneDNN primitive ran: its GEMMs were dnnl_sgemm calls or mpitrain's own kernels)"; fi
  done
  rm -rf "$w"
}
for s in "${@:-units train bench}"; do
  for s1 in $s; do
    case $s1 in
      units)
        for t in test_device test_cuda_bits test_cuda_kernels test_cuda_layers test_cuda_optim; do
          step "$t" 300 sh -c "'$MT/build/tests/$t' >'$MT/$t.log' 2>&1; rc=\$?; grep -E '^FAIL|^not ok' '$MT/$t.log' | head -20; tail -1 '$MT/$t.log'; exit \$rc"
        done
        step test_nccl_id.sh 120 bash tests/test_nccl_id.sh ;;
      train) step test_gpu_train.sh 600 bash tests/test_gpu_train.sh ;;
      bench) step bench_gpu.sh 600 bash bench/bench_gpu.sh -r 3 "$MT/build" ;;
      bigbench) step "bench_gpu.sh at GPT-2 small's widths" 900 bash bench/bench_gpu.sh -r 3 --layers 12 --heads 12 --embd 768 --block 1024 \
        --batch 8 --steps 25 "$MT/build" ;;
      cpuamp)
        d=${MT_BENCH_DATA:-$MT/data}
        mkdir -p "$d"
        [ -f "$d/fashion-mnist-train.h5" ] ||
          "$MT/build/tests/mkdata" synth "$d/fashion-mnist-train.h5" 10000 784 10 1 image >/dev/null
        echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $(grep -o -w -m1 -e avx512_bf16 -e amx_bf16 -e amx_tile /proc/cpuinfo | sort -u | tr '\n' ' ')"
        step "bench_amp.sh on the CPU" 600 env GEMM_SHAPES="$MT/build/bench/gemm_shapes" bash bench/bench_amp.sh -r "${MT_CPUAMP_REPEATS:-2}" --steps "${MT_CPUAMP_STEPS:-60}" --models "${MT_CPUAMP_MODELS:-mlp cnn gpt}" --variants "${MT_CPUAMP_VARIANTS:-mt-fp32 mt-amp pt-fp32 pt-bf16}" --kernels \
          --python "$PYTHON" "$MT/build/mpitrain" "$d" ;;
      memcheck) step "compute-sanitizer memcheck" 900 bash -c "$(declare -f memcheck); memcheck" ;;
      cpuunits)
        for t in test_gemm_matmul test_amp test_layout test_bf16_layers; do
          step "$t" 300 sh -c "OMP_NUM_THREADS=1 '$MT/build/tests/$t' >'$MT/$t.log' 2>&1; rc=\$?; grep -E '^FAIL|^not ok|^#' '$MT/$t.log' | head -20; tail -1 '$MT/$t.log'; exit \$rc"
        done ;;
      dnnlv) step "oneDNN's primitives under sp-amp bf16" 300 bash -c "$(declare -f dnnlv); dnnlv" ;;
      attn) step "attention by part (bench/attn_parts)" 300 env OMP_NUM_THREADS=1 "$MT/build/bench/attn_parts" -reps 15 ;;
      swap) step "the forward of few rows both ways (gemm_shapes)" 300 env OMP_NUM_THREADS=1 "$MT/build/bench/gemm_shapes" \
        -shapes bench/forward_swap.shapes -libs sgemm,matmul,bf16,bf16emu,bf16api -reps 9 -ms 20 ;;
      *) echo "unknown step '$s1' (units, train, bench, bigbench, memcheck, cpuamp, cpuunits, dnnlv, attn, swap)" >&2; status=2 ;;
    esac
  done
done
exit $status
