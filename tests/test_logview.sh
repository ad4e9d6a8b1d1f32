#!/usr/bin/env bash
# -log_view's flop column: the mlp, cnn and gpt log their GEMMs' and
# convolutions' flops (PetscLogFlops) inside mtForward, mtBackward and
# mtValidation. Each rank's count (-log_view :FILE:ascii_csv) equals the
# model's flops per sample, worked out here from the shapes, times the
# samples that rank computed, at 1 and 2 ranks, in fp64 and with 2 threads
# splitting the batch; the text table's flop column agrees to its 3 digits and its
# Mflop/s column is not zero. The epoch line's share of a core's peak: of
# one core's GEMM measured at the first epoch line by default, of
# -peak_gflops when given; a negative one refused.
# The kernel events (nn/trace.h: mtLinear, mtGemm, mtConv, mtPool, mtNorm,
# mtAttention, mtActivation, mtElementwise, mtLoss, mtEmbedding, mtConvert):
# each counts the calls its layers made, worked out here from the model and
# the steps; mtConvert appears under sp-amp only, and the per-thread models of
# -thread_split batch log none (PETSc logs from one thread).
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$MPITRAIN" "$MT_DATA" "$MKDATA"

# events: N_TRAIN samples per epoch, N_VAL validation samples; batches divide both
"$MKDATA" synth "$WORK/train.h5" 256 64 4 11 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/val.h5" 64 64 4 12 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/img.h5" 64 64 3 13 image >/dev/null || bail "mkdata synth image failed"
"$MT_DATA" text "$top_srcdir/README.md" -out "$WORK" -name txt -val_fraction 0.1 >/dev/null ||
  bail "mt-data text failed"

# csv_flops FILE EVENT RANK: the flops of EVENT on RANK in an ascii_csv log
csv_flops() { awk -F, -v e="$2" -v r="$3" '$2 == e && $3 == r { print $9 + 0 }' "$1"; }

# near A B REL: |A - B| <= REL * |B| (the csv prints 6 digits, the table 3)
near() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= r * (b < 0 ? -b : b)) }'; }

# check_csv NAME NP FILE FWD BWD VFWD: every rank's mtForward and mtBackward
# flops (FWD and BWD), and mtValidation's summed over the ranks: VFWD (one
# sample's forward) times the samples the last run says it evaluated
check_csv() {
  local name=$1 np=$2 f=$3 fwd=$4 bwd=$5 val r got sum=0 ok=1 why=
  val=$(last_output | sed -n 's/^epoch 1\/1 val\[0\] .*(\([0-9]*\) samples)$/\1/p')
  val=$((${val:-0} * $6))
  [ "$val" -gt 0 ] || { fail "$name" "no validation sample count in the output"; return; }
  for ((r = 0; r < np; r++)); do
    got=$(csv_flops "$f" mtForward $r)
    near "$got" "$fwd" 1e-5 || { ok=0; why+=" rank $r mtForward $got != $fwd;"; }
    got=$(csv_flops "$f" mtBackward $r)
    near "$got" "$bwd" 1e-5 || { ok=0; why+=" rank $r mtBackward $got != $bwd;"; }
    got=$(csv_flops "$f" mtValidation $r)
    sum=$(awk -v s="$sum" -v g="${got:-0}" 'BEGIN { printf "%.17g", s + g }')
  done
  near "$sum" "$val" 1e-5 || { ok=0; why+=" mtValidation over the ranks $sum != $val;"; }
  [ $ok = 1 ] && pass "$name" || fail "$name" "$why"
}

# check_table NAME EVENT FLOPS: the text table's row: flop column (the max
# over ranks) FLOPS to 3 digits, Mflop/s (the last column) above zero
check_table() {
  local row flop mf
  row=$(last_output | grep -E "^$2 ")
  flop=$(echo "$row" | awk '{ print $6 }')
  mf=$(echo "$row" | awk '{ print $NF }')
  if ! near "$flop" "$3" 5e-3; then
    fail "$1" "$2's flop column '$flop', expected $3"
  elif ! awk -v m="$mf" 'BEGIN { exit !(m + 0 > 0) }'; then
    fail "$1" "$2's Mflop/s '$mf' is not above zero"
  else
    pass "$1"
  fi
}

# run NAME NP THREADS LOGVIEW ARGS...: a 1-epoch run with -log_view [LOGVIEW]
run() {
  local name=$1 np=$2 thr=$3 backend=sp lv=(-log_view)
  [ -n "$4" ] && lv+=("$4")
  shift 4
  [ "$np" -gt 1 ] && backend=ddp
  run_logged run_mpi "$np" 120 "$MPITRAIN" -backend $backend -threads "$thr" -epochs 1 \
    -log_every 0 -output_dir "$WORK/$name" "${lv[@]}" "$@"
  [ "$LAST_RC" = 0 ] && pass "run $name" || fail "run $name" "exit $LAST_RC"
}

# ---- mlp 64 -> 96 -> 32 -> 4: forward 2 (64x96 + 96x32 + 32x4) per sample;
# backward twice that but the first layer's (no input gradient)
mlp=(-model mlp -mlp_hidden 96,32 -data_train "$WORK/train.h5" -data_val "$WORK/val.h5"
  -batch_size 16 -val_batch_size 16)
fwd=$((2 * (64 * 96 + 96 * 32 + 32 * 4)))
bwd=$((2 * 64 * 96 + 4 * (96 * 32 + 32 * 4)))
run mlp1 1 1 "" "${mlp[@]}"
check_table "mlp 1 rank: mtForward row" mtForward $((256 * fwd))
check_table "mlp 1 rank: mtBackward row" mtBackward $((256 * bwd))
check_table "mlp 1 rank: mtValidation row" mtValidation $((64 * fwd))
# the epoch line's share: "G GFLOP/s, S% of T (WHAT P x C cores)", T the
# cores' peak P x C and S = 100 G / T to the printed digits (G and S to 0.1;
# T and a measured P to 1: then T's rounding too)
# check_peak NAME WHAT CORES [EXACT_T]: the last run's first epoch line
check_peak() {
  local line g sh tot pk
  line=$(last_output | grep -E '^epoch 1/1 time:.* GFLOP/s, ' | head -n 1)
  read -r g sh tot pk < <(echo "$line" |
    sed -n "s/.*; \([0-9.]*\) GFLOP\/s, \([0-9.]*\)% of \([0-9]*\) ($2 \([0-9.]*\)\( GFLOP\/s\)\{0,1\} x $3 cores).*/\1 \2 \3 \4/p")
  if [ -z "$pk" ] || ! awk -v p="$pk" 'BEGIN { exit !(p + 0 > 0) }'; then
    fail "$1" "no '($2 N x $3 cores)' with N > 0 in '$line'"
  elif [ -n "${4:-}" ] && [ "$tot" != "$4" ]; then
    fail "$1" "the cores' peak is $tot, expected $4"
  elif ! awk -v t="$tot" -v p="$pk" -v c="$3" 'BEGIN { d = t - p * c; exit !(d <= 0.5 * c + 0.5 && d >= -0.5 * c - 0.5) }'; then
    fail "$1" "the cores' peak $tot is not $pk x $3"
  elif ! awk -v g="$g" -v s="$sh" -v t="$tot" -v x="${4:+1}" \
    'BEGIN { d = 100 * g / t - s; e = 5.1 / t + 0.051 + (x ? 0 : 0.51 * s / t); exit !(d <= e && d >= -e) }'; then
    fail "$1" "share $sh% is not 100 x $g / $tot"
  else
    pass "$1"
  fi
}
check_peak "epoch line: the share of one core's GEMM measured on this machine" \
  "one core's GEMM measured at" 1
run mlppk 1 1 "" "${mlp[@]}" -peak_gflops 1
check_peak "epoch line: the share of -peak_gflops 1" "-peak_gflops" 1 1
expect_output "epoch line: -peak_gflops 1 is the peak" "(-peak_gflops 1 x 1 cores)"
run mlppk2 2 1 "" "${mlp[@]}" -peak_gflops 1
check_peak "epoch line, 2 ranks: the share of -peak_gflops 1 x 2 cores" "-peak_gflops" 2 2
expect_error "-peak_gflops -1 refused, naming the option" "-peak_gflops" "$MPITRAIN" "${mlp[@]}" \
  -peak_gflops -1 -output_dir "$WORK/pkbad"
run mlp2 2 1 ":$WORK/mlp2.csv:ascii_csv" "${mlp[@]}"
check_peak "epoch line, 2 ranks: one core's GEMM measured x 2 cores" "one core's GEMM measured at" 2
check_csv "mlp 2 ranks: flops per rank" 2 "$WORK/mlp2.csv" $((128 * fwd)) $((128 * bwd)) $fwd
run mlp64 1 1 ":$WORK/mlp64.csv:ascii_csv" "${mlp[@]}" -precision fp64
check_csv "mlp fp64: flops" 1 "$WORK/mlp64.csv" $((256 * fwd)) $((256 * bwd)) $fwd
# two threads split each batch: the same counts, backward in its own event
run mlp2t 1 2 ":$WORK/mlp2t.csv:ascii_csv" "${mlp[@]}"
check_csv "mlp 2 threads: flops" 1 "$WORK/mlp2t.csv" $((256 * fwd)) $((256 * bwd)) $fwd
# the threads' forwards, then their backwards: the model is the same
run_logged "$MKDATA" compare "$WORK/mlp2t/model_final.h5" "$WORK/mlp1/model_final.h5" 1e-5
[ "$LAST_RC" = 0 ] && pass "mlp: 2 threads' model == 1 thread's" || fail "mlp: 2 threads' model == 1 thread's" "differ"

# ---- cnn on 8x8 images, channels 4,6 (3x3, padding 1; each block pools
# by 2), hidden 16, 3 classes: convolutions 2 OC OH OW IC 9, then 24->16->3
cnn=(-model cnn -cnn_channels 4,6 -cnn_hidden 16 -data_train "$WORK/img.h5" -data_val "$WORK/img.h5"
  -batch_size 8 -val_batch_size 16)
c1=$((2 * 4 * 8 * 8 * 1 * 9)) c2=$((2 * 6 * 4 * 4 * 4 * 9)) lin=$((2 * (24 * 16 + 16 * 3)))
fwd=$((c1 + c2 + lin))
bwd=$((c1 + 2 * c2 + 2 * lin)) # the first convolution: no input gradient
run cnn1 1 1 "" "${cnn[@]}"
check_table "cnn 1 rank: mtForward row" mtForward $((64 * fwd))
check_table "cnn 1 rank: mtBackward row" mtBackward $((64 * bwd))
run cnn2 2 1 ":$WORK/cnn2.csv:ascii_csv" "${cnn[@]}"
check_csv "cnn 2 ranks: flops per rank" 2 "$WORK/cnn2.csv" $((32 * fwd)) $((32 * bwd)) $fwd
run cnn64 1 1 ":$WORK/cnn64.csv:ascii_csv" "${cnn[@]}" -precision fp64
check_csv "cnn fp64: flops" 1 "$WORK/cnn64.csv" $((64 * fwd)) $((64 * bwd)) $fwd

# ---- gpt: L 2, C 32, T 16, byte vocabulary V 256; per token the GEMMs touch
# 12 L C^2 + V C weights (the tied head) and attention 2 T C per layer
# (causal half of Q K^T and A V): forward 2 x that, backward twice the forward
gpt=(-model gpt -gpt_layers 2 -gpt_heads 2 -gpt_embd 32 -gpt_block 16 -data_train "$WORK/txt-train.h5"
  -data_val "$WORK/txt-val.h5" -batch_size 4 -max_train_steps_per_epoch 3 -max_val_steps_per_epoch 1
  -val_batch_size 8)
fwd=$((16 * (2 * (2 * 12 * 32 * 32 + 256 * 32) + 2 * 2 * 16 * 32)))
bwd=$((2 * fwd))
run gpt1 1 1 "" "${gpt[@]}"
check_table "gpt 1 rank: mtForward row" mtForward $((12 * fwd))
check_table "gpt 1 rank: mtBackward row" mtBackward $((12 * bwd))
check_table "gpt 1 rank: mtValidation row" mtValidation $((8 * fwd))
run gpt2 2 1 ":$WORK/gpt2.csv:ascii_csv" "${gpt[@]}"
check_csv "gpt 2 ranks: flops per rank" 2 "$WORK/gpt2.csv" $((6 * fwd)) $((6 * bwd)) $fwd
run gpt64 1 1 ":$WORK/gpt64.csv:ascii_csv" "${gpt[@]}" -precision fp64
check_csv "gpt fp64: flops" 1 "$WORK/gpt64.csv" $((12 * fwd)) $((12 * bwd)) $fwd
# ---- kernel events
# csv_count FILE EVENT RANK: the calls of EVENT on RANK (0 when not logged)
csv_count() { awk -F, -v e="$2" -v r="$3" '$2 == e && $3 == r { n = $4 + 0 } END { print n + 0 }' "$1"; }
# check_counts NAME FILE EVENT=COUNT...: rank 0's counts
check_counts() {
  local name=$1 f=$2 kv ok=1 why= got
  shift 2
  for kv in "$@"; do
    got=$(csv_count "$f" "${kv%%=*}" 0)
    [ "$got" = "${kv#*=}" ] || { ok=0; why+=" ${kv%%=*} $got, expected ${kv#*=};"; }
  done
  [ $ok = 1 ] && pass "$name" || fail "$name" "$why"
}
# mlp: 16 steps of 16; a step runs 3 linear layers forward and back (6
# calls), 3 + 5 GEMMs (the first layer has no input gradient) and the loss
# twice; validation evaluates its 64 samples as one piece: 3 layers, 3 GEMMs,
# one loss
run kmlp 1 1 ":$WORK/kmlp.csv:ascii_csv" "${mlp[@]}"
check_counts "mlp: kernel events" "$WORK/kmlp.csv" mtLinear=$((16 * 6 + 3)) \
  mtGemm=$((16 * 8 + 3)) mtLoss=$((16 * 2 + 1)) mtConvert=0 mtAttention=0
run kmlpamp 1 1 ":$WORK/kmlpamp.csv:ascii_csv" "${mlp[@]}" -backend sp-amp -amp_dtype bf16
check_counts "mlp sp-amp: the same layers and GEMMs" "$WORK/kmlpamp.csv" mtLinear=$((16 * 6 + 3)) \
  mtGemm=$((16 * 8 + 3)) mtLoss=$((16 * 2 + 1))
[ "$(csv_count "$WORK/kmlpamp.csv" mtConvert 0)" -gt 0 ] && pass "mlp sp-amp: mtConvert logged" ||
  fail "mlp sp-amp: mtConvert logged" "no bf16 conversion in the log"
run kmlp2b 1 2 ":$WORK/kmlp2b.csv:ascii_csv" "${mlp[@]}" -thread_split batch
check_counts "mlp, 2 threads splitting the batch: no kernel events in the threads" \
  "$WORK/kmlp2b.csv" mtForward=16 mtLinear=0 mtGemm=0 mtLoss=0 # validation in the threads too
# cnn: 8 steps of 8; 2 convolutions, 2 pools and 2 linear layers each way,
# GEMMs 2 + 4 (the first linear layer feeds the convolutions its gradient),
# the loss twice; validation one piece of 64
run kcnn 1 1 ":$WORK/kcnn.csv:ascii_csv" "${cnn[@]}"
check_counts "cnn: kernel events" "$WORK/kcnn.csv" mtConv=$((8 * 4 + 2)) mtPool=$((8 * 4 + 2)) \
  mtLinear=$((8 * 4 + 2)) mtGemm=$((8 * 6 + 2)) mtLoss=$((8 * 2 + 1))
# gpt, fp64 too: 3 steps; per pass 2 layers (attention, GELU, 2 layer norms,
# 4 linear layers each), the final layer norm, the head (a linear layer),
# embedding and loss; each linear layer 1 GEMM forward and 2 back; validation
# 8 sequences of 16 = 2 pieces of 64 tokens
gk=(mtAttention=$((3 * 4 + 2 * 2)) mtActivation=$((3 * 4 + 2 * 2)) mtNorm=$((3 * 10 + 2 * 5))
  mtLinear=$((3 * 18 + 2 * 9)) mtGemm=$((3 * 27 + 2 * 9)) mtEmbedding=$((3 * 2 + 2))
  mtLoss=$((3 * 2 + 2)))
run kgpt 1 1 ":$WORK/kgpt.csv:ascii_csv" "${gpt[@]}"
check_counts "gpt: kernel events" "$WORK/kgpt.csv" "${gk[@]}"
check_counts "gpt fp64: kernel events" "$WORK/gpt64.csv" "${gk[@]}"
finish
