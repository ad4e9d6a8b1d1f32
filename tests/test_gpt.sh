#!/usr/bin/env bash
# The gpt model on byte tokens of a text every Debian system has (base-files'
# GPL-3): mt-data text makes the token files; ddp at 2 and 4 ranks and 2 threads
# give sp's parameters; the validation loss falls below the unigram entropy
# of the text; token-file mistakes are refused clearly.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MT_DATA" "$MKDATA"
text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || { echo "# SKIP: $text missing"; exit 77; }
run_logged "$MT_DATA" text "$text" -out "$WORK" -name gpl -val_fraction 0.1
[ "$LAST_RC" = 0 ] && pass "mt-data text" || bail "mt-data text failed"
H=$(last_output | sed -n 's/.*gpl-val.h5.*entropy \([0-9.]*\) nats.*/\1/p')
common=(-model gpt -gpt_layers 2 -gpt_heads 2 -gpt_embd 32 -gpt_block 16 -data_train "$WORK/gpl-train.h5"
  -data_val "$WORK/gpl-val.h5" -batch_size 8 -log_every 0)
# equality runs use SGD: AdamW divides by sqrt(v) and so magnifies rounding
# differences of near-zero gradients (rare bytes' embedding rows) past 1e-5
short=(-epochs 1 -max_train_steps_per_epoch 6 -max_val_steps_per_epoch 1 -val_batch_size 20
  -optimizer sgd -lr 0.1 -momentum 0.9)
train() { # NAME NP BACKEND THREADS
  run_logged run_mpi "$2" 120 "$MPITRAIN" "${common[@]}" "${short[@]}" -backend "$3" -threads "$4" -output_dir "$WORK/$1"
  [ "$LAST_RC" = 0 ] && pass "train gpt $1" || fail "train gpt $1" "exit $LAST_RC"
}
same() {
  run_logged "$MKDATA" compare "$WORK/$2/model_final.h5" "$WORK/$3/model_final.h5" 1e-5
  [ "$LAST_RC" = 0 ] && pass "$1" || fail "$1" "parameters differ beyond 1e-5"
}
train sp 1 sp 1
train ddp2 2 ddp 1
train ddp4 4 ddp 1
train sp2t 1 sp 2
same "gpt: ddp 2 ranks == sp" sp ddp2
same "gpt: ddp 4 ranks == sp" sp ddp4
same "gpt: 2 threads == 1 thread" sp sp2t
expect_output "nanoGPT parameter names" "transformer.h.1.mlp.c_proj.weight"

# learning: 2 epochs of 150 steps get below the unigram entropy (nats/byte)
run_logged run_mpi 2 300 "$MPITRAIN" "${common[@]}" -backend ddp -epochs 2 -optimizer adamw \
  -lr 3e-3 -max_train_steps_per_epoch 150 -output_dir "$WORK/learn"
loss=$(grep -E '^2,' "$WORK/learn/curve.csv" | cut -d, -f9)
if [ -n "$H" ] && awk -v l="$loss" -v h="$H" 'BEGIN { exit !(l < h) }'; then
  pass "validation loss $loss < unigram entropy $H nats/byte"
else fail "validation loss below the unigram entropy" "loss '$loss', entropy '$H'"; fi

"$MKDATA" synth "$WORK/flat.h5" 100 8 3 1 >/dev/null || bail "mkdata synth failed"
expect_error "gpt refuses class data" "model gpt needs a token data set" \
  run_mpi 1 60 "$MPITRAIN" -model gpt -data_train "$WORK/flat.h5" -batch_size 4 -gpt_block 8 -output_dir "$WORK/bad2"
expect_error "class model refuses token data" "model mlp needs" \
  run_mpi 1 60 "$MPITRAIN" -model mlp -data_train "$WORK/gpl-train.h5" -batch_size 4 -output_dir "$WORK/bad3"
expect_error "token and class sets do not mix" "holds /x and /y but the training set holds /tokens" \
  run_mpi 1 60 "$MPITRAIN" "${common[@]}" -data_val "$WORK/flat.h5" -output_dir "$WORK/bad4"
expect_error "context longer than the text" "make no window" \
  run_mpi 1 60 "$MPITRAIN" "${common[@]}" -gpt_block 60000 -output_dir "$WORK/bad5"
expect_error "heads must divide the width" "-gpt_embd" \
  run_mpi 1 60 "$MPITRAIN" "${common[@]}" -gpt_heads 3 -output_dir "$WORK/bad6"
finish
