#!/usr/bin/env bash
# -mode generate end to end: a gpt trained briefly on the bytes of a text
# every Debian system has (base-files' GPL-3), its vocabulary cut to 128
# (the text is ASCII), generates from its model file alone (the file's
# description makes the model: no -gpt_* given):
#  - greedy: the text printed and OUTPUT_DIR/generated.txt (the prompt, then
#    -max_new_tokens bytes), the same at 1 and 2 ranks and from -prompt_file;
#    an fp64 model's file generates too (in fp32);
#  - sampling: a seed gives the same text twice, another seed another text;
#  - every bad input ends in one line naming it: no prompt, a missing model
#    file, a model that is not a gpt, a prompt byte outside the vocabulary,
#    -max_new_tokens past the block, an option only training uses.
# The decoding itself (cache vs full forward, PyTorch) is tests/test_generate.c's.
. "$top_srcdir/tests/lib.sh"
make_work
H5ATTR=${H5ATTR:-$top_builddir/tests/h5attr}
need_bin "$MPITRAIN" "$MT_DATA" "$MKDATA" "$H5ATTR"
text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || { echo "# SKIP: $text missing"; exit 77; }
run_logged "$MT_DATA" text "$text" -out "$WORK" -name gpl -val_fraction 0.1
[ "$LAST_RC" = 0 ] && pass "mt-data text" || bail "mt-data text failed"
for s in train val; do
  "$H5ATTR" "$WORK/gpl-$s.h5" /tokens vocab_size int 128 || bail "h5attr vocab_size failed"
done
expect_ok "train a gpt (vocabulary 128, block 32)" run_mpi 1 120 "$MPITRAIN" -model gpt \
  -gpt_layers 2 -gpt_heads 2 -gpt_embd 32 -gpt_block 32 -data_train "$WORK/gpl-train.h5" \
  -data_val "$WORK/gpl-val.h5" -batch_size 16 -epochs 1 -max_train_steps_per_epoch 40 \
  -max_val_steps_per_epoch 1 -optimizer adamw -lr 3e-3 -log_every 0 -output_dir "$WORK/m"
M=$WORK/m/model_final.h5
gen() { # NP OUTDIR ARGS...
  local np=$1 dir=$2
  shift 2
  run_logged run_mpi "$np" 120 "$MPITRAIN" -mode generate -model_file "$M" -output_dir "$WORK/$dir" "$@"
}
same_file() { # NAME A B
  if cmp -s "$WORK/$2/generated.txt" "$WORK/$3/generated.txt"; then pass "$1"; else
    fail "$1" "$2/generated.txt and $3/generated.txt differ"; fi
}

gen 1 g1 -prompt "This License " -max_new_tokens 19
[ "$LAST_RC" = 0 ] && pass "greedy at 1 rank" || fail "greedy at 1 rank" "exit $LAST_RC"
f=$WORK/g1/generated.txt
if [ -f "$f" ] && [ "$(wc -c <"$f")" = 32 ] && [ "$(head -c 13 "$f")" = "This License " ]; then
  pass "generated.txt: the prompt and 19 bytes"
else fail "generated.txt: the prompt and 19 bytes" "$(wc -c <"$f" 2>/dev/null) bytes"; fi
if last_output | grep -qF -- "$(cat "$f")"; then pass "the text printed"; else
  fail "the text printed" "stdout lacks the file's text"; fi
gen 2 g2 -prompt "This License " -max_new_tokens 19
[ "$LAST_RC" = 0 ] && pass "greedy at 2 ranks" || fail "greedy at 2 ranks" "exit $LAST_RC"
same_file "greedy: 2 ranks == 1 rank" g1 g2
printf 'This License ' >"$WORK/prompt.txt"
gen 1 g3 -prompt_file "$WORK/prompt.txt" -max_new_tokens 19
same_file "greedy: -prompt_file == -prompt" g1 g3

for r in s1 s2; do gen 1 "$r" -prompt "the " -max_new_tokens 28 -temperature 0.9 -top_k 20 -seed 5; done
same_file "sampling: seed 5 twice, the same text" s1 s2
gen 2 s3 -prompt "the " -max_new_tokens 28 -temperature 0.9 -top_k 20 -seed 6
if ! cmp -s "$WORK/s1/generated.txt" "$WORK/s3/generated.txt" && [ -s "$WORK/s3/generated.txt" ]; then
  pass "sampling: seeds 5 and 6, other texts"
else fail "sampling: seeds 5 and 6, other texts" "the same text, or none"; fi

expect_ok "train an fp64 gpt" run_mpi 1 120 "$MPITRAIN" -model gpt -gpt_layers 1 -gpt_heads 2 \
  -gpt_embd 16 -gpt_block 16 -precision fp64 -data_train "$WORK/gpl-train.h5" -batch_size 8 \
  -epochs 1 -max_train_steps_per_epoch 3 -log_every 0 -output_dir "$WORK/m64"
run_logged run_mpi 1 60 "$MPITRAIN" -mode generate -model_file "$WORK/m64/model_final.h5" -prompt "the " \
  -max_new_tokens 12 -output_dir "$WORK/g64"
if [ "$LAST_RC" = 0 ] && [ "$(wc -c <"$WORK/g64/generated.txt")" = 16 ]; then
  pass "an fp64 model generates (in fp32)"
else fail "an fp64 model generates (in fp32)" "exit $LAST_RC"; fi

expect_error "no prompt" "option -prompt: -mode generate needs a prompt" \
  run_mpi 1 60 "$MPITRAIN" -mode generate -model_file "$M"
expect_error "a missing model file" "$WORK/none.h5" \
  run_mpi 1 60 "$MPITRAIN" -mode generate -model_file "$WORK/none.h5" -prompt "a"
expect_error "a prompt byte outside the vocabulary" "byte 195 at position 2 is outside the model's vocabulary of 128" \
  run_mpi 2 60 "$MPITRAIN" -mode generate -model_file "$M" -prompt "ab$(printf '\303\251')"
expect_error "-max_new_tokens past the block" "option -max_new_tokens: 30 after a prompt of 4 tokens is past the block size 32" \
  run_mpi 2 60 "$MPITRAIN" -mode generate -model_file "$M" -prompt "the " -max_new_tokens 30
expect_error "a missing prompt file" "option -prompt_file: cannot read $WORK/none.txt" \
  run_mpi 1 60 "$MPITRAIN" -mode generate -model_file "$M" -prompt_file "$WORK/none.txt"
expect_error "a training option" "option -lr" \
  run_mpi 1 60 "$MPITRAIN" -mode generate -model_file "$M" -prompt "a" -lr 0.1
"$MKDATA" synth "$WORK/flat.h5" 64 8 3 1 >/dev/null || bail "mkdata synth failed"
expect_ok "train an mlp" run_mpi 1 60 "$MPITRAIN" -model mlp -mlp_hidden 8 -data_train "$WORK/flat.h5" \
  -batch_size 16 -epochs 1 -log_every 0 -output_dir "$WORK/mlp"
expect_error "a model that is not a gpt" "-mode generate" \
  run_mpi 1 60 "$MPITRAIN" -mode generate -model_file "$WORK/mlp/model_final.h5" -prompt "a"
finish
