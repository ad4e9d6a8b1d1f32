#!/usr/bin/env bash
# The loops written for vector code (src/nn/fastmath.h: mt_vexp, no calls,
# no branches) are vector code in the built library: each function below
# must hold a packed shift by 23 (pslld $0x17, the 2^n of mt_vexp on a
# vector register; its scalar form is a shl on a general register).
#
# GCC 12 vectorised them on AVX-512 (with its masks) but not on AVX2 nor
# under -march=znver4: the clamps of mt_vexp became branches there, and
# with -ftrapping-math (GCC's default) the arithmetic inside them "could
# trap", so no if-conversion and no vector loop ("control flow in loop",
# -fopt-info-vec-missed). Makefile.am's -fno-trapping-math (mpitrain reads
# no floating-point exception flags) lets them vectorise: the gpt at 1
# thread on an AVX2 EPYC ran its GELU in 12 ms a step against 76, with
# the same bits (bench/README.md, "GELU and softmax in vector code").
#
# Skipped off x86-64, without objdump, in a sanitizer build (its
# instrumentation keeps some loops from vector code: tests/test_bits.sh) and
# in one without -O2 or -O3.
. "$top_srcdir/tests/lib.sh"
lib=${MPITRAIN_LIB:-$top_builddir/libmpitrain.a}
if [ "$(uname -m)" != x86_64 ]; then
  echo "# SKIP: not x86-64 ($(uname -m))"
  exit 77
fi
if ! command -v objdump >/dev/null 2>&1; then
  echo "# SKIP: no objdump"
  exit 77
fi
cflags=$(sed -n 's/^CFLAGS = //p' "$top_builddir/Makefile" 2>/dev/null)
case " $cflags " in
*-fsanitize*)
  echo "# SKIP: a sanitizer build"
  exit 77
  ;;
*" -O2 "* | *" -O3 "* | *" -Ofast "*) ;;
*)
  echo "# SKIP: CFLAGS without -O2 or -O3 ($cflags): GCC vectorises from -O2"
  exit 77
  ;;
esac
[ -f "$lib" ] || bail "missing $lib (run make first)"
make_work
objdump -d --no-show-raw-insn "$lib" >"$WORK/lib.s" 2>/dev/null || bail "objdump -d $lib failed"
# function name (its OpenMP bodies as NAME._omp_fn.N too) -> packed shifts by 23
awk '/^[0-9a-f]+ <.*>:$/ { fn = substr($2, 2, length($2) - 3); sub(/\._omp_fn\.[0-9]+$/, "", fn) }
     /pslld +\$0x17,/ { n[fn]++ }
     END { for (f in n) print f, n[f] }' "$WORK/lib.s" >"$WORK/shifts"
for fn in mt_gelu_forward mt_gelu_forward_ex mt_gelu_backward_ex att_softmax mt_xent_ignore_forward; do
  if grep -q "^$fn " "$WORK/shifts"; then
    pass "$fn: mt_vexp in vector code"
  elif grep -q "<$fn>:" "$WORK/lib.s"; then
    fail "$fn: mt_vexp in vector code" "no packed shift by 23 in $fn (scalar loop: check -fno-trapping-math, -fopt-info-vec-missed)"
  else
    fail "$fn: mt_vexp in vector code" "no function $fn in $lib"
  fi
done
finish
