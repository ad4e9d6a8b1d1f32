#!/usr/bin/env bash
# The shared-memory all-reduce's checks (test_shm_reduce) at 1, 2, 3 and 4
# ranks on this machine: one node, every rank summing a slice. (Across 2
# simulated hosts x 2 ranks: test_multihost.sh.)
. "$top_srcdir/tests/lib.sh"
make_work
need_bin "$top_builddir/tests/test_shm_reduce"
for np in 1 2 3 4; do
  run_logged run_mpi "$np" 120 "$top_builddir/tests/test_shm_reduce"
  if timed_out; then fail "test_shm_reduce at $np ranks" "timed out"
  elif [ "$LAST_RC" != 0 ]; then fail "test_shm_reduce at $np ranks" "exit $LAST_RC"
  else pass "test_shm_reduce at $np ranks ($(grep -c '^ok' "$LAST_LOG") checks)"; fi
done
finish
