#!/usr/bin/env bash
# The Python examples as a user runs them, on little data: each must finish under
# kolorun with 2 workers and print its progress lines.
#   run_examples.sh KOLORUN PYTHON SOURCE_DIR
set -euo pipefail
kolorun=$1 python=$2 source=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$kolorun" -np 2 "$python" "$source/examples/python/fashion_mnist.py" --limit 2048 --log-interval 8 >"$out" 2>&1 ||
  { cat "$out"; echo "fashion_mnist.py failed" >&2; exit 1; }
grep -Eq '^\[0\]<stdout>:Epoch\[0\] Batch \[0-8\]  Speed: [0-9.]+ samples/sec  accuracy=[0-9.]+$' "$out" ||
  { cat "$out"; echo "fashion_mnist.py printed no Speedometer line" >&2; exit 1; }
grep -Eq '^\[0\]<stdout>:Epoch\[0\] Validation-accuracy=0\.[0-9]+$' "$out" ||
  { cat "$out"; echo "fashion_mnist.py printed no validation accuracy" >&2; exit 1; }

"$kolorun" -np 2 "$python" "$source/examples/python/pytorch_synthetic_benchmark.py" --model resnet18 \
  --image-size 32 --batch-size 4 --num-warmup-batches 1 --num-iters 2 --num-batches-per-iter 1 --threads 1 \
  >"$out" 2>&1 || { cat "$out"; echo "pytorch_synthetic_benchmark.py failed" >&2; exit 1; }
grep -Eq '^\[0\]<stdout>:Total img/sec on 2 worker\(s\): [0-9.]+ \+-[0-9.]+$' "$out" ||
  { cat "$out"; echo "pytorch_synthetic_benchmark.py printed no total" >&2; exit 1; }
# The elastic example loses worker 2 mid-epoch and trains on with the other two.
"$kolorun" -np 3 --min-np 2 "$python" "$source/examples/python/fashion_mnist_elastic.py" --limit 3072 \
  --commit-every 4 --log-interval 4 --kill-worker 2 --kill-at-batch 10 >"$out" 2>&1 ||
  { cat "$out"; echo "fashion_mnist_elastic.py failed" >&2; exit 1; }
grep -Eq '^\[0\]<stdout>:fashion_mnist_elastic.py: re-formed with 2 worker\(s\), epoch 0, [0-9]+ samples left in it$' \
  "$out" || { cat "$out"; echo "fashion_mnist_elastic.py did not re-form with 2 workers" >&2; exit 1; }
grep -Eq '^\[0\]<stdout>:Epoch\[0\] Validation-accuracy=0\.[0-9]+$' "$out" ||
  { cat "$out"; echo "fashion_mnist_elastic.py printed no validation accuracy" >&2; exit 1; }
echo "python examples: ok"
