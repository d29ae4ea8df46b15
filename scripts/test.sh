#!/usr/bin/env bash
# Quick start, part two: installs what is missing, builds kolo and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir build -j2 --output-on-failure --timeout 900
