#!/bin/bash
# Bad data files: each broken training or validation file is found before
# training starts, on 1 and 2 ranks: one line 'mpitrain: error: ...' naming
# the file, a non-zero exit, no hang, no HDF5 error stack, and nothing left in
# the output folder. Good files of the same size train (positive controls).
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

MKBAD=${MKBAD:-$top_builddir/tests/mkbad}
need_bin "$MPITRAIN" "$MKDATA" "$MKBAD"
make_work
unset PETSC_OPTIONS

T=$TEST_TIMEOUT
# (mkdata also makes noclasses and noscale; the reader accepts those by design:
# nclasses defaults to max label + 1, scale to 1.)
KINDS="nox noy xdtype ydtype xrank nmismatch label_high label_neg empty garbage"
"$MKDATA" synth "$WORK/good.h5" 64 8 4 1 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/good-u8.h5" 64 8 4 1 uint8 >/dev/null || bail "mkdata synth uint8 failed"
"$MKDATA" synth "$WORK/val.h5" 32 8 4 2 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val-d6.h5" 32 6 4 3 >/dev/null || bail "mkdata synth failed"
for k in $KINDS; do
  "$MKDATA" bad "$k" "$WORK/bad-$k.h5" || bail "mkdata bad $k failed"
done
MISSING=$WORK/does-not-exist.h5
mkbad() { "$MKBAD" "$1" "$2" "$WORK/$3" || bail "mkbad $1 failed"; }
mkbad x_nan 100 x-nan-100.h5
mkbad x_nan 600 x-nan-600.h5
mkbad x_inf 600 x-inf-600.h5
mkbad y_nan 9999 y-nan.h5
mkbad scale_inf 0 scale-inf.h5
mkbad scale_nan 0 scale-nan.h5
mkbad nclasses 100000000 nclasses-1e8.h5
mkbad nclasses 9223372036854775807 nclasses-max.h5
mkbad label 2147483647 label-i32max.h5
mkbad label 9223372036854775807 label-i64max.h5
mkbad nclasses2 4 nclasses-array.h5
mkbad wide 2147483656 wide.h5
mkbad label 3 good4.h5 # all finite, labels 0..3: the training set beside x-nan-600
mkbad vocab 9223372036854775807 vocab.h5


SMALL=(-model mlp -mlp_hidden 8 -epochs 1 -batch_size 8 -log_every 0)

# bad_run NAME FILE NP ARGS...: fails naming FILE, no HDF5-DIAG, no output.
bad_run() {
  local name=$1 file=$2 np=$3
  shift 3
  local d
  d=$(out)
  expect_error "$name" "$file" run_mpi "$np" "$T" "$MPITRAIN" -backend "$B" "$@" "${SMALL[@]}" \
    -output_dir "$d"
  expect_no_output "$name: no HDF5 error stack" "HDF5-DIAG"
  expect_empty_dir "$name: no output left" "$d"
}

# A checkpoint whose position (trainer state attributes, no checksum) is
# damaged: a restart is refused naming the file (tests/fuzz found an epoch
# of INT_MIN overflowing the step arithmetic). Step 2 of 2 is a position
# (the epoch's end, test_restart.sh); 3 is not.
d=$WORK/ckpt-run
RUN=(-backend sp -data_train "$WORK/good.h5" "${SMALL[@]}" -max_train_steps_per_epoch 2 -output_dir "$d")
expect_ok "a run writes a checkpoint" run_mpi 1 "$T" "$MPITRAIN" "${RUN[@]}" -checkpoint_every_steps 1
for kv in "state_epoch -2147483648" "state_step 3" "state_step -1"; do
  ck=$WORK/ckpt-${kv// /_}.h5
  cp "$d/checkpoints/ckpt-1.h5" "$ck" && "$MKBAD" $kv "$ck" || bail "mkbad $kv failed"
  expect_error "restart from a checkpoint with $kv" "checkpoint $ck: trainer state epoch" \
    run_mpi 1 "$T" "$MPITRAIN" "${RUN[@]}" -restart "$ck"
done

for np in 1 2; do
  # sp runs on one rank only; use ddp on more.
  B=sp
  [ "$np" -gt 1 ] && B=ddp
  # Positive controls: the same run on good files succeeds.
  d=$(out)
  expect_ok "np=$np good float32 file trains" \
    run_mpi "$np" "$T" "$MPITRAIN" -backend $B -data_train "$WORK/good.h5" \
    -data_val "$WORK/val.h5" \
    "${SMALL[@]}" -output_dir "$d"
  expect_nonempty_dir "np=$np good run wrote output" "$d"
  d=$(out)
  expect_ok "np=$np good uint8 file trains" \
    run_mpi "$np" "$T" "$MPITRAIN" -backend $B -data_train "$WORK/good-u8.h5" "${SMALL[@]}" \
    -output_dir "$d"

  for k in $KINDS; do
    bad_run "np=$np -data_train bad-$k" "$WORK/bad-$k.h5" $np -data_train "$WORK/bad-$k.h5"
  done
  bad_run "np=$np -data_train missing file" "$MISSING" $np -data_train "$MISSING"

  # A bad validation set is found before training, too.
  for k in garbage nox label_neg nmismatch; do
    bad_run "np=$np -data_val bad-$k" "$WORK/bad-$k.h5" $np -data_train "$WORK/good.h5" \
      -data_val "$WORK/val.h5,$WORK/bad-$k.h5"
  done
  bad_run "np=$np -data_val missing file" "$MISSING" $np -data_train "$WORK/good.h5" \
    -data_val "$MISSING"
  bad_run "np=$np -data_val with other sample shape" "$WORK/val-d6.h5" $np \
    -data_train "$WORK/good.h5" -data_val "$WORK/val-d6.h5"

  # Files that would train silently to NaN, or overflow a size: refused at
  # open naming the file, the dataset and the row (or the attribute/dim).
  # Row 100 is in the default sample, row 600 is not (tests/mkbad.c).
  bad_run "np=$np NaN in /x at a sampled row" "$WORK/x-nan-100.h5: /x row 100 holds NaN (value 2" \
    $np -data_train "$WORK/x-nan-100.h5"
  bad_run "np=$np Inf in /x, -data_check full" "$WORK/x-inf-600.h5: /x row 600 holds Inf" \
    $np -data_train "$WORK/x-inf-600.h5" -data_check full
  bad_run "np=$np NaN in /x outside the sample, -data_check full" "/x row 600 holds NaN" \
    $np -data_train "$WORK/good4.h5" -data_val "$WORK/x-nan-600.h5" -data_check full
  bad_run "np=$np NaN in a float /y" "$WORK/y-nan.h5: /y row 9999 holds NaN (target 1)" \
    $np -data_train "$WORK/y-nan.h5"
  bad_run "np=$np Inf scale attribute" "$WORK/scale-inf.h5: attribute scale of /x is inf" \
    $np -data_train "$WORK/scale-inf.h5"
  bad_run "np=$np NaN scale attribute" "$WORK/scale-nan.h5: attribute scale of /x is" \
    $np -data_train "$WORK/scale-nan.h5"
  bad_run "np=$np nclasses 1e8" "attribute nclasses of /y is 100000000, above the 16777216" \
    $np -data_train "$WORK/nclasses-1e8.h5"
  bad_run "np=$np nclasses int64 max" "attribute nclasses of /y is 2147483647, above" \
    $np -data_train "$WORK/nclasses-max.h5"
  # an attribute of 2 values read as one overran the int (tests/fuzz, ASan)
  bad_run "np=$np nclasses an array of 2" "$WORK/nclasses-array.h5: attribute nclasses of /y is unreadable" \
    $np -data_train "$WORK/nclasses-array.h5"
  bad_run "np=$np label int32 max, no nclasses" "largest label 2147483647 makes 2147483648 classes" \
    $np -data_train "$WORK/label-i32max.h5"
  bad_run "np=$np label int64 max" "$WORK/label-i64max.h5: /y holds a label outside the 32-bit" \
    $np -data_train "$WORK/label-i64max.h5"
  bad_run "np=$np width 2^31+8" "$WORK/wide.h5: /x dim 1 is 2147483656" \
    $np -data_train "$WORK/wide.h5"
  bad_run "np=$np vocab_size int64 max" "$WORK/vocab.h5: attribute vocab_size of /tokens is 2147483647" \
    $np -data_train "$WORK/vocab.h5" -model gpt -gpt_block 8
  # the same files pass when the check is off or the NaN is not sampled
  d=$(out)
  expect_ok "np=$np NaN outside the sample passes the default check" \
    run_mpi "$np" "$T" "$MPITRAIN" -backend $B -data_train "$WORK/x-nan-600.h5" "${SMALL[@]}" \
    -max_train_steps_per_epoch 2 -output_dir "$d"
  d=$(out)
  expect_ok "np=$np -data_check none skips the scan" \
    run_mpi "$np" "$T" "$MPITRAIN" -backend $B -data_train "$WORK/x-nan-100.h5" "${SMALL[@]}" \
    -data_check none -max_train_steps_per_epoch 1 -output_dir "$d"
  bad_run "np=$np -data_check bad value" "option -data_check: 'most' is not one of: sample, full, none" \
    $np -data_train "$WORK/good.h5" -data_check most

  # An output folder that already holds files keeps exactly those.
  d=$WORK/existing-$np
  { mkdir -p "$d" && echo keep >"$d/KEEP"; } || bail "cannot make $d"
  expect_error "np=$np bad file with an existing output folder" "$WORK/bad-label_high.h5" \
    run_mpi "$np" "$T" "$MPITRAIN" -backend $B -data_train "$WORK/bad-label_high.h5" "${SMALL[@]}" \
    -output_dir "$d"
  if [ "$(ls -A "$d")" = KEEP ]; then
    pass "np=$np existing output folder unchanged"
  else
    fail "np=$np existing output folder unchanged" "now holds: $(ls -A "$d" | tr '\n' ' ')"
  fi
done

finish
