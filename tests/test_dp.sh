#!/usr/bin/env bash
# DP-SGD backends (sp-dp, ddp-dp):
# - with clipping at a huge norm, no noise and shuffled batches a DP step is
#   the ordinary step: sp-dp equals sp for mlp, cnn (no batch norm) and gpt
#   (the sum of clipped per-sample gradients is the batch gradient);
# - with Poisson sampling and noise, ddp-dp at 2 and 4 ranks, and sp-dp
#   with 2 threads and small physical batches, equal sp-dp (the noise is
#   added once per global batch, on rank 0); the mlp's batched clipping
#   (per-sample norms from its layers) equals one backward per sample
#   (-dp_grad_sample exact), with dropout, ranks and threads too;
# - the noise a step adds has standard deviation sigma * C / B;
# - a restart mid-training gives the uninterrupted run's epsilon (and
#   model); -dp_target_epsilon solves the noise, or stops training when the
#   budget is spent; nearly empty Poisson steps run (no hang);
# - bad combinations are refused with a message naming the option.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MKDATA"
"$MKDATA" synth "$WORK/train.h5" 1000 20 4 11 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 200 20 4 12 >/dev/null || bail "mkdata synth failed"

ok() { # NAME NP ARGS...: a run that must succeed
  local name=$1 np=$2
  shift 2
  run_logged run_mpi "$np" 180 "$MPITRAIN" "$@"
  [ "$LAST_RC" = 0 ] && pass "$name" || fail "$name" "exit $LAST_RC"
}
same() { # NAME A B RTOL
  run_logged "$MKDATA" compare "$WORK/$2/model_final.h5" "$WORK/$3/model_final.h5" "$4"
  [ "$LAST_RC" = 0 ] && pass "$1" || fail "$1" "$(last_output | grep -E 'FAIL|MISSING' | head -3)"
}
eps() { sed -n 's/^RESULT dp epsilon=\([^ ]*\).*/\1/p' "$1"; } # the final epsilon of a log

base=(-data_train "$WORK/train.h5" -data_val "$WORK/val.h5" -log_every 0 -threads 1 -seed 5)
mlp=(-model mlp -mlp_hidden 32,16 "${base[@]}" -epochs 2 -max_train_steps_per_epoch 10
  -batch_size 32 -lr 0.1 -momentum 0.9)
exact=(-dp_sampling shuffle -dp_noise_multiplier 0 -dp_max_grad_norm 1e30)

# ---- C huge, no noise, shuffle: the ordinary step
ok "mlp sp" 1 "${mlp[@]}" -backend sp -output_dir "$WORK/mlp-sp"
ok "mlp sp-dp, C huge, no noise" 1 "${mlp[@]}" -backend sp-dp "${exact[@]}" -output_dir "$WORK/mlp-dp0"
expect_output "no noise is said to give no privacy" "no privacy"
same "mlp: sum of clipped per-sample gradients (C huge) == batch gradient (sp-dp == sp)" mlp-sp mlp-dp0 1e-5
ok "mlp dropout sp" 1 "${mlp[@]}" -mlp_dropout 0.3 -backend sp -output_dir "$WORK/mlpd-sp"
ok "mlp dropout ddp-dp 2 ranks x 2 threads, C huge" 2 "${mlp[@]}" -mlp_dropout 0.3 -backend ddp-dp \
  "${exact[@]}" -threads 2 -output_dir "$WORK/mlpd-dp0"
same "mlp dropout: ddp-dp (C huge, no noise) == sp" mlpd-sp mlpd-dp0 1e-5
data=${MT_FMNIST_DIR:-$top_builddir/tests/work/fmnist}
if [ -f "$data/fashion-mnist-test.h5" ]; then
  cnn=(-model cnn -cnn_channels 4,6 -cnn_hidden 16 -data_train "$data/fashion-mnist-test.h5"
    -epochs 1 -max_train_steps_per_epoch 3 -batch_size 16 -lr 0.05 -momentum 0.9 -log_every 0 -threads 1)
  ok "cnn sp" 1 "${cnn[@]}" -backend sp -output_dir "$WORK/cnn-sp"
  ok "cnn sp-dp, C huge, no noise" 1 "${cnn[@]}" -backend sp-dp "${exact[@]}" -output_dir "$WORK/cnn-dp0"
  same "cnn: sum of clipped per-sample gradients (C huge) == batch gradient" cnn-sp cnn-dp0 1e-5
  cdp=(-backend sp-dp -dp_noise_multiplier 1.1 -dp_max_grad_norm 0.5 -cnn_dropout 0.25)
  ok "cnn sp-dp with noise, batched clipping" 1 "${cnn[@]}" "${cdp[@]}" -output_dir "$WORK/cnn-b"
  expect_output "the cnn clips in batched passes" "clipped in batched passes (ghost clipping)"
  ok "cnn sp-dp with noise, one backward per sample" 1 "${cnn[@]}" "${cdp[@]}" -dp_grad_sample exact \
    -output_dir "$WORK/cnn-x"
  same "cnn: batched clipping == one backward per sample (noise, dropout)" cnn-b cnn-x 1e-4
else
  echo "# cnn check skipped: no $data/fashion-mnist-test.h5 (set MT_FMNIST_DIR)"
fi
if [ -x "$MT_DATA" ] && [ -f /usr/share/common-licenses/GPL-3 ]; then
  "$MT_DATA" text /usr/share/common-licenses/GPL-3 -out "$WORK" -name gpl >/dev/null || bail "mt-data text failed"
  gp=(-model gpt -gpt_layers 2 -gpt_heads 2 -gpt_embd 16 -gpt_block 16 -gpt_dropout 0.1
    -data_train "$WORK/gpl-train.h5" -epochs 1 -max_train_steps_per_epoch 3 -batch_size 8
    -lr 0.05 -momentum 0.9 -log_every 0 -threads 1)
  ok "gpt sp" 1 "${gp[@]}" -backend sp -output_dir "$WORK/gpt-sp"
  ok "gpt sp-dp, C huge, no noise" 1 "${gp[@]}" -backend sp-dp "${exact[@]}" -output_dir "$WORK/gpt-dp0"
  same "gpt: sum of clipped per-sample gradients (C huge) == batch gradient" gpt-sp gpt-dp0 1e-5
fi

# ---- Poisson sampling and noise: any ranks, threads, physical batches
dp=(-dp_noise_multiplier 1.1 -dp_max_grad_norm 0.5 -checkpoint_keep 0)
ok "sp-dp Poisson with noise" 1 "${mlp[@]}" -backend sp-dp "${dp[@]}" -checkpoint_every_steps 7 \
  -output_dir "$WORK/p1"
expect_output "epsilon reported each epoch" "epoch 1/2 privacy: epsilon"
expect_output "the mlp clips in batched passes" "clipped in batched passes (ghost clipping)"
e1=$(eps "$LAST_LOG")
ok "sp-dp Poisson with noise, one backward per sample (-dp_grad_sample exact)" 1 "${mlp[@]}" \
  -backend sp-dp "${dp[@]}" -dp_grad_sample exact -output_dir "$WORK/p1x"
expect_output "the exact path says so" "one forward+backward per sample"
same "batched clipping (norms from the layers) == one backward per sample (noise included)" \
  p1 p1x 1e-4
ok "mlp dropout ddp-dp 2 ranks x 2 threads, exact" 2 "${mlp[@]}" -mlp_dropout 0.3 -backend ddp-dp \
  "${dp[@]}" -threads 2 -dp_grad_sample exact -output_dir "$WORK/pdx"
ok "mlp dropout ddp-dp 2 ranks x 2 threads, batched" 2 "${mlp[@]}" -mlp_dropout 0.3 -backend ddp-dp \
  "${dp[@]}" -threads 2 -output_dir "$WORK/pdb"
same "with dropout, 2 ranks and 2 threads: batched == exact" pdx pdb 1e-4
ok "ddp-dp 2 ranks" 2 "${mlp[@]}" -backend ddp-dp "${dp[@]}" -output_dir "$WORK/p2"
ok "ddp-dp 4 ranks" 4 "${mlp[@]}" -backend ddp-dp "${dp[@]}" -output_dir "$WORK/p4"
ok "sp-dp 2 threads, physical batches of 5" 1 "${mlp[@]}" -backend sp-dp "${dp[@]}" -threads 2 \
  -dp_max_physical_batch 5 -output_dir "$WORK/p1t"
same "ddp-dp at 2 ranks == sp-dp (noise included)" p1 p2 1e-5
same "ddp-dp at 4 ranks == sp-dp (noise included)" p1 p4 1e-5
same "sp-dp with 2 threads and physical batches of 5 == sp-dp" p1 p1t 1e-5
run_logged "$MKDATA" compare "$WORK/p1/model_final.h5" "$WORK/mlp-dp0/model_final.h5" 1e-3
[ "$LAST_RC" = 1 ] && pass "the noise and clipping change the model" || fail "the noise and clipping change the model" "compare exit $LAST_RC"
[ "$(sed -n 3p "$WORK/p1/dp.csv" | cut -d, -f3)" = "$(sed -n 3p "$WORK/p4/dp.csv" | cut -d, -f3)" ] &&
  pass "dp.csv: the same epsilon at 1 and 4 ranks" || fail "dp.csv: the same epsilon at 1 and 4 ranks" "differ"

# ---- the noise's standard deviation: one step of lr 1 with and without
# noise differ by exactly the noise / B, std sigma * C / B = 50 / 32
one=(-model mlp -mlp_hidden 256 "${base[@]}" -epochs 1 -max_train_steps_per_epoch 1 -batch_size 32
  -lr 1 -backend sp-dp -dp_max_grad_norm 1)
ok "one step without noise" 1 "${one[@]}" -dp_noise_multiplier 0 -output_dir "$WORK/n0"
ok "one step with noise multiplier 50" 1 "${one[@]}" -dp_noise_multiplier 50 -output_dir "$WORK/n50"
if command -v h5dump >/dev/null; then
  for r in n0 n50; do
    h5dump -d /layers.0.weight -y -w 0 -m %.9g -o "$WORK/$r.txt" "$WORK/$r/model_final.h5" >/dev/null
  done
  sd=$(paste <(tr ',' '\n' <"$WORK/n0.txt" | awk 'NF') <(tr ',' '\n' <"$WORK/n50.txt" | awk 'NF') |
    awk '{ d = $2 - $1; s += d; s2 += d * d; n++ } END { if (n > 5000) printf "%.5f", sqrt((s2 - s * s / n) / (n - 1)) }')
  awk -v s="$sd" 'BEGIN { exit !(s != "" && s / (50 / 32) > 0.96 && s / (50 / 32) < 1.04) }' &&
    pass "the noise of a step has std sigma*C/B = 1.5625 within 4% ($sd over 5120 weights)" ||
    fail "the noise of a step has std sigma*C/B" "measured '$sd'"
fi

# ---- restart: the same budget goes on
ok "restart sp-dp from step 7 (mid-epoch 1)" 1 "${mlp[@]}" -backend sp-dp "${dp[@]}" \
  -restart "$WORK/p1/checkpoints/ckpt-7.h5" -output_dir "$WORK/p1r"
expect_output "the restart is from step 7" "global step 7"
e1r=$(eps "$LAST_LOG")
[ -n "$e1" ] && [ "$e1" = "$e1r" ] && pass "restarted run's final epsilon == uninterrupted run's ($e1)" ||
  fail "restarted run's final epsilon == uninterrupted run's" "'$e1r' vs '$e1'"
same "restarted run's model == uninterrupted run's (bit-exact)" p1 p1r 0
ok "restart ddp-dp at 2 ranks from the 1-rank checkpoint" 2 "${mlp[@]}" -backend ddp-dp "${dp[@]}" \
  -restart "$WORK/p1/checkpoints/ckpt-7.h5" -output_dir "$WORK/p2r"
[ "$(eps "$LAST_LOG")" = "$e1" ] && pass "... and the same epsilon" || fail "... and the same epsilon" "$(eps "$LAST_LOG") vs $e1"
cmp -s "$WORK/p1/dp.csv" "$WORK/p1r/dp.csv" && pass "dp.csv of the restarted run == uninterrupted" ||
  fail "dp.csv of the restarted run == uninterrupted" "differ"

# ---- budgets
ok "-dp_target_epsilon alone solves the noise multiplier" 1 "${mlp[@]}" -backend sp-dp -dp_target_epsilon 1.5 \
  -output_dir "$WORK/t1"
expect_output "solved noise multiplier reported" "(solved for the target)"
awk -v e="$(eps "$LAST_LOG")" 'BEGIN { exit !(e != "" && e <= 1.5 && e >= 1.4) }' &&
  pass "final epsilon within [1.49, 1.5] of the target ($(eps "$LAST_LOG"))" || fail "final epsilon near the target" "$(eps "$LAST_LOG")"
ok "-dp_target_epsilon with a fixed noise multiplier stops training" 1 "${mlp[@]}" -backend sp-dp \
  "${dp[@]}" -dp_target_epsilon 0.75 -output_dir "$WORK/t2"
expect_output "the budget stops training" "privacy budget spent"
e2=$(eps "$LAST_LOG") s2=$(sed -n 's/^RESULT dp .*steps=\([0-9]*\)/\1/p' "$LAST_LOG")
awk -v e="$e2" -v s="$s2" 'BEGIN { exit !(e != "" && e <= 0.75 && e > 0.68 && s > 10 && s < 20) }' &&
  pass "stopped in epoch 2 with epsilon <= 0.75 ($e2 after $s2 steps; 0.79 after 20)" ||
  fail "stopped in epoch 2 with epsilon <= 0.75" "epsilon '$e2' after '$s2' steps"
[ -f "$WORK/t2/model_final.h5" ] && pass "the stopped run writes its model" || fail "the stopped run writes its model" "missing"

# ---- nearly empty Poisson steps: q = 1/1000, 0 or 1 member most steps
ok "ddp-dp 2 ranks with q = 0.001 (empty steps)" 2 "${base[@]}" -model mlp -mlp_hidden 8 -epochs 1 \
  -max_train_steps_per_epoch 60 -batch_size 2 -backend ddp-dp -dp_noise_multiplier 1 -output_dir "$WORK/e2"
ok "sp-dp with q = 0.001 and physical batches of 1" 1 "${base[@]}" -model mlp -mlp_hidden 8 -epochs 1 \
  -max_train_steps_per_epoch 60 -batch_size 1 -backend sp-dp -dp_noise_multiplier 1 -dp_max_physical_batch 1 -output_dir "$WORK/e1"

# ---- refused
bad() { # NAME TEXT NP ARGS...
  local name=$1 text=$2 np=$3
  shift 3
  expect_error "$name" "$text" run_mpi "$np" 60 "$MPITRAIN" "${mlp[@]}" "$@" -output_dir "$WORK/bad"
}
bad "DP option with a non-DP backend" "option -dp_noise_multiplier: needs the DP-SGD policy (-dp), which -backend sp does not have; it applies with: sp-dp, ddp-dp" 1 -backend sp -dp_noise_multiplier 1
bad "-dp_sampling with ddp" "option -dp_sampling" 1 -backend ddp -dp_sampling shuffle
bad "DP backend without noise or budget" "option -dp_noise_multiplier" 1 -backend sp-dp
bad "batch norm under DP" "option -cnn_batchnorm" 1 -backend sp-dp -dp_noise_multiplier 1 -cnn_batchnorm
bad "global clipping under DP" "option -clip_grad_norm" 1 -backend sp-dp -dp_noise_multiplier 1 -clip_grad_norm 1
bad "accumulation under DP" "option -micro_batch_size" 1 -backend sp-dp -dp_noise_multiplier 1 -micro_batch_size 8
bad "unknown sampling" "option -dp_sampling: 'uniform'" 1 -backend sp-dp -dp_noise_multiplier 1 -dp_sampling uniform
bad "unknown accountant" "option -dp_accountant: 'prv'" 1 -backend sp-dp -dp_noise_multiplier 1 -dp_accountant prv
bad "unknown per-sample mode" "option -dp_grad_sample: 'ghost'" 1 -backend sp-dp -dp_noise_multiplier 1 -dp_grad_sample ghost
bad "clipping norm 0" "option -dp_max_grad_norm" 1 -backend sp-dp -dp_noise_multiplier 1 -dp_max_grad_norm 0
bad "negative noise" "option -dp_noise_multiplier" 1 -backend sp-dp -dp_noise_multiplier -1
bad "delta 1" "option -dp_delta" 1 -backend sp-dp -dp_noise_multiplier 1 -dp_delta 1
bad "unreachable target" "option -dp_target_epsilon" 1 -backend sp-dp -dp_delta 1e-5 -dp_target_epsilon 0.05
bad "sp-dp on 2 ranks" "use -backend ddp-dp" 2 -backend sp-dp -dp_noise_multiplier 1
bad "restart of a non-DP checkpoint under DP" "no privacy accountant" 1 -backend sp-dp -dp_noise_multiplier 1 \
  -restart "$WORK/mlp-sp/checkpoints/ckpt-20.h5"
finish
