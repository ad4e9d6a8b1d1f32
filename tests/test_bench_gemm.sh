#!/usr/bin/env bash
# bench/bench_gemm.sh at small shapes: it builds bench/gemm_shapes.c (with
# src/nn/gemm_pack.c) the way it documents, every library's result at every
# shape passes gemm_shapes's check against a double reference (a wrong one
# fails the run), and the table has each shape of forward, input gradient
# and weight gradient with the model's GEMM time per step.
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
finish
