#!/usr/bin/env bash
# Checkpoint files (tests/test_checkpoint.c) at 1 to 4 ranks:
#  - written replicated and sharded (uneven, overlapping, empty shards) at 4
#    ranks, read bit-exact at 1, 2 and 3 (and written at 3, read at 4 and 2);
#  - truncated file, flipped byte, missing tensor, shape and format
#    mismatches: clear errors on every rank, no hang;
#  - latest, keep K (this run's files only: an unreadable one is left
#    alone, named once), fallback past damaged checkpoints, stale .tmp files;
#  - a rank SIGKILLed in the middle of a save leaves the previous
#    checkpoint loadable, at another rank count too.
. "$top_srcdir/tests/lib.sh"
make_work
T=$top_builddir/tests/test_checkpoint
need_bin "$T"
D=$WORK/ckpt
D3=$WORK/ckpt3
mkdir -p "$D" "$D3" || bail "mkdir failed"

expect_ok "unit checks (selections, checksum, state)" run_mpi 1 60 "$T" unit "$D"

expect_ok "write at 4 ranks, replicated and sharded" run_mpi 4 120 "$T" write "$D"
for np in 1 2 3; do
  expect_ok "read at $np ranks what 4 wrote, bit-exact" run_mpi "$np" 120 "$T" read "$D" 4
done
expect_ok "write at 3 ranks (one shard empty)" run_mpi 3 120 "$T" write "$D3"
for np in 4 2; do
  expect_ok "read at $np ranks what 3 wrote, bit-exact" run_mpi "$np" 120 "$T" read "$D3" 3
done

for np in 1 3 4; do
  expect_ok "damaged and incompatible files at $np ranks" run_mpi "$np" 120 "$T" errors "$D"
done

for np in 1 2 3; do
  rm -rf "$D/ck"
  expect_ok "latest, keep K and fallback at $np ranks" run_mpi "$np" 120 "$T" dir "$D"
  expect_output "the fallback warning names the damaged checkpoint" \
    "mpitrain: warning: skipping a damaged checkpoint: checkpoint $D/ck/sub/ckpt-50.h5: tensor /momentum_buffer/embed.weight fails its checksum"
  n=$(last_output | grep -c "warning: $D/ck/sub/ckpt-40.h5 is not a readable checkpoint: it is never removed")
  [ "$n" = 1 ] && pass "pruning leaves the truncated ckpt-40.h5 alone, warning once" \
    || fail "pruning leaves the truncated ckpt-40.h5 alone, warning once" "$n warnings"
done

# kill -9 of one rank in the middle of a save. mpirun then exits 137 like
# a timeout does, so the elapsed time tells them apart.
NF=$((1 << 23))
t0=$SECONDS
run_logged run_mpi 2 120 "$T" kill "$D" "$NF"
if [ $((SECONDS - t0)) -ge 115 ]; then
  fail "a rank killed during a save" "timed out (exit $LAST_RC): a hang"
elif [ "$LAST_RC" = 0 ]; then
  fail "a rank killed during a save" "exit 0: the kill did not happen"
elif ! last_output | grep -q "killing itself while"; then
  fail "a rank killed during a save" "no kill reported (exit $LAST_RC)"
else
  pass "a rank killed during a save"
fi
if [ -f "$D/kill/ckpt-2.h5.tmp" ] && [ ! -e "$D/kill/ckpt-2.h5" ]; then
  pass "the kill left only ckpt-2.h5.tmp, not ckpt-2.h5"
else
  fail "the kill left only ckpt-2.h5.tmp, not ckpt-2.h5" "$(ls "$D/kill" | tr '\n' ' ')"
fi
if [ "$(cat "$D/kill/latest" 2>/dev/null)" = "ckpt-1.h5" ]; then
  pass "latest still names ckpt-1.h5"
else
  fail "latest still names ckpt-1.h5" "latest: $(cat "$D/kill/latest" 2>&1)"
fi
expect_ok "after the kill, step 1 loads at 3 ranks" run_mpi 3 120 "$T" afterkill "$D" "$NF"
expect_output "it is step 1" "newest good checkpoint after the kill: step 1"
expect_ok "after the kill, step 1 loads at 1 rank and the next save cleans up" \
  run_mpi 1 120 "$T" afterkill "$D" "$NF" save
finish
