#!/usr/bin/env bash
# Installs what mpitrain needs from Debian 12's archive, when missing.
# Idempotent and non-interactive; run as root (or with sudo available).
set -euo pipefail
pkgs=(build-essential autoconf automake pkg-config libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev libpetsc-real-dev libdnnl-dev libblas-dev zlib1g-dev dataset-fashion-mnist
  gnuplot-nox # OUTPUT_DIR/curve.png
  slurmctld slurmd slurm-client munge slurm-wlm-torque) # last line: for tests/test_slurm.sh
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: done"
