#!/bin/bash
# Bytes host 0 sends per training step, for each configuration given: the
# synthetic ResNet-50 runs 2 and then 10 steps (after one warmup step) across
# the network-namespace hosts of bench/netns_hosts.py, and the difference of
# host 0's nic0 transmit counter over the 8 extra steps is the step's share,
# free of the start's broadcast and connections:
#   bench/netns_hosts.py run --hosts 4 --cpus spread --host -1 -- \
#       bench/step_bytes.sh "--powersgd-rank 4" "--lockstep-only" ""
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a hosts <<<"${NETNS_HOSTS:?run under bench/netns_hosts.py run --host -1}"
netns_exec=$PWD/bench/netns_exec.sh
export OPENBLAS_NUM_THREADS=1
host_list=$(printf '%s:1,' "${hosts[@]}")
host_list=${host_list%,}

sent() { ip netns exec "${hosts[0]}" cat /proc/net/dev | awk '/nic0/ { print $10 }'; }

run() {  # batches extra...
  local batches=$1 before
  shift
  before=$(sent)
  "$netns_exec" "${hosts[0]}" build/tools/kolorun/kolorun --launcher-command "$netns_exec {host}" -H "$host_list" \
    --network-interface "$NETNS_INTERFACE" build/examples/synthetic_benchmark/synthetic_benchmark --model resnet50 \
    --batch-size 8 --image-size 32 --num-warmup-batches 1 --num-iters 1 --num-batches-per-iter "$batches" \
    --threads 1 "$@" >/dev/null
  echo $(($(sent) - before))
}

for config in "$@"; do
  # shellcheck disable=SC2086 # a configuration is several words
  short=$(run 2 $config) long=$(run 10 $config)
  echo "${config:-whole gradients}: $(((long - short) / 8)) bytes per step from host 0"
done
