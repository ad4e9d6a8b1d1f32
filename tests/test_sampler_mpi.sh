#!/usr/bin/env bash
# The sampler and loader checks of test_sampler at 1 to 4 ranks.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$top_builddir/tests/test_sampler"
for np in 1 2 3 4; do
  run_logged run_mpi "$np" 60 "$top_builddir/tests/test_sampler"
  if timed_out; then fail "test_sampler at $np ranks" "timed out"
  elif [ "$LAST_RC" != 0 ]; then fail "test_sampler at $np ranks" "exit $LAST_RC"
  else pass "test_sampler at $np ranks"; fi
done
finish
