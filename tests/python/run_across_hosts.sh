#!/usr/bin/env bash
# The kolo.torch suites across hosts: HOSTS network-namespace hosts made by
# bench/netns_hosts.py, RANKS ranks on each, kolorun in host 0 starting the others
# through `ip netns exec`, as across machines. Exits 77 (skipped) where
# namespaces cannot be made (not root).
#   run_across_hosts.sh KOLORUN PYTHON SOURCE_DIR HOSTS RANKS [PYTEST ARGS...]
set -euo pipefail
kolorun=$1 python=$2 source=$3 hosts=$4 ranks=$5
shift 5
netns_hosts=$source/bench/netns_hosts.py
if ! why=$("$python" "$netns_hosts" check 2>&1); then
  echo "skipped: $why"
  exit 77
fi
# In host 0, with the hosts' names in NETNS_HOSTS and their interface in NETNS_INTERFACE.
exec "$python" "$netns_hosts" run --hosts "$hosts" -- bash -c '
  kolorun=$1 ranks=$2
  shift 2
  host_list=""
  for host in $NETNS_HOSTS; do host_list="$host_list${host_list:+,}$host:$ranks"; done
  exec "$kolorun" --launcher-command "ip netns exec {host}" -H "$host_list" --network-interface "$NETNS_INTERFACE" "$@"
' run_across_hosts "$kolorun" "$ranks" "$python" -m pytest -q -p no:cacheprovider "$@"
