#!/bin/sh
# Broadcast on one host, 2 ranks, alone and beside busy loops, with the single
# copy off (KOLO_SHM_SINGLE_COPY=never), on load (auto) and always, interleaved
# with Open MPI's shared memory in each round. Usage: bench/busy_broadcast.sh BUILD [ROUNDS]
set -eu
build=${1:?usage: busy_broadcast.sh BUILD [ROUNDS]}
rounds=${2:-2}
sizes=4M,64M
kolo() {
  KOLO_SHM_SINGLE_COPY=$1 "$build/tools/kolorun/kolorun" -np 2 "$build/tools/kolo-bench/kolo-bench" \
    --op broadcast --buffers plain --sizes $sizes --warmup 2 --iters 5 | grep -E '^\[0\]<stdout>: +[0-9]'
}
mpi() {
  mpirun --allow-run-as-root -np 2 --mca btl vader,self "$build/bench/mpi_bench" \
    --op broadcast --sizes $sizes --warmup 2 --iters 5 | grep -E '^ +[0-9]'
}
each() {
  for mode in never auto always; do echo "kolo single_copy=$mode ($1)"; kolo $mode; done
  echo "open-mpi vader ($1)"; mpi
}
round=1
while [ "$round" -le "$rounds" ]; do
  echo "# round $round $(date -u +%FT%TZ)"
  each alone
  pids=""
  for _ in 1 2 3; do sh -c 'while :; do :; done' & pids="$pids $!"; done
  each "3 busy loops"
  kill $pids
  round=$((round + 1))
done
