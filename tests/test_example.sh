#!/usr/bin/env bash
# examples/user_model.c: a model and a backend from outside mpitrain, through
# the public header only. It trains, its own option is read (and a misspelt
# one refused), and the user's backend on 2 ranks equals sp on 1.
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
finish
