#!/usr/bin/env bash
# Sets everything up and runs every test: `make check` in a normal build and
# in an AddressSanitizer + UBSan build, then `make distcheck` (skip the last
# two with MT_QUICK=1). Where nvcc is on the PATH, also a --with-cuda build
# (compile and link of src/cuda/, -Werror) and its CUDA tests; no GPU is
# needed (the kernel test skips without one); MT_CUDA=0 leaves it out.
# Ends with one line 'N passed, N failed'.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash scripts/deps.sh || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# one Fashion-MNIST conversion shared by the builds
export MT_FMNIST_DIR="$top/build/tests/work/fmnist"
passed=0 failed=0 status=0

tally() { # BUILD_DIR LABEL
  local log=$1/test-suite.log p f
  if [ ! -f "$log" ]; then
    echo "check ($2): no test-suite.log"
    failed=$((failed + 1)); status=1; return
  fi
  p=$(sed -n 's/^# PASS: *//p' "$log"); f=$(sed -n 's/^# FAIL: *//p' "$log")
  e=$(sed -n 's/^# ERROR: *//p' "$log"); x=$(sed -n 's/^# XPASS: *//p' "$log")
  passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0} + ${e:-0} + ${x:-0}))
  echo "check ($2): ${p:-0} passed, $(( ${f:-0} + ${e:-0} + ${x:-0} )) failed"
}

run_check() { # BUILD_DIR LABEL CONFIGURE_ARGS...
  local dir=$1 label=$2
  shift 2
  if ! bash scripts/build.sh "$dir" "$@"; then
    echo "check ($label): build failed"
    failed=$((failed + 1)); status=1; return
  fi
  (cd "$dir" && make -j2 check >/dev/null 2>&1) || {
    status=1
    cat "$dir/test-suite.log" 2>/dev/null | tail -80
  }
  tally "$dir" "$label"
}

run_cuda_check() { # BUILD_DIR LABEL: CUDA parts only, a short step
  local dir=$1 label=$2
  local tests="tests/test_cuda_bits tests/test_cuda_kernels tests/test_cuda_layers tests/test_cuda_optim tests/test_device"
  local progs="tests/test_nccl_id tests/mkdata $tests bench/cuda_gpt" # the benchmark: compiled, not run
  if ! bash scripts/build.sh "$dir" --with-cuda --enable-werror; then
    echo "check ($label): build failed"
    failed=$((failed + 1)); status=1; return
  fi
  (cd "$dir" && make -j2 check check_PROGRAMS="$progs" \
    TESTS="tests/test_nccl_id.sh tests/test_gpu_train.sh $tests" >/dev/null 2>&1) || {
    status=1
    cat "$dir/test-suite.log" 2>/dev/null | tail -80
  }
  tally "$dir" "$label"
}

# the CPU build as it always was (no CUDA even where nvcc is present)
run_check build "default" --enable-werror --without-cuda
if command -v nvcc >/dev/null 2>&1 && [ "${MT_CUDA:-1}" != 0 ]; then
  run_cuda_check build-cuda "cuda (compile, link; tests skip without a GPU)"
fi
if [ "${MT_QUICK:-0}" != 1 ]; then
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # -O2 as in the default build: GCC fuses a*b+c into an FMA only from -O2
  # (-fexpensive-optimizations), and the batch-norm CNN's 50-step curve against
  # PyTorch (test_torch_curves.sh) follows a different max-pool/ReLU tie from
  # step 29 when rounded without them. MT_ACCURACY_RUNS=0: the runs whose
  # point is the accuracy after epochs of real data (tests/lib.sh) are the
  # default build's; under the sanitizers they took 10 of CI's 52 minutes
  # running code the short runs reach there too. MT_BITS=0: test_bits.sh's
  # references are the default build's bits (the sanitizers move the gpt's).
  MT_ACCURACY_RUNS=0 MT_BITS=0 run_check build-asan "asan+ubsan" --enable-werror --without-cuda \
    CFLAGS="-O2 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
    LDFLAGS="-fsanitize=address,undefined"
  unset ASAN_OPTIONS UBSAN_OPTIONS
  # distcheck proves the tarball: complete, built out of tree, its tests
  # finding their files there. The C unit tests and the scripts that read
  # files of the source tree (references, options files, the example, the
  # fuzz corpus, install) run there; the two builds above ran everything.
  dist_tests="$(make -s -C build print-tests | tr ' ' '\n' | grep -v '\.sh$' | tr '\n' ' ')"
  dist_tests+="tests/test_example.sh tests/test_torch_curves.sh tests/test_install.sh "
  dist_tests+="tests/test_logview.sh tests/fuzz.sh tests/test_fp64.sh"
  if (cd build && make distcheck TESTS="$dist_tests" >distcheck.log 2>&1); then
    passed=$((passed + 1)); echo "check (distcheck): ok"
  else
    failed=$((failed + 1)); status=1; echo "check (distcheck): FAILED"; tail -40 build/distcheck.log
  fi
fi
echo "$passed passed, $failed failed"
exit $status
