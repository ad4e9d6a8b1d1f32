#!/usr/bin/env bash
# bench/bench_gemm.sh at small shapes: it builds bench/gemm_shapes.c (with
# src/nn/gemm_pack.c) the way it documents, every library's result at every
# shape passes gemm_shapes's check against a double reference (a wrong one
# fails the run), and the table has each shape of forward, input gradient
# and weight gradient with the model's GEMM time per step. Then
# mpitrain -log_gemm_shapes: the record of a small mlp's step (1 and 2
# threads, 2 ranks, bf16) and a small cnn's is the list derived by hand, and
# gemm_shapes -shapes times every line of it (a wrong result fails it).
. "$top_srcdir/tests/lib.sh"
make_work
command -v "${CC:-cc}" >/dev/null || bail "no C compiler for bench_gemm.sh"
bench=("$top_srcdir/bench/bench_gemm.sh" -r 2 --batch 5,8 --in 65 --hidden 70,33 --out 3 --ms 1)
expect_ok "bench_gemm.sh runs at small shapes, every result checked" with_env TMPDIR="$WORK" \
  timeout 300 "${bench[@]}"
expect_output "a table per batch" "batch 8, GFLOP/s"
row() { last_output | grep -Eq "^$2"; }
# hidden 70,33: layer 0 has no input gradient, layers 1 and 2 do
for s in fwd0 dw0 fwd1 dx1 dw1 fwd2 dx2 dw2; do
  if row "" "$s +[0-9]"; then pass "shape $s in the table"; else fail "shape $s in the table" "no row $s"; fi
done
if row "" "dx0 "; then fail "no input gradient of layer 0" "a row dx0"; else pass "no input gradient of layer 0"; fi
if row "" "x 2:sgemm +1\.000 "; then pass "model GEMM time per step over dnnl_sgemm's"; else
  fail "model GEMM time per step over dnnl_sgemm's" "no 'x 2:sgemm 1.000' row"; fi
# our kernel runs where the CPU has AVX2 and FMA
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  if last_output | grep -q " 2:pack"; then pass "our packed kernel beside the libraries"; else
    fail "our packed kernel beside the libraries" "no 2:pack column on an AVX2 machine"; fi
fi
expect_fail "-r 0 is refused" "not a positive number" "${bench[0]}" -r 0

# ---- -log_gemm_shapes: a step's GEMMs recorded by mpitrain, timed by gemm_shapes -shapes
need_bin "$MPITRAIN" "$MKDATA"
"$MKDATA" synth "$WORK/flat.h5" 200 10 3 21 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/img.h5" 100 64 3 5 image >/dev/null || bail "mkdata synth image failed"
run=(-epochs 1 -max_train_steps_per_epoch 3 -log_every 0 -plot 0 -checkpoint_at_end 0)
mlp=(-model mlp -mlp_hidden 16,8 -data_train "$WORK/flat.h5" -batch_size 32 "${run[@]}")
shapes() { grep -v '^#' "$1" | sort; }
same_shapes() { # NAME FILE WANT
  if [ -f "$2" ] && [ "$(shapes "$2")" = "$(printf '%s\n' "$3" | sort)" ]; then pass "$1"; else
    fail "$1" "record differs: $(diff <(printf '%s\n' "$3" | sort) <(shapes "$2" 2>&1) | tr '\n' ' ')"; fi
}
# layers 10 -> 16 -> 8 -> 3: forward X W^T ('N','T': B x OC x IC, beta 0),
# input gradient dY W ('N','N': B x IC x OC, beta 0: the layer writes it;
# none into the input), weight gradient dY^T X ('T','N': OC x IC x B, beta
# 0: the mlp writes the step's gradients, mt_model_ops.sets_grads)
mlp_want() { # B PRECISION COUNT
  printf '%s\n' "gemm N T $1 16 10 0 $2 $3" "gemm N T $1 8 16 0 $2 $3" "gemm N T $1 3 8 0 $2 $3" \
    "gemm N N $1 8 3 0 $2 $3" "gemm T N 3 8 $1 0 $2 $3" "gemm N N $1 16 8 0 $2 $3" \
    "gemm T N 8 16 $1 0 $2 $3" "gemm T N 16 10 $1 0 $2 $3"
}
expect_ok "mlp: -log_gemm_shapes runs" run_mpi 1 120 "$MPITRAIN" "${mlp[@]}" -threads 1 \
  -output_dir "$WORK/o1" -log_gemm_shapes "$WORK/mlp.txt"
same_shapes "mlp: the record is the step's GEMMs derived by hand" "$WORK/mlp.txt" "$(mlp_want 32 fp32 1)"
# -thread_split batch: each of 2 threads its 16 rows, every thread's calls counted
expect_ok "mlp 2 threads: -log_gemm_shapes runs" run_mpi 1 120 "$MPITRAIN" "${mlp[@]}" -threads 2 \
  -thread_split batch -output_dir "$WORK/o2" -log_gemm_shapes "$WORK/mlp2t.txt"
same_shapes "mlp 2 threads: 16 rows, 2 calls each" "$WORK/mlp2t.txt" "$(mlp_want 16 fp32 2)"
# ddp on 2 ranks: rank 0's 16 rows
expect_ok "mlp ddp 2 ranks: -log_gemm_shapes runs" run_mpi 2 120 "$MPITRAIN" "${mlp[@]}" -threads 1 \
  -backend ddp -output_dir "$WORK/o3" -log_gemm_shapes "$WORK/mlp2r.txt"
same_shapes "mlp ddp 2 ranks: rank 0's 16 rows" "$WORK/mlp2r.txt" "$(mlp_want 16 fp32 1)"
# bf16 autocast: the same GEMMs, recorded in bf16
expect_ok "mlp sp-amp: -log_gemm_shapes runs" run_mpi 1 120 "$MPITRAIN" "${mlp[@]}" -threads 1 \
  -backend sp-amp -output_dir "$WORK/o4" -log_gemm_shapes "$WORK/amp.txt"
same_shapes "mlp sp-amp: bf16 GEMMs" "$WORK/amp.txt" "$(mlp_want 32 bf16 1)"
# cnn on 8x8 images, channels 4, 6 (3x3, padding 1, each pooled 2x2), hidden 16,
# batch 8: convolutions as im2col GEMMs (M = B*OH*OW, N = OC, K = IC*3*3),
# no input gradient into the images
expect_ok "cnn: -log_gemm_shapes runs" run_mpi 1 120 "$MPITRAIN" -model cnn -cnn_channels 4,6 \
  -cnn_hidden 16 -data_train "$WORK/img.h5" -batch_size 8 "${run[@]}" -threads 1 \
  -output_dir "$WORK/o5" -log_gemm_shapes "$WORK/cnn.txt"
same_shapes "cnn: convolutions as their im2col GEMMs, derived by hand" "$WORK/cnn.txt" \
  "$(printf '%s\n' "conv_fwd N T 512 4 9 0 fp32 1" "conv_fwd N T 128 6 36 0 fp32 1" \
    "gemm N T 8 16 24 0 fp32 1" "gemm N T 8 3 16 0 fp32 1" "gemm N N 8 16 3 0 fp32 1" \
    "gemm T N 3 16 8 1 fp32 1" "gemm N N 8 24 16 0 fp32 1" "gemm T N 16 24 8 1 fp32 1" \
    "conv_bwd_data N N 128 36 6 0 fp32 1" "conv_bwd_w T N 6 36 128 1 fp32 1" \
    "conv_bwd_w T N 4 9 512 1 fp32 1")"
expect_error "a run of one step has no second to record" "-log_gemm_shapes" \
  run_mpi 1 120 "$MPITRAIN" "${mlp[@]}" -max_train_steps_per_epoch 1 -output_dir "$WORK/o6" \
  -log_gemm_shapes "$WORK/none.txt"
expect_error "fp64 is refused" "-log_gemm_shapes" run_mpi 1 120 "$MPITRAIN" "${mlp[@]}" \
  -precision fp64 -output_dir "$WORK/o7" -log_gemm_shapes "$WORK/none.txt"

# gemm_shapes -shapes: every recorded shape timed (checked against the double
# reference), the step's FLOPs and calls those of the record
. "$top_srcdir/bench/lib.sh"
gemm_shapes_build "$WORK/gs" || bail "gemm_shapes does not build"
gs() { with_env OMP_NUM_THREADS=1 timeout 300 "$WORK/gs" -reps 1 -ms 1 "$@"; }
limit_of() { # NAME RECORD: the table has each line of RECORD, LIMIT has its FLOPs and calls
  expect_ok "$1: gemm_shapes times the record" gs -shapes "$2"
  local n want got
  n=$(grep -vc '^#' "$2")
  got=$(last_output | grep -cE '^  (gemm|cfwd|cdat|cwgt)[0-9]+b? ')
  [ "$got" = "$n" ] && pass "$1: a row per recorded shape" || fail "$1: a row per recorded shape" "$got rows, $n shapes"
  want=$(grep -v '^#' "$2" | awk '{f += 2 * $4 * $5 * $6 * $9; c += $9} END {printf "%.6g %d", f * 1e-9, c}')
  got=$(last_output | sed -n 's/^LIMIT ms_per_step=[0-9.eE+-]* gflop=\([^ ]*\) shapes=[0-9]* calls=\([0-9]*\)$/\1 \2/p')
  [ "$got" = "$want" ] && pass "$1: LIMIT over the record's FLOPs and calls" ||
    fail "$1: LIMIT over the record's FLOPs and calls" "got '$got', want '$want'"
}
limit_of "mlp record" "$WORK/mlp.txt"
limit_of "mlp 2-thread record (counts)" "$WORK/mlp2t.txt"
limit_of "cnn record" "$WORK/cnn.txt"
limit_of "bf16 record" "$WORK/amp.txt"
if last_output | grep -E '^  gemm1b ' | grep -qE ' bf16(emu)?$'; then pass "bf16 shapes through a bf16 path"
else fail "bf16 shapes through a bf16 path" "gemm1b's best is not bf16 or bf16emu"; fi
printf 'gemm N T 4 4 4 0 fp32 1\ngemm N X 4 4 4 0 fp32 1\n' >"$WORK/bad.txt"
expect_fail "a malformed record is refused, naming its line" "bad.txt line 2: TA, TB" gs -shapes "$WORK/bad.txt"
finish
