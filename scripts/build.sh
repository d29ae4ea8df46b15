#!/usr/bin/env bash
# Configures and builds kolo into build/ (extra arguments go to cmake).
set -euo pipefail
cd "$(dirname "$0")/.."
# Everything, whatever an earlier configuration (scripts/demo.sh's) left in the cache.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKOLO_BUILD_TESTS=ON -DKOLO_BUILD_EXAMPLES=ON -DKOLO_WITH_TORCH=ON \
  -DKOLO_WITH_GLOO=ON -DKOLO_WITH_MPI=ON -DKOLO_WITH_PYTHON=ON "$@" >/dev/null
cmake --build build -j"$(nproc)"
