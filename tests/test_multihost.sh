#!/usr/bin/env bash
# mpitrain across simulated hosts: network namespaces joined by a bridge
# (tests/multihost/hosts.sh), one Open MPI daemon per "host", ranks talking
# over TCP only (btl tcp,self), as on a real cluster without shared memory.
# 1. 2 hosts, one rank each: ddp equals sp (1 rank, this machine) to 1e-5,
#    for the mlp and the cnn; 4 ranks on the 2 hosts too. Each rank runs on
#    the host it was mapped to (its own host name).
# 2. The node communicator (MPI_COMM_TYPE_SHARED) groups ranks by host:
#    mpitrain prints nothing about it directly, but its default thread count
#    (-threads 0) is the node's cores / the ranks on that node, and rank 0
#    prints "N ranks x T threads": 2 ranks on 2 hosts get all the cores each,
#    2 ranks on one host (plain mpirun) and 4 ranks on 2 hosts half of them.
#    (Needs 2 or more cores; skipped on 1.) The shared-memory all-reduce
#    (test_shm_reduce, and ddp -ddp_allreduce shm == sp, its gradients
#    summed in place in the host's window) at 2 hosts x 2
#    ranks: reduce in the host, all-reduce across, read back in the host.
#    -ddp_overlap auto overlaps the all-reduce with the backward across hosts;
#    -ddp_shard_optimizer 1 at 2 hosts x 2 ranks gives the bits of the run
#    without it, with clipping (the whole sum) and without (each slice
#    summed across the hosts inside its step).
# 3. 4 hosts, one rank each: ddp equals sp; the hang guard (-comm_timeout 4)
#    fires when rank 1's host stops (SIGSTOP of that rank), names the step
#    and rank 1, and the job ends within the timeout + 16 s; nothing is left
#    running in the hosts after it.
# 4. Taking the hosts down leaves no namespace behind.
#
# Skips (exit 77, "# SKIP: ...") when not root or when network namespaces,
# veth pairs, bridges or UTS namespaces do not work here; with
# MT_MULTIHOST_REQUIRED=1 those are hard errors (99). Whatever it starts
# (namespaces, the bridge, every process in them) is removed on every exit
# path, by the namespaces it made, never by process name. Every launch has a
# time limit; the whole test stops after MT_MULTIHOST_TIMEOUT s (default 300).
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/multihost/hosts.sh"

skip() {
  if [ "${MT_MULTIHOST_REQUIRED:-0}" = 1 ]; then
    echo "Bail out! multi-host test cannot run (MT_MULTIHOST_REQUIRED=1): $*"
    exit 99
  fi
  echo "# SKIP: multi-host test not run: $*"
  exit 77
}

mh_usable || skip "$MH_WHY"
need_bin "$MPITRAIN" "$MKDATA"
make_work
T_START=$SECONDS
WATCHDOG=

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  mh_down
  [ -n "$WATCHDOG" ] && kill -TERM "$WATCHDOG" 2>/dev/null
  cleanup_work
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'echo "# stopped by SIGTERM (watchdog?)"; exit 143' TERM

(
  trap 'kill "$s" 2>/dev/null; exit 0' TERM
  sleep "${MT_MULTIHOST_TIMEOUT:-300}" &
  s=$!
  wait "$s"
  echo "# test_multihost.sh: over ${MT_MULTIHOST_TIMEOUT:-300} s, stopping"
  kill -TERM $$
) &
WATCHDOG=$!

"$MKDATA" synth "$WORK/train.h5" 1000 20 4 11 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 203 20 4 12 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/img.h5" 600 144 3 13 image >/dev/null || bail "mkdata synth image failed"
"$MKDATA" synth "$WORK/big.h5" 4000 64 4 7 >/dev/null || bail "mkdata synth failed"

mlp=(-model mlp -mlp_hidden 64,48 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5"
  -epochs 2 -max_train_steps_per_epoch 12 -batch_size 32 -lr 0.05 -momentum 0.9 -nesterov
  -weight_decay 1e-3 -clip_grad_norm 2.0 -lr_schedule cosine -warmup_steps 3 -seed 5
  -log_every 0)
bk=(-ddp_bucket_mb 0.005) # the mlp's small buckets, where the strategy has them (not sp)
cnn=(-model cnn -cnn_channels 4,6 -cnn_hidden 16 -data_train "$WORK/img.h5" -epochs 2
  -max_train_steps_per_epoch 4 -batch_size 24 -lr 0.05 -momentum 0.9 -seed 5 -log_every 0)

# a wrapper records where each rank runs: "RANK HOSTNAME PID" in where.RANK
cat >"$WORK/rank.sh" <<EOS
#!/bin/sh
echo "\$OMPI_COMM_WORLD_RANK \$(hostname) \$\$" > "$WORK/where.\$OMPI_COMM_WORLD_RANK"
exec "\$@"
EOS
chmod +x "$WORK/rank.sh"

# train_mh NAME NP MODEL THREADS [BACKEND [OPTIONS...]]: ddp (or BACKEND)
# on the simulated hosts
train_mh() {
  local -n opts=$3
  local b=()
  [ "$3" = mlp ] && b=("${bk[@]}")
  rm -f "$WORK"/where.*
  run_logged mh_mpirun "$2" 90 "$WORK/rank.sh" "$MPITRAIN" "${opts[@]}" -backend "${5:-ddp}" \
    "${b[@]}" "${@:6}" -threads "$4" -output_dir "$WORK/$1"
  if [ "$LAST_RC" != 0 ]; then fail "train $1" "exit $LAST_RC"; return 1; fi
  [ -f "$WORK/$1/model_final.h5" ] || { fail "train $1" "no model_final.h5"; return 1; }
  pass "train $1 ($2 ranks on $MH_N hosts, $3, -threads $4)"
}

same() { # NAME A B
  run_logged "$MKDATA" compare "$WORK/$2/model_final.h5" "$WORK/$3/model_final.h5" 1e-5
  if [ "$LAST_RC" = 0 ]; then pass "$1"; else fail "$1" "parameters differ beyond 1e-5"; fi
}

# placed NAME NP: rank r ran on host h(r mod N + 1), per the wrapper
placed() {
  local r want got bad=
  for r in $(seq 0 $(($2 - 1))); do
    want=h$((r % MH_N + 1))
    got=$(cut -d' ' -f2 "$WORK/where.$r" 2>/dev/null)
    [ "$got" = "$want" ] || bad="$bad rank $r on '${got:-?}' (not $want);"
  done
  [ -z "$bad" ] && pass "$1: each rank on the host it was mapped to ($(cut -d' ' -f1,2 "$WORK"/where.* | tr '\n' ',' | sed 's/,$//'))" ||
    fail "$1: each rank on the host it was mapped to" "$bad"
}

# threads_line NP T: rank 0 printed "NP ranks x T thread(s)"
threads_line() {
  local s=s
  [ "$2" = 1 ] && s=
  expect_output "$3" "$1 ranks x $2 thread$s"
}

# ---- references on this machine (1 rank, shared memory)
expect_ok "sp reference, mlp (1 rank)" run_mpi 1 90 "$MPITRAIN" "${mlp[@]}" -backend sp -threads 1 -output_dir "$WORK/sp"
expect_ok "sp reference, cnn (1 rank)" run_mpi 1 90 "$MPITRAIN" "${cnn[@]}" -backend sp -threads 1 -output_dir "$WORK/cnnsp"
CORES=$(nproc)
if [ "$CORES" -ge 2 ]; then
  expect_ok "2 ranks on one host, -threads 0 (plain mpirun)" \
    run_mpi 2 90 "$MPITRAIN" "${mlp[@]}" "${bk[@]}" -epochs 1 -max_train_steps_per_epoch 2 -backend ddp -threads 0 -output_dir "$WORK/local2"
  threads_line 2 $((CORES / 2)) "one host: the node communicator holds both ranks (-threads 0 gives $((CORES / 2)) of $CORES cores each)"
fi

# ---- 1 and 2: two hosts
t=$SECONDS
mh_up "$WORK/hosts2" 2 || bail "could not set up 2 simulated hosts: $MH_WHY"
pass "2 simulated hosts up ($(tr '\n' ' ' <"$WORK/hosts2/namespaces"))"
if train_mh mlp2 2 mlp 0; then
  placed "mlp, 2 hosts" 2
  if [ "$CORES" -ge 2 ]; then
    threads_line 2 "$CORES" "2 hosts: the node communicator holds one rank per host (-threads 0 gives all $CORES cores each)"
  fi
  same "mlp: ddp on 2 hosts == sp" sp mlp2
fi
# -ddp_overlap auto overlaps across nodes (the network waits, not the cores)
if train_mh ov2 2 mlp 1; then
  expect_output "2 hosts, 1 thread: -ddp_overlap auto all-reduces during the backward" \
    "ddp: gradients all-reduced during the backward (-ddp_overlap auto: several nodes)"
fi
if train_mh mlp2x2 4 mlp 0; then
  placed "mlp, 4 ranks on 2 hosts" 4
  if [ "$CORES" -ge 2 ]; then
    threads_line 4 $((CORES / 2)) "2 hosts x 2 ranks: the node communicator holds the 2 ranks of a host"
  fi
  same "mlp: ddp, 4 ranks on 2 hosts == sp" sp mlp2x2
fi
# the shared-memory all-reduce across hosts: a host's 2 ranks reduce their
# slices in its window, the ranks of the same local index all-reduce them
# over TCP, the hosts read them back (src/comm/shm_reduce.c)
SHMT=$top_builddir/tests/test_shm_reduce
if [ -x "$SHMT" ]; then
  run_logged mh_mpirun 4 120 "$SHMT"
  if [ "$LAST_RC" = 0 ] && grep -q "# 4 ranks on 2 node(s)" "$LAST_LOG"; then
    pass "shm all-reduce, 2 hosts x 2 ranks: in-host slices, across hosts by slice ($(grep -c '^ok' "$LAST_LOG") checks)"
  else
    fail "shm all-reduce, 2 hosts x 2 ranks" "exit $LAST_RC"
  fi
  # uneven hosts, 2 ranks and 1: one slice per host, the lone rank's host
  # through its window too (the hosts' chunks and slices must pair up)
  run_logged mh_mpirun 3 120 "$SHMT"
  if [ "$LAST_RC" = 0 ] && grep -q "# 3 ranks on 2 node(s)" "$LAST_LOG"; then
    pass "shm all-reduce, 2 hosts with 2 and 1 ranks ($(grep -c '^ok' "$LAST_LOG") checks)"
  else
    fail "shm all-reduce, 2 hosts with 2 and 1 ranks" "exit $LAST_RC"
  fi
  # one rank per host: no window, the hosts' MPI_Allreduce alone
  run_logged mh_mpirun 2 120 "$SHMT"
  if [ "$LAST_RC" = 0 ] && grep -q "# 2 ranks on 2 node(s)" "$LAST_LOG"; then
    pass "shm all-reduce, 2 hosts x 1 rank ($(grep -c '^ok' "$LAST_LOG") checks)"
  else
    fail "shm all-reduce, 2 hosts x 1 rank" "exit $LAST_RC"
  fi
else
  fail "shm all-reduce, 2 hosts x 2 ranks" "no $SHMT (make check builds it)"
fi
if train_mh shm2x2 4 mlp 1 ddp -ddp_allreduce shm; then
  expect_output "ddp -ddp_allreduce shm on 2 hosts: 2 slices per host" \
    "shared-memory window (-ddp_allreduce shm), 2 slices per node"
  expect_output "ddp -ddp_allreduce shm on 2 hosts: the gradients summed in place in the host" \
    "100% of it summed in place in the shared window"
  same "mlp: ddp -ddp_allreduce shm, 4 ranks on 2 hosts == sp" sp shm2x2
fi
# -ddp_shard_optimizer 1: a host's 2 ranks step a slice each and share it
# through the host's window; local rank j of each host steps the same slice
# (src/trainer/own_zero.c): the bits of the run without it
if train_mh zero2x2 4 mlp 1 ddp -ddp_allreduce shm -ddp_shard_optimizer 1; then
  expect_output "ddp -ddp_shard_optimizer 1 on 2 hosts: the optimizer sharded over a host's 2 ranks" \
    "optimizer sharded over the 2 ranks of each node"
  if [ -x "${H5DIGEST:=$top_builddir/tests/h5digest}" ] &&
    [ "$("$H5DIGEST" "$WORK/shm2x2/model_final.h5")" = "$("$H5DIGEST" "$WORK/zero2x2/model_final.h5")" ]; then
    pass "mlp: ddp -ddp_shard_optimizer 1, 4 ranks on 2 hosts == without, bit for bit"
  else
    fail "mlp: ddp -ddp_shard_optimizer 1, 4 ranks on 2 hosts == without, bit for bit" \
      "model_final.h5 differs from shm2x2's (or no $H5DIGEST)"
  fi
fi
# without clipping nothing reads the whole gradient: each rank sums its
# slice in its optimizer step, across hosts after the hosts' all-reduce of
# the slice (comm/shm_reduce.c, mt_shm_reduce_apply): the bits without it
if train_mh shm2x2n 4 mlp 1 ddp -ddp_allreduce shm -ddp_overlap 0 -clip_grad_norm 0 &&
  train_mh zerof2x2 4 mlp 1 ddp -ddp_allreduce shm -ddp_overlap 0 -clip_grad_norm 0 \
    -ddp_shard_optimizer 1; then
  expect_output "ddp -ddp_shard_optimizer 1 on 2 hosts, no clipping: each slice summed in its step" \
    "each rank sums its slice of the gradient and steps it in one pass"
  if [ "$("${H5DIGEST:=$top_builddir/tests/h5digest}" "$WORK/shm2x2n/model_final.h5")" = "$("$H5DIGEST" "$WORK/zerof2x2/model_final.h5")" ]; then
    pass "mlp: ddp -ddp_shard_optimizer 1 summed in the step, 4 ranks on 2 hosts == without, bit for bit"
  else
    fail "mlp: ddp -ddp_shard_optimizer 1 summed in the step, 4 ranks on 2 hosts == without, bit for bit" \
      "model_final.h5 differs from shm2x2n's"
  fi
fi
# hybrid_shard's sharding groups are the hosts (the node communicator)
if train_mh hybrid2x2 4 mlp 1 fsdp -fsdp_sharding_strategy hybrid_shard; then
  expect_output "fsdp hybrid_shard: a host's 2 ranks shard, the hosts replicate" \
    "sharding groups of 2 ranks (the node's)"
  same "mlp: fsdp hybrid_shard, 4 ranks on 2 hosts == sp" sp hybrid2x2
fi
train_mh cnn2 2 cnn 1 && same "cnn: ddp on 2 hosts == sp" cnnsp cnn2
mh_down
echo "# 2 hosts: $((SECONDS - t)) s"

# ---- 3: four hosts
t=$SECONDS
mh_up "$WORK/hosts4" 4 || bail "could not set up 4 simulated hosts: $MH_WHY"
pass "4 simulated hosts up"
train_mh mlp4 4 mlp 1 && placed "mlp, 4 hosts" 4 && same "mlp: ddp on 4 hosts == sp" sp mlp4

# hang guard: SIGSTOP of rank 1 (alone on h2) after 2 s of training
rm -f "$WORK"/where.*
log=$WORK/hang.log
LAST_LOG=$log
mh_mpirun 4 60 "$WORK/rank.sh" "$MPITRAIN" -backend ddp -model mlp -mlp_hidden 256,256 \
  -data_train "$WORK/big.h5" -epochs 1000 -batch_size 32 -lr 0.01 -log_every 0 -threads 1 \
  -comm_timeout 4 -output_dir "$WORK/hang" >"$log" 2>&1 &
job=$!
i=0
until [ -f "$WORK/where.1" ] && grep -q '^epoch 1/' "$log"; do
  sleep 0.1
  i=$((i + 1))
  [ $i -lt 400 ] && kill -0 $job 2>/dev/null || break
done
if [ -f "$WORK/where.1" ] && kill -0 $job 2>/dev/null; then
  sleep 1
  read -r _ host1 pid1 <"$WORK/where.1"
  t0=$SECONDS
  kill -STOP "$pid1"
  wait $job
  rc=$? took=$((SECONDS - t0))
  kill -CONT "$pid1" 2>/dev/null
  echo "# rank 1 (pid $pid1 on $host1) stopped: exit $rc after $took s"
  grep -iE "error|signal|killed" "$log" | head -4 | sed 's/^/#   | /'
  if [ $rc != 0 ] && [ $rc != 124 ] && [ $rc != 137 ] && [ $took -le 20 ]; then
    pass "hang guard over TCP: the job ends with an error within the timeout + 16 s (${took} s)"
  else
    fail "hang guard over TCP: the job ends with an error within the timeout + 16 s" "exit $rc after ${took} s"
  fi
  if grep -q "hang guard" "$log" && grep -q "did not arrive: 1 " "$log" && grep -q "global step" "$log"; then
    pass "hang guard: the error names the step and rank 1 (on $host1)"
  else
    fail "hang guard: the error names the step and rank 1" "$(grep -m1 error "$log")"
  fi
  i=0
  while [ -n "$(mh_pids)" ] && [ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
  left=$(mh_pids | tr '\n' ' ')
  [ -z "$left" ] && pass "nothing left running in the hosts after the abort" ||
    fail "nothing left running in the hosts after the abort" "pids: $left ($(ps -o pid=,stat=,comm= -p ${left// /,} | tr '\n' ';'))"
else
  wait $job
  fail "hang guard: the 4-host job trains" "it did not start training (exit $?)"
fi
LAST_LOG=
tag=$MH_TAG
mh_down
echo "# 4 hosts: $((SECONDS - t)) s"

# ---- 4: nothing left
left=$(ip netns list 2>/dev/null | grep -c "^$tag-")
[ "$left" = 0 ] && pass "taking the hosts down leaves no namespace" || fail "taking the hosts down leaves no namespace" "$left left"
echo "# total $((SECONDS - T_START)) s"
finish
