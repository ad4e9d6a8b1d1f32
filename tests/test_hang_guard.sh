#!/usr/bin/env bash
# The hang guard (-comm_timeout): a rank that stops (SIGSTOP) or dies
# (kill -9) mid-training ends the job within the timeout plus a few seconds
# (never a hang), and for a stopped rank the error names the step and the
# rank; a run without trouble is not disturbed by a short timeout.
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

run_logged run_mpi 2 120 "$MPITRAIN" "${opts[@]}" -epochs 3 -comm_timeout 1 -output_dir "$WORK/fine"
[ "$LAST_RC" = 0 ] && pass "a healthy run with -comm_timeout 1 finishes" ||
  fail "a healthy run with -comm_timeout 1 finishes" "exit $LAST_RC"
expect_error "-comm_timeout refuses negative values" "-comm_timeout" \
  run_mpi 1 60 "$MPITRAIN" "${opts[@]}" -comm_timeout -1 -output_dir "$WORK/bad"
finish
