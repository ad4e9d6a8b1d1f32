#!/usr/bin/env bash
# Per-sample outputs (-outputs val,train,test) and the collective helpers:
# - test_sync (all-gather of per-rank values; the collective outputs writer
#   with unequal row counts and several write rounds) at 1 to 4 ranks;
# - one file per set and epoch, rows in data-set order, every sample exactly
#   once, the same rows (1e-5) at 1, 2 and 3 ranks with 2 threads, for a
#   validation set of 203 samples (not divisible by 2 or 3);
# - with -max_val_steps_per_epoch exactly the evaluated prefix of each
#   rank's block, compacted, in order, equal to the full file's rows;
# - mean loss and accuracy of the rows equal the printed metrics; pred is
#   the argmax of the logits and loss their cross-entropy;
# - test sets after training (test.csv), the training-set pass, a set with
#   fewer samples than ranks, cnn, gpt (token data) and the user model;
# - bad -outputs words and combinations refused, no .tmp left, no hang.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MKDATA" "$top_builddir/tests/test_sync"

for np in 1 2 3 4; do
  run_logged run_mpi "$np" 60 "$top_builddir/tests/test_sync"
  if timed_out; then fail "test_sync at $np ranks" "timed out"
  elif [ "$LAST_RC" != 0 ]; then fail "test_sync at $np ranks" "exit $LAST_RC"
  else pass "test_sync at $np ranks"; fi
done

N=203 NTRAIN=600 NTEST=77
"$MKDATA" synth "$WORK/train.h5" $NTRAIN 4 6 31 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" $N 4 6 32 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/test.h5" $NTEST 4 6 33 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/tiny.h5" 2 4 6 34 >/dev/null || bail "mkdata synth failed"

base=(-backend ddp -max_train_steps_per_epoch 8 -batch_size 36 -lr 0.05 -momentum 0.9
  -seed 3 -log_every 0 -val_batch_size 16 -threads 2)
mlp=(-model mlp -mlp_hidden 16 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5")

# close A B TOL: |A - B| <= TOL
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= t) }'; }

# printed NAME PATTERN: "loss accuracy samples" of the line of run NAME that matches PATTERN
printed() {
  sed -n "s|^$2.*: loss \([0-9.]*\) accuracy \([0-9.]*\) (\([0-9]*\) samples)\$|\1 \2 \3|p" \
    "$WORK/$1.log" | tail -n 1
}

# stats FILE: "rows loss accuracy" from mkdata outstats (which also checks
# the order, and pred and loss against the logits)
stats() {
  local s
  s=$("$MKDATA" outstats "$@") || return 1
  sed -n 's/^rows \([0-9]*\) index .* mean_loss \([^ ]*\) accuracy \([^ ]*\).*/\1 \2 \3/p' <<<"$s"
}

# agree NAME FILE PRINTED_LINE_PATTERN ROWS: the file's rows (in order, each
# index once, consistent with the logits) match the printed metrics
agree() {
  local name=$1 file=$2 pat=$3 rows=$4 p s
  p=$(printed "$name" "$pat")
  s=$(stats "$file")
  read -r pl pa pn <<<"$p"
  read -r sn sl sa <<<"$s"
  if [ -z "$s" ]; then fail "$name: $(basename "$file")" "mkdata outstats: $("$MKDATA" outstats "$file" 2>&1 | tr '\n' ' ')"
  elif [ "$sn" != "$rows" ] || [ "$pn" != "$rows" ]; then
    fail "$name: $(basename "$file")" "rows $sn, printed count '$pn', expected $rows"
  elif ! close "$sl" "$pl" 0.0000501 || ! close "$sa" "$pa" 0.0000501; then
    fail "$name: $(basename "$file")" "rows give loss $sl accuracy $sa, printed '$pl' '$pa'"
  else
    pass "$name: $(basename "$file") has $rows rows in order, loss $sl accuracy $sa as printed"
  fi
}

# block N NP R: "start count" of rank R's block: its share of the set's
# pieces of 64 samples (mt_eval_piece, src/trainer/trainer.h), the last one
# short
block() {
  local n=$1 np=$2 r=$3 p a b
  p=$(((n + 63) / 64))
  a=$((64 * (p * r / np))) b=$((64 * (p * (r + 1) / np)))
  [ "$b" -gt "$n" ] && b=$n
  [ "$b" -lt "$a" ] && b=$a
  echo "$a $((b - a))"
}

# expected_rows N NP K VB: samples evaluated when each of NP ranks takes at
# most K batches of VB (a multiple of 64) from its block (K = 0: all)
expected_rows() {
  local n=$1 np=$2 k=$3 vb=$4 r a c t=0
  for ((r = 0; r < np; r++)); do
    read -r a c <<<"$(block "$n" "$np" "$r")"
    [ "$k" -gt 0 ] && [ "$c" -gt $((k * vb)) ] && c=$((k * vb))
    t=$((t + c))
  done
  echo $t
}

# expected_index N NP K VB: those samples' indices, one a line
expected_index() {
  local n=$1 np=$2 k=$3 vb=$4 r a c
  for ((r = 0; r < np; r++)); do
    read -r a c <<<"$(block "$n" "$np" "$r")"
    [ "$k" -gt 0 ] && [ "$c" -gt $((k * vb)) ] && c=$((k * vb))
    [ "$c" -gt 0 ] && seq "$a" $((a + c - 1))
  done
}

train() { # NAME NP [OPTIONS...]; EPOCHS (2) and OUT ($WORK/NAME) from the environment
  local name=$1 np=$2
  shift 2
  run_logged run_mpi "$np" 120 "$MPITRAIN" "${base[@]}" -epochs "${EPOCHS:-2}" -output_dir "${OUT:-$WORK/$name}" "$@"
  cp "$LAST_LOG" "$WORK/$name.log"
  if timed_out; then fail "train $name ($np ranks)" "timed out: a hang"; return 1; fi
  if [ "$LAST_RC" != 0 ]; then fail "train $name ($np ranks)" "exit $LAST_RC"; return 1; fi
  pass "train $name ($np ranks)"
}

rows_equal() { # NAME A B [subset]
  run_logged "$MKDATA" rows "$2" "$3" 1e-5 ${4:-}
  [ "$LAST_RC" = 0 ] && pass "$1" || fail "$1" "$(last_output | tail -n 2 | tr '\n' ' ')"
}

# -val_batch_size 16 (base) makes batches of one piece, 64 samples
# (src/trainer/trainer.h); one of them per rank cuts every block short
K=1 VB=64
all=("${mlp[@]}" -data_test "$WORK/test.h5" -outputs val,train,test -outputs_logits)
for np in 1 2 3; do
  train full$np $np "${all[@]}"
  train cut$np $np "${all[@]}" -max_val_steps_per_epoch $K
  o=$WORK/full$np/outputs c=$WORK/cut$np/outputs
  for e in 1 2; do
    agree full$np "$o/val0-epoch$e.h5" "epoch $e/2 val\[0\]" $N
    agree full$np "$o/train-epoch$e.h5" "epoch $e/2 train (evaluation pass)" $NTRAIN
  done
  agree full$np "$o/test0.h5" "test\[0\]" $NTEST
  rv=$(expected_rows $N $np $K $VB) rt=$(expected_rows $NTRAIN $np $K $VB)
  agree cut$np "$c/val0-epoch2.h5" "epoch 2/2 val\[0\]" "$rv"
  agree cut$np "$c/train-epoch2.h5" "epoch 2/2 train (evaluation pass)" "$rt"
  agree cut$np "$c/test0.h5" "test\[0\]" $NTEST
  if [ "$("$MKDATA" outindex "$c/val0-epoch2.h5")" = "$(expected_index $N $np $K $VB)" ]; then
    pass "cut$np: the rows are the first $K batches of each of the $np blocks, in order"
  else fail "cut$np: the rows are the first $K batches of each block" "other indices"; fi
  rows_equal "cut$np rows equal full$np's rows of the same samples" "$o/val0-epoch2.h5" "$c/val0-epoch2.h5" subset
  if [ -z "$(ls "$o" "$c" | grep -F .tmp)" ]; then pass "$np ranks: no .tmp left"
  else fail "$np ranks: no .tmp left" "$(ls "$o" "$c")"; fi
done
for np in 2 3; do
  for f in val0-epoch1 val0-epoch2 train-epoch2 test0; do
    rows_equal "$f: $np ranks == 1 rank (every row)" "$WORK/full1/outputs/$f.h5" "$WORK/full$np/outputs/$f.h5"
  done
  rows_equal "cut: $np ranks' rows == 1 rank's" "$WORK/full1/outputs/val0-epoch2.h5" "$WORK/cut$np/outputs/val0-epoch2.h5" subset
done
# the comparison can fail: another epoch's rows differ
run_logged "$MKDATA" rows "$WORK/full1/outputs/val0-epoch1.h5" "$WORK/full1/outputs/val0-epoch2.h5" 1e-5
[ "$LAST_RC" = 1 ] && pass "rows of another epoch are told apart" || fail "rows of another epoch are told apart" "exit $LAST_RC"
if grep -qE "^0,$WORK/test.h5,2,16,[0-9.e-]+,[0-9.e-]+,$NTEST\$" "$WORK/full2/test.csv"; then
  pass "test.csv holds the test set's metrics"
else fail "test.csv holds the test set's metrics" "$(cat "$WORK/full2/test.csv" 2>&1)"; fi
if grep -q "^  rank 2 (.*): [0-9]* samples in" "$WORK/full3.log"; then pass "rank 0 prints each rank's evaluated samples"
else fail "rank 0 prints each rank's evaluated samples" "no line for rank 2"; fi

# a restart reproduces the outputs bit for bit: epoch 1, then -restart auto
# for epoch 2 (constant lr: the schedule does not depend on -epochs)
EPOCHS=1 train stop2 2 "${all[@]}"
OUT=$WORK/stop2 train resume2 2 "${all[@]}" -restart auto
run_logged "$MKDATA" rows "$WORK/full2/outputs/val0-epoch2.h5" "$WORK/stop2/outputs/val0-epoch2.h5" 0
[ "$LAST_RC" = 0 ] && pass "restarted run's outputs == uninterrupted run's, bitwise" ||
  fail "restarted run's outputs == uninterrupted run's, bitwise" "$(last_output | tail -n 1)"

# fewer samples than ranks: one rank evaluates nothing and still joins; one
# sample per batch gives the ranks different batch counts
train tiny3 3 -model mlp -mlp_hidden 16 -data_train "$WORK/train.h5" -data_val "$WORK/tiny.h5" \
  -val_batch_size 1 -outputs val
agree tiny3 "$WORK/tiny3/outputs/val0-epoch2.h5" "epoch 2/2 val\[0\]" 2
if [ "$("$MKDATA" outindex "$WORK/tiny3/outputs/val0-epoch2.h5" | tr '\n' ' ')" = "0 1 " ]; then
  pass "tiny3: samples 0 and 1"; else fail "tiny3: samples 0 and 1" "other indices"; fi
[ ! -e "$WORK/tiny3/outputs/train-epoch1.h5" ] && pass "only the sets -outputs names are written" ||
  fail "only the sets -outputs names are written" "train outputs present"

# cnn (image data, 2 threads) and the user's model: pred/loss consistent with the logits
if "$MKDATA" synth "$WORK/img.h5" 150 16 3 35 image >/dev/null; then
  train cnn2 2 -model cnn -cnn_channels 2 -cnn_hidden 8 -data_train "$WORK/img.h5" \
    -data_val "$WORK/img.h5" -outputs val -outputs_logits
  agree cnn2 "$WORK/cnn2/outputs/val0-epoch2.h5" "epoch 2/2 val\[0\]" 150
else fail "mkdata synth image" "failed"; fi
EX=$top_builddir/examples/user_model
if [ -x "$EX" ]; then
  run_logged run_mpi 2 120 "$EX" "${base[@]}" -epochs 2 -model softmax_tanh -softmax_tanh_hidden 8 \
    -data_train "$WORK/train.h5" -data_val "$WORK/val.h5" -outputs val -outputs_logits -output_dir "$WORK/user2"
  cp "$LAST_LOG" "$WORK/user2.log"
  [ "$LAST_RC" = 0 ] && pass "user model with -outputs val" || fail "user model with -outputs val" "exit $LAST_RC"
  agree user2 "$WORK/user2/outputs/val0-epoch2.h5" "epoch 2/2 val\[0\]" $N
fi

# token data: label and pred -1, loss the sample's mean token loss
text=/usr/share/common-licenses/GPL-3
if [ -f "$text" ] && [ -x "$MT_DATA" ]; then
  "$MT_DATA" text "$text" -out "$WORK" -name gpl -val_fraction 0.1 >/dev/null || bail "mt-data text failed"
  gpt=(-model gpt -gpt_layers 1 -gpt_heads 2 -gpt_embd 16 -gpt_block 16 -data_train "$WORK/gpl-train.h5"
    -data_val "$WORK/gpl-val.h5" -data_test "$WORK/gpl-val.h5" -batch_size 6 -epochs 1
    -max_train_steps_per_epoch 3 -max_val_steps_per_epoch 2 -val_batch_size 20 -threads 2 -log_every 0)
  run_logged run_mpi 3 120 "$MPITRAIN" -backend ddp "${gpt[@]}" -outputs val,test -output_dir "$WORK/gpt3"
  cp "$LAST_LOG" "$WORK/gpt3.log"
  [ "$LAST_RC" = 0 ] && pass "gpt with -outputs val,test (3 ranks)" || fail "gpt with -outputs val,test" "exit $LAST_RC"
  p=$(printed gpt3 "epoch 1/1 val\[0\]") s=$("$MKDATA" outstats "$WORK/gpt3/outputs/val0-epoch1.h5" 2>&1)
  read -r pl pa pn <<<"$p"
  sl=$(sed -n 's/.*mean_loss \([^ ]*\) accuracy \([^ ]*\).*/\1/p' <<<"$s")
  sa=$(sed -n 's/.*mean_loss \([^ ]*\) accuracy \([^ ]*\).*/\2/p' <<<"$s")
  sn=$(sed -n 's/^rows \([0-9]*\) .*/\1/p' <<<"$s")
  if [ "$sa" = -1 ] && [ "$sn" = "$pn" ] && close "$sl" "$pl" 0.0000501; then
    pass "gpt outputs: $sn rows, no labels (-1), mean token loss $sl as printed"
  else fail "gpt outputs" "outstats '$s', printed '$p'"; fi
  expect_error "-outputs_logits refused for token data" "-outputs_logits" \
    run_mpi 2 60 "$MPITRAIN" -backend ddp "${gpt[@]}" -outputs val -outputs_logits -output_dir "$(out)"
fi

# bad options: one line naming the option, no hang
for np in 1 2; do
  b=(-backend ddp -model mlp -mlp_hidden 8 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5" -epochs 1
    -batch_size 12 -log_every 0)
  expect_error "np=$np -outputs foo refused" "option -outputs: 'foo' is not one of: val, train, test" \
    run_mpi "$np" 60 "$MPITRAIN" "${b[@]}" -outputs val,foo -output_dir "$(out)"
  expect_error "np=$np -outputs test needs -data_test" "option -outputs: 'test' needs test sets (-data_test)" \
    run_mpi "$np" 60 "$MPITRAIN" "${b[@]}" -outputs test -output_dir "$(out)"
  expect_error "np=$np -outputs_logits needs -outputs" "option -outputs_logits" \
    run_mpi "$np" 60 "$MPITRAIN" "${b[@]}" -outputs_logits -output_dir "$(out)"
  d=$(out)
  expect_error "np=$np a missing -data_test file is named" "$WORK/none.h5" \
    run_mpi "$np" 60 "$MPITRAIN" "${b[@]}" -data_test "$WORK/none.h5" -output_dir "$d"
  expect_empty_dir "np=$np nothing written for a bad test set" "$d/outputs"
done
finish
