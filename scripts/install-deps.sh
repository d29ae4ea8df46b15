#!/usr/bin/env bash
# Installs the Debian 12 packages kolo builds, tests and demonstrates with, when
# any is missing. Run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake ccache pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
  libgloo-dev libopenmpi-dev openmpi-bin python3-mpi4py
  libtorch-dev python3-torch libopenblas0-pthread zlib1g-dev
  python3-dev pybind11-dev python3-pytest python3-torchvision python3-cloudpickle
  dataset-fashion-mnist gnuplot-nox
  iproute2 procps gdb openssh-client openssh-server slurm-wlm
)

# --demo: only what scripts/demo.sh builds and runs (the C++ demo); --demo-python
# adds the Python package's. --fuzz: what the libFuzzer targets need (clang and
# its runtime).
demo=(build-essential cmake ccache pkg-config libcli11-dev nlohmann-json3-dev zlib1g-dev
      libtorch-dev libopenblas0-pthread dataset-fashion-mnist)
case "${1:-}" in
  --demo) packages=("${demo[@]}") ;;
  --demo-python) packages=("${demo[@]}" python3-torch python3-dev pybind11-dev) ;;
  --fuzz) packages=(clang-14 libclang-rt-14-dev) ;;
  "") ;;
  *) echo "usage: scripts/install-deps.sh [--demo | --demo-python | --fuzz]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
echo "kolo: installing ${missing[*]}" >&2
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
