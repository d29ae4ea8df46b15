#!/usr/bin/env bash
# Training throughput on this machine, in one run: kolo's synthetic ResNet
# benchmark with 1 and 2 workers (under kolorun) and PyTorch DistributedDataParallel
# (gloo) with 1 and 2 workers, same model, batch, image size and threads; DDP also
# with glibc's allocator tuned as kolo::init() tunes it (GLIBC_TUNABLES), so the
# comparison shows what is kolo's and what is the allocator's. Prints each one's
# 2-worker scaling efficiency and the ratios kolo / DDP.
#
#   bench/run_training_bench.sh [--model resnet50] [--batch-size 32] [--image-size 48]
#       [--num-warmup-batches 2] [--num-iters 5] [--num-batches-per-iter 2]
#       [--threads 1] [--repeat 1] [--build-dir build] [--python 0|1] [--across-hosts 0|1]
#
# With --python 1 the rounds also run kolo.torch from Python (Horovod's
# pytorch_synthetic_benchmark.py in examples/python, torchvision's model of the
# same name) with 1 and 2 workers, beside the C++ benchmark and DDP.
#
# Needs a build with -DKOLO_BUILD_EXAMPLES=ON -DKOLO_WITH_TORCH=ON and Debian's
# python3-torch. Every worker gets --threads intra-op threads (1 by default, so
# two workers use two cores and the comparison with one worker is fair). With
# --repeat N the four runs are made N times, interleaved, and each keeps its best
# total: on a shared machine that filters out the rounds other work slowed down.
# Each round also runs two independent one-worker jobs side by side, one per core:
# their sum over twice one worker is the scaling this machine allows at all.
#
# With --across-hosts 1 the 2-worker runs put one worker on each of two network-
# namespace hosts (bench/netns_hosts.py), which it finds in NETNS_HOSTS,
# NETNS_ADDRESSES and NETNS_INTERFACE, and the 1-worker runs happen inside the
# first of them; with NETNS_CPUS (netns_hosts.py run --cpus spread) each host's
# processes run on that host's CPUs, as on separate machines:
#   bench/netns_hosts.py run --hosts 2 --rate 10gbit --cpus spread --host -1 -- \
#       bench/run_training_bench.sh --across-hosts 1 --repeat 3
# kolo's workers start with kolorun --launcher-command 'ip netns exec {host}',
# DDP's one per host with host 0's address as MASTER_ADDR and gloo on that
# interface.
set -euo pipefail
cd "$(dirname "$0")/.."

model=resnet50
batch_size=32
image_size=48
warmup=2
iters=5
batches_per_iter=2
threads=1
repeat=1
build_dir=build
with_python=0
across_hosts=0

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  [[ $# -ge 2 ]] || usage
  case "$1" in
    --model) model=$2 ;;
    --batch-size) batch_size=$2 ;;
    --image-size) image_size=$2 ;;
    --num-warmup-batches) warmup=$2 ;;
    --num-iters) iters=$2 ;;
    --num-batches-per-iter) batches_per_iter=$2 ;;
    --threads) threads=$2 ;;
    --repeat) repeat=$2 ;;
    --build-dir) build_dir=$2 ;;
    --python) with_python=$2 ;;
    --across-hosts) across_hosts=$2 ;;
    *) usage ;;
  esac
  shift 2
done

benchmark=$build_dir/examples/synthetic_benchmark/synthetic_benchmark
kolorun=$build_dir/tools/kolorun/kolorun
python=/usr/bin/python3
for tool in "$benchmark" "$kolorun"; do
  [[ -x $tool ]] || { echo "run_training_bench: $tool is missing; build with -DKOLO_BUILD_EXAMPLES=ON -DKOLO_WITH_TORCH=ON" >&2; exit 1; }
done
"$python" -c 'import torch.distributed' 2>/dev/null || { echo "run_training_bench: $python lacks torch (apt-get install python3-torch)" >&2; exit 1; }

args=(--model "$model" --batch-size "$batch_size" --image-size "$image_size" --num-warmup-batches "$warmup"
      --num-iters "$iters" --num-batches-per-iter "$batches_per_iter" --threads "$threads")
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# How 1- and 2-worker jobs start: on this host, or one worker per namespace host.
if [[ $across_hosts == 1 ]]; then
  read -r -a netns_hosts <<<"${NETNS_HOSTS:-}"
  read -r -a netns_addresses <<<"${NETNS_ADDRESSES:-}"
  [[ ${#netns_hosts[@]} -ge 2 && ${#netns_addresses[@]} -ge 2 && -n ${NETNS_INTERFACE:-} ]] || {
    echo "run_training_bench: --across-hosts 1 needs NETNS_HOSTS, NETNS_ADDRESSES and NETNS_INTERFACE (run it under bench/netns_hosts.py run --host -1)" >&2
    exit 1
  }
  # bench/netns_exec.sh puts a host's processes on its CPUs (netns_hosts.py run --cpus).
  netns_exec=$PWD/bench/netns_exec.sh
  in_host0=("$netns_exec" "${netns_hosts[0]}")
  kolorun_one=("${in_host0[@]}" "$kolorun" -np 1)
  kolorun_two=("${in_host0[@]}" "$kolorun" --launcher-command "$netns_exec {host}"
               -H "${netns_hosts[0]}:1,${netns_hosts[1]}:1" --network-interface "$NETNS_INTERFACE")
else
  in_host0=()
  kolorun_one=("$kolorun" -np 1)
  kolorun_two=("$kolorun" -np 2)
fi

# DDP with N workers; extra words before the command (env NAME=VALUE). Across
# hosts rank 1 runs in the second host and rank 0, whose output counts, in the first.
ddp() {
  local workers=$1
  shift
  if [[ $across_hosts == 1 && $workers == 2 ]]; then
    local ddp_args=(bench/ddp_synthetic.py --num-proc 2 --master-addr "${netns_addresses[0]}" --master-port 29500 "${args[@]}")
    "$netns_exec" "${netns_hosts[1]}" env GLOO_SOCKET_IFNAME="$NETNS_INTERFACE" "$@" "$python" "${ddp_args[@]}" --rank 1 >/dev/null 2>&1 &
    local second=$!
    local status=0
    "$netns_exec" "${netns_hosts[0]}" env GLOO_SOCKET_IFNAME="$NETNS_INTERFACE" "$@" "$python" "${ddp_args[@]}" --rank 0 || status=$?
    wait "$second" || status=$?
    return "$status"
  fi
  "${in_host0[@]}" env "$@" "$python" bench/ddp_synthetic.py --num-proc "$workers" "${args[@]}"
}

# Runs a benchmark command, shows its output, and prints its total img/sec.
total_img_sec() {
  "$@" >"$log" 2>&1 || { cat "$log" >&2; echo "run_training_bench: '$*' failed" >&2; exit 1; }
  sed 's/^\[[0-9]*\]<std[a-z]*>://' "$log" | sed 's/^/    /' >&2
  local total
  total=$(sed -n 's/.*Total img\/sec on [0-9]* worker(s): \([0-9.]*\) +-.*/\1/p' "$log")
  [[ -n $total ]] || { echo "run_training_bench: no 'Total img/sec' line from '$*'" >&2; exit 1; }
  echo "$total"
}

best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b ? a : b) }'; }

echo "== $model, batch $batch_size per worker, ${image_size}x$image_size images, $threads thread(s) per worker" >&2
[[ $across_hosts == 1 ]] && echo "== 2 workers: one on each of the namespace hosts ${netns_hosts[0]} and ${netns_hosts[1]} ($NETNS_INTERFACE)" >&2
# The same settings kolo::init() makes with mallopt (src/api/allocator_tuning.cc).
tuned_malloc=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824
kolo1=0 kolo2=0 ddp1=0 ddp2=0 tuned1=0 tuned2=0 py1=0 py2=0 pair=0
python_benchmark=(env "PYTHONPATH=$build_dir/python" "$python" examples/python/pytorch_synthetic_benchmark.py)

# Two one-worker jobs at once, one per core, with no communication between them:
# what two workers get from this machine (shared memory bandwidth and caches) with
# nothing distributed in the way, the ceiling of every framework's scaling here.
independent_pair() {
  local a b
  a=$(mktemp) b=$(mktemp)
  taskset -c 0 "$kolorun" --bind-to none -np 1 "$benchmark" "${args[@]}" >"$a" 2>&1 &
  local first=$!
  taskset -c 1 "$kolorun" --bind-to none -np 1 "$benchmark" "${args[@]}" >"$b" 2>&1 || { cat "$b" >&2; exit 1; }
  wait "$first" || { cat "$a" >&2; exit 1; }
  cat "$a" "$b" | sed -n 's/.*Total img\/sec on 1 worker(s): \([0-9.]*\) +-.*/\1/p' | awk '{ s += $1 } END { print s }'
  rm -f "$a" "$b"
}

# One configuration by name; each keeps its best round.
run_config() {
  case $1 in
    py1) echo "-- round $round: kolo.torch (Python), 1 worker" >&2
         py1=$(best "$py1" "$(total_img_sec "${kolorun_one[@]}" "${python_benchmark[@]}" "${args[@]}")") ;;
    py2) echo "-- round $round: kolo.torch (Python), 2 workers" >&2
         py2=$(best "$py2" "$(total_img_sec "${kolorun_two[@]}" "${python_benchmark[@]}" "${args[@]}")") ;;
    kolo1) echo "-- round $round: kolo, 1 worker" >&2
           kolo1=$(best "$kolo1" "$(total_img_sec "${kolorun_one[@]}" "$benchmark" "${args[@]}")") ;;
    kolo2) echo "-- round $round: kolo, 2 workers" >&2
           kolo2=$(best "$kolo2" "$(total_img_sec "${kolorun_two[@]}" "$benchmark" "${args[@]}")") ;;
    pair) echo "-- round $round: two independent kolo 1-worker jobs, one per core" >&2
          pair=$(best "$pair" "$(independent_pair)") ;;
    ddp1) echo "-- round $round: PyTorch DDP (gloo), 1 worker" >&2
          ddp1=$(best "$ddp1" "$(total_img_sec ddp 1)") ;;
    ddp2) echo "-- round $round: PyTorch DDP (gloo), 2 workers" >&2
          ddp2=$(best "$ddp2" "$(total_img_sec ddp 2)") ;;
    tuned1) echo "-- round $round: PyTorch DDP (gloo), malloc tuned, 1 worker" >&2
            tuned1=$(best "$tuned1" "$(total_img_sec ddp 1 GLIBC_TUNABLES=$tuned_malloc)") ;;
    tuned2) echo "-- round $round: PyTorch DDP (gloo), malloc tuned, 2 workers" >&2
            tuned2=$(best "$tuned2" "$(total_img_sec ddp 2 GLIBC_TUNABLES=$tuned_malloc)") ;;
  esac
}

configs=(kolo1 kolo2 pair ddp1 ddp2 tuned1 tuned2)
[[ $with_python == 1 ]] && configs=(py1 py2 "${configs[@]}")
for round in $(seq "$repeat"); do
  # Each round starts one configuration later, so that no configuration always
  # runs first (or last), where a drifting machine would favour or punish it.
  n=${#configs[@]}
  for ((i = 0; i < n; i++)); do run_config "${configs[$(((i + round - 1) % n))]}"; done
done

awk -v k1="$kolo1" -v k2="$kolo2" -v p="$pair" -v d1="$ddp1" -v d2="$ddp2" -v t1="$tuned1" -v t2="$tuned2" -v model="$model" 'BEGIN {
  printf "\n%-34s %12s %12s %12s\n", model " img/sec", "1 worker", "2 workers", "scaling"
  printf "%-34s %12.1f %12.1f %11.1f%%\n", "kolo", k1, k2, 100 * k2 / (2 * k1)
  printf "%-34s %12.1f %12.1f %11.1f%%\n", "PyTorch DDP (gloo)", d1, d2, 100 * d2 / (2 * d1)
  printf "%-34s %12.1f %12.1f %11.1f%%\n", "PyTorch DDP (gloo) tuned malloc", t1, t2, 100 * t2 / (2 * t1)
  printf "%-34s %12.1f %12.1f %11.1f%%\n", "two independent 1-worker jobs", k1, p, 100 * p / (2 * k1)
  printf "kolo / DDP with 2 workers: %.2fx (%.2fx against DDP with the tuned allocator)\n", k2 / d2, k2 / t2
}'
if [[ $with_python == 1 ]]; then
  awk -v p1="$py1" -v p2="$py2" -v d2="$ddp2" 'BEGIN {
    printf "%-34s %12.1f %12.1f %11.1f%%\n", "kolo.torch (Python)", p1, p2, 100 * p2 / (2 * p1)
    printf "kolo.torch (Python) / DDP with 2 workers: %.2fx\n", p2 / d2
  }'
fi
