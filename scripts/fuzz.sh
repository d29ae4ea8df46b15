#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang into build-fuzz/ and runs each
# for a bounded time; fails if any finds a crash, a leak, undefined behaviour or a
# broken property (the input that did it is left in build-fuzz/artifacts/).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET [TARGET...]]
#
# SECONDS_PER_TARGET defaults to $KOLO_FUZZ_SECONDS, else 30. Needs clang-14 and
# libclang-rt-14-dev (Debian 12). The corpus each run grows is kept in
# build-fuzz/corpus/<target>/ and reused by the next run.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-${KOLO_FUZZ_SECONDS:-30}}
[[ $# -gt 0 ]] && shift
# libFuzzer reads a non-number as 0, which means "run forever".
if ! [[ $seconds =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: SECONDS_PER_TARGET must be a positive whole number, got '$seconds' (usage: scripts/fuzz.sh [SECONDS [TARGET...]])" >&2
  exit 2
fi
all_targets=(engine_requests_fuzzer engine_responses_fuzzer stall_report_fuzzer store_requests_fuzzer
             store_replies_fuzzer flight_report_fuzzer kolorun_options_fuzzer host_list_fuzzer
             remote_spec_fuzzer env_parsers_fuzzer tcp_handshake_fuzzer elastic_hosts_fuzzer
             elastic_membership_fuzzer)
targets=("${@:-${all_targets[@]}}")

cxx=${KOLO_FUZZ_CXX:-$(command -v clang++-14 || command -v clang++ || true)}
if [[ -z "$cxx" ]]; then
  echo "fuzz.sh: clang++ not found: apt-get install clang-14 libclang-rt-14-dev" >&2
  exit 2
fi

cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKOLO_BUILD_FUZZERS=ON -DKOLO_BUILD_TESTS=OFF -DKOLO_BUILD_EXAMPLES=OFF -DKOLO_WITH_TORCH=OFF >/dev/null
cmake --build build-fuzz -j"${KOLO_JOBS:-2}" --target kolo_fuzzers

# Seeds: the binary ones written by kolo's own encoders, the text ones checked in.
seeds=build-fuzz/seeds
rm -rf "$seeds"
build-fuzz/fuzz/kolo_fuzz_seeds "$seeds"
cp -r fuzz/corpus/. "$seeds"/
mkdir -p build-fuzz/artifacts

export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for target in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$target
  mkdir -p "$corpus" "$seeds/$target"
  echo "== $target: ${seconds} s"
  # New inputs go to the first directory; the seeds are only read. -timeout: one
  # input taking longer than 10 s is a hang. -rss_limit_mb: bounded memory is
  # part of the parsers' contract.
  if ! build-fuzz/fuzz/"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/"$target"- \
      "$corpus" "$seeds/$target" > build-fuzz/"$target".log 2>&1; then
    failed+=("$target")
    tail -n 40 build-fuzz/"$target".log >&2
  fi
  grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb)' build-fuzz/"$target".log || true
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz.sh: FAILED: ${failed[*]} (inputs in build-fuzz/artifacts/, logs in build-fuzz/<target>.log)" >&2
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} target(s), ${seconds} s each: no failure"
