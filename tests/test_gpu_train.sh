#!/usr/bin/env bash
# -device cuda against -device cpu (needs a CUDA build and a GPU; else one
# "skipped" line and the automake skip code 77): mlp, cnn (batch norm,
# dropout) and gpt trained for a few steps on each give the same parameters
# within 1e-4 (the GPU sums in another order), and the validation pass on
# the device the same outputs (the CPU model holding no batch of
# activations beside the device's); bf16 and fp16 autocast (sp-amp) learn; a
# checkpoint written on the GPU restarts on the CPU and one written on the
# CPU on the GPU, ending where the uninterrupted run ends; fsdp
# shard_grad_op with -fsdp_cpu_offload on one GPU gives sp's parameters;
# fsdp full_shard and hybrid_shard (units gathered into buffers of their
# own: mlp, cnn, gpt with its tied head, micro-batches, one unit for the
# model, validation on the gathered model, autocast, a checkpoint that
# restarts on the CPU) give sp's;
# with two GPUs, ddp on 2 ranks (NCCL, overlapped or not) gives sp's, fsdp
# shard_grad_op (with and without offload), full_shard and hybrid_shard
# give ddp's, and their checkpoints restart under ddp on the CPU.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

need_bin "$MPITRAIN" "$MKDATA" "$MT_DATA"
make_work
unset PETSC_OPTIONS

"$MKDATA" synth "$WORK/train.h5" 512 32 4 1 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 128 32 4 2 >/dev/null || bail "mkdata synth failed"

# the probe: -device auto says where it runs
run_logged run_mpi 1 120 "$MPITRAIN" -data_train "$WORK/train.h5" -model mlp -mlp_hidden 8 \
  -epochs 0 -batch_size 8 -log_every 0 -device auto -output_dir "$WORK/probe"
if ! last_output | grep -q -- '-device auto: cuda:'; then
  why=$(last_output | sed -n 's/.*-device auto: cpu (\(.*\))$/\1/p' | head -1)
  echo "skipped: no CUDA device (${why:-see $LAST_LOG})"
  exit 77
fi
pass "-device auto finds a CUDA device"

mlp=(-model mlp -mlp_hidden 64,32 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5"
  -batch_size 32 -optimizer sgd -lr 0.05 -momentum 0.9 -log_every 0 -checkpoint_at_end 0)
train() { # NAME NP DEVICE ARGS...
  local name=$1 np=$2 dev=$3
  shift 3
  run_logged run_mpi "$np" 300 "$MPITRAIN" "$@" -device "$dev" -output_dir "$WORK/$name"
  [ "$LAST_RC" = 0 ] && pass "train $name ($np rank(s), -device $dev)" ||
    fail "train $name" "exit $LAST_RC"
}
same() { # LABEL A B RTOL
  run_logged "$MKDATA" compare "$WORK/$2/model_final.h5" "$WORK/$3/model_final.h5" "$4"
  [ "$LAST_RC" = 0 ] && pass "$1" || fail "$1" "parameters differ beyond $4"
}

outs=(-outputs val -outputs_logits 1)
train mlp-cpu 1 cpu "${mlp[@]}" -epochs 2 -backend sp "${outs[@]}"
train mlp-gpu 1 cuda "${mlp[@]}" -epochs 2 -backend sp "${outs[@]}"
same "mlp: -device cuda gives the CPU's parameters" mlp-cpu mlp-gpu 1e-4
# the validation pass on the device: losses, predictions and logits per sample
run_logged "$MKDATA" rows "$WORK/mlp-cpu/outputs/val0-epoch2.h5" \
  "$WORK/mlp-gpu/outputs/val0-epoch2.h5" 1e-4
[ "$LAST_RC" = 0 ] && pass "mlp: validation outputs on the device are the CPU's" ||
  fail "mlp: validation outputs on the device are the CPU's" "rows differ beyond 1e-4"
train mlp-adamw 1 cuda "${mlp[@]}" -epochs 2 -backend sp -optimizer adamw -lr 0.003 \
  -clip_grad_norm 0.5
train mlp-adamw-cpu 1 cpu "${mlp[@]}" -epochs 2 -backend sp -optimizer adamw -lr 0.003 \
  -clip_grad_norm 0.5
same "mlp: AdamW and clipping on the device" mlp-adamw-cpu mlp-adamw 1e-3

# checkpoints cross the device: epoch 1 on one side, epoch 2 on the other
ck=(-checkpoint_every_epochs 1 -checkpoint_keep 0)
train mlp-gpu-a 1 cuda "${mlp[@]}" -epochs 1 -backend sp "${ck[@]}" -checkpoint_dir "$WORK/ckg"
train mlp-gpu-b 1 cpu "${mlp[@]}" -epochs 2 -backend sp "${ck[@]}" -checkpoint_dir "$WORK/ckg" \
  -restart auto
same "a GPU checkpoint restarts on the CPU" mlp-gpu mlp-gpu-b 1e-4
train mlp-cpu-a 1 cpu "${mlp[@]}" -epochs 1 -backend sp "${ck[@]}" -checkpoint_dir "$WORK/ckc"
train mlp-cpu-b 1 cuda "${mlp[@]}" -epochs 2 -backend sp "${ck[@]}" -checkpoint_dir "$WORK/ckc" \
  -restart auto
same "a CPU checkpoint restarts on the GPU" mlp-cpu mlp-cpu-b 1e-4

for dt in bf16 fp16; do # fp16: dynamic loss scaling on the device
  train mlp-amp-$dt 1 cuda "${mlp[@]}" -epochs 2 -backend sp-amp -amp_dtype $dt
  if ! awk -F, 'NR > 1 && $7 == 0 && $9 + 0 > 0 && $9 + 0 < 1.5 {ok = 1} END {exit !ok}' \
    "$WORK/mlp-amp-$dt/curve.csv"; then
    fail "sp-amp ($dt) on the device learns" "validation loss not below 1.5: $(cat "$WORK/mlp-amp-$dt/curve.csv")"
  else
    pass "sp-amp ($dt) on the device learns"
  fi
done
train mlp-apex 1 cuda "${mlp[@]}" -epochs 2 -backend sp-amp-apex
if awk -F, 'NR > 1 && $7 == 0 && $9 + 0 > 0 && $9 + 0 < 1.5 {ok = 1} END {exit !ok}' \
  "$WORK/mlp-apex/curve.csv"; then
  pass "sp-amp-apex (O2, bf16) on the device learns"
else
  fail "sp-amp-apex (O2, bf16) on the device learns" "$(cat "$WORK/mlp-apex/curve.csv")"
fi
[ -s "$WORK/mlp-amp-fp16/loss_scale.csv" ] && pass "fp16 on the device writes loss_scale.csv" ||
  fail "fp16 on the device writes loss_scale.csv" "missing or empty"

# cnn with batch norm (running statistics on the device) and dropout
"$MKDATA" synth "$WORK/img.h5" 256 64 4 3 image >/dev/null || bail "mkdata synth image failed"
cnn=(-model cnn -cnn_channels 4,8 -cnn_hidden 16 -cnn_batchnorm 1 -cnn_dropout 0.25
  -data_train "$WORK/img.h5" -data_val "$WORK/img.h5" -batch_size 32 -optimizer sgd -lr 0.05
  -log_every 0 -checkpoint_at_end 0 -epochs 1 -backend sp)
train cnn-cpu 1 cpu "${cnn[@]}"
train cnn-gpu 1 cuda "${cnn[@]}"
same "cnn: -device cuda gives the CPU's parameters and running statistics" cnn-cpu cnn-gpu 1e-4
train cnn-fs 1 cuda "${cnn[@]}" -backend fsdp
same "cnn: fsdp full_shard on one GPU gives sp's" cnn-gpu cnn-fs 1e-4

text=/usr/share/common-licenses/GPL-3
if [ -f "$text" ]; then
  run_logged "$MT_DATA" text "$text" -out "$WORK" -name gpl -val_fraction 0.1
  gpt=(-model gpt -gpt_layers 2 -gpt_heads 2 -gpt_embd 32 -gpt_block 16
    -data_train "$WORK/gpl-train.h5" -data_val "$WORK/gpl-val.h5" -batch_size 8 -log_every 0
    -epochs 1 -max_train_steps_per_epoch 6 -max_val_steps_per_epoch 1 -val_batch_size 20
    -optimizer sgd -lr 0.1 -momentum 0.9 -checkpoint_at_end 0 -backend sp)
  train gpt-cpu 1 cpu "${gpt[@]}"
  cpu_log=$LAST_LOG
  train gpt-gpu 1 cuda "${gpt[@]}"
  # the device twin holds the activations: the CPU model keeps one sample's
  # and no per-thread copies (they were the whole batch's, never read)
  a=$(forecast_activations "$cpu_log") b=$(forecast_activations "$LAST_LOG")
  if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN {exit !(b * 4 < a)}'; then
    pass "gpt on the GPU: host activations $b MiB (on the CPU $a MiB)"
  else
    fail "gpt on the GPU: host activations" "forecast ${b:-?} MiB on the GPU, ${a:-?} MiB on the CPU"
  fi
  same "gpt: -device cuda gives the CPU's parameters" gpt-cpu gpt-gpu 1e-4
  # the validation pass on the device: the same loss and accuracy
  vl() { awk -F, 'NR > 1 && $7 == 0 {v = $9 "," $10} END {print v}' "$WORK/$1/curve.csv"; }
  a=$(vl gpt-cpu) b=$(vl gpt-gpu)
  if awk -v a="$a" -v b="$b" 'BEGIN {split(a, x, ","); split(b, y, ",");
      d = x[1] - y[1]; e = x[2] - y[2]; if (d < 0) d = -d; if (e < 0) e = -e;
      exit !(x[1] > 0 && d <= 1e-4 * x[1] && e <= 0.01)}'; then
    pass "gpt: validation on the device gives the CPU's loss and accuracy ($b)"
  else
    fail "gpt: validation on the device gives the CPU's loss and accuracy" "cpu $a, cuda $b"
  fi
  # fsdp full_shard: the tied head gathers its unit again at the end of
  # the forward; two micro-batches gather every unit twice per step
  train gpt-fs 1 cuda "${gpt[@]}" -backend fsdp -micro_batch_size 4
  if last_output | grep -q 'fsdp full_shard: .* per rank (groups of 1), gathered unit by unit'; then
    pass "gpt fsdp full_shard on the device says so at start-up"
  else
    fail "gpt fsdp full_shard on the device says so at start-up" "see $LAST_LOG"
  fi
  same "gpt: fsdp full_shard on one GPU, 2 micro-batches, gives sp's" gpt-gpu gpt-fs 1e-4
  a=$(vl gpt-gpu) b=$(vl gpt-fs)
  if awk -v a="$a" -v b="$b" 'BEGIN {split(a, x, ","); split(b, y, ",");
      d = x[1] - y[1]; if (d < 0) d = -d; exit !(x[1] > 0 && d <= 1e-4 * x[1])}'; then
    pass "gpt: validation on the gathered units gives sp's loss ($b)"
  else
    fail "gpt: validation on the gathered units gives sp's loss" "sp $a, fsdp $b"
  fi
  train gpt-hs 1 cuda "${gpt[@]}" -backend fsdp -fsdp_sharding_strategy hybrid_shard \
    -fsdp_node_size 1 -fsdp_unit model
  same "gpt: fsdp hybrid_shard, one unit for the model, gives sp's" gpt-gpu gpt-hs 1e-4
  # with 6 layers the device never holds the whole model: the units'
  # buffers (gathered parameters, unit gradients) peak below the whole
  # model's parameters and gradient
  train gpt-fs6 1 cuda "${gpt[@]}" -gpt_layers 6 -backend fsdp
  mem=$(last_output | sed -n 's/.*fsdp units gathered and their gradients (peak in training) \([0-9.]*\) MiB, the whole model.s parameters and gradient \([0-9.]*\) MiB.*/\1 \2/p')
  if [ -n "$mem" ] && awk -v m="$mem" 'BEGIN {split(m, x, " "); exit !(x[1] > 0 && x[1] < 0.75 * x[2])}'; then
    pass "gpt fsdp full_shard: the units' device memory peaks below the whole model's ($mem MiB)"
  else
    fail "gpt fsdp full_shard: the units' device memory" "peak and whole: '${mem:-none}' (see $LAST_LOG)"
  fi
fi

# fsdp shard_grad_op with -fsdp_cpu_offload on one GPU: the CPU's AdamW on
# the host shard gives the GPU's
sgo=(-backend fsdp -fsdp_sharding_strategy shard_grad_op)
adam=(-optimizer adamw -lr 0.003 -clip_grad_norm 0.5)
train mlp-adam-gpu 1 cuda "${mlp[@]}" -epochs 2 -backend sp "${adam[@]}"
train mlp-offload1 1 cuda "${mlp[@]}" -epochs 2 "${sgo[@]}" -fsdp_cpu_offload "${adam[@]}"
same "fsdp -fsdp_cpu_offload on one GPU gives sp's parameters" mlp-adam-gpu mlp-offload1 1e-4
train mlp-fs1 1 cuda "${mlp[@]}" -epochs 2 -backend fsdp "${adam[@]}"
same "fsdp full_shard on one GPU gives sp's parameters (AdamW, clipping)" mlp-adam-gpu mlp-fs1 1e-4
train mlp-fs-amp 1 cuda "${mlp[@]}" -epochs 2 -backend fsdp-amp -amp_dtype bf16
same "fsdp-amp full_shard (bf16) on one GPU gives sp-amp's" mlp-amp-bf16 mlp-fs-amp 1e-3
# a full_shard checkpoint holds the whole model and optimizer state
train mlp-fs-a 1 cuda "${mlp[@]}" -epochs 1 -backend fsdp "${adam[@]}" "${ck[@]}" \
  -checkpoint_dir "$WORK/ckf"
train mlp-fs-b 1 cpu "${mlp[@]}" -epochs 2 -backend sp "${adam[@]}" "${ck[@]}" \
  -checkpoint_dir "$WORK/ckf" -restart auto
same "a full_shard checkpoint from the GPU restarts under sp on the CPU" mlp-adam-gpu mlp-fs-b 1e-3

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${ngpu:-0}" -ge 2 ]; then
  train ddp-gpu 2 cuda "${mlp[@]}" -epochs 2 -backend ddp
  same "ddp on 2 GPUs (NCCL) gives sp's parameters" mlp-gpu ddp-gpu 1e-4
  train ddp-gpu-seq 2 cuda "${mlp[@]}" -epochs 2 -backend ddp -ddp_overlap 0
  same "ddp without overlap gives the same" ddp-gpu ddp-gpu-seq 0
  # fsdp on 2 GPUs: reduce-scatter, the optimizer on each shard, all-gather
  train ddp-adam2 2 cuda "${mlp[@]}" -epochs 2 -backend ddp "${adam[@]}"
  train sgo2 2 cuda "${mlp[@]}" -epochs 2 "${sgo[@]}" "${adam[@]}"
  same "fsdp shard_grad_op on 2 GPUs gives ddp's parameters" ddp-adam2 sgo2 1e-4
  # its reduction bucket by bucket behind the backward (grouped ncclReduce)
  # against one reduce-scatter after it: two ranks sum in either order alike
  train sgo2-seq 2 cuda "${mlp[@]}" -epochs 2 "${sgo[@]}" -fsdp_prefetch 0 "${adam[@]}"
  same "shard_grad_op reduced after the backward gives the same" sgo2 sgo2-seq 0
  train sgo2-off 2 cuda "${mlp[@]}" -epochs 2 "${sgo[@]}" -fsdp_cpu_offload "${adam[@]}"
  same "and with -fsdp_cpu_offload" ddp-adam2 sgo2-off 1e-4
  # its checkpoint holds the whole optimizer state: it restarts under ddp on the CPU
  train sgo2-a 2 cuda "${mlp[@]}" -epochs 1 "${sgo[@]}" "${adam[@]}" "${ck[@]}" \
    -checkpoint_dir "$WORK/cks"
  train sgo2-b 2 cpu "${mlp[@]}" -epochs 2 -backend ddp "${adam[@]}" "${ck[@]}" \
    -checkpoint_dir "$WORK/cks" -restart auto
  same "an fsdp checkpoint from 2 GPUs restarts under ddp on the CPU" ddp-adam2 sgo2-b 1e-3
  # full_shard and hybrid_shard on 2 GPUs: units gathered by grouped
  # broadcasts and reduced by grouped reduces (NCCL)
  train fs2 2 cuda "${mlp[@]}" -epochs 2 -backend fsdp "${adam[@]}"
  same "fsdp full_shard on 2 GPUs gives ddp's parameters" ddp-adam2 fs2 1e-4
  train hs2 2 cuda "${mlp[@]}" -epochs 2 -backend fsdp -fsdp_sharding_strategy hybrid_shard \
    -fsdp_node_size 1 "${adam[@]}"
  same "fsdp hybrid_shard (groups of 1, 2 replicas) on 2 GPUs gives ddp's" ddp-adam2 hs2 1e-4
  train fs2-a 2 cuda "${mlp[@]}" -epochs 1 -backend fsdp "${adam[@]}" "${ck[@]}" \
    -checkpoint_dir "$WORK/ckf2"
  train fs2-b 2 cpu "${mlp[@]}" -epochs 2 -backend ddp "${adam[@]}" "${ck[@]}" \
    -checkpoint_dir "$WORK/ckf2" -restart auto
  same "a full_shard checkpoint from 2 GPUs restarts under ddp on the CPU" ddp-adam2 fs2-b 1e-3
else
  echo "# ddp on the device: needs 2 GPUs (NCCL puts one rank on each), this node has ${ngpu:-0}"
  # two ranks, one GPU: -device cuda is refused naming the option and the
  # shared device; auto trains on the CPU and says why
  run_logged run_mpi 2 120 "$MPITRAIN" "${mlp[@]}" -epochs 1 -backend ddp -device cuda \
    -output_dir "$WORK/shared"
  if [ "$LAST_RC" != 0 ] && last_output | grep -q -- '-device cuda: rank 1 would share cuda:0'; then
    pass "2 ranks on 1 GPU: -device cuda is refused, naming the shared device"
  else
    fail "2 ranks on 1 GPU: -device cuda is refused" "exit $LAST_RC"
  fi
  run_logged run_mpi 2 120 "$MPITRAIN" "${mlp[@]}" -epochs 1 -backend ddp -device auto \
    -output_dir "$WORK/shared-auto"
  if [ "$LAST_RC" = 0 ] &&
    last_output | grep -q -- '-device auto: cpu (a node has more ranks than CUDA devices)'; then
    pass "2 ranks on 1 GPU: -device auto trains on the CPU and says why"
  else
    fail "2 ranks on 1 GPU: -device auto trains on the CPU" "exit $LAST_RC"
  fi
fi
finish
