#!/bin/sh
# A training step's gradients (kolo-bench --mode step: ResNet-50's 161 tensors,
# 102 MB) beside busy processes, with and without the short scheduler slice a
# waiting rank asks for (KOLO_WAKE_SLICE_US: 0 is the kernel's own slice, 100
# the default): 2 ranks on one host over shared memory and over TCP loopback,
# alone and beside three busy loops on the two cores, interleaved in each round.
# Usage: bench/busy_wakeups.sh BUILD [ROUNDS]
set -eu
build=${1:?usage: busy_wakeups.sh BUILD [ROUNDS]}
rounds=${2:-2}
step() {  # backend slice
  KOLO_BACKEND=$1 KOLO_WAKE_SLICE_US=$2 "$build/tools/kolorun/kolorun" -np 2 "$build/tools/kolo-bench/kolo-bench" \
    --mode step --buffers plain --warmup 2 --iters 5 | grep -E '^\[0\]<stdout>: +api-'
}
each() {
  for backend in shm tcp; do
    for slice in 0 100; do echo "kolo $backend wake_slice_us=$slice ($1)"; step $backend $slice; done
  done
}
. "$(dirname "$0")/busy_rounds.sh"
busy_rounds "$rounds"
