#!/bin/bash
# The bounded fuzzer (tests/fuzz.c) over option lines, data files and
# checkpoints: FUZZ_CASES cases (default 300, the `make check` share) of
# seed FUZZ_SEED (default 1), or as many as fit in FUZZ_MINUTES. Passes when
# no case crashed (a signal, a sanitizer report) or hung. A crash ends the
# fuzz process; this script reads the case from the work folder's progress
# file, reports it with its replay command and goes on after it.
#
# A long run by hand, in the AddressSanitizer + UBSan build of scripts/check.sh:
#   cd build-asan && make tests/fuzz tests/mkdata mpitrain mt-data &&
#   ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
#   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
#   FUZZ_CASES=10000 FUZZ_SEED=1 bash ../tests/fuzz.sh
# (FUZZ_MINUTES=30 instead of FUZZ_CASES for a timed run; FUZZ_FLIP_METADATA=1
# flips bytes of HDF5's own metadata too, where libhdf5 itself is not
# hardened: see tests/fuzz.c). Replay a case:
#   tests/fuzz --work DIR --corpus ../tests/fuzz_corpus/options.txt --seed S --case K
# with DIR a folder this script filled (KEEP_WORK=1 keeps it).
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

FUZZ=${FUZZ:-$top_builddir/tests/fuzz}
need_bin "$MPITRAIN" "$MKDATA" "$FUZZ"
make_work
unset PETSC_OPTIONS
CASES=${FUZZ_CASES:-300}
SEED=${FUZZ_SEED:-1}
MINUTES=${FUZZ_MINUTES:-0}
[ "$MINUTES" != 0 ] && CASES=${FUZZ_CASES:-100000000}
CORPUS=$top_srcdir/tests/fuzz_corpus/options.txt
# an OOM is not a memory bug: an allocation over 256 MiB (a mutated width,
# -cnn_channels 1000000) gets NULL, a clean "cannot allocate", not a report
# nor minutes of filling GiBs (the fuzzer's runs need a few MiB)
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}:allocator_may_return_null=1:malloc_limit_mb=256"

"$MKDATA" synth "$WORK/train.h5" 64 8 4 1 >/dev/null || bail "mkdata synth failed"
"$MKDATA" synth "$WORK/img.h5" 64 64 4 2 image >/dev/null || bail "mkdata synth image failed"
"$MKDATA" regress "$WORK/reg.h5" 64 8 2 3 >/dev/null || bail "mkdata regress failed"
if [ -x "$MT_DATA" ] && [ -r /usr/share/common-licenses/GPL-3 ]; then
  "$MT_DATA" text /usr/share/common-licenses/GPL-3 -out "$WORK/text" -name gpl -val_fraction 0.1 \
    >/dev/null && cp "$WORK"/text/gpl-train.h5 "$WORK/tokens.h5" 2>/dev/null
fi
# the seed checkpoint: the corpus's first line, checkpointed at its end
line=$(grep -v '^#' "$CORPUS" | head -1 | sed "s|@DIR@|$WORK|g")
# shellcheck disable=SC2086
run_logged run_mpi 1 "$TEST_TIMEOUT" "$MPITRAIN" $line -output_dir "$WORK/seed" -checkpoint_at_end 1
ckpt=$(ls "$WORK"/seed/checkpoints/ckpt-*.h5 2>/dev/null | head -1)
[ -n "$ckpt" ] && cp "$ckpt" "$WORK/ckpt.h5" || bail "the seed run wrote no checkpoint"

first=0 crashes=0 hangs=0 start=$(date +%s)
while [ "$first" -lt "$CASES" ]; do
  left=$((CASES - first))
  args=(--work "$WORK" --corpus "$CORPUS" --seed "$SEED" --first "$first" --cases "$left")
  [ "${FUZZ_FLIP_METADATA:-0}" = 1 ] && args+=(--flip_metadata 1)
  if [ "$MINUTES" != 0 ]; then
    m=$(awk -v m="$MINUTES" -v s=$(($(date +%s) - start)) 'BEGIN { print m - s / 60 }')
    awk -v m="$m" 'BEGIN { exit !(m > 0) }' || break
    args+=(--minutes "$m")
  fi
  rm -f "$WORK/progress"
  "$FUZZ" "${args[@]}" 2>"$WORK/fuzz.err"
  rc=$?
  summary=$(grep '^fuzz: seed' "$WORK/fuzz.err")
  [ "$rc" = 0 ] && [ -n "$summary" ] && break
  k=$(awk '{ print $2 }' "$WORK/progress" 2>/dev/null)
  [ -n "$k" ] || bail "fuzz exited $rc before its first case: $(tail -5 "$WORK/fuzz.err")"
  if [ "$rc" = 124 ]; then hangs=$((hangs + 1)); what=hang; else crashes=$((crashes + 1)); what=crash; fi
  LAST_LOG=$WORK/fuzz.err # fail() shows its end; the report's head and frames here
  fail "case $k of seed $SEED: $what (exit $rc); replay: tests/fuzz --work DIR --corpus $CORPUS --seed $SEED --case $k" \
    "$(grep -E 'ERROR: AddressSanitizer|runtime error|HANG|SUMMARY' "$WORK/fuzz.err" | head -3)"
  grep -E '^ +#[0-9]+ 0x' "$WORK/fuzz.err" | head -12 | sed 's/^/#   | /'
  cp "$WORK/fuzz.err" "$WORK/finding-$k.err"
  first=$((k + 1))
done
ran=$((first + $(echo "$summary" | sed -n 's/.*: \([0-9]*\) cases,.*/\1/p')))
[ -n "$summary" ] || ran=$first
echo "# $summary"
echo "# fuzz total: seed $SEED, $ran cases, $crashes crashes, $hangs hangs"
if [ "$crashes" = 0 ] && [ "$hangs" = 0 ]; then pass "fuzz: $ran cases, 0 crashes, 0 hangs"; fi
finish
