#!/usr/bin/env bash
# Stop signals and the launcher's grace (doc/checkpoints-and-jobs.md, "Signals"):
# - a signal that arrives while a checkpoint is written stops the run right
#   after it, without another step or write (an epoch's end checkpoint and a
#   periodic one), exit 75 from the job, and -restart auto then repeats the
#   uninterrupted run bit for bit;
# - the first checkpoint states the grace the launcher leaves (mpirun's
#   odls_base_sigkill_timeout) or, when it took longer (-signal_grace), warns
#   once naming the numbers and the remedies.
# (SIGTERM to mpirun is not tested here: mpirun exits 1 whatever the ranks
# do, and stops reading their output, so whether they checkpoint in its
# grace depends on how much they print; see doc/checkpoints-and-jobs.md.
# test_restart.sh sends mpirun SIGUSR1.)
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MKDATA"
"$MKDATA" synth "$WORK/train.h5" 800 16 4 31 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 150 16 4 32 >/dev/null || bail "mkdata synth failed"
opts=(-backend ddp -model mlp -mlp_hidden 40,24 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5"
  -epochs 3 -max_train_steps_per_epoch 10 -batch_size 24 -lr 0.05 -momentum 0.9 -lr_schedule cosine
  -threads 1 -log_every 0 -checkpoint_keep 0)
same_bits() { # NAME A B: parameters equal bit for bit
  run_logged "$MKDATA" compare "$WORK/$2/model_final.h5" "$WORK/$3/model_final.h5" 0
  [ "$LAST_RC" = 0 ] && pass "$1" || fail "$1" "parameters differ"
}
ckpts() { (cd "$WORK/$1/checkpoints" 2>/dev/null && ls ckpt-*.h5 | sort -V | tr '\n' ' '); }

expect_ok "uninterrupted run" run_mpi 2 120 "$MPITRAIN" "${opts[@]}" -checkpoint_at_end 0 -output_dir "$WORK/U"

# sig_in_ckpt NAME STEP WHAT CKPTS OPTIONS...: SIGUSR1 during the checkpoint
# of global step STEP (MT_TEST_SIGNAL_IN_CHECKPOINT, rank 0) stops the run
# there, leaving the checkpoints CKPTS (no write after STEP's).
sig_in_ckpt() {
  local name=$1 step=$2 what=$3 want=$4
  shift 4
  run_logged with_env MT_TEST_SIGNAL_IN_CHECKPOINT="$step" run_mpi 2 120 "$MPITRAIN" "${opts[@]}" \
    "$@" -output_dir "$WORK/$name"
  [ "$LAST_RC" = 75 ] && pass "$what: exit 75" || fail "$what: exit 75" "exit $LAST_RC"
  expect_output "$what: stopped at global step $step" "stopped by signal 10 after global step $step:"
  [ "$(ckpts "$name")" = "$want" ] && pass "$what: no write after step $step's ($want)" ||
    fail "$what: no write after step $step's ($want)" "checkpoints: $(ckpts "$name")"
  expect_ok "$what: -restart auto" run_mpi 2 120 "$MPITRAIN" "${opts[@]}" "$@" -restart auto \
    -checkpoint_at_end 0 -output_dir "$WORK/$name"
  expect_output "$what: it resumes from ckpt-$step.h5" "ckpt-$step.h5"
  same_bits "$what: signal + restart == uninterrupted, bit for bit" "$name" U
}
sig_in_ckpt E 10 "signal in an epoch's end checkpoint" "ckpt-10.h5 " -checkpoint_every_epochs 1 \
  -signal_grace 3600
sig_in_ckpt P 14 "signal in a periodic checkpoint" "ckpt-7.h5 ckpt-14.h5 " -checkpoint_every_steps 7

# the grace: stated under mpirun (1 s by default), warned about when shorter
run_logged run_mpi 2 120 "$MPITRAIN" "${opts[@]}" -epochs 1 -checkpoint_every_steps 4 -output_dir "$WORK/G1"
expect_output "mpirun's grace is stated at the first checkpoint" \
  "signals: mpirun (odls_base_sigkill_timeout 1) leaves 1 s from SIGTERM to SIGKILL"
expect_no_output "no warning when the checkpoint fits" "warning: the checkpoint took"
run_logged run_mpi 2 120 "$MPITRAIN" "${opts[@]}" -epochs 1 -checkpoint_every_steps 4 -signal_grace 1e-6 \
  -output_dir "$WORK/G2"
expect_output "a checkpoint longer than -signal_grace is warned about" \
  "more than the 1e-06 s that -signal_grace leaves between SIGTERM and SIGKILL"
expect_output "the warning names the remedies" "sbatch --signal=USR1@T"
n=$(last_output | grep -c "warning: the checkpoint took")
[ "$n" = 1 ] && pass "one warning for 3 checkpoints" || fail "one warning for 3 checkpoints" "$n warnings"

finish
