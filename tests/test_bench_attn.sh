#!/usr/bin/env bash
# bench/attn_parts (one attention layer's time by part, fp32 against bf16)
# at a small shape: it runs, its bf16 layer matches fp32 (its own check: a
# wrong one exits 1), and it prints a row for each part with a figure for
# each policy; bad options are refused.
. "$top_srcdir/tests/lib.sh"
make_work
ATTN=${ATTN_PARTS:-$top_builddir/bench/attn_parts}
need_bin "$ATTN"
expect_ok "attn_parts runs at a small shape, bf16 checked against fp32" with_env OMP_NUM_THREADS=1 \
  timeout 120 "$ATTN" -B 2 -T 16 -C 32 -NH 2 -reps 1
expect_output "its header says the shape and the check" "B=2 T=16 C=32 NH=2"
num='[0-9]+\.[0-9]{3}'
for row in "layer fwd" "layer bwd" "products"; do
  if last_output | grep -Eq "^$row +$num +$num +$num +$num +$num\$"; then
    pass "row '$row': fp32, bf16 dense, strided, widened, converted"
  else fail "row '$row': fp32, bf16 dense, strided, widened, converted" "no such row"; fi
done
if last_output | grep -Eq "^att conversions +- +- +- +- +$num\$"; then pass "row 'att conversions'"
else fail "row 'att conversions'" "no such row"; fi
expect_fail "C no multiple of NH is refused" "usage" "$ATTN" -C 30 -NH 4
expect_fail "an unknown option is refused" "unknown option" "$ATTN" -X 1
finish
