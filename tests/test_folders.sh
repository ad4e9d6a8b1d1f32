#!/usr/bin/env bash
# Reused checkpoint folders (issue 19, case 3) and unwritable ones:
# - a fresh run into a folder holding another run's ckpt-40/50/60 is refused
#   at start, naming them and the ways on, and deletes nothing;
# - with -checkpoint_overwrite it removes them (one line), runs, its own
#   keep-K works and latest names an existing file;
# - -restart auto continues the folder's run (its run identity) and prunes
#   only that run's files: another run's checkpoint and a junk ckpt-100.h5
#   stay, with -checkpoint_keep 1, and the junk is named once; a checkpoint
#   without a run_id (an older file) restarts, and is never pruned;
# - a read-only folder (a read-only tmpfs as root, mode 555 otherwise) is
#   refused at start with "not writable (...)", before training.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MKDATA"
"$MKDATA" synth "$WORK/train.h5" 400 8 3 41 >/dev/null || bail "mkdata synth failed"
opts=(-model mlp -mlp_hidden 12 -data_train "$WORK/train.h5" -batch_size 8 -lr 0.05
  -threads 1 -log_every 0 -max_train_steps_per_epoch 30 -checkpoint_every_steps 10)
ckpts() { (cd "$1" && ls ckpt-*.h5 2>/dev/null | sort -t- -k2 -n | tr '\n' ' '); }
files_are() { # NAME DIR EXPECTED: the checkpoints of DIR, step order
  local got
  got=$(ckpts "$2")
  [ "$got" = "$3" ] && pass "$1" || fail "$1" "$2 holds '$got', expected '$3'"
}
latest_is() { # NAME DIR FILE: DIR/latest names FILE, and FILE exists
  local l
  l=$(cat "$2/latest" 2>/dev/null)
  [ "$l" = "$3" ] && [ -f "$2/$l" ] && pass "$1" || fail "$1" "latest is '$l' (exists: $([ -f "$2/$l" ] && echo yes || echo no))"
}

# another run: 60 steps, keeps ckpt-40/50/60
expect_ok "another run writes ckpt-40/50/60" \
  run_mpi 2 120 "$MPITRAIN" "${opts[@]}" -backend ddp -epochs 2 -output_dir "$WORK/B"
B=$WORK/B/checkpoints
files_are "it keeps three" "$B" "ckpt-40.h5 ckpt-50.h5 ckpt-60.h5 "
cp -r "$B" "$WORK/C"
cp -r "$B" "$WORK/M"

# a fresh 30-step run into that folder: refused before training, nothing lost
expect_error "a fresh run into a folder with checkpoints is refused, naming them" \
  "already holds 3 checkpoints of an earlier run (ckpt-60.h5 and 2 more)" \
  run_mpi 2 60 "$MPITRAIN" "${opts[@]}" -backend ddp -epochs 1 -output_dir "$WORK/N" \
  -checkpoint_dir "$B"
expect_output "it names -restart auto" "-restart auto"
expect_output "it names -checkpoint_overwrite" "-checkpoint_overwrite"
expect_no_output "it stops before training" "epoch 1/1"
files_are "the other run's checkpoints are untouched" "$B" "ckpt-40.h5 ckpt-50.h5 ckpt-60.h5 "
expect_ok "a run that writes no checkpoint may use the folder" \
  run_mpi 1 60 "$MPITRAIN" "${opts[@]}" -backend sp -epochs 1 -checkpoint_every_steps 0 \
  -checkpoint_at_end 0 -output_dir "$WORK/N0" -checkpoint_dir "$B"
expect_error "-checkpoint_overwrite with -restart auto is refused" "option -checkpoint_overwrite" \
  run_mpi 1 60 "$MPITRAIN" "${opts[@]}" -backend sp -epochs 1 -restart auto \
  -checkpoint_overwrite -output_dir "$WORK/N1" -checkpoint_dir "$WORK/C"

# the same with -checkpoint_overwrite: the old ones go, its own keep-K works
expect_ok "-checkpoint_overwrite: the fresh run goes on" \
  run_mpi 2 120 "$MPITRAIN" "${opts[@]}" -backend ddp -epochs 1 -checkpoint_keep 2 \
  -checkpoint_overwrite -output_dir "$WORK/O" -checkpoint_dir "$WORK/C"
expect_output "it says it removed them" \
  "-checkpoint_overwrite: removed the 3 checkpoints of an earlier run in $WORK/C (ckpt-60.h5 and 2 more)"
files_are "its own keep 2 holds ckpt-20 and ckpt-30" "$WORK/C" "ckpt-20.h5 ckpt-30.h5 "
latest_is "latest names its last checkpoint, which exists" "$WORK/C" ckpt-30.h5

# -restart auto continues the folder's run; another run's checkpoint and junk stay
cp "$WORK/C/ckpt-20.h5" "$WORK/M/ckpt-45.h5" # the overwrite run's: another run
printf 'not a checkpoint\n' >"$WORK/M/ckpt-100.h5"
expect_ok "-restart auto continues the other folder's run (keep 1)" \
  run_mpi 2 120 "$MPITRAIN" "${opts[@]}" -backend ddp -epochs 3 -checkpoint_keep 1 \
  -restart auto -output_dir "$WORK/R" -checkpoint_dir "$WORK/M"
expect_output "it skips the junk file, naming it" "skipping a damaged checkpoint"
expect_output "it resumes from ckpt-60" "restart from $WORK/M/ckpt-60.h5"
files_are "only that run's files were pruned: its newest, another run's and the junk remain" \
  "$WORK/M" "ckpt-45.h5 ckpt-90.h5 ckpt-100.h5 "
latest_is "latest names the run's newest" "$WORK/M" ckpt-90.h5
n=$(last_output | grep -c "$WORK/M/ckpt-100.h5 is not a readable checkpoint: it is never removed")
[ "$n" = 1 ] && pass "the junk file is named once by pruning" || fail "the junk file is named once by pruning" "$n times"

# a checkpoint older than run ids: restartable; its run gets a new identity,
# and the old files are never pruned (another run's for keep-K)
cp -r "$B" "$WORK/L"
for s in 40 50 60; do
  "$MKDATA" unattr "$WORK/L/ckpt-$s.h5" run_id || bail "mkdata unattr failed"
done
expect_ok "-restart auto from a checkpoint without a run id" \
  run_mpi 1 120 "$MPITRAIN" "${opts[@]}" -backend sp -epochs 3 -checkpoint_keep 1 \
  -restart auto -output_dir "$WORK/LR" -checkpoint_dir "$WORK/L"
expect_output "it says the run has a new identity" "has no run id (an older mpitrain's)"
files_are "the older checkpoints stay, keep 1 of the new run" "$WORK/L" \
  "ckpt-40.h5 ckpt-50.h5 ckpt-60.h5 ckpt-90.h5 "

# a read-only folder: said at start, before any training
RO=$WORK/ro
mkdir -p "$RO" || bail "mkdir $RO failed"
if [ "$(id -u)" = 0 ]; then
  if mount -t tmpfs -o ro,size=1m tmpfs "$RO" 2>/dev/null; then
    trap 'umount "$RO" 2>/dev/null; cleanup_work' EXIT
    why="read-only file system"
  else
    why=""
    echo "ok - # SKIP a read-only folder: cannot mount a read-only tmpfs here"
  fi
else
  chmod 555 "$RO"
  why="permission denied"
fi
if [ -n "$why" ]; then
  expect_error "a read-only checkpoint folder is refused at start" \
    "checkpoint directory $RO is not writable ($why)" \
    run_mpi 2 60 "$MPITRAIN" "${opts[@]}" -backend ddp -epochs 1 -output_dir "$WORK/W" \
    -checkpoint_dir "$RO"
  expect_no_output "before training" "epoch 1/1"
  expect_error "a folder to be made in a read-only one too" \
    "checkpoint directory $RO/sub is not writable ($why)" \
    run_mpi 1 60 "$MPITRAIN" "${opts[@]}" -backend sp -epochs 1 -output_dir "$WORK/W1" \
    -checkpoint_dir "$RO/sub"
  [ "$(id -u)" = 0 ] && umount "$RO"
  chmod 755 "$RO"
fi
finish
