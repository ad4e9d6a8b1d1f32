#!/usr/bin/env bash
# examples/user_model.c: a model, a backend and an optimizer from outside
# mpitrain, through the public header only. It trains, its own option is read
# (and a misspelt one refused), the user's backend on 2 ranks equals sp on 1
# and composes with the -amp policy its traits allow (and no other), and the
# user's optimizer equals the built-in sgd, its state restarting bit for bit.
# Its own metrics (the metrics op, combined over ranks with the public
# mt_allgather_values) are columns of curve.csv and curve.h5 with the values
# it must give (with -thread_split gemm's evaluation models too), restored from a checkpoint, and refused when they differ
# between ranks.
. "$top_srcdir/tests/lib.sh"
make_work
EX=$top_builddir/examples/user_model
need_bin "$EX" "$MKDATA"
"$MKDATA" synth "$WORK/train.h5" 600 10 3 21 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 300 10 3 22 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val2.h5" 131 10 3 23 >/dev/null || bail "mkdata synth failed"
args=(-model softmax_tanh -softmax_tanh_hidden 12 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5"
  -epochs 3 -batch_size 30 -lr 0.2 -momentum 0.5 -log_every 0 -threads 1)

expect_ok "user model trains with sp" run_mpi 1 120 "$EX" "${args[@]}" -backend sp -output_dir "$WORK/sp"
acc=$(grep -E '^3,' "$WORK/sp/curve.csv" | cut -d, -f10)
if awk -v a="$acc" 'BEGIN { exit !(a >= 0.8) }'; then pass "user model learns (val accuracy $acc)"
else fail "user model learns" "val accuracy '$acc' < 0.8"; fi
expect_ok "user backend on 2 ranks" run_mpi 2 120 "$EX" "${args[@]}" -backend ddp-reduce-bcast -output_dir "$WORK/rb"
run_logged "$MKDATA" compare "$WORK/sp/model_final.h5" "$WORK/rb/model_final.h5" 1e-5
[ "$LAST_RC" = 0 ] && pass "user backend (2 ranks) == sp" || fail "user backend (2 ranks) == sp" "parameters differ"
expect_output "parameter names of the user model" "layers.2.weight"
expect_error "a misspelt user option is refused" "-softmax_tanh_hiden" \
  run_mpi 1 60 "$EX" "${args[@]}" -softmax_tanh_hiden 5 -output_dir "$WORK/bad1"
expect_error "a bad value of a user option names it" "-softmax_tanh_hidden" \
  run_mpi 2 60 "$EX" "${args[@]}" -backend ddp -softmax_tanh_hidden 0 -output_dir "$WORK/bad2"
run_logged run_mpi 1 60 "$EX" -help
expect_output "-help lists the user model's option" "-softmax_tanh_hidden"
expect_output "-help lists the user's optimizer" "heavy_ball"
expect_output "-help lists the user's strategy with its -amp policy" "ddp-reduce-bcast-amp"

# the user's strategy composes with the policies its traits name
expect_ok "user backend with the -amp policy (2 ranks)" \
  run_mpi 2 120 "$EX" "${args[@]}" -backend ddp-reduce-bcast-amp -output_dir "$WORK/rbamp"
expect_ok "ddp-amp (2 ranks)" run_mpi 2 120 "$EX" "${args[@]}" -backend ddp-amp -output_dir "$WORK/ddpamp"
run_logged "$MKDATA" compare "$WORK/ddpamp/model_final.h5" "$WORK/rbamp/model_final.h5" 1e-5
[ "$LAST_RC" = 0 ] && pass "user backend -amp == ddp-amp" || fail "user backend -amp == ddp-amp" "parameters differ"
expect_error "a policy the user's strategy lacks is refused naming those that have it" \
  "option -backend ddp-reduce-bcast-dp: the DP-SGD policy (-dp) does not compose with the ddp-reduce-bcast strategy; it does in: sp-dp, ddp-dp" \
  run_mpi 1 60 "$EX" "${args[@]}" -backend ddp-reduce-bcast-dp -output_dir "$WORK/bad3"

# the user's optimizer: heavy-ball momentum is the built-in sgd's rule here
expect_ok "user optimizer trains" \
  run_mpi 1 120 "$EX" "${args[@]}" -backend sp -optimizer heavy_ball -output_dir "$WORK/hb"
run_logged "$MKDATA" compare "$WORK/sp/model_final.h5" "$WORK/hb/model_final.h5" 1e-6
[ "$LAST_RC" = 0 ] && pass "user optimizer == sgd" || fail "user optimizer == sgd" "parameters differ"
# its state by name in checkpoints: a restart from mid-run gives the same bits
expect_ok "user optimizer, checkpoints" run_mpi 1 120 "$EX" "${args[@]}" -backend sp \
  -optimizer heavy_ball -checkpoint_every_steps 25 -output_dir "$WORK/hbc"
expect_ok "user optimizer, restart from step 25" run_mpi 1 120 "$EX" "${args[@]}" -backend sp \
  -optimizer heavy_ball -restart "$WORK/hbc/checkpoints/ckpt-25.h5" -output_dir "$WORK/hbr"
run_logged "$MKDATA" compare "$WORK/hb/model_final.h5" "$WORK/hbr/model_final.h5" 0
[ "$LAST_RC" = 0 ] && pass "user optimizer restarted == uninterrupted" ||
  fail "user optimizer restarted == uninterrupted" "parameters differ"
expect_error "the user's optimizer checks its hyper-parameters" "option -optimizer heavy_ball" \
  run_mpi 1 60 "$EX" "${args[@]}" -optimizer heavy_ball -weight_decay 0.1 -output_dir "$WORK/bad4"

# the user model's own metrics: metric.val_samples is the samples it
# evaluated in the pass over all ranks (the set's size), metric.hosts the
# distinct host names of the ranks (one machine here)
col() { # col FILE NAME: that column of a CSV file, one line per row
  awk -F, -v n="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == n) c = i; next }
    c { print $c }' "$1"
}
# what the curve must keep across a restart: everything but the timings
curve_kept() { cut -d, -f1-4,7- "$1"; }
expect_ok "user metrics, 2 ranks x 2 threads, 2 validation sets" run_mpi 2 120 "$EX" "${args[@]}" \
  -backend ddp -threads 2 -thread_split batch -data_val "$WORK/val.h5,$WORK/val2.h5" -output_dir "$WORK/met"
got=$(col "$WORK/met/curve.csv" metric.val_samples | tr '\n' ' ')
[ "$got" = "300 131 300 131 300 131 " ] && pass "metric.val_samples is each set's size" ||
  fail "metric.val_samples is each set's size" "got '$got'"
# one model for the rank's threads: its evaluation models' counts too
expect_ok "user metrics, 1 rank x 2 threads, -thread_split gemm" run_mpi 1 120 "$EX" "${args[@]}" \
  -threads 2 -thread_split gemm -epochs 1 -output_dir "$WORK/metgemm"
got=$(col "$WORK/metgemm/curve.csv" metric.val_samples | tr '\n' ' ')
[ "$got" = "300 " ] && pass "metric.val_samples with -thread_split gemm: the set's size" ||
  fail "metric.val_samples with -thread_split gemm: the set's size" "got '$got'"
got=$(col "$WORK/met/curve.csv" metric.hosts | sort -u | tr '\n' ' ')
[ "$got" = "1 " ] && pass "metric.hosts gathered from the ranks' strings" ||
  fail "metric.hosts gathered from the ranks' strings" "got '$got'"
run_logged "$top_builddir/tests/h5digest" "$WORK/met/curve.h5"
expect_output "curve.h5 has the metrics' fields" "metric.val_samples@72:f64le,metric.hosts@80:f64le"
expect_ok "user metrics without validation sets (after each epoch)" run_mpi 1 120 "$EX" \
  -model softmax_tanh -softmax_tanh_hidden 12 -data_train "$WORK/train.h5" -epochs 2 \
  -batch_size 30 -log_every 0 -threads 1 -output_dir "$WORK/metnoval"
got=$(col "$WORK/metnoval/curve.csv" metric.val_samples | tr '\n' ' ')
[ "$got" = "0 0 " ] && pass "metric.val_samples is 0 without evaluation" ||
  fail "metric.val_samples is 0 without evaluation" "got '$got'"
# the restart above (from step 25, in epoch 2) brings epoch 1's metrics back
[ -n "$(col "$WORK/hbr/curve.csv" metric.val_samples)" ] &&
  diff <(curve_kept "$WORK/hb/curve.csv") <(curve_kept "$WORK/hbr/curve.csv") >/dev/null &&
  pass "restarted curve.csv == uninterrupted, metrics included" ||
  fail "restarted curve.csv == uninterrupted, metrics included" \
    "$(diff <(curve_kept "$WORK/hb/curve.csv") <(curve_kept "$WORK/hbr/curve.csv") | head -4)"
expect_error "metrics that differ between ranks are refused, naming the model and metric" \
  "model softmax_tanh: metric val_samples is" \
  run_mpi 2 60 "$EX" "${args[@]}" -backend ddp -data_val "$WORK/val2.h5" \
  -softmax_tanh_local_metrics 1 -output_dir "$WORK/bad5"
finish
