#!/usr/bin/env bash
# Installs kolo from BUILD_DIR into a temporary prefix, builds the consumer project
# against it with find_package(kolo), and runs it under the installed kolorun.
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir/tests/install/consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
test -x "$work/prefix/bin/kolorun"
"$work/prefix/bin/kolorun" -np 2 "$work/build/consumer" | tee "$work/out"
grep -q '^\[0\]<stdout>:consumer: rank 0 of 2, sum 42.0$' "$work/out"
grep -q '^\[1\]<stdout>:consumer: rank 1 of 2, sum 42.0$' "$work/out"
# kolo.torch, where it was built: the installed package imports with Debian's
# python3 and runs a collective under the installed kolorun.
package=$(find "$work/prefix" -path '*/dist-packages/kolo/torch/__init__.py' | head -1)
if [[ -n $package ]]; then
  site=${package%/kolo/torch/__init__.py}
  PYTHONPATH=$site "$work/prefix/bin/kolorun" -np 2 /usr/bin/python3 -c \
    'import kolo.torch as hvd, torch; hvd.init(); print("python: sum", hvd.allreduce(torch.ones(1), op=hvd.Sum).item())' \
    | tee "$work/out"
  grep -q '^\[1\]<stdout>:python: sum 2.0$' "$work/out"
fi
echo "install check passed"
