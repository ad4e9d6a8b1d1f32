#!/usr/bin/env bash
# The edges of a run that must not lose work (issue 19):
# - a loss that turns NaN stops the run at that step, on every rank, naming
#   the step and the newest good checkpoint; nothing is written from it, and
#   -restart auto resumes from the good checkpoint;
# - -restart auto skips a checkpoint that holds NaN, naming it;
# - a full disk (a small tmpfs, root only) during a checkpoint ends within
#   seconds with one line naming the file, errno and the bytes needed, exit
#   74, the previous checkpoint intact and no .tmp left; with
#   -checkpoint_write_error continue training goes on and finishes;
# - a signal to one rank alone names that signal (not "signal 0").
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MKDATA"
H5DIGEST=${H5DIGEST:-$top_builddir/tests/h5digest}
"$MKDATA" synth "$WORK/train.h5" 1200 32 4 7 >/dev/null || bail "mkdata synth failed"
base=(-model mlp -mlp_hidden 64,64 -data_train "$WORK/train.h5" -batch_size 32 -threads 1
  -max_train_steps_per_epoch 30 -momentum 0.9 -log_every 0)

# --- NaN: a one-cycle schedule whose peak lr blows the loss up at step 5,
# after the checkpoint of step 4
nan=("${base[@]}" -backend ddp -epochs 2 -lr 1e4 -lr_schedule onecycle -onecycle_div_factor 1e7
  -checkpoint_every_steps 4 -checkpoint_keep 0)
o=$WORK/nan
expect_error "a NaN loss stops the run at its step, naming the good checkpoint" \
  "training loss is NaN at epoch 1, step 5 of 30" run_mpi 2 120 "$MPITRAIN" "${nan[@]}" -output_dir "$o"
expect_output "the stop names the newest good checkpoint" "the newest good checkpoint is $o/checkpoints/ckpt-4.h5"
[ ! -e "$o/model_final.h5" ] && pass "no model_final.h5 from NaN parameters" \
  || fail "no model_final.h5 from NaN parameters" "written"
ls "$o/checkpoints" | grep -q 'ckpt-[0-9]*\.h5$' && [ "$(ls "$o/checkpoints" | grep -c 'h5$')" = 1 ] \
  && pass "only the good checkpoint exists" || fail "only the good checkpoint exists" "$(ls "$o/checkpoints")"
# -restart auto then resumes from ckpt-4 (and fails at the same step: the run
# is deterministic), bit-exact to the run above
expect_error "-restart auto resumes from the good checkpoint" "step 5 of 30" \
  run_mpi 2 120 "$MPITRAIN" "${nan[@]}" -output_dir "$o" -restart auto
expect_output "the restart names ckpt-4" "restart from $o/checkpoints/ckpt-4.h5"
# -log_every 0 and no checkpoints at all: the run still stops (it exited 0
# with a NaN model_final.h5)
expect_error "a NaN loss stops a run that logs and checkpoints nothing" "training loss is NaN" \
  run_mpi 2 120 "$MPITRAIN" "${nan[@]}" -checkpoint_every_steps 0 -checkpoint_at_end 0 -output_dir "$WORK/nan0"
expect_output "before any checkpoint, said" "before any checkpoint"
[ ! -e "$WORK/nan0/model_final.h5" ] && pass "no model_final.h5 (no checkpoints)" \
  || fail "no model_final.h5 (no checkpoints)" "written"

# --- a signal to one rank alone stops every rank, naming that signal
long=("${base[@]}" -backend ddp -mlp_hidden 512,512 -epochs 200 -lr 0.01)
timeout -k 10 120 "$MPIRUN" -np 2 --oversubscribe --bind-to none --mca btl self,vader \
  "$MPITRAIN" "${long[@]}" -log_every 5 -output_dir "$WORK/sig" >"$WORK/sig.log" 2>&1 </dev/null &
pid=$!
for _ in $(seq 1 300); do grep -q '^epoch 2/' "$WORK/sig.log" 2>/dev/null && break; sleep 0.1; done
mpi=$(pgrep -P "$pid" -x mpirun || echo "$pid")
rank=$(pgrep -P "$mpi" -x mpitrain | tail -1)
[ -n "$rank" ] && kill -USR1 "$rank"
wait "$pid"
rc=$?
LAST_LOG=$WORK/sig.log
[ "$rc" = 75 ] && pass "SIGUSR1 to one rank: exit 75" || fail "SIGUSR1 to one rank: exit 75" "exit $rc"
expect_output "the stop names the signal one rank got" "stopped by signal 10 after"

# --- the last step of an epoch is checkpointed once, by the epoch's end
expect_ok "steps and epochs checkpoints at the same step" \
  run_mpi 2 120 "$MPITRAIN" "${base[@]}" -backend ddp -epochs 2 -lr 0.01 -checkpoint_every_steps 10 \
    -checkpoint_every_epochs 1 -checkpoint_keep 0 -output_dir "$WORK/twice"
n=$(last_output | grep -c 'checkpoint .*/ckpt-30.h5:')
[ "$n" = 1 ] && pass "ckpt-30 written once" || fail "ckpt-30 written once" "$n times"
expect_output "as the epoch's checkpoint" "ckpt-30.h5: after epoch 1"

# --- full disk: root mounts a 2 MiB tmpfs for the checkpoints (each about
# 1.4 MiB: two never fit)
disk=$WORK/disk
mkdir -p "$disk"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=2m tmpfs "$disk" 2>/dev/null; then
  trap 'umount "$disk" 2>/dev/null; cleanup_work' EXIT
  full=("${base[@]}" -backend ddp -mlp_hidden 400,400 -epochs 1 -lr 0.01 -checkpoint_every_steps 10
    -checkpoint_keep 1 -checkpoint_dir "$disk/ck")
  start=$(date +%s)
  run_logged run_mpi 2 120 "$MPITRAIN" "${full[@]}" -output_dir "$WORK/full"
  secs=$(($(date +%s) - start))
  [ "$LAST_RC" = 74 ] && pass "a full disk exits 74" || fail "a full disk exits 74" "exit $LAST_RC"
  [ "$secs" -lt 60 ] && pass "a full disk ends within seconds ($secs s)" || fail "a full disk ends within seconds" "$secs s"
  n=$(last_output | grep -c '^mpitrain: error: ')
  [ "$n" = 1 ] && pass "one error line" || fail "one error line" "$n"
  expect_output "the error names the file and errno" "$disk/ck/ckpt-20.h5.tmp: No space left on device (it needs"
  expect_output "the error names the previous checkpoint" "the newest good checkpoint is $disk/ck/ckpt-10.h5"
  ls "$disk/ck" | grep -q '\.tmp$' && fail "no .tmp left" "$(ls "$disk/ck")" || pass "no .tmp left"
  run_logged "$H5DIGEST" "$disk/ck/ckpt-10.h5"
  [ "$LAST_RC" = 0 ] && pass "the previous checkpoint is intact" || fail "the previous checkpoint is intact" "h5digest: $LAST_RC"
  expect_ok "-restart auto resumes from it" \
    run_mpi 2 120 "$MPITRAIN" "${full[@]}" -checkpoint_dir "$disk/ck" -restart auto \
      -checkpoint_every_steps 0 -checkpoint_at_end 0 -output_dir "$WORK/full2"
  expect_output "from ckpt-10" "restart from $disk/ck/ckpt-10.h5"
  rm -rf "${disk:?}/ck"
  expect_ok "-checkpoint_write_error continue trains on" \
    run_mpi 2 120 "$MPITRAIN" "${full[@]}" -checkpoint_write_error continue -output_dir "$WORK/full3"
  expect_output "the failed checkpoint is a warning" "training goes on (-checkpoint_write_error continue)"
  [ -f "$WORK/full3/model_final.h5" ] && pass "the run finished" || fail "the run finished" "no model_final.h5"
  # model_best.h5 on a full output folder: named with errno, exit 74
  "$MKDATA" synth "$WORK/val.h5" 200 32 4 8 >/dev/null || bail "mkdata synth failed"
  rm -rf "${disk:?}/ck"
  dd if=/dev/zero of="$disk/filler" bs=1k count=1700 2>/dev/null
  run_logged run_mpi 2 120 "$MPITRAIN" "${full[@]}" -data_val "$WORK/val.h5" -checkpoint_dir "$WORK/ck-best" \
    -output_dir "$disk/out"
  [ "$LAST_RC" = 74 ] && pass "a full disk for model_best.h5 exits 74" || fail "a full disk for model_best.h5 exits 74" "exit $LAST_RC"
  expect_output "the error names model_best.h5 and errno" "$disk/out/model_best.h5.tmp: No space left on device"
  ls "$disk/out" | grep -q '\.tmp$' && fail "no model_best.h5.tmp left" "$(ls "$disk/out")" || pass "no model_best.h5.tmp left"
  umount "$disk"
else
  echo "# skipped the full-disk cases: needs root and a tmpfs mount"
fi
finish
