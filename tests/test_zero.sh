#!/usr/bin/env bash
# -ddp_shard_optimizer 1 (ZeRO stage 1 inside a node, src/trainer/own_zero.c)
# gives the bits of the same run with 0:
# - the final parameters (model_final.h5's datasets, tests/h5digest) at 2 and
#   3 ranks, the MLP with SGD (momentum, Nesterov, weight decay) and AdamW,
#   the all-reduce after the backward and overlapped with it,
#   with and without -clip_grad_norm (and -clip_grad_value), -precision
#   fp64, ddp-amp (bf16 autocast; fp16 with its loss scaler), -restore_best,
#   and the CNN; at 4 ranks; each slice's sum fused into its step where
#   nothing reads the whole gradient (no clipping, scaler or overlap), the
#   whole sum first otherwise (which one, from the run's output);
# - checkpoints: one written mid-epoch at 2 ranks with it holds the tensors
#   of one written without it; resumed at 2 ranks with it, at 1 rank without
#   it and at 3 ranks with it, the results are those of the uninterrupted run
#   and of the resumes of the checkpoint written without it; a checkpoint
#   written without it resumes with it;
# - the optimizer state per rank is halved at 2 ranks, forecast = allocated;
#   (the parameters are one copy per node: without it each rank kept one)
# - refusals name the option: -backend sp, fsdp, ddp-dp, ddp-amp-apex,
#   -ddp_allreduce mpi, one rank, auto's choice of mpi;
# - auto, the default: on (and saying so) for ddp of several ranks on a
#   node, the same bits as 0; off without a word where the options rule it
#   out (sp, ddp-dp, -ddp_allreduce mpi), off saying why where the run does
#   (auto's choice of mpi); a value not auto, 1 or 0 refused.
# Two simulated hosts x 2 ranks: tests/test_multihost.sh.
. "$top_srcdir/tests/lib.sh"
make_work
H5DIGEST=${H5DIGEST:-$top_builddir/tests/h5digest}
need_bin "$MPITRAIN" "$MKDATA" "$H5DIGEST"
"$MKDATA" synth "$WORK/train.h5" 1000 20 4 11 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 203 20 4 12 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/img.h5" 600 144 3 13 image >/dev/null || bail "mkdata synth image failed"

# a batch of 48 divides over 1, 2 and 3 ranks; small buckets: several
# in-place reductions per step before the parameters are shared
mlp=(-model mlp -mlp_hidden 64,48 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5"
  -epochs 2 -max_train_steps_per_epoch 10 -batch_size 48 -lr 0.05 -seed 5 -log_every 0
  -threads 1 -ddp_bucket_mb 0.005)
sgd=(-optimizer sgd -momentum 0.9 -nesterov -weight_decay 1e-3)
adamw=(-optimizer adamw -lr 0.01 -weight_decay 1e-2)
cnn=(-model cnn -cnn_channels 4,6 -cnn_hidden 16 -data_train "$WORK/img.h5" -epochs 2
  -max_train_steps_per_epoch 4 -batch_size 24 -lr 0.05 -momentum 0.9 -seed 5 -log_every 0
  -threads 1)

# train NAME NP ARRAY BACKEND OPTIONS...: a run into $WORK/NAME
train() {
  local name=$1 np=$2 be=$4
  local -n a=$3
  shift 4
  run_logged run_mpi "$np" 120 "$MPITRAIN" "${a[@]}" -backend "$be" "$@" -output_dir "$WORK/$name"
  if [ "$LAST_RC" != 0 ]; then fail "train $name" "exit $LAST_RC"; return 1; fi
  [ -f "$WORK/$name/model_final.h5" ] || { fail "train $name" "no model_final.h5"; return 1; }
}

# same NAME FILE-A FILE-B: every dataset's bits alike (h5digest)
same() {
  local da db
  da=$("$H5DIGEST" "$2") || { fail "$1" "h5digest $2 failed"; return; }
  db=$("$H5DIGEST" "$3") || { fail "$1" "h5digest $3 failed"; return; }
  if [ "$da" = "$db" ]; then
    pass "$1 ($(echo "$da" | wc -l) datasets bit-identical)"
  else
    fail "$1" "datasets differ: $(diff <(echo "$da") <(echo "$db") | grep -c '^<') of $(echo "$da" | wc -l)"
  fi
}

# pair NAME NP ARRAY BACKEND OPTIONS...: without and with the option
pair() {
  local name=$1 np=$2 arr=$3 be=$4
  shift 4
  train "$name-off" "$np" "$arr" "$be" "$@" -ddp_shard_optimizer 0 || return
  train "$name-on" "$np" "$arr" "$be" "$@" -ddp_shard_optimizer 1 || return
  expect_output "$name: the optimizer sharded over $np ranks" \
    "optimizer sharded over the $np ranks of each node (-ddp_shard_optimizer 1)"
  same "$name: $np ranks, $be $*: with -ddp_shard_optimizer 1 == without" \
    "$WORK/$name-off/model_final.h5" "$WORK/$name-on/model_final.h5"
}

# which way the slices got their sum: fused into the step when nothing reads
# the whole gradient, else the whole sum first (the last run's output)
FUSED="each rank sums its slice of the gradient and steps it in one pass"
WHOLE="the gradient summed whole (clipping, the loss scaler or the backward's buckets read it)"
fused() { expect_output "$1: each slice summed and stepped in one pass" "$FUSED"; }
whole() { expect_output "$1: the gradient summed whole, then stepped" "$WHOLE"; }

pair sgd2 2 mlp ddp "${sgd[@]}"
fused sgd2
# the buckets summed by the communication thread during the backward
pair overlap2 2 mlp ddp "${sgd[@]}" -ddp_overlap 1 -ddp_comm_thread 1
expect_output "overlap2: with the option, buckets started during the backward" \
  "started during the backward by the communication thread"
whole overlap2
pair sgd2clip 2 mlp ddp "${sgd[@]}" -clip_grad_norm 0.5 -clip_grad_value 0.2
whole sgd2clip
pair adamw2clip 2 mlp ddp "${adamw[@]}" -clip_grad_norm 0.5
pair sgd3clip 3 mlp ddp "${sgd[@]}" -clip_grad_norm 0.5
pair adamw3 3 mlp ddp "${adamw[@]}"
fused adamw3
pair sgd4 4 mlp ddp "${sgd[@]}"
fused sgd4
pair fp64 2 mlp ddp "${adamw[@]}" -clip_grad_norm 0.5 -precision fp64
pair fp64fused 2 mlp ddp "${adamw[@]}" -precision fp64
fused fp64fused
pair amp2 2 mlp ddp-amp "${sgd[@]}" -clip_grad_norm 0.5 -amp_dtype bf16
pair amp2fused 2 mlp ddp-amp "${sgd[@]}" -amp_dtype bf16
fused amp2fused
# fp16's loss scaler checks and unscales the whole gradient
pair fp16 2 mlp ddp-amp "${sgd[@]}" -amp_dtype fp16
whole fp16
# the best model (an earlier epoch's at this lr) put back after training:
# each rank writes its slice of the shared copy
pair best2 2 mlp ddp "${sgd[@]}" -lr 0.5 -epochs 4 -restore_best
if grep -q "restored the best model: epoch [123]," "$LAST_LOG"; then
  pass "best2: the restored best model is not the last epoch's"
else
  fail "best2: the restored best model is not the last epoch's" "$(grep 'restored the best' "$LAST_LOG")"
fi
pair cnn2 2 cnn ddp

# ---- checkpoints: mid-epoch (step 7 of 10) at 2 ranks, with and without
ck=(-checkpoint_every_steps 7 -checkpoint_at_end 0)
train U 2 mlp ddp "${sgd[@]}" "${ck[@]}" -ddp_shard_optimizer 0 # the uninterrupted run, without
train Z 2 mlp ddp "${sgd[@]}" "${ck[@]}" -ddp_shard_optimizer 1
NCK=$WORK/U/checkpoints/ckpt-7.h5 ZCK=$WORK/Z/checkpoints/ckpt-7.h5
same "a mid-epoch checkpoint written with the option holds the tensors of one written without" \
  "$NCK" "$ZCK"
train Z2 2 mlp ddp "${sgd[@]}" -ddp_shard_optimizer 1 -restart "$ZCK" &&
  same "its checkpoint resumed at 2 ranks with the option == the uninterrupted run" \
    "$WORK/U/model_final.h5" "$WORK/Z2/model_final.h5"
train N1 1 mlp ddp "${sgd[@]}" -restart "$NCK" -ddp_shard_optimizer 0
train Z1 1 mlp ddp "${sgd[@]}" -restart "$ZCK" -ddp_shard_optimizer 0 &&
  same "its checkpoint resumed at 1 rank without the option == the checkpoint without it, resumed so" \
    "$WORK/N1/model_final.h5" "$WORK/Z1/model_final.h5"
train N3 3 mlp ddp "${sgd[@]}" -restart "$NCK" -ddp_shard_optimizer 0
train Z3 3 mlp ddp "${sgd[@]}" -ddp_shard_optimizer 1 -restart "$ZCK" &&
  same "its checkpoint resumed at 3 ranks with the option == the checkpoint without it, resumed without" \
    "$WORK/N3/model_final.h5" "$WORK/Z3/model_final.h5"
train NZ 2 mlp ddp "${sgd[@]}" -ddp_shard_optimizer 1 -restart "$NCK" &&
  same "a checkpoint written without the option resumed with it == the uninterrupted run" \
    "$WORK/U/model_final.h5" "$WORK/NZ/model_final.h5"

# ---- memory: the optimizer state per rank / 2, forecast = allocated
big=(-model mlp -mlp_hidden 256,256 -data_train "$WORK/train.h5" -batch_size 48 -epochs 0
  -threads 1 -optimizer adamw)
optim() { # the forecast and allocated optimizer state (MiB) of the last run
  sed -n 's|^memory allocated per rank (forecast / allocated): .*, optimizer state \([0-9.]*\) / \([0-9.]*\), .*total \([0-9.]*\) / \([0-9.]*\) MiB$|\1 \2 \3 \4|p' "$LAST_LOG"
}
train mem-off 2 big ddp -ddp_shard_optimizer 0 && off=$(optim)
train mem-on 2 big ddp -ddp_shard_optimizer 1 && on=$(optim)
# (the totals within tests/test_memory.sh's margin: the ranks' slices and
# activations differ by a few KiB, and each figure is the largest rank's)
if [ -n "${off:-}" ] && [ -n "${on:-}" ] &&
  echo "$off $on" | awk 'function near(a, b) { d = a - b; if (d < 0) d = -d; return d <= 0.02 * b + 0.05 }
      { exit !($1 == $2 && $5 == $6 && near($7, $8) && $5 > 0 && near($5, $1 / 2)) }'; then
  pass "optimizer state per rank halved at 2 ranks, forecast = allocated (MiB without: $off; with: $on)"
else
  fail "optimizer state per rank halved at 2 ranks, forecast = allocated" "without '${off:-}', with '${on:-}'"
fi

# ---- refusals: one line naming the option, before training
err() { # NAME NP TEXT BACKEND OPTIONS...
  local name=$1 np=$2 text=$3 be=$4
  shift 4
  expect_error "refused: $name" "$text" run_mpi "$np" 60 "$MPITRAIN" "${mlp[@]:0:20}" -backend "$be" \
    "$@" -ddp_shard_optimizer 1 -output_dir "$WORK/err"
  if [ "$LAST_RC" = 1 ]; then pass "refused: $name: exit status 1 (an error)"; else
    fail "refused: $name: exit status 1 (an error)" "exit $LAST_RC"; fi
  expect_no_output "refused: $name: before training" "epoch 1/"
}
O="option -ddp_shard_optimizer 1:"
err "-backend sp" 1 "$O shards the optimizer of -backend ddp (or ddp-amp), not of -backend sp" sp
err "-backend fsdp" 2 "$O shards the optimizer of -backend ddp (or ddp-amp), not of -backend fsdp" fsdp
err "-backend ddp-dp" 2 "$O DP-SGD" ddp-dp -dp_noise_multiplier 1
err "-backend ddp-amp-apex" 2 "$O not with the O2 policy" ddp-amp-apex
err "-ddp_allreduce mpi" 2 "$O shares the parameters in the window of -ddp_allreduce shm" ddp -ddp_allreduce mpi
err "one rank" 1 "$O shards the optimizer among the ranks of a node through ddp's shared-memory window, which this run does not use: the run has one rank" ddp
err "auto chose mpi" 2 "-ddp_allreduce auto chose mpi" ddp -ddp_overlap 1 -ddp_comm_thread 0

# ---- auto, the default
train auto2 2 mlp ddp "${sgd[@]}" &&
  expect_output "auto: on for ddp of 2 ranks on a node, saying so" \
    "optimizer sharded over the 2 ranks of each node (-ddp_shard_optimizer auto)" &&
  same "auto: the bits of -ddp_shard_optimizer 0" "$WORK/sgd2-off/model_final.h5" \
    "$WORK/auto2/model_final.h5"
mlp1=("${mlp[@]:0:20}" -threads 1) # without -ddp_bucket_mb, which sp refuses
for a in "sp 1" "ddp-dp 2 -dp_noise_multiplier 1" "ddp 2 -ddp_allreduce mpi"; do
  read -r be np more <<<"$a"
  # shellcheck disable=SC2086 # more: the case's options
  train "auto-$be-$np" "$np" mlp1 "$be" ${more:-} &&
    expect_no_output "auto: off, silent, with -backend $be${more:+ $more}" "optimizer sharded" &&
    expect_no_output "auto: with -backend $be${more:+ $more}, no word of it" "optimizer not sharded"
done
train auto-mpi 2 mlp ddp "${sgd[@]}" -ddp_overlap 1 -ddp_comm_thread 0 &&
  expect_output "auto: off where auto chose mpi, saying why" \
    "ddp: optimizer not sharded (-ddp_shard_optimizer auto: -ddp_allreduce auto chose mpi"
expect_error "a value not auto, 1 or 0 refused" "option -ddp_shard_optimizer: 'maybe' is not auto, 1 or 0" \
  run_mpi 2 60 "$MPITRAIN" "${mlp[@]}" -backend ddp -ddp_shard_optimizer maybe -output_dir "$WORK/err"

finish
