#!/bin/bash
# Bad data files: each broken training or validation file is found before
# training starts, on 1 and 2 ranks: one line 'mpitrain: error: ...' naming
# the file, a non-zero exit, no hang, no HDF5 error stack, and nothing left in
# the output folder. Good files of the same size train (positive controls).
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

need_bin "$MPITRAIN" "$MKDATA"
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
