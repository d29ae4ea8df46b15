#!/bin/sh
# Open MPI's remote-shell agent for network-namespace hosts (bench/netns_hosts.py):
#   mpirun --mca plm_rsh_agent bench/netns_rsh_agent.sh -H ns0:1,ns1:1 ...
# mpirun calls it as ssh: AGENT [options] HOST COMMAND...; it runs COMMAND (a shell
# command line, as ssh would hand it to the remote shell) inside namespace HOST,
# on that host's CPUs when NETNS_CPUS gives it some (bench/netns_exec.sh).
while [ "${1#-}" != "$1" ]; do shift; done
[ $# -ge 2 ] || { echo "netns_rsh_agent.sh: usage: $0 [options] NAMESPACE COMMAND..." >&2; exit 255; }
host=$1
shift
exec "$(dirname "$0")/netns_exec.sh" "$host" /bin/sh -c "$*"
