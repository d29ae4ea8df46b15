#!/usr/bin/env bash
# Installs kolo from BUILD_DIR into a temporary prefix, builds a libtorch program
# against kolo::torch with find_package(kolo), and runs it under the installed kolorun.
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir/tests/torch/install/consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/prefix/bin/kolorun" -np 2 "$work/build/torch_consumer" | tee "$work/out"
grep -q '^\[0\]<stdout>:torch consumer: rank 0 of 2, average 1.5$' "$work/out"
grep -q '^\[1\]<stdout>:torch consumer: rank 1 of 2, average 1.5$' "$work/out"
echo "kolo::torch install check passed"
