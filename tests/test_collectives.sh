#!/usr/bin/env bash
# The sharding collectives' checks of test_collectives at 2, 3 and 4 ranks.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$top_builddir/tests/test_collectives"
for np in 2 3 4; do
  run_logged run_mpi "$np" 120 "$top_builddir/tests/test_collectives"
  if timed_out; then fail "test_collectives at $np ranks" "timed out"
  elif [ "$LAST_RC" != 0 ]; then fail "test_collectives at $np ranks" "exit $LAST_RC"
  else pass "test_collectives at $np ranks"; fi
done
finish
