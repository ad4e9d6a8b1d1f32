#!/usr/bin/env bash
# The hang guard (-comm_timeout): a rank that stops (SIGSTOP) or dies
# (kill -9) mid-training ends the job within the timeout plus a few seconds
# (never a hang), and for a stopped rank the error names the step and the
# rank; so does a rank stopped after the final checkpoint, where the others
# wait for it in the guarded end of the run (mt_guard_finish), with one
# error line only; a run without trouble is not disturbed by a short timeout.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MKDATA"
"$MKDATA" synth "$WORK/train.h5" 4000 64 4 7 >/dev/null || bail "mkdata synth failed"
opts=(-backend ddp -model mlp -mlp_hidden 256,256 -data_train "$WORK/train.h5" -epochs 1000
  -batch_size 30 -lr 0.01 -log_every 0 -threads 1 -comm_timeout 4)
# a wrapper records each rank's pid
cat >"$WORK/rank.sh" <<EOS
#!/bin/sh
echo \$\$ > "$WORK/pid.\$OMPI_COMM_WORLD_RANK"
exec "\$@"
EOS
chmod +x "$WORK/rank.sh"

# stall KIND SIGNAL: starts 3 ranks, sends SIGNAL to rank 1 after 2 s of
# training, expects the job to end with an error within 4 s + 16 s
stall() {
  local name=$1 sig=$2 log=$WORK/$1.log
  rm -f "$WORK"/pid.*
  timeout -s KILL 60 "$MPIRUN" -np 3 --oversubscribe "$WORK/rank.sh" "$MPITRAIN" "${opts[@]}" \
    -output_dir "$WORK/$name" >"$log" 2>&1 &
  local job=$! i=0
  while [ ! -f "$WORK/pid.1" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  sleep 2
  local t0=$SECONDS
  kill -"$sig" "$(cat "$WORK/pid.1")" 2>/dev/null || bail "cannot signal rank 1"
  wait $job
  local rc=$? took=$((SECONDS - t0))
  echo "# $name: exit $rc after ${took} s"
  grep -iE "error|signal|killed" "$log" | head -4 | sed 's/^/#   | /'
  # (the 60 s limit's kill would also be 137, but far later)
  if [ $rc != 0 ] && [ $took -le 20 ]; then
    pass "$name: the job ends with an error within the timeout + 16 s (${took} s)"
  else
    fail "$name: the job ends with an error within the timeout + 16 s" "exit $rc after ${took} s"
  fi
  kill -CONT "$(cat "$WORK/pid.1")" 2>/dev/null
}
stall sigstop STOP
if grep -q "hang guard" "$WORK/sigstop.log" && grep -q "did not arrive: 1 " "$WORK/sigstop.log" &&
   grep -q "global step" "$WORK/sigstop.log"; then
  pass "sigstop: the error names the step and rank 1"
else
  fail "sigstop: the error names the step and rank 1" "$(grep -m1 error "$WORK/sigstop.log")"
fi
stall kill9 KILL

# stopped after the last checkpoint: MT_TEST_STOP_AT_FINISH=1 has rank 1
# SIGSTOP itself just before the end's barrier (from outside, a test sees
# the end of training too late: the ranks may be in MPI_Finalize by then)
rm -f "$WORK"/pid.*
"$MKDATA" synth "$WORK/small.h5" 400 16 4 7 >/dev/null || bail "mkdata synth failed"
MT_TEST_STOP_AT_FINISH=1 timeout -s KILL 60 "$MPIRUN" -np 3 --oversubscribe -x MT_TEST_STOP_AT_FINISH \
  "$WORK/rank.sh" "$MPITRAIN" -backend ddp -model mlp -mlp_hidden 16 -data_train "$WORK/small.h5" \
  -epochs 2 -batch_size 30 -log_every 0 -threads 1 -comm_timeout 4 -output_dir "$WORK/fin" \
  >"$WORK/fin.log" 2>&1 &
job=$!
i=0 t0=
while [ $i -lt 400 ] && kill -0 $job 2>/dev/null; do # until rank 1 has stopped itself (state T)
  if [ -f "$WORK/pid.1" ] && [ "$(sed 's/.*) //' "/proc/$(cat "$WORK/pid.1")/stat" 2>/dev/null | cut -c1)" = T ]; then
    t0=$SECONDS
    break
  fi
  sleep 0.1
  i=$((i + 1))
done
# continue it as soon as the guard has fired: it must not blame anyone
i=0
while [ $i -lt 300 ] && kill -0 $job 2>/dev/null && ! grep -q "hang guard" "$WORK/fin.log"; do
  sleep 0.1
  i=$((i + 1))
done
kill -CONT "$(cat "$WORK/pid.1" 2>/dev/null)" 2>/dev/null
wait $job
rc=$? took=$((SECONDS - ${t0:-$SECONDS}))
echo "# stopped at the end: exit $rc ${took} s after rank 1 stopped"
grep -iE "error|signal|killed" "$WORK/fin.log" | head -4 | sed 's/^/#   | /'
if [ -n "$t0" ] && [ $rc != 0 ] && [ $took -le 20 ]; then
  pass "stopped at the end: the job ends with an error within the timeout + 16 s (${took} s)"
else
  fail "stopped at the end: the job ends with an error within the timeout + 16 s" \
    "exit $rc after ${took} s (rank 1 seen stopped: ${t0:+yes})"
fi
grep -q "^model\|done: 2 epochs" "$WORK/fin.log" && [ -f "$WORK/fin/model_final.h5" ] &&
  grep -q "did not arrive: 1 (silent" "$WORK/fin.log" && grep -q "finishing" "$WORK/fin.log" &&
  pass "stopped at the end: after the model was written, the error names rank 1 and the end" ||
  fail "stopped at the end: after the model was written, the error names rank 1 and the end" \
    "$(grep -m1 "hang guard" "$WORK/fin.log")"
n=$(grep -c "mpitrain: error: hang guard" "$WORK/fin.log")
[ "$n" = 1 ] && pass "stopped at the end: one error line (no rank blames a healthy one)" ||
  fail "stopped at the end: one error line (no rank blames a healthy one)" "$n lines"

run_logged run_mpi 2 120 "$MPITRAIN" "${opts[@]}" -epochs 3 -comm_timeout 1 -output_dir "$WORK/fine"
[ "$LAST_RC" = 0 ] && pass "a healthy run with -comm_timeout 1 finishes" ||
  fail "a healthy run with -comm_timeout 1 finishes" "exit $LAST_RC"
expect_error "-comm_timeout refuses negative values" "-comm_timeout" \
  run_mpi 1 60 "$MPITRAIN" "${opts[@]}" -comm_timeout -1 -output_dir "$WORK/bad"
finish
