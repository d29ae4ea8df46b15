// cross_core_copy: how fast one core can take what another core has just written,
// the ceiling for the copies of a shared-memory collective that cross cores.
//
//   cross_core_copy [--min-bytes 64K] [--max-bytes 4M] [--step-factor 2] [--iters 50] [--json]
//
// For each slot size S, a writer process on the second CPU of this process's
// affinity mask fills two alternating slots of S bytes in shared memory from a
// private 16 MiB vector, and a reader on the first CPU copies each slot out into
// its own 16 MiB vector with streaming stores (kolo's copy of large outputs). The
// rate is what the reader copies per second while both run, one 16 MiB vector per
// iteration, best of --iters; once with the writer using glibc's memcpy
// (`memcpy`) and once kolo's copy_to_shared (`to-shared`, `rep movsb`).
// Beside it, on the reader's CPU alone:
//   local  the same copy out of a slot that this core wrote itself;
//   cma    process_vm_readv of S-byte pieces of the writer's private vector
//          (cross-memory attach, the single-copy path Open MPI uses), which
//          needs no shared memory but goes through the kernel per call.
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/shm/stream_copy.h"
#include "core/bench_options.h"
#include "cpu_affinity.h"

namespace {

using namespace kolo::bench;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kVectorBytes = std::size_t{16} << 20;
constexpr std::size_t kLine = 64;

struct Row {
  std::size_t slot_bytes;
  double local_gbps, cross_memcpy_gbps, cross_shared_gbps, cma_gbps;
};

// Two counters in their own lines, then two slots.
struct alignas(kLine) Handshake {
  std::atomic<std::uint64_t> posted{0};  // slots the writer has filled
  alignas(kLine) std::atomic<std::uint64_t> consumed{0};  // slots the reader has copied out
};

// Waits until `counter` reaches `target`; false after 10 s (the other side died).
bool wait_for(const std::atomic<std::uint64_t>& counter, std::uint64_t target) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (unsigned spins = 0; counter.load(std::memory_order_acquire) < target; ++spins) {
    __builtin_ia32_pause();
    if ((spins & 0xffff) == 0 && Clock::now() > deadline) return false;
  }
  return true;
}

double gbps(std::size_t bytes, Clock::duration d) {
  return static_cast<double>(bytes) / std::chrono::duration<double, std::nano>(d).count();
}

// The writer's and reader's loops over `iters` vectors of slots of `slot` bytes.
double cross_core(std::byte* shared, std::size_t slot, int iters, int writer_cpu, bool to_shared) {
  auto* hs = new (shared) Handshake;
  std::byte* slots = shared + sizeof(Handshake);
  const std::uint64_t per_vector = kVectorBytes / slot;
  const std::uint64_t total = per_vector * static_cast<std::uint64_t>(iters + 1);  // +1: warm-up vector
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error("fork failed");
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    pin_to(writer_cpu);
    std::vector<std::byte> source(kVectorBytes, std::byte{3});
    for (std::uint64_t s = 0; s < total; ++s) {
      if (s >= 2 && !wait_for(hs->consumed, s - 1)) _exit(1);  // the slot of step s-2 is free
      std::byte* dst = slots + (s % 2) * slot;
      const std::byte* src = source.data() + (s % per_vector) * slot;
      if (to_shared) {
        kolo::comm::shm::copy_to_shared(dst, src, slot);
      } else {
        std::memcpy(dst, src, slot);
      }
      hs->posted.store(s + 1, std::memory_order_release);
    }
    _exit(0);
  }
  std::vector<std::byte> out(kVectorBytes, std::byte{1});
  double best = 0;
  Clock::time_point start;
  bool ok = true;
  for (std::uint64_t s = 0; s < total && ok; ++s) {
    if (s % per_vector == 0) start = Clock::now();
    ok = wait_for(hs->posted, s + 1);
    if (!ok) break;
    kolo::comm::shm::copy_streaming(out.data() + (s % per_vector) * slot, slots + (s % 2) * slot, slot);
    hs->consumed.store(s + 1, std::memory_order_release);
    if (s % per_vector == per_vector - 1 && s >= per_vector) best = std::max(best, gbps(kVectorBytes, Clock::now() - start));
  }
  if (!ok) kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error("the writer process failed");
  return best;
}

// The same copy out, of two slots this core filled itself.
double local_copy(std::byte* slot_memory, std::size_t slot, int iters) {
  std::vector<std::byte> source(kVectorBytes, std::byte{3}), out(kVectorBytes, std::byte{1});
  std::memcpy(slot_memory, source.data(), 2 * slot);
  double best = 0;
  for (int i = 0; i <= iters; ++i) {
    const auto start = Clock::now();
    for (std::size_t off = 0; off < kVectorBytes; off += slot)
      kolo::comm::shm::copy_streaming(out.data() + off, slot_memory + (off / slot % 2) * slot, slot);
    if (i > 0) best = std::max(best, gbps(kVectorBytes, Clock::now() - start));
  }
  return best;
}

double cma_copy(std::size_t slot, int iters, int writer_cpu) {
  std::vector<std::byte> source(kVectorBytes, std::byte{3}), out(kVectorBytes, std::byte{1});
  int ready[2], hold[2];  // child -> parent: its vector is written; parent -> child: EOF ends it
  if (pipe(ready) != 0 || pipe(hold) != 0) throw std::runtime_error("pipe failed");
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error("fork failed");
  if (child == 0) {  // writes its (copy-on-write) copy of `source`, then holds it until the parent is done
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    pin_to(writer_cpu);
    close(hold[1]);
    std::memset(source.data(), 5, source.size());
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(1);
    while (read(hold[0], &c, 1) > 0) {
    }
    _exit(0);
  }
  close(ready[1]);
  close(hold[0]);
  char c;
  const bool started = read(ready[0], &c, 1) == 1;
  close(ready[0]);
  auto finish = [&] {
    close(hold[1]);
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
  };
  if (!started) {
    finish();
    throw std::runtime_error("the CMA peer failed");
  }
  double best = 0;
  std::string error;
  for (int i = 0; i <= iters && error.empty(); ++i) {
    const auto start = Clock::now();
    for (std::size_t off = 0; off < kVectorBytes; off += slot) {
      iovec local{out.data() + off, slot}, remote{source.data() + off, slot};
      if (process_vm_readv(child, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(slot)) {
        error = std::string("process_vm_readv: ") + std::strerror(errno);
        break;
      }
    }
    if (i > 0) best = std::max(best, gbps(kVectorBytes, Clock::now() - start));
  }
  finish();
  if (!error.empty()) std::fprintf(stderr, "cross_core_copy: %s (cma column left at 0)\n", error.c_str());
  return error.empty() ? best : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    auto o = parse_bench_options(std::vector<std::string>(argv + 1, argv + argc));
    if (o.show_help) {
      std::cout << bench_usage("cross_core_copy",
                               "Copy-out rate of slots another core has just written, beside the same copy within "
                               "one core and cross-memory attach.");
      return 0;
    }
    const auto cpus = usable_cpus();
    if (cpus.size() < 2) throw std::runtime_error("needs two CPUs in its affinity mask");
    const int reader_cpu = cpus[0], writer_cpu = cpus[1];
    const std::size_t min_slot = std::max<std::size_t>(o.min_bytes, 4096);
    const std::size_t max_slot = std::min(o.max_bytes, kVectorBytes);
    const std::size_t mapping_bytes = sizeof(Handshake) + 2 * max_slot;
    void* shared = mmap(nullptr, mapping_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) throw std::runtime_error("mmap failed");
    pin_to(reader_cpu);
    std::vector<Row> rows;
    for (std::size_t slot = min_slot; slot <= max_slot;
         slot = std::max(slot + 1, static_cast<std::size_t>(static_cast<double>(slot) * o.step_factor))) {
      const std::size_t s = std::max<std::size_t>(kLine, slot / kLine * kLine);
      if (kVectorBytes % s != 0) continue;  // whole slots per vector keep the loops simple
      auto* base = static_cast<std::byte*>(shared);
      rows.push_back({s, local_copy(base + sizeof(Handshake), s, o.iters), cross_core(base, s, o.iters, writer_cpu, false),
                      cross_core(base, s, o.iters, writer_cpu, true), cma_copy(s, o.iters, writer_cpu)});
    }
    munmap(shared, mapping_bytes);
    if (o.json) {
      nlohmann::json j = {{"program", "cross_core_copy"}, {"reader_cpu", reader_cpu}, {"writer_cpu", writer_cpu},
                          {"results", nlohmann::json::array()}};
      for (const auto& r : rows)
        j["results"].push_back({{"slot_bytes", r.slot_bytes},
                                {"local_gbps", r.local_gbps},
                                {"cross_core_memcpy_gbps", r.cross_memcpy_gbps},
                                {"cross_core_to_shared_gbps", r.cross_shared_gbps},
                                {"cma_gbps", r.cma_gbps}});
      std::cout << j.dump() << "\n";
    } else {
      std::printf("# cross_core_copy  reader CPU %d, writer CPU %d; GB/s copied out of 16 MiB, best of %d\n#\n",
                  reader_cpu, writer_cpu, o.iters);
      std::printf("# %12s %12s %12s %12s %12s\n", "slot (B)", "local", "memcpy", "to-shared", "cma");
      std::printf("# %12s %12s %12s %12s %12s\n", "", "", "(cross-core)", "(cross-core)", "");
      for (const auto& r : rows) {
        std::printf("  %12zu %12.2f %12.2f %12.2f %12.2f\n", r.slot_bytes, r.local_gbps, r.cross_memcpy_gbps,
                    r.cross_shared_gbps, r.cma_gbps);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cross_core_copy: %s\n", e.what());
    return 2;
  }
}
