#!/usr/bin/env bash
# scripts/gpu_run.sh's CPU steps (cpuunits, attn, dnnlv, swap), so that they work
# when a GPU node is lent: a bundle as gpu_bundle.sh lays it out, made here
# from this (CPU) build, the system's OpenMPI standing in for the bundled one
# (usr -> /usr), run through gpu_run.sh from the source tree.
. "$top_srcdir/tests/lib.sh"
make_work
command -v xz >/dev/null || { echo "# SKIP: no xz to pack the bundle"; exit 77; }
[ -r /usr/share/common-licenses/GPL-3 ] ||
  { echo "# SKIP: no /usr/share/common-licenses/GPL-3 (dnnlv's text)"; exit 77; }
progs="mpitrain mt-data tests/mkdata tests/test_gemm_matmul tests/test_amp tests/test_layout tests/test_bf16_layers
  bench/attn_parts"
B=$WORK/bundle
mkdir -p "$B/build/tests" "$B/build/bench" "$B/lib" || bail "mkdir failed"
for p in $progs; do
  [ -x "$top_builddir/$p" ] || bail "no $top_builddir/$p (make check builds it)"
  cp "$top_builddir/$p" "$B/build/$p" || bail "cp $p failed"
done
# gemm_shapes as gpu_bundle.sh builds it (bench/lib.sh, not make)
(. "$top_srcdir/bench/lib.sh" && gemm_shapes_build "$B/build/bench/gemm_shapes") ||
  bail "cannot build bench/gemm_shapes"
ln -s /usr "$B/usr" || bail "ln failed"
tar -C "$B" -cJf "$WORK/b.tar.xz" . || bail "tar failed"
cd "$top_srcdir" || bail "cd $top_srcdir failed"
expect_ok "gpu_run.sh cpuunits attn dnnlv swap" with_env TMPDIR="$WORK" timeout 600 \
  bash scripts/gpu_run.sh "$WORK/b.tar.xz" cpuunits attn dnnlv swap
for t in test_gemm_matmul test_amp test_layout test_bf16_layers; do
  expect_output "cpuunits: $t ran" "$t: "
  if last_output | grep -Eq "^$t: [0-9]+ checks, 0 failed"; then pass "cpuunits: $t, 0 failed"
  else fail "cpuunits: $t, 0 failed" "no '$t: N checks, 0 failed' line"; fi
done
if last_output | grep -Eq '^layer fwd( +[0-9.]+){5}$'; then pass "attn: its table"
else fail "attn: its table" "no 'layer fwd' row"; fi
# the cnn's convolutions are primitives on every CPU; the mlp's and gpt's
# GEMMs only where oneDNN 2.6 has brgemm matmul kernels (AVX-512 with BW,
# VL and DQ): elsewhere the step says that none ran
brgemm=1
for f in avx512f avx512bw avx512vl avx512dq; do
  grep -qw "$f" /proc/cpuinfo || brgemm=0
done
for m in mlp cnn gpt; do
  if last_output | grep -A1 -- "^--- $m sp-amp bf16" | grep -Eq '^ +[0-9.]+ +[0-9.]+  (matmul|convolution|reorder) '; then
    pass "dnnlv: $m's primitives"
  elif [ $brgemm = 0 ] && [ $m != cnn ] &&
    last_output | grep -A1 -- "^--- $m sp-amp bf16" | grep -q '^    (no oneDNN primitive ran'; then
    pass "dnnlv: $m's GEMMs outside oneDNN's primitives (no AVX-512 here), said so"
  else fail "dnnlv: $m's primitives" "no primitive under '--- $m'"; fi
done
# swap: all 14 shapes timed (the bf16 ones at least emulated) and the limit
if [ "$(last_output | grep -Ec '^  gemm[0-9]+b? +[0-9]+ +[0-9]+ +[0-9]+  NT .*[0-9]\.[0-9] ')" = 14 ] &&
  last_output | grep -q '^LIMIT ms_per_step='; then pass "swap: its 14 shapes timed"
else fail "swap: its 14 shapes timed" "not 14 timed rows and a LIMIT line"; fi
n=$(last_output | grep -c '^=== exit 0$')
if [ "$n" = 7 ]; then pass "seven steps (four unit tests, attn, dnnlv, swap), each exit 0"
else fail "seven steps (four unit tests, attn, dnnlv, swap), each exit 0" "$n"; fi
finish
