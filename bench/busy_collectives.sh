#!/bin/sh
# Broadcast and allgather on one host, 2 ranks, plain memory, alone and beside
# busy loops, with the single copy off (KOLO_SHM_SINGLE_COPY=never), on load
# (auto) and always, interleaved with Open MPI's shared memory in each round.
# Usage: bench/busy_collectives.sh BUILD [ROUNDS] [OPS]
set -eu
build=${1:?usage: busy_collectives.sh BUILD [ROUNDS] [OPS]}
rounds=${2:-2}
ops=${3:-broadcast allgather}
sizes=4M,64M
kolo() {
  KOLO_SHM_SINGLE_COPY=$1 "$build/tools/kolorun/kolorun" -np 2 "$build/tools/kolo-bench/kolo-bench" \
    --op "$op" --buffers plain --sizes $sizes --warmup 2 --iters 5 | grep -E '^\[0\]<stdout>: +[0-9]'
}
mpi() {
  mpirun --allow-run-as-root -np 2 --mca btl vader,self "$build/bench/mpi_bench" \
    --op "$op" --sizes $sizes --warmup 2 --iters 5 | grep -E '^ +[0-9]'
}
each() {
  for op in $ops; do
    for mode in never auto always; do echo "$op kolo single_copy=$mode ($1)"; kolo $mode; done
    echo "$op open-mpi vader ($1)"; mpi
  done
}
. "$(dirname "$0")/busy_rounds.sh"
busy_rounds "$rounds"
