#!/usr/bin/env bash
# Packs a CUDA build's programs with the shared libraries they need (OpenMPI
# with its plugins, PMIx, HDF5, PETSc, oneDNN, BLAS, ...) into one tarball,
# to run the GPU tests and benchmarks on a GPU node that has the CUDA
# runtime, cuBLAS and NCCL (of the same CUDA major version) but not this
# project's Debian packages (a cloud or container image). Leaves out glibc,
# libstdc++ and the CUDA libraries: the node's own are used.
# scripts/gpu_run.sh unpacks and runs it.
#
#   scripts/gpu_bundle.sh BUILD_DIR OUT.tar.xz
#
# Build BUILD_DIR for the node's processor: configure takes -march=native;
# for another CPU, scripts/build.sh DIR --with-cuda --disable-native
# CFLAGS="-g -O2 -march=x86-64-v3".
set -euo pipefail
B=$(cd "${1:?usage: $0 BUILD_DIR OUT.tar.xz}" && pwd)
out=${2:?usage: $0 BUILD_DIR OUT.tar.xz}
grep -q 'MT_HAVE_CUDA 1' "$B/config.h" || { echo "$B is not a --with-cuda build" >&2; exit 2; }
progs="mpitrain mt-data tests/mkdata tests/test_cuda_bits tests/test_cuda_kernels
  tests/test_cuda_layers tests/test_cuda_optim tests/test_device tests/test_nccl_id bench/cuda_gpt
  bench/gemm_shapes tests/test_gemm_matmul tests/test_amp tests/test_layout tests/test_bf16_layers bench/attn_parts"
S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
mkdir -p "$S/lib" "$S/build/tests" "$S/build/bench" "$S/usr/bin" "$S/usr/lib/x86_64-linux-gnu/pmix2" \
  "$S/usr/share" "$S/etc"
# bench_amp.sh's GEMM limit on the node's CPU (gpu_run.sh cpuamp), for the
# build's processor
arch=$(sed -n 's/^CFLAGS = .*\(-march=[^ ]*\).*/\1/p' "$B/Makefile")
(. "$(dirname "$0")/../bench/lib.sh" && GEMM_SHAPES_ARCH=${arch:--march=native} gemm_shapes_build "$B/bench/gemm_shapes") ||
  { echo "cannot build bench/gemm_shapes" >&2; exit 1; }
for p in $progs; do
  # made (or brought up to date: a program left from an older build would
  # be bundled stale)
  (cd "$B" && make "$p" >/dev/null) || { echo "cannot build $p" >&2; exit 1; }
  cp "$B/$p" "$S/build/$p"
done
cp "$B/config.h" "$S/build/"
# OpenMPI, relocated at run time by OPAL_PREFIX and PMIX_PREFIX
cp /usr/bin/orterun /usr/bin/orted "$S/usr/bin/"
ln -s orterun "$S/usr/bin/mpirun"
cp -a /usr/lib/x86_64-linux-gnu/openmpi "$S/usr/lib/x86_64-linux-gnu/"
rm -rf "$S/usr/lib/x86_64-linux-gnu/openmpi/include"
cp -a /usr/lib/x86_64-linux-gnu/pmix2/lib /usr/lib/x86_64-linux-gnu/pmix2/share \
  "$S/usr/lib/x86_64-linux-gnu/pmix2/"
rm -f "$S"/usr/lib/x86_64-linux-gnu/pmix2/lib/*.a
cp -a /usr/share/openmpi "$S/usr/share/"
cp -a /etc/openmpi "$S/etc/"
# the libraries every program and plugin needs, in one folder
skip='^(libc|libm|libdl|libpthread|librt|libutil|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia[-a-z]*)\.so'
{
  for p in $progs; do echo "$B/$p"; done
  echo /usr/bin/orterun /usr/bin/orted | tr ' ' '\n'
  find "$S/usr/lib" -name '*.so*' -type f
} | while read -r o; do ldd "$o" 2>/dev/null | awk '/=> \//{print $1, $3}'; done | sort -u |
  while read -r n p; do
    echo "$n" | grep -Eq "$skip" && continue
    [ -e "$S/lib/$n" ] || cp -L "$p" "$S/lib/$n"
  done
tar -C "$S" -cf - . | xz -T0 -6 >"$out"
echo "bundle: $out ($(du -h "$out" | cut -f1))"
