#!/usr/bin/env bash
# make install: the library, the programs and the public header where a
# user's program includes it from, <mpitrain/mpitrain.h>; the example
# (its model's metrics through the public mixed-type all-gather included)
# compiles against the installed header alone.
. "$top_srcdir/tests/lib.sh"
make_work
prefix=$(sed -n 's/^prefix = //p' "$top_builddir/Makefile")
[ -n "$prefix" ] || bail "no prefix in $top_builddir/Makefile"
inst="$WORK/inst$prefix"
expect_ok "make install into a staging folder" make -C "$top_builddir" install DESTDIR="$WORK/inst"
[ -f "$inst/include/mpitrain/mpitrain.h" ] && pass "the header is include/mpitrain/mpitrain.h" ||
  fail "the header is include/mpitrain/mpitrain.h" "$(cd "$WORK/inst" && find . -name 'mpitrain.h')"
[ ! -e "$inst/include/mpitrain.h" ] && pass "no header at include/mpitrain.h" ||
  fail "no header at include/mpitrain.h" "installed there too"
[ -f "$inst/lib/libmpitrain.a" ] && [ -x "$inst/bin/mpitrain" ] && pass "library and program installed" ||
  fail "library and program installed" "missing under $inst"
# the mixed-type all-gather and the metrics op are public: the example uses them
grep -q 'int mt_allgather_values(MPI_Comm comm' "$inst/include/mpitrain/mpitrain.h" &&
  grep -q 'int (\*metrics)(mt_model \*const \*models' "$inst/include/mpitrain/mpitrain.h" &&
  pass "the installed header declares mt_allgather_values and the metrics op" ||
  fail "the installed header declares mt_allgather_values and the metrics op" "not found"
expect_ok "examples/user_model.c compiles against the installed header" \
  mpicc -std=gnu11 -fsyntax-only -I"$inst/include" "$top_srcdir/examples/user_model.c"
finish
