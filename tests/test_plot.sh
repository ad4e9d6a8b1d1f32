#!/usr/bin/env bash
# The picture of the run (src/io/plot.c), OUTPUT_DIR/curve.png:
# - after a 2-epoch run with validation sets it is a PNG (the 8-byte
#   signature, then the IHDR chunk) of 1024 x 768 pixels (MT_PLOT_WIDTH x
#   MT_PLOT_HEIGHT), no .tmp is left and the run printed no warning; an
#   output folder with a space and a quote in its name works too;
# - a DP run (ddp-dp, 2 ranks) and an fp16 amp run draw theirs, with the
#   epsilon and loss-scale panels;
# - the picture does not change the training: the model equals -plot 0's;
# - without gnuplot (a PATH that hides it; MT_GNUPLOT=/nonexistent at 2
#   ranks): exactly one warning for the whole run, no picture, exit 0;
# - a gnuplot that fails: one warning naming its log; one that hangs:
#   stopped after -plot_timeout (it and its child killed), one warning;
# - -plot 0 writes no picture and looks for no gnuplot; bad -plot and
#   -plot_timeout values are refused naming the option.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MKDATA" "$top_builddir/tests/h5digest"
command -v gnuplot >/dev/null || bail "gnuplot is not on PATH (scripts/deps.sh installs gnuplot-nox)"
"$MKDATA" synth "$WORK/train.h5" 400 8 3 41 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 90 8 3 42 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val2.h5" 70 8 3 43 >/dev/null || bail "mkdata synth failed"

run=(-model mlp -mlp_hidden 16 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5,$WORK/val2.h5"
  -epochs 2 -batch_size 32 -max_train_steps_per_epoch 6 -lr 0.1 -log_every 0 -threads 1 -seed 7)

# png_size FILE: "WIDTH HEIGHT" when FILE starts with PNG's signature and an
# IHDR chunk (length 13), else nothing.
png_size() {
  local h
  h=$(od -An -tx1 -N24 "$1" 2>/dev/null | tr -d ' \n')
  case $h in
    89504e470d0a1a0a0000000d49484452*) echo "$((16#${h:32:8})) $((16#${h:40:8}))" ;;
  esac
}
warnings() { last_output | grep -c '^mpitrain: warning: .*curve.png'; }

# drawn NAME DIR: a run that exited 0 without a warning left DIR/curve.png,
# a 1024x768 PNG, and no curve.png.tmp
drawn() {
  local size
  size=$(png_size "$2/curve.png")
  if [ "$LAST_RC" != 0 ]; then fail "$1" "exit $LAST_RC"
  elif [ "$size" != "1024 768" ]; then fail "$1" "curve.png is not a 1024x768 PNG (got '$size')"
  elif [ -e "$2/curve.png.tmp" ]; then fail "$1" "curve.png.tmp left behind"
  elif [ "$(warnings)" != 0 ]; then fail "$1" "a warning: $(last_output | grep warning | head -1)"
  else pass "$1"; fi
}
# none NAME DIR NWARN: exit 0, no picture (nor .tmp), NWARN warnings about it
none() {
  if [ "$LAST_RC" != 0 ]; then fail "$1" "exit $LAST_RC"
  elif [ -e "$2/curve.png" ] || [ -e "$2/curve.png.tmp" ]; then fail "$1" "a picture was written"
  elif [ "$(warnings)" != "$3" ]; then fail "$1" "$(warnings) warnings about curve.png, expected $3"
  else pass "$1"; fi
}
in_script() { # NAME DIR TEXT: curve.gp draws TEXT
  grep -qF -- "$3" "$2/curve.gp" 2>/dev/null && pass "$1" || fail "$1" "curve.gp lacks '$3'"
}

# ---- drawn
o=$WORK/sp
run_logged run_mpi 1 60 "$MPITRAIN" "${run[@]}" -backend sp -output_dir "$o"
drawn "sp, 2 epochs, 2 validation sets: curve.png is a 1024x768 PNG" "$o"
in_script "the picture has both validation sets" "$o" "val: val2.h5"
in_script "and the validation accuracy" "$o" "validation accuracy by epoch"
odd="$WORK/out dir's"
run_logged run_mpi 1 60 "$MPITRAIN" "${run[@]}" -epochs 1 -backend sp -output_dir "$odd"
drawn "an output folder named with a space and a quote" "$odd"
o0=$WORK/sp-noplot
run_logged run_mpi 1 60 "$MPITRAIN" "${run[@]}" -backend sp -plot 0 -output_dir "$o0"
none "-plot 0: no picture" "$o0" 0
[ ! -e "$o0/curve.gp" ] && pass "-plot 0: no curve.gp either" || fail "-plot 0: no curve.gp" "written"
a=$("$top_builddir/tests/h5digest" "$o/model_final.h5")
b=$("$top_builddir/tests/h5digest" "$o0/model_final.h5")
[ -n "$a" ] && [ "$a" = "$b" ] && pass "the picture leaves the model's bits alone (-plot 0 == -plot 1)" ||
  fail "the picture leaves the model's bits alone" "digests differ: $a / $b"

o=$WORK/dp
run_logged run_mpi 2 90 "$MPITRAIN" "${run[@]}" -backend ddp-dp -dp_noise_multiplier 1 \
  -dp_max_grad_norm 1 -output_dir "$o"
drawn "ddp-dp at 2 ranks: curve.png" "$o"
in_script "the DP picture draws epsilon from dp.csv" "$o" "'dp.csv' skip 1 using 1:3"
o=$WORK/fp16
run_logged run_mpi 1 60 "$MPITRAIN" "${run[@]}" -backend sp-amp -amp_dtype fp16 -output_dir "$o"
drawn "sp-amp fp16: curve.png" "$o"
in_script "the fp16 picture draws the loss scale" "$o" "'loss_scale.csv' skip 1"
# the picture read every step's row: the file was flushed by the epoch's end
rows=$(($(wc -l <"$o/loss_scale.csv") - 1))
[ "$rows" = 12 ] && pass "loss_scale.csv holds the 12 steps" || fail "loss_scale.csv's rows" "$rows"

expect_error "-plot_timeout 0 is refused" "option -plot_timeout" \
  run_mpi 1 30 "$MPITRAIN" "${run[@]}" -plot_timeout 0 -output_dir "$WORK/bad"
expect_error "-plot maybe is refused" "-plot" \
  run_mpi 1 30 "$MPITRAIN" "${run[@]}" -plot maybe -output_dir "$WORK/bad"

# ---- not drawn
# the ranks' PATH (mpirun -x) an empty folder: no gnuplot there
mkdir -p "$WORK/empty" "$WORK/bin"
o=$WORK/nognuplot
run_logged run_mpi 1 60 -x PATH="$WORK/empty" "$MPITRAIN" "${run[@]}" -output_dir "$o"
none "no gnuplot on PATH: one warning, no picture, exit 0" "$o" 1
expect_output "the warning names the package" "gnuplot-nox"
o=$WORK/nonexistent
run_logged with_env MT_GNUPLOT=/nonexistent run_mpi 2 60 "$MPITRAIN" "${run[@]}" -backend ddp -output_dir "$o"
none "MT_GNUPLOT=/nonexistent at 2 ranks: one warning for the run, no picture, exit 0" "$o" 1
o=$WORK/nonexistent-off
run_logged with_env MT_GNUPLOT=/nonexistent run_mpi 1 60 "$MPITRAIN" "${run[@]}" -plot 0 -output_dir "$o"
none "-plot 0 looks for no gnuplot" "$o" 0

printf '#!/bin/sh\necho "fake gnuplot: failing" >&2\nexit 3\n' >"$WORK/bin/failing"
chmod +x "$WORK/bin/failing"
o=$WORK/failing
run_logged with_env MT_GNUPLOT="$WORK/bin/failing" run_mpi 1 60 "$MPITRAIN" "${run[@]}" -output_dir "$o"
none "a failing gnuplot: one warning, no picture, exit 0" "$o" 1
expect_output "the warning names gnuplot's log" "exited with status 3 (its messages: $o/curve.gp.log)"
grep -q "fake gnuplot: failing" "$o/curve.gp.log" 2>/dev/null && pass "gnuplot's messages are in the log" ||
  fail "gnuplot's messages are in the log" "not there"

# a gnuplot that hangs, with a child of its own: both killed after 2 s
printf '#!/bin/sh\nsleep 300 &\necho $! >"%s"\nwait\n' "$WORK/child.pid" >"$WORK/bin/stuck"
chmod +x "$WORK/bin/stuck"
o=$WORK/stuck
run_logged with_env MT_GNUPLOT="$WORK/bin/stuck" run_mpi 1 60 "$MPITRAIN" "${run[@]}" \
  -plot_timeout 2 -output_dir "$o"
none "a stuck gnuplot: stopped after -plot_timeout, one warning, exit 0" "$o" 1
expect_output "the warning says it was too slow" "took more than 2 s (-plot_timeout"
# at 2 ranks rank 1 waits for rank 0 meanwhile: the hang guard must not fire
o=$WORK/stuck-guard
run_logged with_env MT_GNUPLOT="$WORK/bin/stuck" run_mpi 2 60 "$MPITRAIN" "${run[@]}" -backend ddp \
  -plot_timeout 100 -comm_timeout 6 -output_dir "$o"
none "a stuck gnuplot at 2 ranks with -comm_timeout 6: stopped after 3 s, no hang reported" "$o" 1
expect_output "the warning says it was too slow" "took more than 3 s (-plot_timeout"
child=$(cat "$WORK/child.pid" 2>/dev/null)
sleep 0.5
# killed: gone, or a zombie (an orphan's new parent may never reap it)
state=$( [ -n "$child" ] && ps -o stat= -p "$child" 2>/dev/null | tr -d ' ')
if [ -z "$child" ]; then fail "the stuck gnuplot's child was killed too" "no pid recorded"
elif [ -n "$state" ] && [ "${state#Z}" = "$state" ]; then
  fail "the stuck gnuplot's child was killed too" "alive: $(ps -o pid,ppid,pgid,stat,cmd -p "$child" | tail -1)"
  kill "$child"
else pass "the stuck gnuplot's child was killed too"; fi

finish
