# Sourced by the benchmarks beside busy processes: ROUNDS rounds, each running
# the caller's `each` alone and then beside three busy loops on the two cores,
# so that both conditions meet the VM in the same state.
busy_rounds() {  # ROUNDS
  pids=""
  trap '[ -z "$pids" ] || kill $pids 2>/dev/null' EXIT
  round=1
  while [ "$round" -le "$1" ]; do
    echo "# round $round $(date -u +%FT%TZ)"
    each alone
    for _ in 1 2 3; do sh -c 'while :; do :; done' & pids="$pids $!"; done
    each "3 busy loops"
    kill $pids; pids=""
    round=$((round + 1))
  done
}
