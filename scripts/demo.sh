#!/usr/bin/env bash
# Quick start, part one: installs what is missing, builds kolo and trains the
# Fashion-MNIST convnet on 2 workers for one epoch (about 87% validation accuracy).
#   scripts/demo.sh            the C++ program (kolo::torch)
#   scripts/demo.sh --python   the same training written in Python (kolo.torch)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "" | --python) ;;
  *) echo "usage: scripts/demo.sh [--python]" >&2; exit 2 ;;
esac
scripts/install-deps.sh
scripts/build.sh
if [[ "${1:-}" == "--python" ]]; then
  PYTHONPATH=build/python exec build/tools/kolorun/kolorun -np 2 /usr/bin/python3 examples/python/fashion_mnist.py \
    --epochs 1
fi
exec build/tools/kolorun/kolorun -np 2 build/examples/fashion_mnist/fashion_mnist --epochs 1
