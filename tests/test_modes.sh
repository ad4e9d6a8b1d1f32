#!/usr/bin/env bash
# -mode evaluate and -mode predict (src/trainer/mode.h):
# - the exact sum (test_xsum) at 3 ranks;
# - an mlp trained at 2 ranks (ddp) evaluated at 1 and 3 ranks (and 2 with
#   other threads and -val_batch_size) from model_final.h5 alone: the loss
#   and accuracy of evaluate.csv equal the training run's last validation
#   row of curve.csv as strings, and the per-sample losses and predictions
#   (-outputs val) equal the training's bit for bit; a cnn with batch norm
#   (from model_final.h5 and from a checkpoint; trained on 1 thread and
#   evaluated on 2, and the reverse), a regression and a gpt the same way;
#   a regression's predicted /values; a gpt refused by predict;
# - predict at 1, 2 and 3 ranks on a file without /y: identical files,
#   each sample once in order, /probs present; a file with /y adds /label
#   and /loss and the same predictions;
# - jobs/slurm-predict-array.sh picks its shard and names the output;
# - bad inputs end in one line naming them.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MKDATA" "$MT_DATA" "$top_builddir/tests/h5digest" "$top_builddir/tests/test_xsum"
H5DIGEST=$top_builddir/tests/h5digest

run_logged run_mpi 3 60 "$top_builddir/tests/test_xsum"
if [ "$LAST_RC" = 0 ]; then pass "test_xsum at 3 ranks"; else fail "test_xsum at 3 ranks" "exit $LAST_RC"; fi

"$MKDATA" synth "$WORK/train.h5" 600 12 5 1 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 203 12 5 2 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/wide.h5" 40 8 5 3 >/dev/null || bail "mkdata synth failed"
cp "$WORK/val.h5" "$WORK/nolabel.h5" && "$MKDATA" unlink "$WORK/nolabel.h5" y || bail "mkdata unlink failed"

# last_val DIR: "val_loss,val_acc" of the last row of DIR/curve.csv
last_val() { tail -n 1 "$1/curve.csv" | awk -F, '{ print $9 "," $10 }'; }
# eval_val DIR: the same columns of DIR/evaluate.csv
eval_val() { tail -n 1 "$1/evaluate.csv" | awk -F, '{ print $4 "," $5 }'; }
# digest FILE DATASET...: the h5digest lines of those datasets
digest() {
  local f=$1
  shift
  "$H5DIGEST" "$f" | grep -E "^/($(IFS='|'; echo "$*")) "
}

# same_eval NAME TRAINED_DIR EVAL_DIR: evaluate.csv equals curve.csv's last
# validation row, and the per-sample outputs equal the training's last epoch's
same_eval() {
  local want have
  want=$(last_val "$2")
  have=$(eval_val "$3")
  if [ -n "$want" ] && [ "$have" = "$want" ]; then
    pass "$1: loss,accuracy $have as training's last validation"
  else
    fail "$1: loss,accuracy as training's last validation" "evaluate.csv '$have', curve.csv '$want'"
  fi
  want=$(digest "$(ls "$2"/outputs/val0-epoch*.h5 | sort -V | tail -n 1)" index pred loss)
  have=$(digest "$3/outputs/val0.h5" index pred loss)
  if [ -n "$want" ] && [ "$have" = "$want" ]; then
    pass "$1: per-sample losses and predictions bit for bit as training's"
  else
    fail "$1: per-sample losses and predictions as training's" "$(diff <(echo "$want") <(echo "$have") | tr '\n' ' ')"
  fi
}

# ---- an mlp trained at 2 ranks, evaluated from its file alone
T=$WORK/mlp
expect_ok "mlp trained at 2 ranks (ddp)" run_mpi 2 60 "$MPITRAIN" -backend ddp -model mlp \
  -mlp_hidden 16 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5" -epochs 2 -batch_size 40 \
  -lr 0.1 -val_batch_size 17 -outputs val -log_every 0 -plot 0 -output_dir "$T"
F=$T/model_final.h5
for run in "1 0 500" "3 1 500" "2 2 7"; do
  read -r np th vb <<<"$run"
  E=$WORK/eval-$np
  thr=()
  [ "$th" != 0 ] && thr=(-threads "$th")
  expect_ok "evaluate at $np ranks ${thr[*]} -val_batch_size $vb" run_mpi "$np" 60 "$MPITRAIN" \
    -mode evaluate -model_file "$F" -data_val "$WORK/val.h5" -outputs val "${thr[@]}" \
    -val_batch_size "$vb" -output_dir "$E"
  expect_output "evaluate at $np ranks: the model from the file" "model mlp (hidden 16) from $F"
  if [ "$th" = 2 ]; then
    expect_no_output "evaluate on 2 threads: -thread_split auto weighs no gradients" "-thread_split auto"
  fi
  same_eval "evaluate at $np ranks" "$T" "$E"
done

# ---- a cnn with batch norm (its running statistics are buffers; its rank's
# threads share one model) the same way, from model_final.h5 and from its
# last checkpoint (tensors in /params, buffers in the trainer state)
"$MKDATA" synth "$WORK/img.h5" 160 64 3 4 image >/dev/null || bail "mkdata synth image failed"
"$MKDATA" synth "$WORK/imgval.h5" 53 64 3 5 image >/dev/null || bail "mkdata synth image failed"
C=$WORK/cnn
expect_ok "cnn trained at 2 ranks (ddp)" run_mpi 2 60 "$MPITRAIN" -backend ddp -model cnn \
  -cnn_channels 4,6 -cnn_hidden 16 -cnn_batchnorm -data_train "$WORK/img.h5" -data_val "$WORK/imgval.h5" \
  -epochs 1 -batch_size 32 -lr 0.05 -val_batch_size 20 -outputs val -log_every 0 -plot 0 \
  -output_dir "$C"
for np in 1 3; do
  expect_ok "cnn evaluated at $np ranks" run_mpi "$np" 60 "$MPITRAIN" -mode evaluate \
    -model_file "$C/model_final.h5" -data_val "$WORK/imgval.h5" -outputs val -output_dir "$WORK/ceval-$np"
  same_eval "cnn evaluated at $np ranks" "$C" "$WORK/ceval-$np"
done
ck=$(ls "$C"/checkpoints/ckpt-*.h5 2>/dev/null | sort -V | tail -n 1)
expect_ok "cnn evaluated at 3 ranks from its checkpoint" run_mpi 3 60 "$MPITRAIN" -mode evaluate \
  -model_file "$ck" -data_val "$WORK/imgval.h5" -outputs val -output_dir "$WORK/ceval-ck"
same_eval "cnn evaluated from its checkpoint" "$C" "$WORK/ceval-ck"

# ---- the batch-norm cnn's one model for a rank's threads (-thread_split
# gemm): an evaluation gives each thread a piece on an evaluation model of
# its own (compute.c), so trained on 1 thread and evaluated on 2, and the
# reverse, the results are the same strings and bits (4 pieces of 64)
"$MKDATA" synth "$WORK/imgval4.h5" 203 64 3 6 image >/dev/null || bail "mkdata synth image failed"
for run in "1 2" "2 1"; do
  read -r tt et <<<"$run"
  D=$WORK/cnn-t$tt
  expect_ok "cnn trained at 1 rank -threads $tt" run_mpi 1 60 "$MPITRAIN" -model cnn \
    -cnn_channels 4,6 -cnn_hidden 16 -cnn_batchnorm -data_train "$WORK/img.h5" \
    -data_val "$WORK/imgval4.h5" -epochs 1 -batch_size 32 -lr 0.05 -outputs val -log_every 0 \
    -plot 0 -threads "$tt" -output_dir "$D"
  expect_ok "cnn trained on $tt threads evaluated on $et" run_mpi 1 60 "$MPITRAIN" -mode evaluate \
    -model_file "$D/model_final.h5" -data_val "$WORK/imgval4.h5" -outputs val -threads "$et" \
    -output_dir "$D-eval"
  same_eval "cnn trained on $tt threads evaluated on $et" "$D" "$D-eval"
done

# ---- a regression model: mean squared error, predicted values
"$MKDATA" regress "$WORK/reg.h5" 300 6 2 7 >/dev/null || bail "mkdata regress failed"
"$MKDATA" regress "$WORK/regval.h5" 70 6 2 8 >/dev/null || bail "mkdata regress failed"
R=$WORK/reg
expect_ok "regression mlp trained at 2 ranks" run_mpi 2 60 "$MPITRAIN" -backend ddp -model mlp \
  -mlp_hidden 8 -data_train "$WORK/reg.h5" -data_val "$WORK/regval.h5" -epochs 1 -batch_size 20 \
  -lr 0.01 -outputs val -log_every 0 -plot 0 -output_dir "$R"
expect_ok "regression evaluated at 3 ranks" run_mpi 3 60 "$MPITRAIN" -mode evaluate \
  -model_file "$R/model_final.h5" -data_val "$WORK/regval.h5" -outputs val -output_dir "$WORK/reval"
expect_output "regression: the mean squared error printed" "evaluate val[0] $WORK/regval.h5: mse "
same_eval "regression evaluated at 3 ranks" "$R" "$WORK/reval"
expect_ok "regression predicted at 2 ranks" run_mpi 2 60 "$MPITRAIN" -mode predict \
  -model_file "$R/model_final.h5" -data "$WORK/regval.h5" -predictions "$WORK/reg-pred.h5"
if "$H5DIGEST" "$WORK/reg-pred.h5" | grep -q '^/values f32le 70x2 '; then
  pass "regression predict: /values of 70 x 2 targets"
else
  fail "regression predict: /values of 70 x 2 targets" "$("$H5DIGEST" "$WORK/reg-pred.h5" 2>&1 | tr '\n' ' ')"
fi
expect_error "regression: -outputs_probs refused" "option -outputs_probs: the model of $R/model_final.h5 predicts 2 float targets" \
  run_mpi 2 60 "$MPITRAIN" -mode predict -model_file "$R/model_final.h5" -data "$WORK/regval.h5" \
  -outputs_probs -output_dir "$WORK/bad"

# ---- a gpt (token windows): evaluated exactly; predict refuses its files
text=/usr/share/common-licenses/GPL-3
if [ -f "$text" ] && [ -x "$MT_DATA" ]; then
  "$MT_DATA" text "$text" -out "$WORK" -name gpl -val_fraction 0.1 >/dev/null || bail "mt-data text failed"
  G=$WORK/gpt
  expect_ok "gpt trained at 2 ranks" run_mpi 2 60 "$MPITRAIN" -backend ddp -model gpt -gpt_layers 1 \
    -gpt_heads 2 -gpt_embd 16 -gpt_block 16 -data_train "$WORK/gpl-train.h5" \
    -data_val "$WORK/gpl-val.h5" -batch_size 6 -epochs 1 -max_train_steps_per_epoch 3 \
    -val_batch_size 20 -outputs val -log_every 0 -plot 0 -output_dir "$G"
  expect_ok "gpt evaluated at 3 ranks" run_mpi 3 60 "$MPITRAIN" -mode evaluate \
    -model_file "$G/model_final.h5" -data_val "$WORK/gpl-val.h5" -outputs val -output_dir "$WORK/geval"
  same_eval "gpt evaluated at 3 ranks" "$G" "$WORK/geval"
  expect_error "predict refuses a gpt" "option -mode predict: the model of $G/model_final.h5 reads token windows" \
    run_mpi 2 60 "$MPITRAIN" -mode predict -model_file "$G/model_final.h5" -data "$WORK/gpl-val.h5"
else
  echo "# no $text or mt-data: the gpt case is not run"
fi

# ---- predict: one file, each sample once in order, the same at 1, 2, 3 ranks
ref=
for np in 1 2 3; do
  P=$WORK/pred-$np.h5
  expect_ok "predict at $np ranks" run_mpi "$np" 60 "$MPITRAIN" -mode predict -model_file "$F" \
    -data "$WORK/nolabel.h5" -predictions "$P" -outputs_probs -val_batch_size 20
  d=$("$H5DIGEST" "$P")
  if [ $np = 1 ]; then
    ref=$d
    if grep -q '^/index i64le 203 ' <<<"$d" && grep -q '^/probs f32le 203x5 ' <<<"$d" &&
      grep -q '^/logits f32le 203x5 ' <<<"$d" && ! grep -qE '^/(label|loss) ' <<<"$d"; then
      pass "predict: /index, /pred, /logits, /probs of 203 rows, no /label nor /loss"
    else
      fail "predict: the datasets of a file without /y" "$(tr '\n' ' ' <<<"$d")"
    fi
  elif [ -n "$ref" ] && [ "$d" = "$ref" ]; then
    pass "predict at $np ranks: the same file as at 1 rank"
  else
    fail "predict at $np ranks: the same file as at 1 rank" "$(diff <(echo "$ref") <(echo "$d") | tr '\n' ' ')"
  fi
done
L=$WORK/pred-labelled
expect_ok "predict a file with /y (default file name)" run_mpi 2 60 "$MPITRAIN" -mode predict \
  -model_file "$F" -data "$WORK/val.h5" -output_dir "$L"
expect_output "predict with /y reports its loss" "(its /y: loss"
if [ "$("$MKDATA" outindex "$L/predictions.h5" | tr '\n' ' ')" = "$(seq 0 202 | tr '\n' ' ')" ]; then
  pass "predict: the samples 0..202 once each, in order"
else
  fail "predict: the samples 0..202 once each, in order" "$("$MKDATA" outindex "$L/predictions.h5" 2>&1 | head -5 | tr '\n' ' ')"
fi
if [ "$(digest "$L/predictions.h5" index pred)" = "$(digest "$WORK/pred-1.h5" index pred)" ] &&
  [ "$(digest "$L/predictions.h5" pred loss)" = "$(digest "$T/outputs/val0-epoch2.h5" pred loss)" ]; then
  pass "predict with /y: the same predictions, and the losses of training's validation"
else
  fail "predict with /y: the same predictions" "they differ"
fi

# ---- the Slurm job array's choice of shard (a dry run; test_slurm.sh runs it)
cp "$WORK/nolabel.h5" "$WORK/shard-0.h5" && cp "$WORK/nolabel.h5" "$WORK/shard-1.h5"
cp "$WORK/nolabel.h5" "$WORK/shard-0.pred.h5" # an element that ended: not a shard
run_logged env SLURM_ARRAY_TASK_ID=1 MT_SHARDS="$WORK/shard-*.h5" MT_DRY_RUN=1 \
  bash "$top_srcdir/jobs/slurm-predict-array.sh" "$F" -threads 1
if [ "$LAST_RC" = 0 ] && last_output | grep -qF -- "-data $WORK/shard-1.h5 -predictions $WORK/shard-1.pred.h5 -threads 1"; then
  pass "slurm-predict-array.sh: element 1 predicts shard-1.h5 into shard-1.pred.h5"
else
  fail "slurm-predict-array.sh: element 1 predicts shard-1.h5" "exit $LAST_RC"
fi
expect_fail "slurm-predict-array.sh: an element past the shards" "there are 2 shards" \
  env SLURM_ARRAY_TASK_ID=2 MT_SHARDS="$WORK/shard-*.h5" MT_DRY_RUN=1 \
  bash "$top_srcdir/jobs/slurm-predict-array.sh" "$F"

# ---- bad inputs: one line naming them
ev=(-mode evaluate -data_val "$WORK/val.h5" -output_dir "$WORK/bad")
expect_error "evaluate without -model_file" "option -model_file: -mode evaluate needs" \
  run_mpi 2 60 "$MPITRAIN" "${ev[@]}"
expect_error "a -model_file that is not there" "option -model_file: cannot read $WORK/none.h5" \
  run_mpi 2 60 "$MPITRAIN" "${ev[@]}" -model_file "$WORK/none.h5"
expect_error "a data file as -model_file" "$WORK/val.h5 is a data set (/x or /tokens), not a model file" \
  run_mpi 2 60 "$MPITRAIN" "${ev[@]}" -model_file "$WORK/val.h5"
expect_error "a data file of another shape" "data file $WORK/wide.h5: samples of /x are (8), those of the model of $F (-model_file) (12)" \
  run_mpi 2 60 "$MPITRAIN" -mode evaluate -model_file "$F" -data_val "$WORK/wide.h5"
"$MKDATA" synth "$WORK/six.h5" 40 12 6 3 >/dev/null || bail "mkdata synth failed"
expect_error "a data file of other classes" "data file $WORK/six.h5: /y has 6 classes (attribute nclasses), the model of $F (-model_file) has 5" \
  run_mpi 2 60 "$MPITRAIN" -mode evaluate -model_file "$F" -data_val "$WORK/six.h5"
expect_error "predict: a data file of another shape" "data file $WORK/wide.h5: samples of /x are (8)" \
  run_mpi 2 60 "$MPITRAIN" -mode predict -model_file "$F" -data "$WORK/wide.h5" -output_dir "$WORK/bad"
expect_error "a training option in evaluate" "option -lr: only -mode train uses it, not -mode evaluate" \
  run_mpi 2 60 "$MPITRAIN" "${ev[@]}" -model_file "$F" -lr 0.1
expect_error "a training option in predict" "option -backend: only -mode train uses it, not -mode predict" \
  run_mpi 2 60 "$MPITRAIN" -mode predict -model_file "$F" -data "$WORK/val.h5" -backend ddp
expect_error "predict's option in evaluate" "option -predictions: only -mode predict uses it, not -mode evaluate" \
  run_mpi 2 60 "$MPITRAIN" "${ev[@]}" -model_file "$F" -predictions "$WORK/p.h5"
expect_error "-model_file in train mode" "option -model_file: only -mode evaluate, predict and generate read it" \
  run_mpi 2 60 "$MPITRAIN" -model_file "$F" -data_train "$WORK/train.h5" -output_dir "$WORK/bad"
expect_error "an unknown mode" "option -mode: 'infer' is not one of: train, evaluate, predict" \
  run_mpi 2 60 "$MPITRAIN" -mode infer -model_file "$F"
expect_error "-device cuda in evaluate" "option -device cuda: -mode evaluate runs on the CPU" \
  run_mpi 2 60 "$MPITRAIN" "${ev[@]}" -model_file "$F" -device cuda
expect_error "a model option that contradicts the file" "option -mlp_hidden: 32 contradicts $F" \
  run_mpi 2 60 "$MPITRAIN" "${ev[@]}" -model_file "$F" -mlp_hidden 32
expect_error "evaluate a file without /y" "data file $WORK/nolabel.h5: has no dataset /y" \
  run_mpi 2 60 "$MPITRAIN" -mode evaluate -model_file "$F" -data_val "$WORK/nolabel.h5"
expect_error "predict without -data" "option -data: -mode predict needs the data file" \
  run_mpi 2 60 "$MPITRAIN" -mode predict -model_file "$F"
finish
