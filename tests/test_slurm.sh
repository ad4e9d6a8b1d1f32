#!/usr/bin/env bash
# mpitrain under a real workload manager: starts a private one-machine Slurm
# cluster (munged + slurmctld + slurmd, tests/slurm/cluster.sh; one node of
# 2 CPUs) and runs the job scripts of jobs/ on it:
# 1. srun -n 2 --mpi=pmix mpitrain trains, and its model equals mpirun -np 2's
#    bit for bit; sbatch jobs/slurm-single.sh runs;
# 2. sbatch --array=0-2 jobs/slurm-array.sh: every element finishes with its
#    own options, in its own output folder; sbatch --array=0-1
#    jobs/slurm-predict-array.sh: each element predicts its shard into
#    shard.pred.h5 beside it, the file mpirun's -mode predict writes;
# 3. jobs/slurm-preempt.sh: SIGUSR1 to the batch shell (what --signal=B:USR1@N
#    sends), which forwards it to the ranks; they checkpoint and exit 75; the
#    script requeues the job; the second run resumes with -restart auto and
#    ends with the parameters of an uninterrupted run, bit for bit; its log
#    shows both runs; scancel --signal=TERM (to the ranks, as an admin or a
#    user stops a job) checkpoints, exits 75 and requeues the same way;
# 4. qsub jobs/pbs-single.sh through slurm-wlm-torque's qsub (when installed).
#
# Skips (exit 77) when not root, when Slurm or munge is not installed
# (scripts/deps.sh installs them) or when the cluster does not start; with
# MT_SLURM_REQUIRED=1 those are hard errors (99) instead. Everything it
# starts is stopped at exit, even on failure: jobs are cancelled, daemons are
# stopped by the pids in their pid files. Its files are in its scratch folder
# and in one /tmp/mt-slurm.* folder for the cluster (short paths for the
# munge socket), both removed at exit (KEEP_WORK=1 keeps them).
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/slurm/cluster.sh"

skip() {
  if [ "${MT_SLURM_REQUIRED:-0}" = 1 ]; then
    echo "Bail out! Slurm test cannot run (MT_SLURM_REQUIRED=1): $*"
    exit 99
  fi
  echo "SKIP: Slurm test not run: $*"
  exit 77
}

[ "$(id -u)" = 0 ] || skip "not root (the test starts munged, slurmctld and slurmd)"
export PATH=$PATH:/usr/sbin:/sbin
for c in munged slurmctld slurmd srun sbatch scontrol scancel squeue sinfo; do
  command -v "$c" >/dev/null 2>&1 || skip "$c not found (apt-get install slurmctld slurmd slurm-client munge, or bash scripts/deps.sh)"
done
need_bin "$MPITRAIN" "$MKDATA" "$top_builddir/tests/h5digest"
make_work
T_START=$SECONDS
CLUSTER=
WATCHDOG=

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$CLUSTER" ] && slurm_cluster_stop "$CLUSTER"
  if [ -n "$CLUSTER" ] && [ -d "$CLUSTER" ]; then
    if [ "${KEEP_WORK:-0}" = 1 ]; then echo "# kept cluster folder $CLUSTER"; else rm -rf "$CLUSTER"; fi
  fi
  [ -n "$WATCHDOG" ] && kill -TERM "$WATCHDOG" 2>/dev/null
  cleanup_work
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'echo "# stopped by SIGTERM (watchdog?)"; exit 143' TERM

# never hang: the whole test ends after MT_SLURM_TIMEOUT seconds (every
# command below has its own, shorter limit; this is the last resort)
(
  trap 'kill "$s" 2>/dev/null; exit 0' TERM
  sleep "${MT_SLURM_TIMEOUT:-420}" &
  s=$!
  wait "$s"
  echo "# test_slurm.sh: over ${MT_SLURM_TIMEOUT:-420} s, stopping"
  kill -TERM $$
) &
WATCHDOG=$!

CLUSTER=$(mktemp -d /tmp/mt-slurm.XXXXXX) || bail "mktemp -d /tmp/mt-slurm.XXXXXX failed"
if ! slurm_cluster_start "$CLUSTER" 2; then
  echo "# $SLURM_CLUSTER_WHY" | sed '2,$s/^/#   /'
  skip "the Slurm cluster did not start: ${SLURM_CLUSTER_WHY%%$'\n'*}"
fi
echo "# cluster up in $((SECONDS - T_START)) s: $(timeout 10 sinfo -h -N -o '%N %C %T'), SLURM_CONF=$SLURM_CONF"

# what the jobs see (sbatch and srun pass this environment on): the program,
# Open MPI over shared memory as run_mpi uses it, temporary files here
export MPITRAIN
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$WORK/tmp" "$WORK/runs" && export TMPDIR=$WORK/tmp
export MT_RUNS=$WORK/runs

"$MKDATA" synth "$WORK/train.h5" 800 16 4 31 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 150 16 4 32 >/dev/null || bail "mkdata synth failed"

# ---- helpers
TERMINAL='COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED'

# job_field JOB FIELD: FIELD (JobState, ExitCode, Restarts, ...) of JOB;
# one line per element for an array.
job_field() {
  timeout 10 scontrol show job -o "$1" 2>/dev/null | grep -oE "(^| )$2=[^ ]*" | sed "s/^ *$2=//"
}

# jobs_ended JOB: every element of JOB is in a final state.
jobs_ended() {
  local s
  s=$(job_field "$1" JobState)
  [ -n "$s" ] && ! printf '%s\n' "$s" | grep -qvxE "$TERMINAL"
}

# wait_for SECONDS COMMAND...: retries COMMAND every 0.2 s; status 1 at the limit.
wait_for() {
  local end=$((SECONDS + $1))
  shift
  until "$@"; do
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.2
  done
}

# submit OUTVAR COMMAND...: runs sbatch or qsub (with a limit) and stores
# the job id in OUTVAR (empty on failure); logs like run_logged.
submit() {
  local var=$1 id
  shift
  run_logged timeout 30 "$@"
  id=$(last_output | tail -n 1)
  id=${id%%;*}
  id=${id%%.*}
  if [ "$LAST_RC" = 0 ] && [[ "$id" =~ ^[0-9]+$ ]]; then
    printf -v "$var" %s "$id"
  else
    printf -v "$var" %s ""
  fi
}

same_bits() { # NAME A B: parameters equal bit for bit
  run_logged "$MKDATA" compare "$2/model_final.h5" "$3/model_final.h5" 0
  [ "$LAST_RC" = 0 ] && pass "$1" || fail "$1" "parameters differ"
}

# job_log NAME FILE TEXT: the job's output FILE contains TEXT (on failure,
# no tail of FILE: the job's state check before shows it).
job_log() {
  LAST_LOG=
  if grep -qF -- "$3" "$2" 2>/dev/null; then pass "$1"; else fail "$1" "$2 lacks '$3'"; fi
}

# ---- 1. srun -n 2 == mpirun -np 2
t=$SECONDS
small=(-backend ddp -model mlp -mlp_hidden 40,24 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5"
  -epochs 2 -batch_size 24 -lr 0.05 -momentum 0.9 -lr_schedule cosine -warmup_steps 3 -threads 1 -log_every 0)
expect_ok "srun -n 2 --mpi=pmix mpitrain trains" \
  timeout -k 5 90 srun -n 2 --mpi=pmix --chdir="$WORK" --time=5 --job-name=mt-srun \
  "$MPITRAIN" "${small[@]}" -output_dir "$WORK/srun"
expect_output "it ran as one job of 2 ranks" "2 ranks"
expect_output "the first checkpoint states Slurm's grace (KillWait=3, slurm.conf.in)" \
  "signals: Slurm (KillWait 3) leaves 3 s from SIGTERM to SIGKILL"
expect_ok "mpirun -np 2, the same options" \
  run_mpi 2 90 "$MPITRAIN" "${small[@]}" -output_dir "$WORK/mpirun"
same_bits "srun's model equals mpirun's bit for bit" "$WORK/srun" "$WORK/mpirun"
# the single-run script, with more options after it
printf '%s\n' "${small[@]}" | paste -d' ' - - >"$WORK/single.opts"
submit sjob env MT_OPTIONS="$WORK/single.opts" sbatch --parsable --chdir="$WORK" --output="$WORK/single.out" \
  "$top_srcdir/jobs/slurm-single.sh" -epochs 1
if [ -z "$sjob" ]; then
  fail "sbatch jobs/slurm-single.sh" "no job id (exit $LAST_RC)"
else
  LAST_LOG=$WORK/single.out
  wait_for 90 jobs_ended "$sjob"
  st="$(job_field "$sjob" JobState) $(job_field "$sjob" ExitCode)"
  [ "$st" = "COMPLETED 0:0" ] && pass "sbatch jobs/slurm-single.sh completed" ||
    fail "sbatch jobs/slurm-single.sh completed" "state: $st"
  job_log "its extra options came last (-epochs 1)" "$WORK/single.out" "epoch 1/1 done"
  [ -f "$WORK/runs/slurm-$sjob/model_final.h5" ] && pass "it wrote runs/slurm-$sjob" ||
    fail "it wrote runs/slurm-$sjob" "no model_final.h5 there"
fi
echo "# 1. srun and jobs/slurm-single.sh: $((SECONDS - t)) s"

# ---- 2. job array
t=$SECONDS
mkdir -p "$WORK/array"
for i in 0 1 2; do
  printf '%s\n' "-backend ddp" "-model mlp" "-mlp_hidden $((8 * (i + 1)))" "-data_train $WORK/train.h5" \
    "-data_val $WORK/val.h5" "-epochs 2" "-batch_size 24" "-lr 0.05" "-threads 1" "-log_every 0" \
    >"$WORK/array/$i.opts"
done
submit ajob env MT_ARRAY_DIR="$WORK/array" sbatch --parsable --array=0-2 --chdir="$WORK" \
  --output="$WORK/array-%A_%a.out" "$top_srcdir/jobs/slurm-array.sh"
if [ -z "$ajob" ]; then
  fail "sbatch --array=0-2 jobs/slurm-array.sh" "no job id (exit $LAST_RC)"
else
  pass "sbatch --array=0-2 jobs/slurm-array.sh (job $ajob)"
  if wait_for 120 jobs_ended "$ajob"; then
    pass "the 3 array elements ended"
  else
    fail "the 3 array elements ended" "still not done after 120 s: $(job_field "$ajob" JobState | tr '\n' ' ')"
  fi
  for i in 0 1 2; do
    log=$WORK/array-${ajob}_$i.out
    st="$(job_field "${ajob}_$i" JobState) $(job_field "${ajob}_$i" ExitCode)"
    LAST_LOG=$log
    [ "$st" = "COMPLETED 0:0" ] && pass "element $i completed" || fail "element $i completed" "state: $st"
    job_log "element $i used $i.opts" "$log" "hidden $((8 * (i + 1))))"
    [ -f "$WORK/runs/array-$ajob/$i/model_final.h5" ] && pass "element $i wrote runs/array-$ajob/$i" ||
      fail "element $i wrote runs/array-$ajob/$i" "no model_final.h5 there"
  done
fi
echo "# 2. array: $((SECONDS - t)) s"

# ---- 2b. predictions over shards: sbatch --array=0-1 jobs/slurm-predict-array.sh
t=$SECONDS
mkdir -p "$WORK/shards"
for i in 0 1; do
  "$MKDATA" synth "$WORK/shards/shard-$i.h5" $((60 + 7 * i)) 16 4 $((40 + i)) >/dev/null &&
    "$MKDATA" unlink "$WORK/shards/shard-$i.h5" y || bail "mkdata failed"
done
pmodel=$WORK/srun/model_final.h5 # section 1's model
submit pjob env MT_SHARDS="$WORK/shards/shard-*.h5" sbatch --parsable --array=0-1 --chdir="$WORK" \
  --output="$WORK/predict-%A_%a.out" "$top_srcdir/jobs/slurm-predict-array.sh" "$pmodel" -threads 1
if [ -z "$pjob" ]; then
  fail "sbatch --array=0-1 jobs/slurm-predict-array.sh" "no job id (exit $LAST_RC)"
else
  pass "sbatch --array=0-1 jobs/slurm-predict-array.sh (job $pjob)"
  wait_for 120 jobs_ended "$pjob" || fail "the 2 predict elements ended" "still not done after 120 s"
  for i in 0 1; do
    st="$(job_field "${pjob}_$i" JobState) $(job_field "${pjob}_$i" ExitCode)"
    LAST_LOG=$WORK/predict-${pjob}_$i.out
    [ "$st" = "COMPLETED 0:0" ] && pass "predict element $i completed" || fail "predict element $i completed" "state: $st"
    # the same file as mpirun -np 2 writes for that shard
    run_logged run_mpi 2 60 "$MPITRAIN" -mode predict -model_file "$pmodel" -data "$WORK/shards/shard-$i.h5" \
      -predictions "$WORK/shards/ref-$i.h5" -threads 1
    a=$("$top_builddir/tests/h5digest" "$WORK/shards/shard-$i.pred.h5" 2>&1)
    b=$("$top_builddir/tests/h5digest" "$WORK/shards/ref-$i.h5" 2>&1)
    if [ "$LAST_RC" = 0 ] && [ -f "$WORK/shards/shard-$i.pred.h5" ] && [ "$a" = "$b" ]; then
      pass "element $i wrote shard-$i.pred.h5 next to its shard, as mpirun's predict"
    else
      fail "element $i wrote shard-$i.pred.h5 next to its shard" "$(tr '\n' ' ' <<<"$a")"
    fi
  done
fi
echo "# 2b. predict array: $((SECONDS - t)) s"

# ---- 3. signal -> checkpoint -> exit 75 -> requeue -> -restart auto
t=$SECONDS
# chain_try EPOCHS [TERM]: one submission of jobs/slurm-preempt.sh, signalled
# once it trains: SIGUSR1 to the batch shell, or with TERM, SIGTERM to the
# ranks (scancel --signal=TERM), and then the test stops at the requeue.
# Status 0 when it went through stop, requeue and resume (then CJOB, CLOG
# and COUT name the job, its log and its output folder), 2 when the run had
# ended before the test could hold its ranks (a loaded machine: try again
# with a longer run), 1 on anything else (reported).
chain_try() {
  local n=$1 how=${2:-USR1} st
  local sigbit=9 name=mtchain$1 # SIGUSR1 - 1: its bit in /proc's masks
  [ "$how" = TERM ] && sigbit=14 name=mtterm$1
  CJOB='' CLOG=$WORK/$name.out COUT=$WORK/runs/chain-$name
  printf '%s\n' "-backend ddp" "-model mlp" "-mlp_hidden 512,512" "-data_train $WORK/train.h5" "-epochs $n" \
    "-batch_size 24" "-lr 0.01" "-momentum 0.9" "-threads 1" "-log_every 0" >"$WORK/chain-$n.opts"
  submit CJOB env MT_OPTIONS="$WORK/chain-$n.opts" sbatch --parsable --chdir="$WORK" --job-name="$name" \
    --output="$CLOG" "$top_srcdir/jobs/slurm-preempt.sh"
  [ -n "$CJOB" ] || { fail "sbatch jobs/slurm-preempt.sh" "no job id (exit $LAST_RC)"; return 1; }
  pass "sbatch jobs/slurm-preempt.sh ($n epochs, job $CJOB)"
  LAST_LOG=$CLOG
  # the ranks handle SIGUSR1 once they train: wait for the first epoch (a
  # fast poll of curve.csv, which rank 0 writes a row to per epoch, and of
  # the log, which srun relays and a loaded machine delays; the ranks' pids
  # and the job's state now and then)
  local i=0 end=$((SECONDS + 90))
  RANKS=
  until chain_trains; do
    i=$((i + 1))
    [ "$(echo $RANKS | wc -w)" = 2 ] || [ $((i % 4)) != 0 ] || RANKS=$(chain_ranks)
    if [ "$SECONDS" -ge "$end" ] || { [ $((i % 40)) = 0 ] && jobs_ended "$CJOB"; }; then
      fail "the chain job trains" "no 'epoch 1/' in its log: $(chain_state)"
      return 1
    fi
    sleep 0.05
  done
  # Hold the ranks still (SIGSTOP, by pid) while the signal travels, so the
  # run cannot end before it arrives however loaded the machine is; they
  # take it when they go on (SIGCONT).
  [ "$(echo $RANKS | wc -w)" = 2 ] || RANKS=$(chain_ranks)
  if [ "$(echo $RANKS | wc -w)" != 2 ]; then
    chain_too_fast "ranks: '$(echo $RANKS)'"
    return
  fi
  kill -STOP $RANKS 2>/dev/null
  echo "# job $CJOB: ranks $(echo $RANKS) held after $(($(wc -l <"$COUT/curve.csv" 2>/dev/null || echo 1) - 1)) of $n epochs"
  # what --signal=B:USR1@N does, without waiting for the time limit; or
  # SIGTERM to the job's steps (the ranks), not to the batch shell
  if [ "$how" = TERM ]; then
    run_logged timeout 20 scancel --signal=TERM "$CJOB"
  else
    run_logged timeout 20 scancel --batch --signal=USR1 "$CJOB"
  fi
  if [ "$LAST_RC" != 0 ]; then
    kill -CONT $RANKS 2>/dev/null
    fail "scancel --signal=$how $CJOB" "exit $LAST_RC"
    return 1
  fi
  LAST_LOG=$CLOG
  wait_for 60 chain_held
  local held=0
  chain_ranks_signalled && held=1
  kill -CONT $RANKS 2>/dev/null
  if [ "$held" = 0 ]; then
    if chain_ranks_gone; then # they had ended before the SIGSTOP
      chain_too_fast "a rank is gone"
      return
    fi
    fail "SIG$how reached the ranks" "no SIG$how pending at the ranks after 60 s"
    return 1
  fi
  if ! wait_for 120 chain_stopped; then
    fail "the job requeued itself after the checkpoint" "neither requeued nor ended after 120 s: $(chain_state)"
    return 1
  fi
  if ! chain_requeued; then
    st="$(job_field "$CJOB" JobState) $(job_field "$CJOB" ExitCode)"
    if [ "$st" = "COMPLETED 0:0" ] && ! grep -q '^stopped by signal' "$CLOG"; then
      # held after their last step: a signal there does not stop them
      chain_too_fast "held after the last step"
      return
    fi
    fail "the job requeued itself after the checkpoint" "state: $st, restarts $(job_field "$CJOB" Restarts)"
    grep -v '^epoch ' "$CLOG" | head -n 40 | sed 's/^/#   : /'
    return 1
  fi
  pass "scancel --signal=$how: the job checkpointed and requeued itself"
  if [ "$how" = TERM ]; then # the rest is as for SIGUSR1: end it here
    run_logged timeout 20 scancel "$CJOB"
    return 0
  fi
  # skip Slurm's requeue delay (BeginTime = now + 120 s), but not by less
  # than 2 s: slurmd refuses a credential of the same job issued within the
  # second its old one was revoked ("Job credential revoked"), and the job
  # would fail instead of starting
  sleep 2
  run_logged timeout 20 scontrol update JobId="$CJOB" StartTime=now
  [ "$LAST_RC" = 0 ] || { fail "scontrol update JobId=$CJOB StartTime=now" "exit $LAST_RC"; return 1; }
  LAST_LOG=$CLOG
  if ! wait_for 240 jobs_ended "$CJOB"; then
    fail "the requeued job completed" "not done after 240 s: $(chain_state)"
    return 1
  fi
  st="$(job_field "$CJOB" JobState) $(job_field "$CJOB" ExitCode)"
  if [ "$st" != "COMPLETED 0:0" ]; then
    fail "the requeued job completed" "state: $st"
    grep -v '^epoch ' "$CLOG" | head -n 40 | sed 's/^/#   : /'
    return 1
  fi
  pass "the requeued job completed"
  return 0
}
# chain_too_fast WHY: the run was (nearly) done before the test could hold
# its ranks: status 2 (try a longer one) once the job has completed, else 1.
chain_too_fast() {
  local st
  wait_for 120 jobs_ended "$CJOB"
  st="$(job_field "$CJOB" JobState) $(job_field "$CJOB" ExitCode)"
  if [ "$st" = "COMPLETED 0:0" ]; then
    echo "# the run of job $CJOB was done before the test could hold it ($1; a loaded machine?)"
    return 2
  fi
  LAST_LOG=$CLOG
  fail "the chain job trains" "$1, then state: $st"
  grep -v '^epoch ' "$CLOG" | head -n 40 | sed 's/^/#   : /'
  return 1
}
# chain_trains: the chain's ranks have done their first epoch.
chain_trains() {
  local rows
  rows=$(wc -l <"$COUT/curve.csv" 2>/dev/null) && [ "$rows" -ge 2 ] && return 0
  grep -q '^epoch 1/' "$CLOG" 2>/dev/null
}
# chain_ranks: pids of the tasks of step 0 (the ranks) of the chain job.
chain_ranks() {
  timeout 10 scontrol listpids "$CJOB" 2>/dev/null | awk '$3 == "0" && $4 != "-" && $1 > 0 { print $1 }'
}
# chain_ranks_signalled: every rank has the signal pending (it is stopped;
# sigbit of chain_try, the caller).
chain_ranks_signalled() {
  local pid m
  for pid in $RANKS; do
    m=$(sed -n 's/^ShdPnd:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null)
    [ -n "$m" ] && (((0x$m >> sigbit) & 1)) || return 1
  done
}
chain_ranks_gone() {
  local pid
  for pid in $RANKS; do kill -0 "$pid" 2>/dev/null || return 0; done
  return 1
}
chain_held() { chain_ranks_signalled || chain_ranks_gone; }
chain_state() { echo "$(job_field "$CJOB" JobState) restarts $(job_field "$CJOB" Restarts)"; }
chain_requeued() { [ "$(job_field "$CJOB" Restarts)" = 1 ] && [ "$(job_field "$CJOB" JobState)" = PENDING ]; }
chain_stopped() { chain_requeued || jobs_ended "$CJOB"; }

# ~1.5 s at full speed on 2 cores; longer if that ended before the test
# could hold it (MT_SLURM_CHAIN_EPOCHS overrides the list)
for epochs in ${MT_SLURM_CHAIN_EPOCHS:-60 240 960}; do
  chain_try "$epochs"
  crc=$?
  [ "$crc" = 2 ] || break
done
if [ "$crc" = 2 ]; then
  fail "the chain job was stopped by the signal" "every run ended before the test could hold it"
elif [ "$crc" = 0 ]; then
  job_log "the log shows the first run" "$CLOG" "mpitrain-chain: job $CJOB run 0 "
  job_log "the batch shell forwarded SIGUSR1" "$CLOG" "SIGUSR1, forwarding it to the ranks"
  job_log "the ranks stopped after a checkpoint" "$CLOG" "stopped by signal 10"
  job_log "the script requeued on status 75" "$CLOG" "checkpoint written, requeueing job $CJOB"
  job_log "the log shows the second run (SLURM_RESTART_COUNT=1)" "$CLOG" "mpitrain-chain: job $CJOB run 1 "
  job_log "the second run resumed from the checkpoint" "$CLOG" "restart from $COUT/checkpoints/"
  job_log "the second run finished" "$CLOG" "mpitrain-chain: mpitrain ended with status 0"
  expect_ok "uninterrupted twin (mpirun -np 2, $epochs epochs)" \
    run_mpi 2 300 "$MPITRAIN" -options_file "$WORK/chain-$epochs.opts" -output_dir "$WORK/twin"
  same_bits "signal + requeue + restart auto == uninterrupted, bit for bit" "$COUT" "$WORK/twin"
fi
echo "# 3. preemption chain: $((SECONDS - t)) s"

# ---- 3b. scancel --signal=TERM: checkpoint, exit 75, requeue
t=$SECONDS
for epochs in ${MT_SLURM_CHAIN_EPOCHS:-60 240 960}; do
  chain_try "$epochs" TERM
  crc=$?
  [ "$crc" = 2 ] || break
done
if [ "$crc" = 2 ]; then
  fail "the TERM job was stopped by the signal" "every run ended before the test could hold it"
elif [ "$crc" = 0 ]; then
  job_log "SIGTERM: the ranks stopped after a checkpoint" "$CLOG" "stopped by signal 15"
  job_log "SIGTERM: the script requeued on status 75" "$CLOG" "checkpoint written, requeueing job $CJOB"
fi
echo "# 3b. SIGTERM to the ranks: $((SECONDS - t)) s"

# ---- 3c. a checkpoint longer than KillWait (3 s here): the first checkpoint
# warns, and a plain scancel (SIGTERM, SIGKILL 3 s later) during a later
# checkpoint loses only that one: the one before is whole and -restart auto
# resumes from it. MT_TEST_CHECKPOINT_DELAY (a test hook, ckpt_write.c) makes
# each write 8 s longer.
t=$SECONDS
kw=(-backend ddp -model mlp -mlp_hidden 40,24 -data_train "$WORK/train.h5" -epochs 2
  -max_train_steps_per_epoch 20 -batch_size 24 -lr 0.05 -threads 1 -log_every 0
  -checkpoint_every_steps 5 -checkpoint_keep 0 -output_dir "$WORK/kw")
MT_TEST_CHECKPOINT_DELAY=8 timeout -k 5 90 srun -n 2 --mpi=pmix --chdir="$WORK" --time=5 \
  --job-name=mt-killwait "$MPITRAIN" "${kw[@]}" >"$WORK/kw.log" 2>&1 </dev/null &
kpid=$!
if wait_for 60 grep -q 'ckpt-5.h5: ' "$WORK/kw.log"; then
  sleep 1.5 # ckpt-10 is in its write
  kjob=$(squeue -h -n mt-killwait -o %i | head -n 1)
  [ -n "$kjob" ] && scancel "$kjob"
  wait "$kpid"
  LAST_LOG=$WORK/kw.log
  expect_output "the first checkpoint warns that it is longer than KillWait" \
    "more than the 3 s that Slurm (KillWait 3) leaves between SIGTERM and SIGKILL"
  ck=$WORK/kw/checkpoints
  [ ! -e "$ck/ckpt-10.h5" ] && [ -f "$ck/ckpt-5.h5" ] && pass "SIGKILL in the write lost only that checkpoint" \
    || fail "SIGKILL in the write lost only that checkpoint" "$(ls "$ck" | tr '\n' ' ')"
  expect_ok "-restart auto after the kill" run_mpi 2 90 "$MPITRAIN" "${kw[@]}" -restart auto
  expect_output "it resumes from the checkpoint before the kill" "restart from $ck/ckpt-5.h5"
  ls "$ck" | grep -q '\.tmp$' && fail "the killed write's .tmp is gone" "$(ls "$ck" | tr '\n' ' ')" \
    || pass "the killed write's .tmp is gone"
else
  kill "$kpid" 2>/dev/null
  wait "$kpid"
  LAST_LOG=$WORK/kw.log
  fail "the slow-checkpoint run reached its first checkpoint" "no ckpt-5.h5 line in 60 s"
fi
echo "# 3c. a checkpoint longer than KillWait: $((SECONDS - t)) s"

# ---- 4. PBS syntax through slurm-wlm-torque's qsub
t=$SECONDS
if ! command -v qsub >/dev/null 2>&1; then
  echo "# 4. skipped: no qsub (slurm-wlm-torque not installed)"
else
  printf '%s\n' "-backend ddp" "-model mlp" "-mlp_hidden 16" "-data_train $WORK/train.h5" "-epochs 2" \
    "-batch_size 24" "-lr 0.05" "-threads 1" "-log_every 0" >"$WORK/pbs.opts"
  submit pjob env MT_OPTIONS="$WORK/pbs.opts" qsub -wd "$WORK" -o "$WORK/pbs.out" -e "$WORK/pbs.err" \
    "$top_srcdir/jobs/pbs-single.sh"
  if [ -z "$pjob" ]; then
    fail "qsub jobs/pbs-single.sh" "no job id (exit $LAST_RC)"
  else
    pass "qsub jobs/pbs-single.sh (job $pjob)"
    LAST_LOG=$WORK/pbs.out
    if wait_for 90 jobs_ended "$pjob"; then
      st="$(job_field "$pjob" JobState) $(job_field "$pjob" ExitCode)"
      [ "$st" = "COMPLETED 0:0" ] && pass "the PBS job completed" || fail "the PBS job completed" "state: $st"
    else
      fail "the PBS job completed" "not done after 90 s: $(job_field "$pjob" JobState)"
    fi
    job_log "the PBS job ran 2 ranks" "$WORK/pbs.out" "2 ranks x 1 thread"
    [ -f "$WORK/runs/pbs-$pjob/model_final.h5" ] && pass "the PBS job wrote runs/pbs-$pjob" ||
      fail "the PBS job wrote runs/pbs-$pjob" "no model_final.h5 there"
  fi
  echo "# 4. qsub: $((SECONDS - t)) s"
fi
echo "# total $((SECONDS - T_START)) s"
finish
