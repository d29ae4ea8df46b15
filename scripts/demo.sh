#!/usr/bin/env bash
# Quick start, part one: installs what is missing, builds kolo and trains the
# Fashion-MNIST convnet on 2 workers for one epoch (about 87% validation accuracy).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/tools/kolorun/kolorun -np 2 build/examples/fashion_mnist/fashion_mnist --epochs 1
