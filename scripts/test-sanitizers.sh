#!/usr/bin/env bash
# Builds kolo under sanitizers and runs its tests there; fails on any report.
#
#   scripts/test-sanitizers.sh [asan] [tsan]      (default: both)
#
# asan: AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer) into
#       build-asan/, then every kolo_tests suite.
# tsan: ThreadSanitizer into build-tsan/, then the suites of the engine, the
#       communicators, the store and the diagnostics, whose threads are the point.
#
# KOLO_JOBS sets the build parallelism (default 2). Both use the default compiler.
set -euo pipefail
cd "$(dirname "$0")/.."

[[ $# -gt 0 ]] || set -- asan tsan
jobs=${KOLO_JOBS:-2}
# Tests are listed when ctest runs (PRE_TEST), not after linking, so that a binary
# that fails under a sanitizer is kept for a look instead of being deleted.
# -O1, as the sanitizers' own documentation advises: the build takes half the
# time of -O2 -g on this project's two cores, and reports keep their lines (-g1).
common=(-DKOLO_WITH_TORCH=OFF -DKOLO_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
        "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST)

# Any report ends the process with a failure: UBSan is also compiled not to recover.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1:strict_init_order=1
# The test harness forks its ranks from a single-threaded parent (the store runs
# in a process of its own), so TSan's default die_after_fork=1 stays.
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/sanitizers/tsan.supp

# The suites run several times slower here: upper bounds that tests put on elapsed
# time (tests/harness/time_bound.h) get this much more room.
export KOLO_TEST_TIME_SCALE=${KOLO_TEST_TIME_SCALE:-4}

# The communicator suite's mpi jobs run under mpirun too (Transports/CommunicatorSuite.<test>/mpi_3ranks).
mpi_tests='(Mpi(Launch|Worker)|KolorunMpi)\..*|Transports/Communicator[A-Za-z]*\..*/mpi_[0-9]+ranks'
# ctest names are Suite.Test (or Prefix/Suite.Test/Param for parameterized ones).
# The communicator suite runs every layout in the normal test run. Under a
# sanitizer, layouts that only repeat the code of a smaller one are left out:
# a fourth rank or a third host exercises no thread or buffer that two or three
# ranks do not. AddressSanitizer keeps one or two layouts per transport, every
# single-rank one, and the hierarchy's shapes (two hosts of one, one host of
# three, over gloo).
asan_repeats='Transports/CommunicatorSuite\..*/(shm_[24]ranks|shm_single_copy_3ranks|tcp_[24]ranks|gloo_[34]ranks|hierarchical_3hosts_of_2|hierarchical_over_gloo_3hosts_of_2|ps_2servers_3ranks)'
# ThreadSanitizer, about 4x slower still, keeps one layout per transport (shm,
# tcp, gloo, hierarchical, parameter servers) and the single-rank ones; the
# peer-failure suites keep shm, tcp and hierarchical; the sweep runs at 2 ranks.
tsan_repeats='Transports/CommunicatorSuite\..*/(shm_(2|4)ranks|shm_single_copy_[23]ranks|tcp_1rank|tcp_[24]ranks|gloo_[34]ranks|hierarchical_(3hosts_of_2|2hosts_of_1|1host_of_3)|hierarchical_over_gloo_.*|ps_(1server_1rank|2servers_3ranks|3servers_2ranks))|Transports/CommunicatorPeerFailures\..*/(gloo_4ranks|shm_single_copy_3ranks|hierarchical_over_gloo_2hosts_of_2)|Ranks/CollectivesSweep\..*/N[134]'
tsan_suites='Fork|Settings|EngineBehaviour|EngineRoutes|EngineExpress|EngineExpressOps|EngineEager|MappingCache|ShareableMemory|ShmInPlace|InPlaceApi|CollectivesSweep|CollectiveErrors|ShmCommunicator|CommunicatorSuite|CommunicatorPeerFailures|CommunicatorAbort|NetworkSetup|Tcp[A-Za-z]*|HierarchicalCommunicator|StallInspector|Timeline|FlightRecorder|ProcessSets|Store[A-Za-z]*|Failure'

# The Fork suite, run apart from the others in each sanitizer's build, with up
# to three tries per test (why: at the asan and tsan runs below).
fork_suite() {  # dir
  ctest --test-dir "$1" -j2 --output-on-failure --timeout 900 --repeat until-pass:3 -R "^Fork\..*\$"
}

build() {  # dir sanitizers
  local started=$SECONDS
  cmake -S . -B "$1" "${common[@]}" "-DKOLO_SANITIZE=$2" -DCMAKE_CXX_FLAGS=-fno-sanitize-recover=undefined >/dev/null
  cmake --build "$1" -j"$jobs" --target kolo_tests
  echo "test-sanitizers: built $1 in $((SECONDS - started)) s"
}

for run in "$@"; do
  case "$run" in
    asan)
      build build-asan "address;undefined"
      started=$SECONDS
      # InstallAndFindPackage builds an outside project against the install, which
      # would need the sanitizer runtime too; the normal test run covers it.
      ctest --test-dir build-asan -j2 --output-on-failure --timeout 900 -E "^(InstallAndFindPackage|$mpi_tests|$asan_repeats|Fork\..*)\$"
      # The Fork suite apart, without LeakSanitizer: a forked child has only the
      # thread that forked, so what kolo's engine thread held at that moment is
      # unreachable there and reported as leaked, and LeakSanitizer's exit-time
      # check in such a child hangs in about one run in four (10 s, then the test
      # fails). AddressSanitizer's other checks stay on. Each test gets up to three
      # tries: GCC 12's AddressSanitizer takes no lock of its own allocator around
      # fork(), so a child forked while another thread of its parent holds one
      # (kolo's engine thread allocating) deadlocks in its first malloc or free
      # (seen in about one run in eight, stack in the allocator's size-class
      # mutex). The normal test run, with glibc's fork-safe malloc, runs the suite
      # once, without retries.
      ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0 \
        fork_suite build-asan
      # The MPI tests apart: OpenMPI never frees what MPI_Init allocates, so their
      # leak reports are suppressed, narrowly (see the file), with the full stacks
      # that the suppressions need (slower, hence not for every test). use_tls=0:
      # GCC 12's LeakSanitizer crashes ("Tracer caught signal 11") scanning a
      # dynamic-TLS range with a garbage bound in one of four mpirun ranks (seen
      # in every run of MpiLaunch.PublicApiUnderMpirunWithoutKolorun); these
      # processes' TLS is not scanned for pointers, which can only add reports.
      LSAN_OPTIONS=suppressions=$PWD/scripts/sanitizers/openmpi.lsan.supp:fast_unwind_on_malloc=0:use_tls=0 \
        ctest --test-dir build-asan -j2 --output-on-failure --timeout 900 -R "^($mpi_tests)\$"
      echo "test-sanitizers: asan+ubsan tests passed in $((SECONDS - started)) s"
      ;;
    tsan)
      build build-tsan thread
      started=$SECONDS
      ctest --test-dir build-tsan -j2 --output-on-failure --timeout 900 -R "^([A-Za-z]+/)?($tsan_suites)\\." \
        -E "(/mpi_[0-9]+ranks|^Fork\\..*|^($tsan_repeats))\$"
      # The Fork suite apart, each test with up to three tries, for the reason given
      # for AddressSanitizer above: GCC 12's ThreadSanitizer allocator has no fork
      # handlers either (a child hung in its first free, stack in the size-class
      # mutex, where kolo's engine thread had been allocating at the fork).
      fork_suite build-tsan
      echo "test-sanitizers: tsan tests passed in $((SECONDS - started)) s"
      ;;
    *)
      echo "test-sanitizers: unknown run '$run' (asan or tsan)" >&2
      exit 2
      ;;
  esac
done
