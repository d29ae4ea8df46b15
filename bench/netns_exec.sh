#!/bin/sh
# Runs a command inside a namespace host of bench/netns_hosts.py, on that host's
# CPUs when the hosts were given some (NETNS_CPUS, in the order of NETNS_HOSTS,
# as `netns_hosts.py run --cpus` exports them), so that each "host" computes on
# cores of its own as separate machines would:
#   kolorun --launcher-command '/path/to/bench/netns_exec.sh {host}' ...
#   bench/netns_exec.sh HOST COMMAND...
[ $# -ge 2 ] || { echo "usage: $0 HOST COMMAND..." >&2; exit 2; }
host=$1
shift
if [ -n "${NETNS_CPUS:-}" ]; then
  i=0
  for name in $NETNS_HOSTS; do
    [ "$name" = "$host" ] && break
    i=$((i + 1))
  done
  cpus=$(echo "$NETNS_CPUS" | cut -d' ' -f$((i + 1)))
  [ -n "$cpus" ] || { echo "netns_exec.sh: $host is not in NETNS_HOSTS ($NETNS_HOSTS)" >&2; exit 2; }
  exec ip netns exec "$host" taskset -c "$cpus" "$@"
fi
exec ip netns exec "$host" "$@"
