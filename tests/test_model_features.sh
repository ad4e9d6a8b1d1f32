#!/usr/bin/env bash
# Model features beyond the plain layers:
# - cnn -cnn_batchnorm under ddp (2, 3 and 4 ranks) gives the parameters of sp
#   with the same per-rank micro-batches (batch statistics are per forward,
#   as in PyTorch DDP without SyncBatchNorm); its running statistics follow
#   the broadcast rule: rank 0's win every step, so a 2-rank evaluation of
#   the final model equals a 1-rank one of rank 0's saved model;
# - dropout (mlp, cnn, gpt) draws its mask per sample id, so ddp at 2 ranks,
#   2 threads and accumulation equal sp, and a mid-epoch restart is
#   bit-exact;
# - mlp regression (/y float (N,K), MSE) trains, ddp equals sp, and the
#   target kind is checked between training and validation sets;
# - the smoothed validation loss drives the best model (model_best.h5),
#   early stopping and -restore_best; -epochs 0 only evaluates;
# - the mlp writes its gradients instead of having them zeroed before each
#   step (mt_model_ops.sets_grads): at batch 1 with 2 threads one thread has
#   no rows, and its buffer (thread 0's is the rank's, which holds the last
#   step's sum) must count as zeros: the run equals 1 thread bit for bit,
#   in fp32 and fp64.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MT_DATA" "$MKDATA"
src=/usr/share/datasets/fashion-mnist
[ -f "$src/t10k-images-idx3-ubyte.gz" ] || { echo "# SKIP: $src missing"; exit 77; }
data=${MT_FMNIST_DIR:-$top_builddir/tests/work/fmnist}
if [ ! -f "$data/fashion-mnist-test.h5" ]; then
  mkdir -p "$data"
  "$MT_DATA" fashion-mnist -out "$data" >/dev/null || bail "mt-data fashion-mnist failed"
fi
fm=$data/fashion-mnist-test.h5
same() { # NAME A B RTOL [SKIP]
  run_logged "$MKDATA" compare "$WORK/$2/model_final.h5" "$WORK/$3/model_final.h5" "$4" ${5:+"$5"}
  [ "$LAST_RC" = 0 ] && pass "$1" || fail "$1" "$(last_output | grep -E 'FAIL|MISSING' | head -3)"
}
ok() { # NAME NP ARGS...: a run that must succeed
  local name=$1 np=$2
  shift 2
  run_logged run_mpi "$np" 300 "$MPITRAIN" "$@"
  [ "$LAST_RC" = 0 ] && pass "$name" || fail "$name" "exit $LAST_RC: $(last_output | tail -3)"
}
col() { sed -n "$2p" "$1" | cut -d, -f"$3"; } # FILE ROW FIELD of a csv
close_to() { # NAME A B RTOL: two numbers
  awk -v a="$2" -v b="$3" -v t="$4" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b;
    exit !(a != "" && b != "" && d <= t * m) }' && pass "$1 ($2 vs $3)" || fail "$1" "$2 vs $3"
}

# ---- batch norm
bn=(-model cnn -cnn_channels 4,6 -cnn_hidden 16 -cnn_batchnorm -data_train "$fm" -data_val "$fm"
  -epochs 2 -max_train_steps_per_epoch 4 -max_val_steps_per_epoch 1 -val_batch_size 50
  -batch_size 24 -lr 0.05 -momentum 0.9 -log_every 0 -threads 1)
ok "cnn+bn sp, micro-batches of 12" 1 "${bn[@]}" -backend sp -micro_batch_size 12 -output_dir "$WORK/bn-sp12"
ok "cnn+bn sp, micro-batches of 8" 1 "${bn[@]}" -backend sp -micro_batch_size 8 -output_dir "$WORK/bn-sp8"
ok "cnn+bn sp, micro-batches of 6" 1 "${bn[@]}" -backend sp -micro_batch_size 6 -output_dir "$WORK/bn-sp6"
ok "cnn+bn ddp 2 ranks" 2 "${bn[@]}" -backend ddp -data_test "$fm" -output_dir "$WORK/bn-ddp2"
ok "cnn+bn ddp 3 ranks" 3 "${bn[@]}" -backend ddp -output_dir "$WORK/bn-ddp3"
ok "cnn+bn ddp 4 ranks" 4 "${bn[@]}" -backend ddp -output_dir "$WORK/bn-ddp4"
same "cnn+bn: ddp 2 ranks == sp with the same micro-batches (parameters)" bn-sp12 bn-ddp2 1e-5 running_
same "cnn+bn: ddp 3 ranks == sp with the same micro-batches (parameters)" bn-sp8 bn-ddp3 1e-5 running_
same "cnn+bn: ddp 4 ranks == sp with the same micro-batches (parameters)" bn-sp6 bn-ddp4 1e-5 running_
expect_output "batch norm named as in PyTorch" "features.5.running_var"
ok "cnn+bn: 1-rank evaluation of the 2-rank model (-epochs 0)" 1 "${bn[@]}" -backend sp -epochs 0 \
  -init_from "$WORK/bn-ddp2/model_final.h5" -data_test "$fm" -output_dir "$WORK/bn-eval"
expect_output "-epochs 0 evaluates the validation set" "evaluation val[0]"
close_to "cnn+bn: the 2-rank test loss equals the 1-rank one (ranks hold rank 0's buffers)" \
  "$(col "$WORK/bn-ddp2/test.csv" 2 5)" "$(col "$WORK/bn-eval/test.csv" 2 5)" 1e-6
ok "cnn+bn with 2 threads asked to split the batch" 1 "${bn[@]}" -backend sp -micro_batch_size 12 \
  -threads 2 -thread_split batch -output_dir "$WORK/bn-sp12t"
expect_output "a model with running statistics does not split its batch" "-thread_split gemm"
same "cnn+bn: 2 threads == 1 thread" bn-sp12 bn-sp12t 1e-5

# ---- dropout
"$MKDATA" synth "$WORK/train.h5" 600 16 4 31 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 120 16 4 32 >/dev/null || bail "mkdata synth failed"
dm=(-model mlp -mlp_hidden 40,24 -mlp_dropout 0.3 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5"
  -epochs 2 -max_train_steps_per_epoch 10 -batch_size 24 -lr 0.05 -momentum 0.9 -log_every 0
  -log_step_losses -checkpoint_keep 0)
ok "mlp dropout sp" 1 "${dm[@]}" -backend sp -threads 1 -output_dir "$WORK/do-sp"
ok "mlp dropout ddp 2 ranks x 2 threads, accumulation 2" 2 "${dm[@]}" -backend ddp -threads 2 \
  -thread_split batch -micro_batch_size 6 -checkpoint_every_steps 7 -output_dir "$WORK/do-ddp"
same "mlp dropout: ddp 2 ranks x 2 threads with accumulation == sp" do-sp do-ddp 1e-5

# the batch split over 2 threads: each thread's model holds its half of the
# batch's activations, the first one's too (it held the whole batch: 1.6x
# one model's where the forecast now reads 1.15x, the rest being the
# second thread's gradient buffer)
big=(-model mlp -mlp_hidden 256,256 -data_train "$WORK/train.h5" -batch_size 512 -epochs 1
  -max_train_steps_per_epoch 1 -log_every 0 -checkpoint_at_end 0 -backend sp -threads 2)
ok "mlp, one model on 2 threads" 1 "${big[@]}" -thread_split gemm -output_dir "$WORK/acts-gemm"
a_gemm=$(forecast_activations "$LAST_LOG")
ok "mlp, the batch split over 2 threads" 1 "${big[@]}" -thread_split batch -output_dir "$WORK/acts-split"
a_split=$(forecast_activations "$LAST_LOG")
if [ -n "$a_gemm" ] && [ -n "$a_split" ] &&
  awk -v g="$a_gemm" -v s="$a_split" 'BEGIN {exit !(g > 1 && s <= 1.3 * g)}'; then
  pass "split over 2 threads: activations $a_split MiB, one model's $a_gemm MiB"
else
  fail "split over 2 threads: activations" "split ${a_split:-?} MiB, one model ${a_gemm:-?} MiB"
fi
# -thread_split auto (the default): one model on all threads where a step does
# few FLOPs a byte of gradients (the MLP above at batch 512: 748), each
# thread its rows where it does many (batch 1024 of a 16-input MLP: 1,271)
# and under DP-SGD whatever the figure
ok "mlp, 2 threads, -thread_split auto at 748 FLOPs a byte" 1 "${big[@]}" -output_dir "$WORK/acts-auto"
expect_output "-thread_split auto: gemm below 1000 FLOPs a byte" "-thread_split auto: gemm (one model"
expect_output "-thread_split auto says the figure" "a step does 748 FLOPs a byte"
[ "$(forecast_activations "$LAST_LOG")" = "$a_gemm" ] &&
  pass "-thread_split auto (gemm): the memory forecast of -thread_split gemm" ||
  fail "-thread_split auto (gemm): the memory forecast" "$(forecast_activations "$LAST_LOG") MiB, gemm's $a_gemm"
same "-thread_split auto (gemm): the bits of -thread_split gemm" acts-gemm acts-auto 0
"$MKDATA" synth "$WORK/wide.h5" 2048 16 4 34 >/dev/null || bail "mkdata synth failed"
wide=(-model mlp -mlp_hidden 40,24 -data_train "$WORK/wide.h5" -batch_size 1024 -epochs 1
  -max_train_steps_per_epoch 2 -log_every 0 -checkpoint_at_end 0 -backend sp -threads 2)
ok "mlp batch 1024, 2 threads, -thread_split auto" 1 "${wide[@]}" -output_dir "$WORK/wide-auto"
expect_output "-thread_split auto: batch at 1,271 FLOPs a byte" "-thread_split auto: batch (each thread"
ok "mlp batch 1024, 2 threads, -thread_split batch" 1 "${wide[@]}" -thread_split batch -output_dir "$WORK/wide-batch"
same "-thread_split auto (batch): the bits of -thread_split batch" wide-batch wide-auto 0
ok "sp-dp, 2 threads, -thread_split auto" 1 "${big[@]}" -backend sp-dp -dp_noise_multiplier 1.1 \
  -dp_max_grad_norm 0.5 -output_dir "$WORK/acts-dp"
expect_output "-thread_split auto: batch under DP-SGD" "-thread_split auto: batch (each thread"
ok "mlp without dropout" 1 "${dm[@]}" -mlp_dropout 0 -backend sp -threads 1 -output_dir "$WORK/do-none"
run_logged "$MKDATA" compare "$WORK/do-sp/model_final.h5" "$WORK/do-none/model_final.h5" 1e-3
[ "$LAST_RC" != 0 ] && pass "dropout changes the training" || fail "dropout changes the training" "same parameters"
ok "mlp dropout: restart from step 7 (mid-epoch 1)" 2 "${dm[@]}" -backend ddp -threads 2 -micro_batch_size 6 \
  -thread_split batch -restart "$WORK/do-ddp/checkpoints/ckpt-7.h5" -output_dir "$WORK/do-r7"
same "mlp dropout: the restarted run is bit-exact" do-ddp do-r7 0
ok "cnn dropout sp" 1 "${bn[@]}" -cnn_dropout 0.4 -backend sp -micro_batch_size 12 -output_dir "$WORK/cd-sp"
ok "cnn dropout ddp 2 ranks" 2 "${bn[@]}" -cnn_dropout 0.4 -backend ddp -output_dir "$WORK/cd-ddp"
same "cnn+bn dropout: ddp 2 ranks == sp" cd-sp cd-ddp 1e-5 running_
"$MT_DATA" text /usr/share/common-licenses/GPL-3 -out "$WORK" -name gpl >/dev/null || bail "mt-data text failed"
gp=(-model gpt -gpt_layers 2 -gpt_heads 2 -gpt_embd 16 -gpt_block 16 -gpt_dropout 0.2
  -data_train "$WORK/gpl-train.h5" -epochs 1 -max_train_steps_per_epoch 4 -batch_size 8
  -lr 0.05 -momentum 0.9 -log_every 0 -threads 1) # sgd: AdamW normalises the rounding noise of
# the key biases' (in exact arithmetic zero) gradients to full steps
ok "gpt dropout sp" 1 "${gp[@]}" -backend sp -output_dir "$WORK/gd-sp"
ok "gpt dropout ddp 2 ranks" 2 "${gp[@]}" -backend ddp -output_dir "$WORK/gd-ddp"
same "gpt dropout: ddp 2 ranks == sp" gd-sp gd-ddp 1e-5
expect_error "dropout out of range refused" "-mlp_dropout" \
  run_mpi 1 60 "$MPITRAIN" "${dm[@]}" -mlp_dropout 1.5 -output_dir "$WORK/bad1"

# ---- regression
"$MKDATA" regress "$WORK/rtrain.h5" 2000 8 3 5 >/dev/null || bail "mkdata regress failed"
"$MKDATA" regress "$WORK/rval.h5" 400 8 3 6 >/dev/null || bail "mkdata regress failed"
rg=(-model mlp -mlp_hidden 32 -data_train "$WORK/rtrain.h5" -data_val "$WORK/rval.h5" -epochs 6
  -batch_size 32 -lr 0.05 -momentum 0.9 -log_every 0 -threads 1)
ok "mlp regression sp" 1 "${rg[@]}" -backend sp -output_dir "$WORK/rg-sp"
ok "mlp regression ddp 2 ranks" 2 "${rg[@]}" -backend ddp -output_dir "$WORK/rg-ddp"
same "mlp regression: ddp 2 ranks == sp" rg-sp rg-ddp 1e-5
first=$(col "$WORK/rg-sp/curve.csv" 2 9) last=$(col "$WORK/rg-sp/curve.csv" 7 9)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.2 * a) }' &&
  pass "regression: validation MSE falls 5x ($first -> $last)" || fail "regression: validation MSE falls 5x" "$first -> $last"
"$MKDATA" synth "$WORK/val8.h5" 100 8 4 33 >/dev/null || bail "mkdata synth failed"
expect_error "class labels against float targets refused" "float targets" \
  run_mpi 1 60 "$MPITRAIN" "${rg[@]}" -data_val "$WORK/val8.h5" -output_dir "$WORK/bad2"
expect_error "cnn refuses regression targets" "model cnn needs" \
  run_mpi 1 60 "$MPITRAIN" "${rg[@]}" -model cnn -output_dir "$WORK/bad3"

# ---- best model, smoothing, early stop, restore
es=(-model mlp -mlp_hidden 40 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5" -epochs 30
  -batch_size 24 -lr 0.5 -momentum 0.9 -log_every 0 -threads 1 -val_smoothing 0.5
  -early_stop_patience 2 -early_stop_min_delta 0.005 -restore_best -data_test "$WORK/val.h5" -checkpoint_every_epochs 1
  -checkpoint_keep 0)
ok "early stop run" 1 "${es[@]}" -backend sp -output_dir "$WORK/es"
expect_output "training stops early" "early stop after epoch"
expect_output "the best model is restored" "restored the best model"
[ -f "$WORK/es/model_best.h5" ] && pass "model_best.h5 written" || fail "model_best.h5 written" "missing"
best=$(last_output | sed -n 's/^restored the best model: epoch \([0-9]*\),.*/\1/p')
stop=$(last_output | sed -n 's/^early stop after epoch \([0-9]*\):.*/\1/p')
[ -n "$best" ] && [ -n "$stop" ] && [ "$stop" = $((best + 2)) ] &&
  pass "stopped 2 epochs after the best (best $best, stop $stop)" || fail "stopped 2 epochs after the best" "best '$best' stop '$stop'"
expect_output "the last line names the restored epoch" "the model of epoch $best (-restore_best)"
te=$(sed -n '2p' "$WORK/es/test.csv" | cut -d, -f3)
[ -n "$best" ] && [ "$te" = "$best" ] && pass "test.csv is labelled with the restored epoch ($te)" \
  || fail "test.csv is labelled with the restored epoch" "epoch '$te', best '$best'"
run_logged "$MKDATA" compare "$WORK/es/model_best.h5" "$WORK/es/model_final.h5" 0
[ "$LAST_RC" = 0 ] && pass "model_final.h5 == model_best.h5" || fail "model_final.h5 == model_best.h5" "differ"
if [ -n "$best" ] && [ "$best" -ge 2 ]; then
  ok "restart from the checkpoint of epoch $((best - 1))" 1 "${es[@]}" -backend sp \
    -restart "$WORK/es/checkpoints/ckpt-$((($best - 1) * 25)).h5" -output_dir "$WORK/es-r"
  expect_output "the restarted run stops at the same epoch" "early stop after epoch $stop"
  same "restarted early-stop run ends with the same model" es es-r 0
fi
expect_error "-restore_best needs a validation set" "-restore_best" \
  run_mpi 1 60 "$MPITRAIN" "${dm[@]}" -data_val "" -restore_best -output_dir "$WORK/bad4"

# ---- gradients written, not zeroed first
"$MKDATA" synth "$WORK/sg.h5" 25 16 4 33 >/dev/null || bail "mkdata synth failed"
sg=(-model mlp -mlp_hidden 40,24 -data_train "$WORK/sg.h5" -epochs 2 -batch_size 1 -lr 0.05
  -momentum 0.9 -thread_split batch -log_every 0 -backend sp)
for p in fp32 fp64; do
  ok "$p batch 1, 1 thread" 1 "${sg[@]}" -precision "$p" -threads 1 -output_dir "$WORK/sg1-$p"
  ok "$p batch 1, 2 threads (one without rows)" 1 "${sg[@]}" -precision "$p" -threads 2 \
    -output_dir "$WORK/sg2-$p"
  same "$p: a thread without rows adds nothing of the last step" "sg1-$p" "sg2-$p" 0
done
finish
