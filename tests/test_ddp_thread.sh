#!/usr/bin/env bash
# ddp's communication thread while a rank is late (test_ddp_thread) at 2
# and 3 ranks: the sums, and a thread that sleeps instead of polling.
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$top_builddir/tests/test_ddp_thread"
for np in 2 3; do
  run_logged run_mpi "$np" 120 "$top_builddir/tests/test_ddp_thread"
  if timed_out; then fail "test_ddp_thread at $np ranks" "timed out"
  elif [ "$LAST_RC" != 0 ]; then fail "test_ddp_thread at $np ranks" "exit $LAST_RC: $(grep FAIL "$LAST_LOG" | head -n 3)"
  else pass "test_ddp_thread at $np ranks ($(grep -c '^ok' "$LAST_LOG") checks; $(grep '^# mpi' "$LAST_LOG"))"; fi
done
finish
