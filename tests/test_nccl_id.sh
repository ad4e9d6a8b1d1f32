#!/usr/bin/env bash
# NCCL unique id exchange (and the no-GPU failure path of communicator
# creation) at 2 and 4 ranks. Needs a CUDA build; no GPU.
. "$top_srcdir/tests/lib.sh"
if ! grep -q '^#define MT_HAVE_CUDA 1' "$top_builddir/config.h" 2>/dev/null; then
  echo "# SKIP: built without CUDA"
  exit 77
fi
make_work
need_bin "$top_builddir/tests/test_nccl_id"
for np in 2 4; do
  run_logged run_mpi "$np" 90 "$top_builddir/tests/test_nccl_id"
  if timed_out; then fail "test_nccl_id at $np ranks" "timed out (a hang)"
  elif [ "$LAST_RC" != 0 ]; then fail "test_nccl_id at $np ranks" "exit $LAST_RC"
  else pass "test_nccl_id at $np ranks"; fi
done
finish
