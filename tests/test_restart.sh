#!/usr/bin/env bash
# Checkpoint and restart through mpitrain itself:
# - resuming mid-epoch at the same rank count and backend repeats the
#   uninterrupted run bit for bit (parameters, per-step losses, curve);
# - resuming on another rank count / backend gives its parameters to 1e-6;
# - a checkpoint at an epoch's last step resumes at that epoch's end;
# - SIGUSR1 -> checkpoint -> exit 75 -> -restart auto -> the same result;
# - -restart auto skips a damaged newest checkpoint, naming it;
# - incompatible checkpoints are refused with a clear message.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MKDATA"
"$MKDATA" synth "$WORK/train.h5" 800 16 4 31 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 150 16 4 32 >/dev/null || bail "mkdata synth failed"
opts=(-model mlp -mlp_hidden 40,24 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5" -epochs 2
  -max_train_steps_per_epoch 12 -batch_size 24 -lr 0.05 -momentum 0.9 -lr_schedule cosine
  -warmup_steps 3 -threads 1 -log_every 0 -log_step_losses -checkpoint_keep 0)
csv_tail() { tail -n +"$2" "$1"; }
same_bits() { # NAME A B: parameters equal bit for bit
  run_logged "$MKDATA" compare "$WORK/$2/model_final.h5" "$WORK/$3/model_final.h5" 0
  [ "$LAST_RC" = 0 ] && pass "$1" || fail "$1" "parameters differ"
}
close() { # NAME A B
  run_logged "$MKDATA" compare "$WORK/$2/model_final.h5" "$WORK/$3/model_final.h5" 1e-6
  [ "$LAST_RC" = 0 ] && pass "$1" || fail "$1" "parameters differ beyond 1e-6"
}

expect_ok "uninterrupted run (2 ranks, checkpoint every 5 steps)" \
  run_mpi 2 120 "$MPITRAIN" "${opts[@]}" -backend ddp -checkpoint_every_steps 5 -output_dir "$WORK/A"
ck=$WORK/A/checkpoints
for s in 5 10 15 20 24; do
  [ -f "$ck/ckpt-$s.h5" ] && pass "checkpoint of step $s written" || fail "checkpoint of step $s written" "missing"
done
[ "$(cat "$ck/latest" 2>/dev/null)" = "ckpt-24.h5" ] && pass "latest names the end checkpoint" \
  || fail "latest names the end checkpoint" "'$(cat "$ck/latest" 2>/dev/null)'"

# mid-epoch (step 5 of epoch 1; step 15 = epoch 2 step 3) at the same rank count
for s in 5 15; do
  expect_ok "restart from step $s (2 ranks)" \
    run_mpi 2 120 "$MPITRAIN" "${opts[@]}" -backend ddp -restart "$ck/ckpt-$s.h5" -output_dir "$WORK/R$s"
  same_bits "resume from step $s is bit-exact" A "R$s"
  if [ "$(csv_tail "$WORK/A/steps.csv" $((s + 2)))" = "$(csv_tail "$WORK/R$s/steps.csv" 2)" ]; then
    pass "per-step losses after step $s identical"
  else fail "per-step losses after step $s identical" "steps.csv differs"; fi
  if cmp -s <(cut -d, -f1-4,7- "$WORK/A/curve.csv") <(cut -d, -f1-4,7- "$WORK/R$s/curve.csv"); then
    pass "learning curve after a restart from step $s identical (timings aside)"
  else fail "learning curve after a restart from step $s identical" "curve.csv differs"; fi
done

# the same at 1 rank with sp
expect_ok "uninterrupted sp run" \
  run_mpi 1 120 "$MPITRAIN" "${opts[@]}" -backend sp -checkpoint_every_steps 7 -output_dir "$WORK/P"
expect_ok "sp restart from step 7" \
  run_mpi 1 120 "$MPITRAIN" "${opts[@]}" -backend sp -restart "$WORK/P/checkpoints/ckpt-7.h5" -output_dir "$WORK/P7"
same_bits "sp resume from step 7 is bit-exact" P P7

# a checkpoint at an epoch's last step (a signal or -checkpoint_every_steps
# there, no epoch checkpoint after it): the restart runs that epoch's end
# (validation, curve row) and goes on, bit-exact
expect_ok "a checkpoint at the epoch's last step (12 of 12)" \
  run_mpi 1 120 "$MPITRAIN" "${opts[@]}" -backend sp -checkpoint_every_steps 12 \
  -checkpoint_every_epochs 0 -checkpoint_at_end 0 -output_dir "$WORK/E"
expect_ok "restart from it" \
  run_mpi 1 120 "$MPITRAIN" "${opts[@]}" -backend sp -restart "$WORK/E/checkpoints/ckpt-12.h5" \
  -output_dir "$WORK/E12"
expect_output "it says the epoch's steps came before the restart" "(its steps before the restart)"
same_bits "resume at an epoch's end is bit-exact" P E12
if cmp -s <(cut -d, -f1-4,7- "$WORK/P/curve.csv") <(cut -d, -f1-4,7- "$WORK/E12/curve.csv"); then
  pass "learning curve after a restart at an epoch's end identical (timings aside)"
else fail "learning curve after a restart at an epoch's end identical" "curve.csv differs"; fi

# a crash in the middle of a write leaves only a .tmp: auto takes the last good one
cp -r "$WORK/P" "$WORK/Q"
rm -f "$WORK/Q/checkpoints/ckpt-24.h5" "$WORK/Q/checkpoints/ckpt-21.h5"
head -c 5000 "$WORK/P/checkpoints/ckpt-24.h5" >"$WORK/Q/checkpoints/ckpt-24.h5.tmp"
expect_ok "-restart auto after a crash mid-write" \
  run_mpi 1 120 "$MPITRAIN" "${opts[@]}" -backend sp -restart auto -output_dir "$WORK/Q"
expect_output "it resumes from the last complete checkpoint" "global step 14"
same_bits "and ends as the uninterrupted run" P Q

# time-based checkpoints
expect_ok "checkpoints every 0.001 minutes" \
  run_mpi 2 120 "$MPITRAIN" -model mlp -mlp_hidden 1024,1024 -data_train "$WORK/train.h5" -epochs 12 \
  -batch_size 24 -threads 1 -log_every 0 -checkpoint_keep 0 -backend ddp \
  -checkpoint_every_minutes 0.001 -output_dir "$WORK/M"
n=$(ls "$WORK/M/checkpoints" | grep -c '^ckpt-.*\.h5$')
[ "$n" -ge 3 ] && pass "time-based checkpoints written ($n kept)" || fail "time-based checkpoints written" "$n files"

# another rank count and backend
expect_ok "restart a 2-rank checkpoint on 1 rank with sp" \
  run_mpi 1 120 "$MPITRAIN" "${opts[@]}" -backend sp -restart "$ck/ckpt-15.h5" -output_dir "$WORK/S1"
close "2 ranks -> sp at 1 rank equals the uninterrupted run" A S1
expect_ok "restart on 3 ranks" \
  run_mpi 3 120 "$MPITRAIN" "${opts[@]}" -backend ddp -restart "$ck/ckpt-10.h5" -output_dir "$WORK/S3"
close "2 ranks -> 3 ranks equals the uninterrupted run" A S3
expect_ok "4-rank run" run_mpi 4 120 "$MPITRAIN" "${opts[@]}" -backend ddp -checkpoint_every_steps 10 -output_dir "$WORK/F4"
for np in 1 2 3; do
  b=ddp; [ $np = 1 ] && b=sp
  expect_ok "4-rank checkpoint restarts on $np" \
    run_mpi $np 120 "$MPITRAIN" "${opts[@]}" -backend $b -restart "$WORK/F4/checkpoints/ckpt-10.h5" -output_dir "$WORK/F4to$np"
  close "4 -> $np ranks equals the uninterrupted 4-rank run" F4 "F4to$np"
done

# a signal: checkpoint, exit 75, then -restart auto finishes the same run
long=(-model mlp -mlp_hidden 1024,1024 -data_train "$WORK/train.h5" -epochs 60 -batch_size 24 -lr 0.01
  -momentum 0.9 -threads 1 -log_every 0 -log_step_losses)
timeout -k 10 120 "$MPIRUN" -np 2 --oversubscribe --bind-to none --mca btl self,vader \
  "$MPITRAIN" "${long[@]}" -backend ddp -output_dir "$WORK/G" >"$WORK/G.log" 2>&1 </dev/null &
pid=$!
for _ in $(seq 1 200); do grep -q '^epoch 2/' "$WORK/G.log" 2>/dev/null && break; sleep 0.1; done
pkill -USR1 -P "$pid" -x mpirun # mpirun forwards SIGUSR1 to the ranks
wait "$pid"
rc=$?
LAST_LOG=$WORK/G.log
[ "$rc" = 75 ] && pass "SIGUSR1 stops the run with status 75" || fail "SIGUSR1 stops the run with status 75" "exit $rc"
expect_output "the stop names the signal" "stopped by signal"
expect_ok "-restart auto resumes the signalled run" \
  run_mpi 2 300 "$MPITRAIN" "${long[@]}" -backend ddp -restart auto -output_dir "$WORK/G"
expect_output "it says where it resumes" "restart from"
expect_ok "uninterrupted twin of the signalled run" \
  run_mpi 2 300 "$MPITRAIN" "${long[@]}" -backend ddp -checkpoint_at_end 0 -output_dir "$WORK/H"
same_bits "signal + restart auto == uninterrupted, bit for bit" G H

# SIGTERM twice, straight to the ranks: still one clean checkpoint and exit 75
timeout -k 10 120 "$MPIRUN" -np 2 --oversubscribe --bind-to none --mca btl self,vader \
  "$MPITRAIN" "${long[@]}" -backend ddp -output_dir "$WORK/T" >"$WORK/T.log" 2>&1 </dev/null &
pid=$!
for _ in $(seq 1 200); do grep -q '^epoch 2/' "$WORK/T.log" 2>/dev/null && break; sleep 0.1; done
mp=$(pgrep -P "$pid" -x mpirun)
pkill -TERM -P "$mp" -x mpitrain; sleep 0.05; pkill -TERM -P "$mp" -x mpitrain
wait "$pid"
rc=$?
LAST_LOG=$WORK/T.log
[ "$rc" = 75 ] && pass "two SIGTERMs: status 75" || fail "two SIGTERMs: status 75" "exit $rc"
expect_ok "-restart auto after two SIGTERMs" \
  run_mpi 2 300 "$MPITRAIN" "${long[@]}" -backend ddp -restart auto -output_dir "$WORK/T"
same_bits "two SIGTERMs + restart == uninterrupted, bit for bit" T H

# damaged newest checkpoint: auto falls back to the one before, naming it
cp -r "$WORK/A" "$WORK/D"
printf 'garbage' | dd of="$WORK/D/checkpoints/ckpt-24.h5" bs=1 seek=4000 conv=notrunc 2>/dev/null
truncate -s 3000 "$WORK/D/checkpoints/ckpt-20.h5"
expect_ok "-restart auto with the two newest damaged" \
  run_mpi 2 120 "$MPITRAIN" "${opts[@]}" -backend ddp -restart auto -output_dir "$WORK/D"
expect_output "the damaged checkpoint is named" "ckpt-24.h5"
expect_output "it falls back to step 15" "global step 15"
same_bits "fallback run still ends equal" A D

# incompatible checkpoints
expect_error "another model shape is refused, naming the tensor" "layers.0.weight" \
  run_mpi 2 60 "$MPITRAIN" "${opts[@]}" -backend ddp -mlp_hidden 41,24 -restart "$ck/ckpt-5.h5" -output_dir "$WORK/X1"
expect_error "another batch size is refused" "-batch_size" \
  run_mpi 1 60 "$MPITRAIN" "${opts[@]}" -backend sp -batch_size 12 -restart "$ck/ckpt-5.h5" -output_dir "$WORK/X2"
expect_error "a missing checkpoint file is refused" "nonexistent.h5" \
  run_mpi 1 60 "$MPITRAIN" "${opts[@]}" -backend sp -restart "$WORK/nonexistent.h5" -output_dir "$WORK/X3"
finish
