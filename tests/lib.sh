# tests/lib.sh: sourced by the shell tests (bash). Not executable on its own.
#
# Gives: the paths of the programs under test, run_mpi, assertions that print
# `ok - NAME` / `not ok - NAME`, a scratch folder removed at exit, and finish,
# which prints the tally and exits non-zero if anything failed.
#
# Environment: top_srcdir and top_builddir (exported by `make check`; when
# unset, the folder above this file and the current folder). MPITRAIN,
# MT_DATA, MKDATA override the program paths; MPIRUN the launcher; KEEP_WORK=1
# keeps the scratch folder; TEST_TIMEOUT is the default per-run limit (s).
#
# Exit status of a script: 0 all passed, 1 some failed, 99 hard error (a
# program is missing or the setup failed), as automake's harness expects.

set -u

: "${top_srcdir:=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
: "${top_builddir:=$PWD}"
MPITRAIN=${MPITRAIN:-$top_builddir/mpitrain}
MT_DATA=${MT_DATA:-$top_builddir/mt-data}
MKDATA=${MKDATA:-$top_builddir/tests/mkdata}
MPIRUN=${MPIRUN:-mpirun}
TEST_TIMEOUT=${TEST_TIMEOUT:-60}

# One script test at a time under `make check` (which sets MT_TEST_LOCK;
# `make -j2 check` still runs the C tests beside them): their MPI jobs want
# every core, and OpenMPI's waits poll, so two 2-rank jobs on 2 cores each
# ran 7-40x slower than alone (test_fmnist's MLP epoch: 6 s alone, 40-250 s
# beside another job) and ran into their timeouts. flock holds the
# lock, not the script (-o), so a daemon a test leaves behind cannot keep it.
if [ -n "${MT_TEST_LOCK:-}" ] && [ -z "${MT_TEST_LOCKED:-}" ] &&
  command -v flock >/dev/null 2>&1; then
  export MT_TEST_LOCKED=1
  exec flock -o "$MT_TEST_LOCK" "$BASH" "$0" "$@"
fi
# Runs of whole epochs of real data whose point is the accuracy they reach
# (minutes each): MT_ACCURACY_RUNS=0 leaves them out (scripts/check.sh's
# sanitizer build; the default build runs them).
accuracy_runs() { [ "${MT_ACCURACY_RUNS:-1}" != 0 ]; }
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}

T_PASS=0
T_FAIL=0
T_LOGS=0
WORK=
LAST_LOG=
LAST_RC=

# bail MESSAGE: a setup failure, not a test failure.
bail() {
  echo "Bail out! $*"
  exit 99
}

# need_bin PROGRAM...: every program must exist and be executable.
need_bin() {
  local b
  for b in "$@"; do
    [ -x "$b" ] || bail "missing program $b (run make first, or set its path variable)"
  done
}

# make_work: a fresh scratch folder in $WORK, removed at exit unless KEEP_WORK=1.
make_work() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-test.XXXXXX") || bail "mktemp -d failed"
  trap cleanup_work EXIT
}

cleanup_work() {
  if [ -n "$WORK" ] && [ -d "$WORK" ]; then
    if [ "${KEEP_WORK:-0}" = 1 ]; then
      echo "# kept scratch folder $WORK"
    else
      rm -rf "$WORK"
    fi
  fi
}

# run_mpi NP TIMEOUT PROGRAM ARGS...: mpirun on this node, killed after
# TIMEOUT seconds (exit 124, or 137 when it needed SIGKILL). Shared memory
# only, no CPU binding, no stdin. odls_base_sigkill_timeout 0: where a rank
# exits non-zero (every expected error), mpirun ends the job at once
# instead of 2 s later (OpenMPI 4.1, even when every rank has exited).
# Nothing is cut short: after a collective error the ranks leave together
# (mpitrain's exit under the hang guard, src/trainer/app.c), and a rank
# that fails alone aborts the job anyway. The tests that signal a job and
# check what it saved launch mpirun themselves, with the default grace.
run_mpi() {
  local np=$1 t=$2
  shift 2
  timeout -k 10 "$t" "$MPIRUN" -np "$np" --oversubscribe --bind-to none \
    --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
    --mca odls_base_sigkill_timeout 0 \
    "$@" </dev/null
}

# out: prints the name of a fresh output folder under $WORK (not created).
out() { mktemp -u "$WORK/out.XXXXXX"; }

# with_env NAME=VALUE COMMAND...: runs COMMAND (a function too) with NAME set.
with_env() {
  (
    export "${1?}"
    shift
    "$@"
  )
}

pass() {
  T_PASS=$((T_PASS + 1))
  echo "ok - $1"
}

# fail NAME WHY: prints the reason and the tail of the last log.
fail() {
  T_FAIL=$((T_FAIL + 1))
  echo "not ok - $1"
  echo "#   $2"
  if [ -n "$LAST_LOG" ] && [ -f "$LAST_LOG" ]; then
    echo "#   command output (last 15 lines of $LAST_LOG):"
    tail -n 15 "$LAST_LOG" | sed 's/^/#   | /'
  fi
}

# run_logged COMMAND...: runs it with stdout+stderr in a new log file; sets
# LAST_LOG and LAST_RC.
run_logged() {
  [ -n "$WORK" ] || bail "make_work was not called"
  mkdir -p "$WORK/logs"
  T_LOGS=$((T_LOGS + 1))
  LAST_LOG=$(printf '%s/logs/%03d.log' "$WORK" "$T_LOGS")
  {
    printf '$'
    printf ' %q' "$@"
    printf '\n'
  } >"$LAST_LOG"
  "$@" >>"$LAST_LOG" 2>&1
  LAST_RC=$?
}

# Output of the last run, without the command line logged first.
last_output() { tail -n +2 "$LAST_LOG"; }

# forecast_activations LOG: the MiB of activations in a run's memory forecast.
forecast_activations() { sed -n 's/^memory forecast.* activations \([0-9.]*\)[,;].*/\1/p' "$1"; }

timed_out() { [ "$LAST_RC" = 124 ] || [ "$LAST_RC" = 137 ]; }

# expect_ok NAME COMMAND...: exit status 0 within its timeout.
expect_ok() {
  local name=$1
  shift
  run_logged "$@"
  if timed_out; then
    fail "$name" "timed out (exit $LAST_RC)"
  elif [ "$LAST_RC" != 0 ]; then
    fail "$name" "exit status $LAST_RC, expected 0"
  else
    pass "$name"
  fi
}

# expect_fail NAME TEXT COMMAND...: a non-zero exit that is not a timeout nor
# a signal, and TEXT (fixed string) somewhere in stdout+stderr.
expect_fail() {
  local name=$1 text=$2
  shift 2
  run_logged "$@"
  if timed_out; then
    fail "$name" "timed out (exit $LAST_RC): a hang"
  elif [ "$LAST_RC" = 0 ]; then
    fail "$name" "exit status 0, expected a failure"
  elif [ "$LAST_RC" -gt 124 ]; then
    fail "$name" "exit status $LAST_RC: killed by a signal or not runnable"
  elif ! last_output | grep -qF -- "$text"; then
    fail "$name" "output does not contain '$text'"
  else
    pass "$name"
  fi
}

# expect_error NAME TEXT COMMAND...: as expect_fail for mpitrain, and the
# output has exactly one line 'mpitrain: error: ...', which contains TEXT.
expect_error() {
  local name=$1 text=$2
  shift 2
  run_logged "$@"
  local lines n
  lines=$(last_output | grep -E '^mpitrain: error: ')
  n=$(printf '%s' "$lines" | grep -c '^')
  if timed_out; then
    fail "$name" "timed out (exit $LAST_RC): a hang"
  elif [ "$LAST_RC" = 0 ]; then
    fail "$name" "exit status 0, expected a failure"
  elif [ "$LAST_RC" -gt 124 ]; then
    fail "$name" "exit status $LAST_RC: killed by a signal or not runnable"
  elif [ "$n" != 1 ]; then
    fail "$name" "expected exactly one 'mpitrain: error:' line, found $n"
  elif ! printf '%s' "$lines" | grep -qF -- "$text"; then
    fail "$name" "the error line does not contain '$text'"
  else
    pass "$name"
  fi
}

# expect_output NAME TEXT: the last run's output contains TEXT.
expect_output() {
  if last_output | grep -qF -- "$2"; then pass "$1"; else fail "$1" "output lacks '$2'"; fi
}

# expect_no_output NAME TEXT: the last run's output does not contain TEXT.
expect_no_output() {
  if last_output | grep -qF -- "$2"; then fail "$1" "output contains '$2'"; else pass "$1"; fi
}

# expect_empty_dir NAME DIR: DIR is absent or has no entries.
expect_empty_dir() {
  if [ ! -e "$2" ] || [ -z "$(ls -A "$2" 2>/dev/null)" ]; then
    pass "$1"
  else
    fail "$1" "$2 is not empty: $(ls -A "$2" | tr '\n' ' ')"
  fi
}

# expect_nonempty_dir NAME DIR: DIR exists and has at least one entry.
expect_nonempty_dir() {
  if [ -d "$2" ] && [ -n "$(ls -A "$2" 2>/dev/null)" ]; then
    pass "$1"
  else
    fail "$1" "$2 is missing or empty"
  fi
}

# finish: the tally; exit 1 if anything failed or nothing was checked.
finish() {
  echo "# $T_PASS passed, $T_FAIL failed"
  [ "$T_FAIL" = 0 ] && [ "$T_PASS" -gt 0 ] && exit 0
  exit 1
}
