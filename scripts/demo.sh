#!/usr/bin/env bash
# Quick start, part one: installs what is missing, builds kolo and trains the
# Fashion-MNIST convnet on 2 workers for one epoch (about 87% validation accuracy).
#   scripts/demo.sh            the C++ program (kolo::torch)
#   scripts/demo.sh --python   the same training written in Python (kolo.torch)
#   scripts/demo.sh --elastic  the Python training as an elastic job of 3 workers,
#                              one of which is killed mid-epoch: the other two go
#                              on from the last commit to the same accuracy
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "" | --python | --elastic) ;;
  *) echo "usage: scripts/demo.sh [--python | --elastic]" >&2; exit 2 ;;
esac
# Only what the demo runs: the packages, then kolo's core, kolorun and the
# example (scripts/test.sh builds the rest, tests, MPI and gloo included).
if [[ "${1:-}" == "--python" || "${1:-}" == "--elastic" ]]; then
  scripts/install-deps.sh --demo-python
  python=ON target=kolo_python
else
  scripts/install-deps.sh --demo
  python=OFF target=fashion_mnist
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKOLO_BUILD_TESTS=OFF -DKOLO_WITH_GLOO=OFF -DKOLO_WITH_MPI=OFF \
  -DKOLO_WITH_PYTHON="$python" >/dev/null
cmake --build build -j"$(nproc)" --target kolorun "$target"
if [[ "${1:-}" == "--elastic" ]]; then
  PYTHONPATH=build/python exec build/tools/kolorun/kolorun -np 3 --min-np 2 /usr/bin/python3 \
    examples/python/fashion_mnist_elastic.py --epochs 1 --kill-worker 2 --kill-at-batch 150
fi
if [[ "${1:-}" == "--python" ]]; then
  PYTHONPATH=build/python exec build/tools/kolorun/kolorun -np 2 /usr/bin/python3 examples/python/fashion_mnist.py \
    --epochs 1
fi
exec build/tools/kolorun/kolorun -np 2 build/examples/fashion_mnist/fashion_mnist --epochs 1
