#!/usr/bin/env bash
# examples/user_model.c: a model, a backend and an optimizer from outside
# mpitrain, through the public header only. It trains, its own option is read
# (and a misspelt one refused), the user's backend on 2 ranks equals sp on 1
# and composes with the -amp policy its traits allow (and no other), and the
# user's optimizer equals the built-in sgd, its state restarting bit for bit.
. "$top_srcdir/tests/lib.sh"
make_work
EX=$top_builddir/examples/user_model
need_bin "$EX" "$MKDATA"
"$MKDATA" synth "$WORK/train.h5" 600 10 3 21 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 300 10 3 22 >/dev/null || bail "mkdata synth failed"
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
finish
