#!/usr/bin/env bash
# fsdp (sharded data parallelism):
# - every strategy (full_shard, shard_grad_op, hybrid_shard with
#   -fsdp_node_size 2, no_shard; -fsdp_unit model) at 2 and 4 ranks gives
#   ddp's parameters to 1e-5 for mlp (AdamW), cnn with batch norm and gpt,
#   with gradient accumulation and clipping by the global norm;
# - fsdp-amp equals ddp-amp (bf16; fp16 with the loss scaler, a skipped
#   step included);
# - checkpoints hold the global tensors: fsdp(4) -> ddp(2), ddp(2) -> fsdp(3),
#   fsdp(2) -> sp equal the uninterrupted run to 1e-6, fsdp(2) -> fsdp(2)
#   bit for bit;
# - the measured memory per rank shrinks with the ranks (shards), with
#   -fsdp_prefetch 0 it is within 0.2 MiB of ZeRO's bound (total/N + the
#   largest unit's parameters and gradient), and a run whose forecast
#   exceeds -memory_limit_mb is refused with the numbers;
# - bad sharding options are refused, naming the option.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MKDATA" "$MT_DATA"
"$MKDATA" synth "$WORK/train.h5" 600 20 4 41 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 101 20 4 42 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/img.h5" 300 64 3 43 image >/dev/null || bail "mkdata synth image failed"
text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || { echo "# SKIP: $text missing"; exit 77; }
"$MT_DATA" text "$text" -out "$WORK" -name gpl -val_fraction 0.1 >/dev/null || bail "mt-data text failed"

mlp=(-model mlp -mlp_hidden 40,24 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5" -epochs 2
  -max_train_steps_per_epoch 6 -batch_size 24 -optimizer adamw -lr 3e-3 -weight_decay 1e-2
  -clip_grad_norm 0.5 -seed 3)
cnn=(-model cnn -cnn_channels 4,6 -cnn_kernel 3 -cnn_hidden 16 -cnn_batchnorm -data_train "$WORK/img.h5"
  -data_val "$WORK/img.h5" -max_val_steps_per_epoch 2 -epochs 1 -max_train_steps_per_epoch 5
  -batch_size 24 -lr 0.05 -momentum 0.9 -clip_grad_norm 1.0)
# SGD for gpt: AdamW magnifies the rounding differences of near-zero
# gradients (test_gpt.sh)
gpt=(-model gpt -gpt_layers 2 -gpt_heads 2 -gpt_embd 32 -gpt_block 16 -data_train "$WORK/gpl-train.h5"
  -data_val "$WORK/gpl-val.h5" -max_val_steps_per_epoch 1 -val_batch_size 20 -epochs 1
  -max_train_steps_per_epoch 6 -batch_size 8 -optimizer sgd -lr 0.1 -momentum 0.9 -clip_grad_norm 1.0)

run() { # NAME NP MODEL-ARRAY BACKEND OPTIONS...
  local name=$1 np=$2 arr=$3 be=$4
  shift 4
  local -n a=$arr
  run_logged run_mpi "$np" 120 "$MPITRAIN" "${a[@]}" -threads 1 -log_every 0 -backend "$be" "$@" \
    -output_dir "$WORK/$name"
  [ "$LAST_RC" = 0 ] && pass "train $name ($np ranks, $be $*)" || fail "train $name" "exit $LAST_RC"
}
same() { # NAME A B TOL
  run_logged "$MKDATA" compare "$WORK/$2/model_final.h5" "$WORK/$3/model_final.h5" "$4"
  [ "$LAST_RC" = 0 ] && pass "$1" || fail "$1" "parameters differ beyond $4"
}

for m in mlp cnn gpt; do
  mb=6; [ $m = gpt ] && mb=2
  run "$m-ddp2" 2 $m ddp -micro_batch_size $mb
  run "$m-ddp4" 4 $m ddp -micro_batch_size $mb
  for np in 2 4; do
    for s in full_shard shard_grad_op no_shard; do
      unit=layer; [ $m = gpt ] && unit=block # the same: the model's own units
      run "$m-$s$np" $np $m fsdp -fsdp_sharding_strategy $s -micro_batch_size $mb -fsdp_unit $unit
      same "$m: fsdp $s at $np ranks (micro-batch $mb) == ddp" "$m-ddp$np" "$m-$s$np" 1e-5
    done
  done
  run "$m-hybrid4" 4 $m fsdp -fsdp_sharding_strategy hybrid_shard -fsdp_node_size 2 -micro_batch_size $mb
  same "$m: fsdp hybrid_shard (groups of 2) at 4 ranks == ddp" "$m-ddp4" "$m-hybrid4" 1e-5
  run "$m-whole2" 2 $m fsdp -fsdp_unit model -micro_batch_size $mb
  expect_output "$m: the strategy is printed" "fsdp: full_shard, unit model"
  same "$m: fsdp with one unit (-fsdp_unit model) == ddp" "$m-ddp2" "$m-whole2" 1e-5
done

# ranks initialise alike from the seed: without the start-up broadcast
# (-sync_module_states 0) ddp ends the same
run mlp-nosync 2 mlp ddp -micro_batch_size 6 -sync_module_states 0
same "-sync_module_states 0 (no start-up broadcast) == 1 here" mlp-ddp2 mlp-nosync 0

# fsdp-amp (autocast-style; bf16, and fp16 with the dynamic loss scaler) ==
# ddp-amp; an inf in one rank's gradient shard skips the step on every rank
for dt in bf16 fp16; do
  run "ddp-amp-$dt" 2 mlp ddp-amp -amp_dtype $dt -micro_batch_size 6
  run "fsdp-amp-$dt" 2 mlp fsdp-amp -amp_dtype $dt -micro_batch_size 6
  same "fsdp-amp ($dt) == ddp-amp" "ddp-amp-$dt" "fsdp-amp-$dt" 1e-5
done
export MT_DEBUG_INF_STEP=3 MT_DEBUG_INF_RANK=1
run ddp-amp-inf 2 mlp ddp-amp -amp_dtype fp16
run fsdp-amp-inf 2 mlp fsdp-amp -amp_dtype fp16
expect_output "the step with an inf is skipped" "1 of 12 steps skipped"
unset MT_DEBUG_INF_STEP MT_DEBUG_INF_RANK
same "fsdp-amp with a skipped step == ddp-amp" ddp-amp-inf fsdp-amp-inf 1e-5

# checkpoints: the global tensors, whatever wrote them
ck=(-checkpoint_keep 0 -checkpoint_every_steps 4)
run U-fsdp4 4 mlp fsdp "${ck[@]}"
run fsdp4-ddp2 2 mlp ddp -restart "$WORK/U-fsdp4/checkpoints/ckpt-4.h5"
same "fsdp(4) checkpoint -> ddp(2) == the uninterrupted run" U-fsdp4 fsdp4-ddp2 1e-6
run U-ddp2 2 mlp ddp "${ck[@]}"
run ddp2-fsdp3 3 mlp fsdp -restart "$WORK/U-ddp2/checkpoints/ckpt-8.h5"
same "ddp(2) checkpoint -> fsdp(3) == the uninterrupted run" U-ddp2 ddp2-fsdp3 1e-6
run U-fsdp2 2 mlp fsdp "${ck[@]}" -fsdp_sharding_strategy shard_grad_op
run fsdp2-sp 1 mlp sp -restart "$WORK/U-fsdp2/checkpoints/ckpt-4.h5"
same "fsdp(2) checkpoint -> sp == the uninterrupted run" U-fsdp2 fsdp2-sp 1e-6
run fsdp2-fsdp2 2 mlp fsdp -restart "$WORK/U-fsdp2/checkpoints/ckpt-8.h5" -fsdp_sharding_strategy shard_grad_op
same "fsdp(2) checkpoint -> fsdp(2) is bit-exact" U-fsdp2 fsdp2-fsdp2 0

# memory: shards shrink with the ranks
big=(-model gpt -gpt_layers 4 -gpt_heads 4 -gpt_embd 128 -gpt_block 32 -data_train "$WORK/gpl-train.h5"
  -epochs 1 -max_train_steps_per_epoch 2 -batch_size 4 -optimizer adamw -lr 1e-3)
total() { sed -n 's/^memory per rank (measured.*; total \([0-9.]*\) MiB.*/\1/p' "$LAST_LOG"; }
run mem-ddp 4 big ddp -ddp_shard_optimizer 0
t_ddp=$(total)
run mem-fsdp 4 big fsdp
t_fsdp=$(total)
if [ -n "$t_ddp" ] && awk -v a="$t_fsdp" -v b="$t_ddp" 'BEGIN { exit !(a > 0 && a < 0.6 * b) }'; then
  pass "full_shard at 4 ranks holds $t_fsdp MiB per rank, ddp $t_ddp MiB"
else fail "full_shard at 4 ranks holds < 60% of ddp's memory" "fsdp '$t_fsdp' ddp '$t_ddp'"; fi
# -fsdp_prefetch 0 holds one unit (parameters and gradient) at a time: ZeRO's
# bound total/N + the largest unit, up to 0.2 MiB (gpt's tied embedding
# keeps its gradient through the backward: (256 + 32) x 128 floats, 0.14
# MiB; a unit's two edge pages stay: 6 units, 0.05 MiB); the same bits as
# with prefetch
bound() { sed -n 's/^memory per rank (measured.* gradient) \([0-9.]*\) MiB.*/\1/p' "$LAST_LOG"; }
for np in 2 4; do
  run mem-pf0-$np $np big fsdp -fsdp_prefetch 0
  t0=$(total) b0=$(bound)
  if [ -n "$b0" ] && awk -v a="$t0" -v b="$b0" 'BEGIN { exit !(a > 0 && a <= b + 0.2) }'; then
    pass "full_shard, -fsdp_prefetch 0, $np ranks: $t0 MiB per rank, ZeRO's bound $b0 + 0.2"
  else fail "full_shard, -fsdp_prefetch 0, $np ranks: ZeRO's bound + 0.2 MiB" "'$t0' bound '$b0'"; fi
done
run mem-pf1-2 2 big fsdp
same "-fsdp_prefetch 0 == 1, bit for bit" mem-pf1-2 mem-pf0-2 0
expect_error "a forecast past -memory_limit_mb is refused with the numbers" \
  "exceeds 2.0 MiB; use more ranks, -backend fsdp" \
  run_mpi 2 60 "$MPITRAIN" "${big[@]}" -backend ddp -memory_limit_mb 2 -output_dir "$WORK/mem-x"

# options
expect_error "-fsdp_cpu_offload needs a device" "option -fsdp_cpu_offload: keeps the sharded" \
  run_mpi 2 60 "$MPITRAIN" "${mlp[@]}" -backend fsdp -fsdp_cpu_offload -output_dir "$WORK/x1"
expect_error "an unknown strategy is refused" "option -fsdp_sharding_strategy: 'zero3'" \
  run_mpi 2 60 "$MPITRAIN" "${mlp[@]}" -backend fsdp -fsdp_sharding_strategy zero3 -output_dir "$WORK/x2"
expect_error "-fsdp_node_size only with hybrid_shard" "option -fsdp_node_size: only for" \
  run_mpi 2 60 "$MPITRAIN" "${mlp[@]}" -backend fsdp -fsdp_node_size 2 -output_dir "$WORK/x3"
expect_error "groups must divide the ranks" "option -fsdp_node_size: 4 ranks are not whole groups of 3" \
  run_mpi 4 60 "$MPITRAIN" "${mlp[@]}" -backend fsdp -fsdp_sharding_strategy hybrid_shard \
  -fsdp_node_size 3 -output_dir "$WORK/x4"
expect_error "sharding options need -backend fsdp" "option -fsdp_unit: needs a sharded strategy, which -backend ddp does not have; it applies with: fsdp, fsdp-amp" \
  run_mpi 2 60 "$MPITRAIN" "${mlp[@]}" -backend ddp -fsdp_unit model -output_dir "$WORK/x5"
finish
