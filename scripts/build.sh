#!/usr/bin/env bash
# Configures and builds mpitrain in DIR (default build/), passing any further
# arguments to configure. Reconfigures only when needed.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-build}
shift || true
cd "$top"
# several builds (build/, build-asan/, a helper's) may start together: one at
# a time regenerates the shared configure and Makefile.in
exec 9>"$top/.build.lock"
flock 9
[ -x configure ] && [ configure -nt configure.ac ] && [ Makefile.in -nt Makefile.am ] || autoreconf -fi >/dev/null
mkdir -p "$dir"
cd "$dir"
if [ ! -f Makefile ] || [ "$top/configure" -nt Makefile ] || [ $# -gt 0 ]; then
  flags='^(CFLAGS|LDFLAGS|ARCH_CFLAGS|NVCCFLAGS|AM_CFLAGS) =' # AM_CFLAGS: Makefile.am's
  old_flags=$(grep -E "$flags" Makefile 2>/dev/null || true)
  "$top/configure" -q "$@"
  # make does not rebuild objects when only the flags change: start clean
  [ -z "$old_flags" ] || [ "$old_flags" = "$(grep -E "$flags" Makefile)" ] ||
    make clean >/dev/null
fi
flock -u 9
make -j"$(nproc)" >/dev/null
echo "build: $top/$dir"
