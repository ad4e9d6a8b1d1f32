#!/usr/bin/env bash
# -precision fp64 in training runs (the layers, models and optimizers in
# double are tests/test_fp64.c and tests/test_fp64_models.c):
# - ddp at 2 ranks equals sp to 1e-12 for mlp (AdamW, clipping, a schedule,
#   overlapped buckets, the communication thread), cnn with batch norm and dropout (sp with the ranks'
#   micro-batches) and gpt (dropout); 2 threads splitting the batch and
#   gradient accumulation equal sp too;
# - a checkpoint restart is bit-exact (ddp, mid-epoch, dropout, AdamW), a
#   damaged float64 tensor fails its checksum and -restart auto falls back;
#   a restart across precisions is refused naming -precision, while
#   -init_from converts a model file of either type;
# - model_final.h5, model_best.h5 and the outputs' loss and logits are
#   float64; the outputs of ddp equal sp's;
# - fp64 and fp32 runs of the same job agree to fp32 rounding, and differ;
# - what fp64 does not cover is refused with a message naming -precision.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MT_DATA" "$MKDATA"
EX=$top_builddir/examples/user_model
"$MKDATA" synth "$WORK/train.h5" 480 12 4 41 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 150 12 4 42 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/img.h5" 240 64 3 43 image >/dev/null || bail "mkdata synth image failed"
"$MKDATA" synth "$WORK/imgval.h5" 60 64 3 44 image >/dev/null || bail "mkdata synth image failed"
"$MT_DATA" text "$top_srcdir/README.md" -out "$WORK" -name readme -val_fraction 0.1 >/dev/null ||
  bail "mt-data text failed"

ok() { # NAME NP ARGS...: a run that must succeed
  local name=$1 np=$2
  shift 2
  run_logged run_mpi "$np" 120 "$MPITRAIN" "$@"
  if [ "$LAST_RC" = 0 ]; then pass "$name"; else fail "$name" "exit $LAST_RC"; fi
}
same() { # NAME A B RTOL [SKIP]: model_final.h5 of two runs
  run_logged "$MKDATA" compare "$WORK/$2/model_final.h5" "$WORK/$3/model_final.h5" "$4" ${5:+"$5"}
  if [ "$LAST_RC" = 0 ]; then pass "$1"; else fail "$1" "parameters differ beyond $4"; fi
}
types() { # NAME FILE TYPE: every float dataset of FILE is TYPE
  run_logged "$MKDATA" types "$2" "$3"
  if [ "$LAST_RC" = 0 ]; then pass "$1"; else fail "$1" "not all $3"; fi
}

# ---- mlp: AdamW, clipping by value and norm, cosine schedule with warm-up
mlp=(-model mlp -mlp_hidden 24,16 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5" -epochs 2
  -max_train_steps_per_epoch 10 -batch_size 24 -optimizer adamw -lr 0.01 -weight_decay 0.01
  -clip_grad_value 0.5 -clip_grad_norm 1.0 -lr_schedule cosine -warmup_steps 3 -seed 7
  -log_every 0 -precision fp64 -outputs val -outputs_logits)
ok "mlp fp64 sp" 1 "${mlp[@]}" -backend sp -threads 1 -restore_best -output_dir "$WORK/mlp-sp"
expect_output "the start-up line names the precision" "precision fp64"
ok "mlp fp64 ddp 2 ranks, overlapped small buckets (MPI_Iallreduce, MPI_Test)" 2 "${mlp[@]}" \
  -backend ddp -threads 1 -ddp_overlap 1 -ddp_comm_thread 0 -ddp_bucket_mb 0.002 \
  -ddp_first_bucket_mb 0.001 -restore_best \
  -output_dir "$WORK/mlp-ddp"
ok "mlp fp64 ddp 2 ranks, buckets reduced by a communication thread" 2 "${mlp[@]}" -backend ddp \
  -threads 1 -ddp_overlap 1 -ddp_comm_thread 1 -ddp_bucket_mb 0.002 -output_dir "$WORK/mlp-ddpct"
ok "mlp fp64 sp, 2 threads splitting the batch, 3 micro-steps" 1 "${mlp[@]}" -backend sp \
  -threads 2 -thread_split batch -micro_batch_size 8 -output_dir "$WORK/mlp-t2acc"
same "mlp fp64: ddp 2 ranks == sp (1e-12)" mlp-sp mlp-ddp 1e-12
same "mlp fp64: ddp 2 ranks with the communication thread == sp (1e-12)" mlp-sp mlp-ddpct 1e-12
# double buckets summed in the shared-memory window (-ddp_allreduce shm)
ok "mlp fp64 ddp 2 ranks, buckets summed in the shared-memory window" 2 "${mlp[@]}" -backend ddp \
  -threads 1 -ddp_allreduce shm -ddp_bucket_mb 0.002 -output_dir "$WORK/mlp-ddpshm"
same "mlp fp64: ddp 2 ranks -ddp_allreduce shm == sp (1e-12)" mlp-sp mlp-ddpshm 1e-12
run_logged "$MKDATA" compare "$WORK/mlp-ddpct/model_final.h5" "$WORK/mlp-ddpshm/model_final.h5" 0
[ "$LAST_RC" = 0 ] && pass "mlp fp64: shm == MPI_Allreduce at 2 ranks, bit for bit" ||
  fail "mlp fp64: shm == MPI_Allreduce at 2 ranks, bit for bit" "differ"
same "mlp fp64: 2 threads and accumulation == sp (1e-12)" mlp-sp mlp-t2acc 1e-12
types "mlp fp64: model_final.h5 holds float64 tensors" "$WORK/mlp-sp/model_final.h5" float64
types "mlp fp64: model_best.h5 holds float64 tensors" "$WORK/mlp-sp/model_best.h5" float64
types "mlp fp64: the outputs' loss and logits are float64" "$WORK/mlp-sp/outputs/val0-epoch2.h5" float64
run_logged "$MKDATA" outstats "$WORK/mlp-sp/outputs/val0-epoch2.h5" 150
[ "$LAST_RC" = 0 ] && pass "mlp fp64: outputs hold every sample, pred and loss from the logits" ||
  fail "mlp fp64: outputs hold every sample, pred and loss from the logits" "outstats failed"
run_logged "$MKDATA" rows "$WORK/mlp-sp/outputs/val0-epoch2.h5" "$WORK/mlp-ddp/outputs/val0-epoch2.h5" 1e-12
[ "$LAST_RC" = 0 ] && pass "mlp fp64: the outputs of ddp 2 ranks == sp's (1e-12)" ||
  fail "mlp fp64: the outputs of ddp 2 ranks == sp's (1e-12)" "rows differ"

# ---- fp32 of the same job: agrees to fp32 rounding; is not the same numbers
ok "mlp fp32, the same job" 1 "${mlp[@]}" -precision fp32 -backend sp -threads 1 -restore_best \
  -output_dir "$WORK/mlp-f32"
types "mlp fp32: model_final.h5 holds float32 tensors" "$WORK/mlp-f32/model_final.h5" float32
same "mlp: fp64 and fp32 runs agree to fp32 rounding (1e-4)" mlp-sp mlp-f32 1e-4
run_logged "$MKDATA" compare "$WORK/mlp-sp/model_final.h5" "$WORK/mlp-f32/model_final.h5" 1e-9
[ "$LAST_RC" = 1 ] && pass "mlp: the fp64 run is not the fp32 one widened (differs beyond 1e-9)" ||
  fail "mlp: the fp64 run is not the fp32 one widened (differs beyond 1e-9)" "compare exit $LAST_RC"

# ---- -init_from converts: fp32 file into fp64 (exact), fp64 file into fp32
ok "fp64 run from the fp32 model file (-epochs 0)" 1 "${mlp[@]}" -epochs 0 -backend sp -threads 1 \
  -init_from "$WORK/mlp-f32/model_final.h5" -output_dir "$WORK/init64"
types "-init_from fp32 -> fp64: model_final.h5 float64" "$WORK/init64/model_final.h5" float64
same "-init_from fp32 -> fp64: the same numbers, widened" mlp-f32 init64 0
ok "fp32 run from the fp64 model file (-epochs 0)" 1 "${mlp[@]}" -precision fp32 -epochs 0 \
  -backend sp -threads 1 -init_from "$WORK/mlp-sp/model_final.h5" -output_dir "$WORK/init32"
types "-init_from fp64 -> fp32: model_final.h5 float32" "$WORK/init32/model_final.h5" float32
same "-init_from fp64 -> fp32: the numbers rounded to float (6e-8)" mlp-sp init32 6e-8

# ---- cnn with batch norm and dropout: ddp == sp with the ranks' micro-batches
cnn=(-model cnn -cnn_channels 3,4 -cnn_hidden 10 -cnn_batchnorm -cnn_dropout 0.2
  -data_train "$WORK/img.h5" -data_val "$WORK/imgval.h5" -epochs 1 -max_train_steps_per_epoch 6
  -batch_size 16 -lr 0.05 -momentum 0.9 -log_every 0 -threads 1 -precision fp64)
ok "cnn+bn fp64 sp, micro-batches of 8" 1 "${cnn[@]}" -backend sp -micro_batch_size 8 \
  -output_dir "$WORK/cnn-sp"
ok "cnn+bn fp64 ddp 2 ranks" 2 "${cnn[@]}" -backend ddp -output_dir "$WORK/cnn-ddp"
same "cnn+bn fp64: ddp 2 ranks == sp with the same micro-batches (1e-12)" cnn-sp cnn-ddp 1e-12 \
  running_
types "cnn+bn fp64: parameters and running statistics float64" "$WORK/cnn-ddp/model_final.h5" float64
ok "cnn+bn fp32, the same job" 1 "${cnn[@]}" -precision fp32 -backend sp -micro_batch_size 8 \
  -output_dir "$WORK/cnn-f32"
same "cnn+bn: fp64 and fp32 runs agree to fp32 rounding (1e-4)" cnn-sp cnn-f32 1e-4

# ---- gpt with dropout: ddp == sp, restart bit-exact, checkpoint damage
gpt=(-model gpt -gpt_layers 2 -gpt_heads 2 -gpt_embd 16 -gpt_block 8 -gpt_dropout 0.1
  -data_train "$WORK/readme-train.h5" -data_val "$WORK/readme-val.h5" -epochs 2
  -max_train_steps_per_epoch 6 -max_val_steps_per_epoch 1 -val_batch_size 16 -batch_size 8
  -optimizer sgd -lr 0.1 -momentum 0.9 -log_every 0 -threads 1 -precision fp64 -checkpoint_keep 0)
ok "gpt fp64 sp" 1 "${gpt[@]}" -backend sp -output_dir "$WORK/gpt-sp"
ok "gpt fp64 ddp 2 ranks, a checkpoint every 4 steps" 2 "${gpt[@]}" -backend ddp \
  -checkpoint_every_steps 4 -output_dir "$WORK/gpt-ddp"
same "gpt fp64: ddp 2 ranks == sp (1e-12)" gpt-sp gpt-ddp 1e-12
ok "gpt fp64 ddp: restart from step 4 (mid-epoch)" 2 "${gpt[@]}" -backend ddp \
  -restart "$WORK/gpt-ddp/checkpoints/ckpt-4.h5" -output_dir "$WORK/gpt-r4"
same "gpt fp64: the restart is bit-exact" gpt-ddp gpt-r4 0
ok "gpt fp64 AdamW with amsgrad, a checkpoint every 5 steps" 1 "${gpt[@]}" -backend sp \
  -optimizer adamw -adam_amsgrad -lr 3e-3 -checkpoint_every_steps 5 -output_dir "$WORK/gpt-adam"
ok "gpt fp64 AdamW: restart from step 5" 1 "${gpt[@]}" -backend sp -optimizer adamw -adam_amsgrad \
  -lr 3e-3 -restart "$WORK/gpt-adam/checkpoints/ckpt-5.h5" -output_dir "$WORK/gpt-adam-r5"
same "gpt fp64 AdamW (amsgrad state in float64): the restart is bit-exact" gpt-adam gpt-adam-r5 0
C=$WORK/gpt-ddp/checkpoints
run_logged "$MKDATA" flip "$C/ckpt-12.h5" /params/transformer.wpe.weight 5
[ "$LAST_RC" = 0 ] || bail "mkdata flip failed"
expect_error "a flipped bit of a float64 tensor fails its checksum" \
  "tensor /params/transformer.wpe.weight fails its checksum" \
  run_mpi 2 120 "$MPITRAIN" "${gpt[@]}" -backend ddp -restart "$C/ckpt-12.h5" -output_dir "$WORK/gpt-bad"
cp -r "$WORK/gpt-ddp" "$WORK/gpt-auto"
ok "-restart auto skips the damaged fp64 checkpoint" 2 "${gpt[@]}" -backend ddp -restart auto \
  -output_dir "$WORK/gpt-auto"
expect_output "the skipped checkpoint is named" "skipping a damaged checkpoint: checkpoint $WORK/gpt-auto/checkpoints/ckpt-12.h5"
expect_output "it restarts from the one before" "restart from $WORK/gpt-auto/checkpoints/ckpt-8.h5"
same "gpt fp64: after the fallback the run still ends bit-exact" gpt-ddp gpt-auto 0

# ---- a checkpoint is read in its own precision only
expect_error "an fp64 checkpoint in an fp32 run is refused, naming -precision" \
  "written with -precision fp64, this run has -precision fp32" \
  run_mpi 2 120 "$MPITRAIN" "${gpt[@]}" -precision fp32 -backend ddp -restart "$C/ckpt-8.h5" \
  -output_dir "$WORK/gpt-x32"
ok "gpt fp32 with a checkpoint" 1 "${gpt[@]}" -precision fp32 -backend sp -epochs 1 \
  -output_dir "$WORK/gpt-f32"
expect_error "an fp32 checkpoint in an fp64 run is refused, naming -precision" \
  "written with -precision fp32, this run has -precision fp64" \
  run_mpi 1 120 "$MPITRAIN" "${gpt[@]}" -backend sp -restart "$WORK/gpt-f32/checkpoints/ckpt-6.h5" \
  -output_dir "$WORK/gpt-x64"

# ---- what fp64 does not cover, refused by name
base=(-data_train "$WORK/train.h5" -epochs 1 -batch_size 32 -log_every 0 -threads 1
  -output_dir "$WORK/refused")
for b in sp-amp ddp-amp-apex "sp-dp -dp_noise_multiplier 1" fsdp; do
  # shellcheck disable=SC2086 # the DP backend's own option rides along
  expect_error "-backend $b with fp64 is refused" "option -precision fp64: " \
    run_mpi 1 60 "$MPITRAIN" "${base[@]}" -backend $b -precision fp64
done
expect_error "an unknown precision is refused" "option -precision: 'fp16' is not one of: fp32, fp64" \
  run_mpi 1 60 "$MPITRAIN" "${base[@]}" -precision fp16
if [ -x "$EX" ]; then
  expect_error "a user model without fp64 operations is refused" \
    "option -precision fp64: model softmax_tanh has no double-precision operations" \
    run_mpi 1 60 "$EX" "${base[@]}" -model softmax_tanh -precision fp64
  expect_error "a user backend without fp64 operations is refused" \
    "option -precision fp64: backend ddp-reduce-bcast has no double-precision operations" \
    run_mpi 2 60 "$EX" "${base[@]}" -model mlp -backend ddp-reduce-bcast -precision fp64
  expect_ok "the user model and backend still train in fp32" run_mpi 2 60 "$EX" "${base[@]}" \
    -model softmax_tanh -backend ddp-reduce-bcast
fi
finish
