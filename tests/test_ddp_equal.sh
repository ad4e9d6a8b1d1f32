#!/usr/bin/env bash
# ddp at 2 and 4 ranks gives the parameters of sp at 1 rank for the same
# global batch and seed, to 1e-5 relative; so does gradient accumulation
# (1 rank x 4 micro-steps == 4 ranks x 1 == 2 ranks x 2). Momentum,
# Nesterov, weight decay, clipping, a cosine schedule with warm-up and
# several small all-reduce buckets are all on.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MKDATA"
"$MKDATA" synth "$WORK/train.h5" 1000 20 4 11 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 203 20 4 12 >/dev/null || bail "mkdata synth failed"

common=(-model mlp -mlp_hidden 64,48 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5"
  -epochs 2 -max_train_steps_per_epoch 12 -batch_size 32 -lr 0.05 -momentum 0.9 -nesterov
  -weight_decay 1e-3 -clip_grad_norm 2.0 -lr_schedule cosine -warmup_steps 3 -seed 5
  -log_every 0)
# small buckets, where the strategy has them (sp refuses ddp's options)
bk=(-ddp_bucket_mb 0.005)

train() { # NAME NP BACKEND MICRO [THREADS [SPLIT]]
  local o="$WORK/$1" b=("${bk[@]}")
  case $3 in sp | sp-*) b=() ;; esac
  run_logged run_mpi "$2" 120 "$MPITRAIN" "${common[@]}" "${b[@]}" -backend "$3" -micro_batch_size "$4" \
    -threads "${5:-1}" -thread_split "${6:-batch}" -output_dir "$o"
  if [ "$LAST_RC" != 0 ]; then fail "train $1" "exit $LAST_RC"; return 1; fi
  [ -f "$o/model_final.h5" ] || { fail "train $1" "no model_final.h5"; return 1; }
  pass "train $1 ($2 ranks, $3, micro-batch $4, ${5:-1} threads)"
}

same() { # NAME A B
  run_logged "$MKDATA" compare "$WORK/$2/model_final.h5" "$WORK/$3/model_final.h5" 1e-5
  if [ "$LAST_RC" = 0 ]; then pass "$1"; else fail "$1" "parameters differ beyond 1e-5"; fi
}

train sp1 1 sp 32
train sp1acc 1 sp 8
train ddp1 1 ddp 32
train ddp2 2 ddp 16
train ddp4 4 ddp 8
train ddp2acc 2 ddp 8
train sp1t2 1 sp 32 2 batch
train sp1t3acc 1 sp 8 3 batch
train sp1gemm 1 sp 32 2 gemm
train ddp2t2 2 ddp 16 2 batch

same "ddp at 1 rank == sp" sp1 ddp1
same "ddp at 2 ranks == sp" sp1 ddp2
same "ddp at 4 ranks == sp" sp1 ddp4
same "sp with 4 micro-steps == sp" sp1 sp1acc
same "ddp 4 ranks x 1 micro-step == sp 1 rank x 4 micro-steps" sp1acc ddp4
same "ddp 2 ranks x 2 micro-steps == sp" sp1 ddp2acc
same "sp with 2 threads splitting the batch == sp" sp1 sp1t2
same "sp with 3 threads and 4 micro-steps == sp" sp1 sp1t3acc
same "sp with oneDNN-threaded GEMMs == sp" sp1 sp1gemm
same "ddp 2 ranks x 2 threads == sp" sp1 ddp2t2

# AdamW (decoupled decay, no decay for 1-d tensors), value clipping, onecycle
adam=(-optimizer adamw -weight_decay 0.05 -weight_decay_skip_1d -clip_grad_value 0.05
  -lr_schedule onecycle -warmup_steps 0 -lr 0.01)
run_logged run_mpi 1 120 "$MPITRAIN" "${common[@]}" "${adam[@]}" -backend sp -threads 1 -output_dir "$WORK/adam1"
[ "$LAST_RC" = 0 ] && pass "train adamw sp" || fail "train adamw sp" "exit $LAST_RC"
run_logged run_mpi 3 120 "$MPITRAIN" "${common[@]}" "${bk[@]}" "${adam[@]}" -backend ddp -micro_batch_size 8 -batch_size 48 -threads 1 -output_dir "$WORK/adam3x2"
run_logged run_mpi 1 120 "$MPITRAIN" "${common[@]}" "${adam[@]}" -backend sp -batch_size 48 -threads 1 -output_dir "$WORK/adam1b48"
same "adamw: ddp 3 ranks x 2 micro-steps == sp" adam1b48 adam3x2

# overlap: each bucket's all-reduce started during the backward pass
# (MPI_Iallreduce driven by MPI_Test, -ddp_comm_thread 0; small buckets so
# that many overlap) against after it (MPI_Allreduce): the same bits at 2
# ranks (a + b), rounding at 4; MPI_Allreduce asked for (-ddp_allreduce
# mpi: the default, auto, takes the window after the backward)
for ov in 0 1; do
  run_logged run_mpi 2 120 "$MPITRAIN" "${common[@]}" -backend ddp -threads 1 -ddp_overlap $ov \
    -ddp_comm_thread 0 -ddp_allreduce mpi -ddp_bucket_mb 0.01 -ddp_first_bucket_mb 0.002 -output_dir "$WORK/ov$ov"
  [ "$LAST_RC" = 0 ] && pass "ddp 2 ranks -ddp_overlap $ov" || fail "ddp 2 ranks -ddp_overlap $ov" "exit $LAST_RC"
  if [ $ov = 1 ]; then
    expect_output "overlap: buckets start during the backward" "buckets started during the backward"
    expect_no_output "-ddp_comm_thread 0: no communication thread" "by the communication thread"
  else
    expect_no_output "no overlap: no bucket starts during the backward" "started during the backward"
  fi
  run_logged run_mpi 4 120 "$MPITRAIN" "${common[@]}" -backend ddp -threads 1 -ddp_overlap $ov \
    -ddp_comm_thread 0 -ddp_allreduce mpi -ddp_bucket_mb 0.01 -output_dir "$WORK/ov4$ov"
done
run_logged "$MKDATA" compare "$WORK/ov0/model_final.h5" "$WORK/ov1/model_final.h5" 0
[ "$LAST_RC" = 0 ] && pass "overlap on == off at 2 ranks, bit for bit" || fail "overlap on == off at 2 ranks, bit for bit" "differ"
same "overlap on == off at 4 ranks" ov40 ov41
same "overlapped ddp == sp" sp1 ov1
# the same buckets all-reduced by a communication thread (-ddp_comm_thread 1)
for np in 2 4; do
  run_logged run_mpi $np 120 "$MPITRAIN" "${common[@]}" -backend ddp -threads 1 -ddp_overlap 1 \
    -ddp_comm_thread 1 -ddp_allreduce mpi -ddp_bucket_mb 0.01 -ddp_first_bucket_mb 0.002 -output_dir "$WORK/ovt$np"
  [ "$LAST_RC" = 0 ] && pass "ddp $np ranks -ddp_comm_thread 1" || fail "ddp $np ranks -ddp_comm_thread 1" "exit $LAST_RC"
  expect_output "the thread all-reduced buckets during the backward" \
    "buckets started during the backward by the communication thread"
done
# with the batch split over 2 threads there is nothing to overlap: the
# threads' gradients are summed after the backward
run_logged run_mpi 2 120 "$MPITRAIN" "${common[@]}" "${bk[@]}" -backend ddp -threads 2 -thread_split batch \
  -output_dir "$WORK/ovsplit"
[ "$LAST_RC" = 0 ] && pass "ddp 2 ranks x 2 threads (batch split)" || fail "ddp 2 ranks x 2 threads" "exit $LAST_RC"
expect_output "batch split over threads: reduced after the backward" "waiting for the slowest rank"
expect_output "batch split: thread 0's gradients in the window, summed in place" \
  "100% of it summed in place in the shared window"
run_logged "$MKDATA" compare "$WORK/ov0/model_final.h5" "$WORK/ovt2/model_final.h5" 0
[ "$LAST_RC" = 0 ] && pass "communication thread == overlap off at 2 ranks, bit for bit" ||
  fail "communication thread == overlap off at 2 ranks, bit for bit" "differ"
same "communication thread == overlap off at 4 ranks" ov40 ovt4
expect_error "-ddp_comm_thread needs -ddp_overlap 1" "option -ddp_comm_thread: runs the overlapped" \
  run_mpi 2 60 "$MPITRAIN" "${common[@]}" "${bk[@]}" -backend ddp -ddp_overlap 0 -ddp_comm_thread 1 -output_dir "$WORK/ovx"

# -ddp_allreduce shm: the buckets summed in a shared-memory window
# (src/comm/shm_reduce.c) -- after the backward, and overlapped by the
# communication thread; at 2 ranks the same bits as MPI_Allreduce (a + b),
# at 3 and 4 ranks sp's parameters to the same tolerance as MPI's; small
# buckets, so that a bucket spans several of the window's chunks only
# where the gradient is large (the first layer's 64 x 20 weights are not:
# the chunk is 1 MiB), and every bucket boundary of the mlp is crossed
for ov in 0 1; do
  run_logged run_mpi 2 120 "$MPITRAIN" "${common[@]}" -backend ddp -threads 1 -ddp_overlap $ov \
    -ddp_allreduce shm -ddp_bucket_mb 0.01 -ddp_first_bucket_mb 0.002 -output_dir "$WORK/shm$ov"
  [ "$LAST_RC" = 0 ] && pass "ddp 2 ranks -ddp_allreduce shm -ddp_overlap $ov" ||
    fail "ddp 2 ranks -ddp_allreduce shm -ddp_overlap $ov" "exit $LAST_RC"
  expect_output "-ddp_allreduce shm: the window sums the buckets" \
    "ddp: gradient buckets summed in a shared-memory window (-ddp_allreduce shm), 2 slices per node"
  expect_output "shm: the gradients lie in the window" "ddp: the gradients lie in the window"
  expect_output "shm: every bucket summed in place, none copied in (-ddp_overlap $ov)" \
    "100% of it summed in place in the shared window (no copy in)"
  [ $ov = 1 ] && expect_output "shm: the thread reduced buckets during the backward" \
    "buckets started during the backward by the communication thread"
  run_logged "$MKDATA" compare "$WORK/ov0/model_final.h5" "$WORK/shm$ov/model_final.h5" 0
  [ "$LAST_RC" = 0 ] && pass "shm == MPI_Allreduce at 2 ranks, bit for bit (-ddp_overlap $ov)" ||
    fail "shm == MPI_Allreduce at 2 ranks, bit for bit (-ddp_overlap $ov)" "differ"
done
for np in 3 4; do
  run_logged run_mpi $np 120 "$MPITRAIN" "${common[@]}" -backend ddp -threads 1 -ddp_allreduce shm \
    -ddp_bucket_mb 0.01 -batch_size 48 -output_dir "$WORK/shm$np"
  [ "$LAST_RC" = 0 ] && pass "ddp $np ranks -ddp_allreduce shm" || fail "ddp $np ranks -ddp_allreduce shm" "exit $LAST_RC"
  expect_output "shm at $np ranks: every bucket summed in place" \
    "100% of it summed in place in the shared window (no copy in)"
done
run_logged run_mpi 1 120 "$MPITRAIN" "${common[@]}" -backend sp -batch_size 48 -threads 1 -output_dir "$WORK/sp1b48"
same "shm at 3 ranks == sp" sp1b48 shm3
same "shm at 4 ranks == sp" sp1b48 shm4
# without the communication thread the window's buckets go after the backward
run_logged run_mpi 2 120 "$MPITRAIN" "${common[@]}" "${bk[@]}" -backend ddp -threads 1 -ddp_comm_thread 0 \
  -ddp_allreduce shm -output_dir "$WORK/shmnt"
[ "$LAST_RC" = 0 ] && pass "ddp -ddp_allreduce shm -ddp_comm_thread 0" || fail "ddp -ddp_allreduce shm -ddp_comm_thread 0" "exit $LAST_RC"
expect_no_output "shm without the thread: no bucket starts during the backward" "started during the backward"
expect_output "shm without the thread: in place" "100% of it summed in place in the shared window"
same "shm without the thread == sp" sp1 shmnt
# a /dev/shm too small for the gradients (a container's 64 MiB; here 6 MiB
# for 2 x 4.1 MiB): the window's copy in, said, and the bits of the run
# that sums them in place (a + b at 2 ranks), and no shared parameters
# (-ddp_shard_optimizer auto falls back to ddp's copy per rank); needs a
# mount namespace
wide=(-mlp_hidden 1024,1024 -max_train_steps_per_epoch 4 -ddp_allreduce shm -threads 1)
run_logged run_mpi 2 120 "$MPITRAIN" "${common[@]}" "${wide[@]}" -backend ddp -output_dir "$WORK/wide"
expect_output "4 MiB of gradients in the window" "100% of it summed in place in the shared window"
expect_output "the optimizer sharded by default (-ddp_shard_optimizer auto)" \
  "optimizer sharded over the 2 ranks of each node (-ddp_shard_optimizer auto)"
if unshare -m true 2>/dev/null; then
  run_logged unshare -m sh -c 'mount -t tmpfs -o size=6m tmpfs /dev/shm && exec timeout -k 10 120 \
    "$0" -np 2 --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader \
    --mca btl_vader_single_copy_mechanism none "$@" </dev/null' "$MPIRUN" "$MPITRAIN" \
    "${common[@]}" "${wide[@]}" -backend ddp -output_dir "$WORK/wide6m"
  [ "$LAST_RC" = 0 ] && pass "ddp with a 6 MiB /dev/shm" || fail "ddp with a 6 MiB /dev/shm" "exit $LAST_RC"
  expect_output "a small /dev/shm: said" "/dev/shm has too little room for the buffers of 2 ranks"
  expect_output "a small /dev/shm: -ddp_shard_optimizer auto keeps a copy per rank, said" \
    "ddp: optimizer not sharded (-ddp_shard_optimizer auto: the window could not be made"
  expect_no_output "a small /dev/shm: copied in, not in place" "summed in place"
  run_logged "$MKDATA" compare "$WORK/wide/model_final.h5" "$WORK/wide6m/model_final.h5" 0
  [ "$LAST_RC" = 0 ] && pass "in place == copied in at 2 ranks, bit for bit" ||
    fail "in place == copied in at 2 ranks, bit for bit" "differ"
else
  echo "# skipped: the small /dev/shm (no mount namespace here: not root?)"
fi
# -precision fp64: the double gradients in the window too; at 2 ranks
# MPI_Allreduce's bits, for every bucket boundary of small buckets
for m in mpi shm; do
  run_logged run_mpi 2 120 "$MPITRAIN" "${common[@]}" -backend ddp -threads 1 -precision fp64 \
    -ddp_allreduce $m -ddp_bucket_mb 0.01 -ddp_first_bucket_mb 0.002 -output_dir "$WORK/f64$m"
  [ "$LAST_RC" = 0 ] && pass "ddp -precision fp64 -ddp_allreduce $m" || fail "ddp -precision fp64 -ddp_allreduce $m" "exit $LAST_RC"
done
expect_output "fp64: the gradients summed in place" "100% of it summed in place in the shared window"
run_logged "$MKDATA" compare "$WORK/f64mpi/model_final.h5" "$WORK/f64shm/model_final.h5" 0
[ "$LAST_RC" = 0 ] && pass "fp64: shm in place == MPI_Allreduce at 2 ranks, bit for bit" ||
  fail "fp64: shm in place == MPI_Allreduce at 2 ranks, bit for bit" "differ"
# -ddp_reduce_dtype bf16 / fp16 (-amp's low-precision all-reduce): the
# window's sum rounds as the MPI operation does (fp16 compute: the bf16
# GEMMs need a CPU with bf16 instructions)
for r in bf16 fp16; do
  for m in mpi shm; do
    run_logged run_mpi 2 120 "$MPITRAIN" "${common[@]}" "${bk[@]}" -backend ddp-amp -amp_dtype fp16 \
      -ddp_reduce_dtype $r -threads 1 -ddp_allreduce $m -output_dir "$WORK/$r$m"
    [ "$LAST_RC" = 0 ] && pass "ddp-amp -ddp_reduce_dtype $r -ddp_allreduce $m" ||
      fail "ddp-amp -ddp_reduce_dtype $r -ddp_allreduce $m" "exit $LAST_RC"
  done
  expect_output "the $r all-reduce goes through the window" \
    "amp: the $r gradient all-reduce sums in a shared-memory window"
  expect_no_output "the $r all-reduce converts a copy: copied in, not in place" "summed in place"
  run_logged "$MKDATA" compare "$WORK/${r}mpi/model_final.h5" "$WORK/${r}shm/model_final.h5" 0
  [ "$LAST_RC" = 0 ] && pass "$r all-reduce: shm == MPI at 2 ranks, bit for bit" ||
    fail "$r all-reduce: shm == MPI at 2 ranks, bit for bit" "differ"
done
# -ddp_allreduce auto (the default): the window on the CPU, with the
# communication thread or after the backward; MPI_Allreduce where the
# buckets overlap without the thread (MPI_Iallreduce and MPI_Test). The
# overlap asked for (-ddp_overlap auto decides by the cores: test_options.sh)
run_logged run_mpi 2 120 "$MPITRAIN" "${common[@]}" "${bk[@]}" -backend ddp -threads 1 -ddp_overlap 1 -output_dir "$WORK/auto"
[ "$LAST_RC" = 0 ] && pass "ddp 2 ranks, -ddp_allreduce by default" || fail "ddp 2 ranks, -ddp_allreduce by default" "exit $LAST_RC"
expect_output "-ddp_allreduce auto: the window by default on the CPU" \
  "ddp: gradient buckets summed in a shared-memory window (-ddp_allreduce shm), 2 slices per node"
expect_output "auto: overlapped by the communication thread" \
  "buckets started during the backward by the communication thread"
same "ddp by default == sp" sp1 auto
run_logged run_mpi 2 120 "$MPITRAIN" "${common[@]}" "${bk[@]}" -backend ddp -threads 1 -ddp_overlap 1 \
  -ddp_comm_thread 0 -output_dir "$WORK/autont"
[ "$LAST_RC" = 0 ] && pass "ddp -ddp_comm_thread 0, -ddp_allreduce by default" || fail "ddp -ddp_comm_thread 0, -ddp_allreduce by default" "exit $LAST_RC"
expect_no_output "auto with MPI_Test's overlap: MPI_Allreduce" "shared-memory window"
expect_output "auto with MPI_Test's overlap: buckets still start during the backward" \
  "buckets started during the backward"
expect_error "-ddp_allreduce: auto, mpi or shm" "option -ddp_allreduce: 'nccl' is not auto, mpi or shm" \
  run_mpi 2 60 "$MPITRAIN" "${common[@]}" "${bk[@]}" -backend ddp -ddp_allreduce nccl -output_dir "$WORK/shmx"
expect_error "-ddp_allreduce needs a strategy of several ranks" "option -ddp_allreduce: needs" \
  run_mpi 1 60 "$MPITRAIN" "${common[@]}" -backend sp -ddp_allreduce shm -output_dir "$WORK/shmy"

# the comparison can fail: another seed gives other parameters
run_logged run_mpi 1 120 "$MPITRAIN" "${common[@]}" -backend sp -micro_batch_size 32 -seed 6 -output_dir "$WORK/sp1seed6"
run_logged "$MKDATA" compare "$WORK/sp1/model_final.h5" "$WORK/sp1seed6/model_final.h5" 1e-5
if [ "$LAST_RC" = 1 ]; then pass "another seed is told apart"; else fail "another seed is told apart" "compare exit $LAST_RC"; fi

# the validation metrics agree too (every sample counted once)
acc() { grep -E '^2,' "$WORK/$1/curve.csv" | cut -d, -f10; }
a1=$(acc sp1) a4=$(acc ddp4)
if [ -n "$a1" ] && [ "$a1" = "$a4" ]; then pass "validation accuracy equal at 1 and 4 ranks ($a1)"
else fail "validation accuracy equal at 1 and 4 ranks" "'$a1' vs '$a4'"; fi
finish
