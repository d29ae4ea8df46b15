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
# two workers use two cores and the comparison with one worker is fair; OpenBLAS's
# pool too, through OPENBLAS_NUM_THREADS). With
# --repeat N every configuration runs N times, interleaved; the summary gives each
# one's median round, and its scaling and the ratios to DDP as the medians of the
# ratios within each round (a framework's 1- and 2-worker runs go back to back),
# which a machine whose speed drifts moves least.
# Each round also runs two independent one-worker jobs side by side, one per core:
# their sum over twice one worker is the scaling this machine allows at all; and
# two workers that only meet once a step (--lockstep-only: no gradients), the
# scaling synchronous training allows here, since each step then waits for the
# slower worker's.
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
# Every worker computes with --threads threads. torch.set_num_threads sizes
# libtorch's own pool, but Debian's libtorch does its matrix products in
# OpenBLAS, whose pthread pool has a thread per CPU the process may use: a lone
# unbound worker would borrow the idle second core (about 0.1 core-seconds per
# ResNet-50 step, measured) that no worker of a 2-worker job has, and DDP's
# unbound workers would each run two.
export OPENBLAS_NUM_THREADS=$threads
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


echo "== $model, batch $batch_size per worker, ${image_size}x$image_size images, $threads thread(s) per worker" >&2
[[ $across_hosts == 1 ]] && echo "== 2 workers: one on each of the namespace hosts ${netns_hosts[0]} and ${netns_hosts[1]} ($NETNS_INTERFACE)" >&2
# The same settings kolo::init() makes with mallopt (src/api/allocator_tuning.cc).
tuned_malloc=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824
declare -A rounds=()  # configuration -> its img/s, one per round, in round order
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

# One configuration by name; records its img/s for this round.
run_config() {
  local value
  case $1 in
    py1) echo "-- round $round: kolo.torch (Python), 1 worker" >&2
         value=$(total_img_sec "${kolorun_one[@]}" "${python_benchmark[@]}" "${args[@]}") ;;
    py2) echo "-- round $round: kolo.torch (Python), 2 workers" >&2
         value=$(total_img_sec "${kolorun_two[@]}" "${python_benchmark[@]}" "${args[@]}") ;;
    kolo1) echo "-- round $round: kolo, 1 worker" >&2
           value=$(total_img_sec "${kolorun_one[@]}" "$benchmark" "${args[@]}") ;;
    kolo2) echo "-- round $round: kolo, 2 workers" >&2
           value=$(total_img_sec "${kolorun_two[@]}" "$benchmark" "${args[@]}") ;;
    pair) echo "-- round $round: two independent kolo 1-worker jobs, one per core" >&2
          value=$(independent_pair) ;;
    lockstep) echo "-- round $round: kolo, 2 workers in lockstep, gradients not allreduced" >&2
              value=$(total_img_sec "${kolorun_two[@]}" "$benchmark" "${args[@]}" --lockstep-only) ;;
    ddp1) echo "-- round $round: PyTorch DDP (gloo), 1 worker" >&2
          value=$(total_img_sec ddp 1) ;;
    ddp2) echo "-- round $round: PyTorch DDP (gloo), 2 workers" >&2
          value=$(total_img_sec ddp 2) ;;
    tuned1) echo "-- round $round: PyTorch DDP (gloo), malloc tuned, 1 worker" >&2
            value=$(total_img_sec ddp 1 GLIBC_TUNABLES=$tuned_malloc) ;;
    tuned2) echo "-- round $round: PyTorch DDP (gloo), malloc tuned, 2 workers" >&2
            value=$(total_img_sec ddp 2 GLIBC_TUNABLES=$tuned_malloc) ;;
  esac
  rounds[$1]+="$value "
}

# A framework's 1- and 2-worker runs go back to back, in alternating order, so
# that its scaling is read from runs minutes apart at most: this VM's speed drifts
# by up to a fifth within the hour. Each round starts one framework later, so
# that none always runs first (or last).
units=(kolo pair lockstep ddp tuned)
[[ $with_python == 1 ]] && units=(py "${units[@]}")
for round in $(seq "$repeat"); do
  n=${#units[@]}
  for ((i = 0; i < n; i++)); do
    unit=${units[$(((i + round - 1) % n))]}
    if [[ $unit == pair || $unit == lockstep ]]; then
      run_config "$unit"
    elif ((round % 2)); then
      run_config "${unit}1"; run_config "${unit}2"
    else
      run_config "${unit}2"; run_config "${unit}1"
    fi
  done
done

# The summary: each configuration's median round, and the medians of the ratios
# taken within each round (scaling: 2 workers / twice 1 worker; kolo / DDP).
summary() {
  local vars=()
  for config in "${!rounds[@]}"; do vars+=(-v "$config=${rounds[$config]}"); done
  awk "${vars[@]}" -v model="$model" -v python="$with_python" '
    function median(list,    v, n, i, j, t) {
      n = split(list, v, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
      return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    # Median over rounds of a[r] / (scale * b[r]).
    function ratio(a, b, scale,    x, y, n, i, list) {
      n = split(a, x, " "); split(b, y, " "); list = ""
      for (i = 1; i <= n; i++) list = list " " x[i] / (scale * y[i])
      return median(list)
    }
    function row(name, one, two) {
      printf "%-34s %12.1f %12.1f %11.1f%%\n", name, median(one), median(two), 100 * ratio(two, one, 2)
    }
    BEGIN {
      printf "\n%-34s %12s %12s %12s\n", model " img/sec", "1 worker", "2 workers", "scaling"
      row("kolo", kolo1, kolo2)
      row("PyTorch DDP (gloo)", ddp1, ddp2)
      row("PyTorch DDP (gloo) tuned malloc", tuned1, tuned2)
      row("two independent 1-worker jobs", kolo1, pair)
      row("2 workers in lockstep, no gradients", kolo1, lockstep)
      printf "kolo / DDP with 2 workers: %.2fx (%.2fx against DDP with the tuned allocator)\n",
        ratio(kolo2, ddp2, 1), ratio(kolo2, tuned2, 1)
      if (python == 1) {
        row("kolo.torch (Python)", py1, py2)
        printf "kolo.torch (Python) / DDP with 2 workers: %.2fx (%.2fx against DDP with the tuned allocator)\n",
          ratio(py2, ddp2, 1), ratio(py2, tuned2, 1)
      }
      printf "(medians of %d rounds; scaling and ratios are the medians of each round'"'"'s own)\n", split(kolo1, x, " ")
    }'
}
summary
