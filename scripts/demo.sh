#!/usr/bin/env bash
# Quick start, part one: installs what is missing, builds kolo and runs the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/tools/kolorun/kolorun -np 4 build/examples/average_demo
