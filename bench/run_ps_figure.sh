#!/usr/bin/env bash
# The allreduce-versus-parameter-server figure of the article kolo grew from
# (its Figure 1: ResNet-50 throughput as bars, scaling efficiency as lines, by
# number of workers), rerun on this machine. Hosts are network namespaces on one
# bridge, each host's link shaped by tc tbf in both directions, so that the links
# and not the CPUs bound the communication; one worker per host
# (build/bench/figure1_worker: ResNet-50's 161 gradients divided by --scale,
# after --compute-ms of slept compute per step).
#
#   bench/run_ps_figure.sh [--workers "1 2 4 8"] [--rate 100mbit] [--scale 32]
#       [--compute-ms 400] [--batch 64] [--steps 5] [--warmup 2] [--rounds 1]
#       [--configs "ring ps1 ps1to1 ps2to1 ps1to1-colo"] [--out bench/results/ps-figure]
#       [--build-dir build] [--smoke]
#
# The model's scale-down applies to kolo's sizes too, so that a step has the
# shape of a full-size one: the fusion threshold (64 MiB) and the servers'
# partition size (4 MiB, BytePS's) are divided by --scale as well.
#
# Configurations: ring (kolo's allreduce, tcp between the hosts), ps1 (one
# parameter server on a host of its own), ps1to1 and ps2to1 (as many / twice as
# many servers as workers, each on a host of its own), ps1to1-colo (one server
# on each worker's host). The hierarchical communicator does not apply: one
# worker per host. Rounds run every configuration and worker count interleaved,
# rotated, and keep each one's best throughput.
#
# Writes OUT/results.csv (one row per configuration and worker count:
# samples/s, scaling efficiency against one worker without communication, the
# bytes per step each way on a worker's link and on the busiest server's link
# from /proc/net/dev, and what the model predicts for them) and OUT/figure.png.
# --smoke: the smallest run (1 and 2 workers, ring and ps1, one step, a tiny
# model), for CI. Needs root (ip netns, tc); exits 77 without it.
set -euo pipefail
script=$(realpath "$0")
arguments=("$@")
cd "$(dirname "$0")/.."

workers_list="1 2 4 8"
rate=100mbit
scale=32
compute_ms=400
batch=64
steps=5
warmup=2
rounds=1
configs="ring ps1 ps1to1 ps2to1 ps1to1-colo"
out=bench/results/ps-figure
build_dir=build

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --smoke) workers_list="1 2"; configs="ring ps1"; scale=1024; compute_ms=50; steps=1; warmup=1; shift; continue ;;
    --help|-h) usage ;;
  esac
  [[ $# -ge 2 ]] || usage
  case "$1" in
    --workers) workers_list=$2 ;;
    --rate) rate=$2 ;;
    --scale) scale=$2 ;;
    --compute-ms) compute_ms=$2 ;;
    --batch) batch=$2 ;;
    --steps) steps=$2 ;;
    --warmup) warmup=$2 ;;
    --rounds) rounds=$2 ;;
    --configs) configs=$2 ;;
    --out) out=$2 ;;
    --build-dir) build_dir=$2 ;;
    *) usage ;;
  esac
  shift 2
done

[[ $(id -u) -eq 0 ]] || { echo "run_ps_figure: network namespaces need root; skipped" >&2; exit 77; }
command -v tc >/dev/null || { echo "run_ps_figure: tc is missing (apt-get install iproute2)" >&2; exit 1; }
kolorun=$build_dir/tools/kolorun/kolorun
worker=$build_dir/bench/figure1_worker
for tool in "$kolorun" "$build_dir/tools/kolorun/kolo-server" "$worker"; do
  [[ -x $tool ]] || { echo "run_ps_figure: $tool is missing (cmake --build $build_dir --target kolorun kolo-server figure1_worker)" >&2; exit 1; }
done
for c in $configs; do
  case $c in ring|ps1|ps1to1|ps2to1|ps1to1-colo) ;; *) echo "run_ps_figure: unknown configuration '$c'" >&2; exit 2 ;; esac
done

fusion_bytes=$(( (64 << 20) / scale ))
partition_bytes=$(( (4 << 20) / scale ))
(( partition_bytes < 4096 )) && partition_bytes=4096

# Hosts: enough for the most workers plus twice as many dedicated servers.
max_workers=0
for n in $workers_list; do (( n > max_workers )) && max_workers=$n; done
hosts=$(( max_workers * 3 ))
(( hosts < max_workers + 1 )) && hosts=$(( max_workers + 1 ))

# The hosts: bench/netns_hosts.py makes them, runs this script again on this
# machine with their names in NETNS_HOSTS, and removes them whatever happens.
if [[ -z ${NETNS_HOSTS:-} ]]; then
  /usr/bin/python3 bench/netns_hosts.py check || exit $?  # 77: namespaces cannot be made here
  exec /usr/bin/python3 bench/netns_hosts.py run --hosts "$hosts" --rate "$rate" --burst 256k --latency 100ms \
    --host -1 -- "$script" "${arguments[@]}"
fi
read -r -a host_names <<<"$NETNS_HOSTS"
(( ${#host_names[@]} >= hosts )) || { echo "run_ps_figure: NETNS_HOSTS names fewer than $hosts hosts" >&2; exit 2; }
host() { echo "${host_names[$1]}"; }

# Bytes through host i's link, "sent received", from /proc/net/dev.
link_bytes() {
  ip netns exec "$(host "$1")" awk -v dev="$NETNS_INTERFACE:" '$1 == dev { print $10, $2 }' /proc/net/dev
}

mkdir -p "$out"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Runs configuration $1 with $2 workers; prints "samples/s worker_tx worker_rx
# server_tx server_rx" (bytes per step; the server's: the busiest server link).
run_one() {
  local config=$1 n=$2 servers=0 server_list="" placement=dedicated
  case $config in
    ps1) servers=1 ;;
    ps1to1) servers=$n ;;
    ps2to1) servers=$(( 2 * n )) ;;
    ps1to1-colo) servers=$n; placement=colocated ;;
  esac
  local rank_hosts="" i
  for (( i = 0; i < n; i++ )); do rank_hosts+="${rank_hosts:+,}$(host "$i"):1"; done
  local args=(--launcher-command "ip netns exec {host}" --network-interface "$NETNS_INTERFACE" --bind-to none
              -np "$n" -H "$rank_hosts")
  local server_hosts=()
  if (( servers > 0 )); then
    args+=(--num-servers "$servers")
    if [[ $placement == dedicated ]]; then
      for (( i = 0; i < servers; i++ )); do server_list+="${server_list:+,}$(host $(( max_workers + i ))):1"; server_hosts+=($(( max_workers + i ))); done
      args+=(--server-hosts "$server_list")
    else
      for (( i = 0; i < servers; i++ )); do server_hosts+=($i); done
    fi
  fi
  local before=() after=()
  for (( i = 0; i < hosts; i++ )); do before[i]=$(link_bytes "$i"); done
  env KOLO_HIERARCHICAL=0 KOLO_FUSION_THRESHOLD=$fusion_bytes KOLO_PS_PARTITION_BYTES=$partition_bytes ip netns exec "$(host 0)" "$kolorun" "${args[@]}" "$worker" --steps "$steps" \
      --warmup "$warmup" --compute-ms "$compute_ms" --batch "$batch" --scale "$scale" >"$log" 2>&1 ||
    { cat "$log" >&2; echo "run_ps_figure: $config with $n worker(s) failed" >&2; exit 1; }
  for (( i = 0; i < hosts; i++ )); do after[i]=$(link_bytes "$i"); done
  local json samples
  json=$(sed -n 's/^\[0\]<stdout>://p' "$log" | grep '^{' | tail -1)
  samples=$(echo "$json" | sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p')
  [[ -n $samples ]] || { cat "$log" >&2; echo "run_ps_figure: no result from $config with $n worker(s)" >&2; exit 1; }
  local total_steps=$(( steps + warmup ))
  delta() { local b=($1) a=($2); echo $(( (a[0] - b[0]) / total_steps )) $(( (a[1] - b[1]) / total_steps )); }
  local w s_tx=0 s_rx=0 d
  w=$(delta "${before[0]}" "${after[0]}")
  for i in "${server_hosts[@]}"; do
    d=($(delta "${before[i]}" "${after[i]}"))
    if [[ $placement == colocated ]]; then d=($w); fi
    (( d[0] + d[1] > s_tx + s_rx )) && { s_tx=${d[0]}; s_rx=${d[1]}; }
  done
  echo "$samples $w $s_tx $s_rx"
}

declare -A best wtx wrx stx srx
config_list=($configs)
for (( round = 0; round < rounds; round++ )); do
  for n in $workers_list; do
    for (( k = 0; k < ${#config_list[@]}; k++ )); do
      c=${config_list[$(( (k + round) % ${#config_list[@]} ))]}
      read -r samples a b x y < <(run_one "$c" "$n")
      echo "round $round: $c, $n worker(s): $samples samples/s" >&2
      key="$c/$n"
      if [[ -z ${best[$key]:-} ]] || awk -v a="$samples" -v b="${best[$key]}" 'BEGIN { exit !(a > b) }'; then
        best[$key]=$samples; wtx[$key]=$a; wrx[$key]=$b; stx[$key]=$x; srx[$key]=$y
      fi
    done
  done
done

# One worker without communication: the ring configuration's one-worker run
# (its communicator is the self communicator), else a run of its own.
if [[ -z ${best[ring/1]:-} ]]; then
  read -r base _ < <(run_one ring 1)
else
  base=${best[ring/1]}
fi
model_bytes=$(sed -n 's/.*"model_bytes": \([0-9]*\).*/\1/p' "$log" | tail -1)

csv=$out/results.csv
echo "config,workers,servers,samples_per_s,efficiency,worker_link_tx_mb,worker_link_rx_mb,server_link_tx_mb,server_link_rx_mb,model_worker_link_mb,model_server_link_mb" > "$csv"
for c in $configs; do
  for n in $workers_list; do
    key="$c/$n"
    awk -v c="$c" -v n="$n" -v s="${best[$key]}" -v base="$base" -v m="$model_bytes" \
        -v wt="${wtx[$key]}" -v wr="${wrx[$key]}" -v st="${stx[$key]}" -v sr="${srx[$key]}" 'BEGIN {
      k = (c == "ps1") ? 1 : (c == "ps2to1") ? 2 * n : (c == "ring") ? 0 : n
      mb = m / 1e6
      if (c == "ring") { mw = 2 * (n - 1) / n * mb; ms = 0 }
      else if (c == "ps1to1-colo") { mw = 2 * (n - 1) / n * mb; ms = mw }  # pushes to and answers from the other hosts, as ring
      else { mw = mb; ms = n * mb / k }
      printf "%s,%d,%d,%.2f,%.3f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f\n", c, n, k, s, s / (n * base), wt / 1e6, wr / 1e6, st / 1e6, sr / 1e6, mw, ms
    }' >> "$csv"
  done
done
echo "run_ps_figure: one worker without communication: $base samples/s; model $model_bytes bytes per step" >&2
column -s, -t "$csv" >&2

if command -v gnuplot >/dev/null; then
  # Bars: samples/s by workers, one per configuration; lines: scaling efficiency.
  wide=$(mktemp)
  { printf "workers"; for c in $configs; do printf ",%s,%s_eff" "$c" "$c"; done; echo
    for n in $workers_list; do
      printf "%s" "$n"
      for c in $configs; do awk -F, -v c="$c" -v n="$n" '$1 == c && $2 == n { printf ",%s,%s", $4, $5 }' "$csv"; done
      echo
    done; } > "$wide"
  count=$(echo $configs | wc -w)
  gnuplot <<PLOT
set terminal pngcairo size 1000,560 font ',10'
set output '$out/figure.png'
set datafile separator ','
set title "ResNet-50 gradients (1/$scale), ${compute_ms} ms compute per step, $rate links: allreduce vs parameter servers"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel 'samples/s (bars)'
set y2label 'scaling efficiency (lines)'
set y2range [0:1.1]
set ytics nomirror
set y2tics 0.2
set yrange [0:*]
set xlabel 'workers'
set key top left
set grid y
set key autotitle columnhead
# Bar i of a cluster of $count sits at the row's x plus (i - ($count+1)/2) / ($count+1).
plot for [i=1:$count] '$wide' using 2*i:xtic(1) lc i, \
     for [i=1:$count] '' using (\$0 + (i - ($count + 1) / 2.0) / ($count + 1)):(column(2*i+1)) axes x1y2 \
         with linespoints lc i lw 2 pt 7 notitle
PLOT
  rm -f "$wide"
  echo "run_ps_figure: $out/figure.png" >&2
fi
