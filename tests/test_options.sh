#!/bin/bash
# Options: every bad option is one line 'mpitrain: error: ...' naming the
# option, a non-zero exit and no hang, on 1 and 2 ranks; -help documents the
# options; -options_file and PETSC_OPTIONS are read; good runs train.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

need_bin "$MPITRAIN" "$MKDATA"
make_work
unset PETSC_OPTIONS

T=$TEST_TIMEOUT
TRAIN=$WORK/train.h5
"$MKDATA" synth "$TRAIN" 256 8 4 1 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 64 8 4 2 >/dev/null || bail "mkdata synth failed"

# Common options of a tiny run; each case adds what it tests.
SMALL=(-model mlp -mlp_hidden 8 -log_every 0)

for np in 1 2; do
  # sp runs on one rank only; the good runs use ddp on more.
  B=sp
  [ "$np" -gt 1 ] && B=ddp
  expect_error "np=$np unknown option -epochz" -epochz \
    run_mpi "$np" "$T" "$MPITRAIN" -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 \
    -epochz 3 -output_dir "$(out)"
  expect_error "np=$np malformed -epochs ten" -epochs \
    run_mpi "$np" "$T" "$MPITRAIN" -data_train "$TRAIN" "${SMALL[@]}" -epochs ten -batch_size 8 \
    -output_dir "$(out)"
  expect_error "np=$np out-of-range -lr -1" -lr \
    run_mpi "$np" "$T" "$MPITRAIN" -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 \
    -lr -1 -output_dir "$(out)"
  expect_error "np=$np -batch_size 0" -batch_size \
    run_mpi "$np" "$T" "$MPITRAIN" -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 0 \
    -output_dir "$(out)"
  expect_error "np=$np unknown -backend foo" -backend \
    run_mpi "$np" "$T" "$MPITRAIN" -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 \
    -backend foo -output_dir "$(out)"
  # a policy the strategy's traits do not allow: refused naming those that do
  expect_error "np=$np -backend fsdp-dp" \
    "option -backend fsdp-dp: the DP-SGD policy (-dp) does not compose with the fsdp strategy; it does in: sp-dp, ddp-dp" \
    run_mpi "$np" "$T" "$MPITRAIN" -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 \
    -backend fsdp-dp -output_dir "$(out)"
  expect_error "np=$np -backend fsdp-amp-apex" \
    "option -backend fsdp-amp-apex: the O2 mixed precision policy (-amp-apex) does not compose with the fsdp strategy; it does in: sp-amp-apex, ddp-amp-apex" \
    run_mpi "$np" "$T" "$MPITRAIN" -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 \
    -backend fsdp-amp-apex -output_dir "$(out)"
  expect_error "np=$np -optimizer lamb" "option -optimizer: 'lamb' is not one of: sgd, adamw" \
    run_mpi "$np" "$T" "$MPITRAIN" -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 \
    -optimizer lamb -output_dir "$(out)"
  # an empty entry of a comma-separated list is refused, not dropped
  for bad_list in "-mlp_hidden 1024,,1024" "-mlp_hidden 64," "-mlp_hidden ,64" \
    "-cnn_channels 8,,8" "-lr_milestones 5,,6" "-data_val $TRAIN,,$TRAIN" "-outputs val,"; do
    set -- $bad_list
    expect_error "np=$np $bad_list" "option $1: '$2' has an empty entry" \
      run_mpi "$np" "$T" "$MPITRAIN" -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 \
      "$@" -output_dir "$(out)"
  done
  expect_error "np=$np missing -data_train" -data_train \
    run_mpi "$np" "$T" "$MPITRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 -output_dir "$(out)"
  d=$(out)
  expect_error "np=$np -options_file missing file" nonexistent.opts \
    run_mpi "$np" "$T" "$MPITRAIN" -options_file "$WORK/nonexistent.opts" -output_dir "$d"
  expect_empty_dir "np=$np failed runs leave no output" "$d"

  expect_ok "np=$np -help exits 0" run_mpi "$np" "$T" "$MPITRAIN" -help
  for opt in -backend -epochs -ddp_bucket_mb -data_train -batch_size -lr; do
    expect_output "np=$np -help lists $opt" "$opt"
  done

  # Positive controls: the same small run without the mistake trains.
  d=$(out)
  expect_ok "np=$np good run ($B)" \
    run_mpi "$np" "$T" "$MPITRAIN" -backend $B -data_train "$TRAIN" -data_val "$WORK/val.h5" \
    "${SMALL[@]}" -epochs 1 -batch_size 8 -output_dir "$d"
  expect_nonempty_dir "np=$np good run wrote output" "$d"

  # -options_file: a bad value in the file is reported; a good file trains.
  f=$WORK/bad-$np.opts
  printf '%s\n' "# a comment line" "-data_train $TRAIN" "-model mlp" "-mlp_hidden 8" \
    "-epochs ten" "-batch_size 8" >"$f"
  expect_error "np=$np -options_file with -epochs ten" -epochs \
    run_mpi "$np" "$T" "$MPITRAIN" -options_file "$f" -output_dir "$(out)"
  f=$WORK/good-$np.opts
  d=$(out)
  printf '%s\n' "# a good options file" "-data_train $TRAIN" "-model mlp" "-mlp_hidden 8" \
    "-epochs 1" "-batch_size 8" "-log_every 0" "-output_dir $d" "-backend $B" >"$f"
  expect_ok "np=$np -options_file good file trains" \
    run_mpi "$np" "$T" "$MPITRAIN" -options_file "$f"
  expect_nonempty_dir "np=$np -options_file run wrote output" "$d"

  # PETSC_OPTIONS: read like the command line.
  expect_error "np=$np PETSC_OPTIONS with -lr -1" -lr \
    with_env PETSC_OPTIONS="-lr -1" \
    run_mpi "$np" "$T" "$MPITRAIN" -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 \
    -output_dir "$(out)"
  d=$(out)
  expect_ok "np=$np PETSC_OPTIONS good options train" \
    with_env PETSC_OPTIONS="-backend $B -data_train $TRAIN -model mlp -mlp_hidden 8 -epochs 1 \
-batch_size 8 -log_every 0 -output_dir $d" \
    run_mpi "$np" "$T" "$MPITRAIN"
  expect_nonempty_dir "np=$np PETSC_OPTIONS run wrote output" "$d"
done

# Divisibility needs more than one rank.
expect_error "np=2 -batch_size 100 -micro_batch_size 16" -batch_size \
  run_mpi 2 "$T" "$MPITRAIN" -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 100 \
  -micro_batch_size 16 -output_dir "$(out)"
expect_error "np=2 -batch_size 7 (odd)" -batch_size \
  run_mpi 2 "$T" "$MPITRAIN" -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 7 \
  -output_dir "$(out)"
d=$(out)
expect_ok "np=2 good run (ddp, accumulation 2)" \
  run_mpi 2 "$T" "$MPITRAIN" -backend ddp -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 \
  -batch_size 16 -micro_batch_size 4 -output_dir "$d"
expect_nonempty_dir "np=2 ddp run wrote output" "$d"

# a diverging run stops on every rank with one message naming the step
expect_error "np=2 non-finite training loss stops the run" "training loss is" \
  run_mpi 2 "$T" "$MPITRAIN" -backend ddp -data_train "$TRAIN" -model mlp -mlp_hidden 8 -epochs 1 \
  -batch_size 16 -lr 1e6 -log_every 2 -output_dir "$(out)"

# -version and --version: mpitrain's version (not PETSc's alone) and the
# libraries', once on rank 0, exit 0, nothing else run
VER=$(sed -n 's/^#define MPITRAIN_VERSION "\(.*\)"$/\1/p' "$top_srcdir/include/mpitrain/mpitrain.h")
[ -n "$VER" ] || bail "no MPITRAIN_VERSION in include/mpitrain/mpitrain.h"
for v in -version --version; do
  for np in 1 2; do
    d=$(out)
    expect_ok "np=$np $v exits 0" run_mpi "$np" "$T" "$MPITRAIN" "$v" -data_train "$TRAIN" \
      "${SMALL[@]}" -epochs 1 -batch_size 8 -output_dir "$d"
    n=$(last_output | grep -c "^mpitrain $VER\$")
    [ "$n" = 1 ] && pass "np=$np $v: 'mpitrain $VER' once" || fail "np=$np $v: 'mpitrain $VER' once" "$n times"
    for lib in "  PETSc [0-9]+\.[0-9]+\.[0-9]+$" "  HDF5 [0-9]+\.[0-9]+\.[0-9]+$" "  MPI [0-9]+\.[0-9]+: ."; do
      last_output | grep -qE "^$lib" && pass "np=$np $v: '$lib'" || fail "np=$np $v: '$lib'" "missing"
    done
    expect_empty_dir "np=$np $v: nothing run or written" "$d"
  done
done

# An option the backend would ignore is refused (one table, config_applies.c),
# naming the option, the backend and the backends where it applies; a
# default is not an option given, so the same runs without them train.
AMP_WITH="it applies with: sp-amp, sp-amp-apex, ddp-amp, ddp-amp-apex, fsdp-amp"
expect_error "np=1 -backend sp -amp_dtype fp16 -loss_scale dynamic" \
  "option -amp_dtype: needs a mixed-precision policy (-amp or -amp-apex), which -backend sp does not have; $AMP_WITH" \
  run_mpi 1 "$T" "$MPITRAIN" -backend sp -amp_dtype fp16 -loss_scale dynamic -data_train "$TRAIN" \
  "${SMALL[@]}" -epochs 1 -batch_size 8 -output_dir "$(out)"
expect_error "np=1 -backend sp -loss_scale_init 1024" \
  "option -loss_scale_init: needs a mixed-precision policy (-amp or -amp-apex), which -backend sp does not have; $AMP_WITH" \
  run_mpi 1 "$T" "$MPITRAIN" -backend sp -loss_scale_init 1024 -data_train "$TRAIN" \
  "${SMALL[@]}" -epochs 1 -batch_size 8 -output_dir "$(out)"
expect_error "np=1 -backend sp -ddp_bucket_mb 4" \
  "option -ddp_bucket_mb: needs a strategy of several ranks, which -backend sp does not have; it applies with: ddp, ddp-amp, ddp-amp-apex, ddp-dp, fsdp, fsdp-amp" \
  run_mpi 1 "$T" "$MPITRAIN" -backend sp -ddp_bucket_mb 4 -data_train "$TRAIN" \
  "${SMALL[@]}" -epochs 1 -batch_size 8 -output_dir "$(out)"
expect_error "np=1 -backend sp-amp -sync_module_states 0" \
  "option -sync_module_states: needs a strategy of several ranks, which -backend sp-amp does not have" \
  run_mpi 1 "$T" "$MPITRAIN" -backend sp-amp -sync_module_states 0 -data_train "$TRAIN" \
  "${SMALL[@]}" -epochs 1 -batch_size 8 -output_dir "$(out)"
expect_error "np=2 -backend ddp-dp -ddp_overlap 0" \
  "option -ddp_overlap: needs a replicated strategy of several ranks without DP-SGD, which -backend ddp-dp does not have; it applies with: ddp, ddp-amp, ddp-amp-apex" \
  run_mpi 2 "$T" "$MPITRAIN" -backend ddp-dp -dp_noise_multiplier 1 -ddp_overlap 0 \
  -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 -output_dir "$(out)"
expect_error "np=2 -backend ddp -fsdp_prefetch 0" \
  "option -fsdp_prefetch: needs a sharded strategy, which -backend ddp does not have; it applies with: fsdp, fsdp-amp" \
  run_mpi 2 "$T" "$MPITRAIN" -backend ddp -fsdp_prefetch 0 -data_train "$TRAIN" \
  "${SMALL[@]}" -epochs 1 -batch_size 8 -output_dir "$(out)"
expect_error "np=2 -backend fsdp-amp -ddp_reduce_dtype bf16" \
  "option -ddp_reduce_dtype: needs a mixed-precision backend whose strategy all-reduces in low precision, which -backend fsdp-amp does not have; it applies with: ddp-amp, ddp-amp-apex" \
  run_mpi 2 "$T" "$MPITRAIN" -backend fsdp-amp -ddp_reduce_dtype bf16 -data_train "$TRAIN" \
  "${SMALL[@]}" -epochs 1 -batch_size 8 -output_dir "$(out)"
expect_error "np=2 -backend ddp -dp_delta 1e-5" \
  "option -dp_delta: needs the DP-SGD policy (-dp), which -backend ddp does not have; it applies with: sp-dp, ddp-dp" \
  run_mpi 2 "$T" "$MPITRAIN" -backend ddp -dp_delta 1e-5 -data_train "$TRAIN" \
  "${SMALL[@]}" -epochs 1 -batch_size 8 -output_dir "$(out)"
expect_ok "np=1 -backend sp-amp -amp_dtype fp16 -loss_scale dynamic trains" \
  run_mpi 1 "$T" "$MPITRAIN" -backend sp-amp -amp_dtype fp16 -loss_scale dynamic -data_train "$TRAIN" \
  "${SMALL[@]}" -epochs 1 -batch_size 8 -output_dir "$(out)"
expect_error "np=2 -ddp_overlap maybe" "option -ddp_overlap: 'maybe' is not auto, 1 or 0" \
  run_mpi 2 "$T" "$MPITRAIN" -backend ddp -ddp_overlap maybe -data_train "$TRAIN" \
  "${SMALL[@]}" -epochs 1 -batch_size 8 -output_dir "$(out)"
expect_ok "np=2 -backend ddp -ddp_bucket_mb 4 -ddp_overlap 0 trains" \
  run_mpi 2 "$T" "$MPITRAIN" -backend ddp -ddp_bucket_mb 4 -ddp_overlap 0 -sync_module_states 1 \
  -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 -output_dir "$(out)"

# -threads 0 counts the cores the ranks may run on (their affinity masks, as
# a Slurm cpuset sets them), not the machine's: pinned to one core, 1 thread
pinned() { # CPULIST run_mpi-ARGS...: run_mpi with this shell's mask set
  (
    taskset -p -c "$1" "$BASHPID" >/dev/null || exit 99
    shift
    run_mpi "$@"
  )
}
n=$(nproc)
if command -v taskset >/dev/null 2>&1 && [ "$n" -ge 2 ]; then
  threads_run() { # NAME EXPECTED NP [CPULIST]
    local name=$1 want=$2 np=$3 b=sp run=(run_mpi)
    [ "$np" -gt 1 ] && b=ddp
    [ -n "${4:-}" ] && run=(pinned "$4")
    expect_ok "$name" "${run[@]}" "$np" "$T" "$MPITRAIN" -backend "$b" -data_train "$TRAIN" \
      "${SMALL[@]}" -epochs 1 -batch_size 8 -threads 0 -output_dir "$(out)"
    expect_output "$name: $want" "$want"
  }
  threads_run "np=1 -threads 0 on all $n cores" "1 rank x $n threads" 1
  threads_run "np=1 -threads 0 pinned to core 0" "1 rank x 1 thread" 1 0
  threads_run "np=1 -threads 0 pinned to cores 0,1" "1 rank x 2 threads" 1 0,1
  expect_no_output "np=1 on its own 2 cores: no warning that ranks share cores" "they share cores"
  threads_run "np=2 -threads 0 pinned to core 0" "2 ranks x 1 thread" 2 0
  expect_output "np=2 on one core: a warning that ranks share cores" "they share cores"
  # -ddp_overlap auto: overlap only with a core no rank computes on (or a
  # GPU, or several nodes: test_multihost.sh)
  expect_output "np=2 on one core: -ddp_overlap auto reduces after the backward" \
    "ddp: gradients all-reduced after the backward (-ddp_overlap auto: one node, no core free: 2 ranks x 1 thread on 1 core)"
  expect_ok "np=2 -threads 1 pinned to cores 0,1" pinned 0,1 2 "$T" "$MPITRAIN" -backend ddp \
    -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 -threads 1 -output_dir "$(out)"
  expect_output "np=2 x 1 thread on 2 cores: after the backward" "no core free: 2 ranks x 1 thread on 2 cores"
  if [ "$n" -ge 3 ]; then
    expect_ok "np=2 -threads 1 pinned to cores 0-2" pinned 0-2 2 "$T" "$MPITRAIN" -backend ddp \
      -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 -threads 1 -output_dir "$(out)"
    expect_output "np=2 x 1 thread on 3 cores: during the backward" \
      "during the backward (-ddp_overlap auto: a core left free)"
  fi
  expect_ok "np=2 -threads 1 -ddp_overlap 1 pinned to cores 0,1" pinned 0,1 2 "$T" "$MPITRAIN" \
    -backend ddp -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 -threads 1 \
    -ddp_overlap 1 -output_dir "$(out)"
  expect_no_output "an explicit -ddp_overlap 1 is not auto's" "-ddp_overlap auto"
else
  echo "# SKIP -threads 0 under taskset: no taskset or one core"
fi

# -device: a bad word, a model or backend without a CUDA path, and (where
# this build or node has no GPU) cuda itself are refused naming -device;
# auto falls back to the CPU and says why; nothing is written
expect_error "np=2 -device gpu" "option -device: 'gpu'" \
  run_mpi 2 "$T" "$MPITRAIN" -backend ddp -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 \
  -batch_size 8 -device gpu -output_dir "$(out)"
expect_error "np=1 -device cuda -backend sp-dp" "option -device cuda: DP-SGD (-backend sp-dp)" \
  run_mpi 1 "$T" "$MPITRAIN" -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 \
  -backend sp-dp -dp_noise_multiplier 1 -device cuda -output_dir "$(out)"
expect_error "np=2 -device cuda -ddp_reduce_dtype bf16" \
  "option -device cuda: -ddp_reduce_dtype bf16 has no CUDA path" \
  run_mpi 2 "$T" "$MPITRAIN" -backend ddp-amp -ddp_reduce_dtype bf16 -data_train "$TRAIN" \
  "${SMALL[@]}" -epochs 1 -batch_size 8 -device cuda -output_dir "$(out)"
expect_error "np=2 -fsdp_cpu_offload with no_shard" "option -fsdp_cpu_offload: needs -fsdp_sharding_strategy shard_grad_op" \
  run_mpi 2 "$T" "$MPITRAIN" -backend fsdp -fsdp_sharding_strategy no_shard -fsdp_cpu_offload \
  -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 -device cuda -output_dir "$(out)"
expect_error "np=2 -fsdp_cpu_offload with -device auto on a CPU run" "option -fsdp_cpu_offload: needs a GPU" \
  run_mpi 2 "$T" "$MPITRAIN" -backend fsdp -fsdp_sharding_strategy shard_grad_op \
  -fsdp_cpu_offload -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 -device auto \
  -output_dir "$(out)"
# read through PetscOptionsGetBool, a bad value printed PETSc's traceback (tests/fuzz)
expect_error "np=1 -fsdp_cpu_offload 1e-5" "option -fsdp_cpu_offload: '1e-5' is not a boolean" \
  run_mpi 1 "$T" "$MPITRAIN" -backend fsdp -fsdp_cpu_offload 1e-5 -data_train "$TRAIN" \
  "${SMALL[@]}" -epochs 1 -batch_size 8 -output_dir "$(out)"
expect_no_output "np=1 -fsdp_cpu_offload 1e-5: no PETSc traceback" "PETSC ERROR"
expect_error "np=1 -device cuda -precision fp64" "option -device cuda: -precision fp64" \
  run_mpi 1 "$T" "$MPITRAIN" -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 \
  -precision fp64 -device cuda -output_dir "$(out)"
if ! nvidia-smi -L >/dev/null 2>&1; then # no GPU here
  d=$(out)
  expect_error "np=2 -device cuda without a GPU" "-device cuda:" \
    run_mpi 2 "$T" "$MPITRAIN" -backend ddp -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 \
    -batch_size 8 -device cuda -output_dir "$d"
  expect_empty_dir "np=2 -device cuda without a GPU wrote nothing" "$d"
  expect_ok "np=2 -device auto without a GPU runs" run_mpi 2 "$T" "$MPITRAIN" -backend ddp \
    -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 -device auto -output_dir "$(out)"
  expect_output "np=2 -device auto: on the CPU, saying why" "-device auto: cpu ("
fi
expect_ok "np=1 -device auto -precision fp64 runs" run_mpi 1 "$T" "$MPITRAIN" \
  -data_train "$TRAIN" "${SMALL[@]}" -epochs 1 -batch_size 8 -precision fp64 -device auto \
  -output_dir "$(out)"
expect_output "np=1 -device auto -precision fp64: on the CPU, saying why" \
  "-device auto: cpu (-precision fp64 has no CUDA path yet)"

finish
