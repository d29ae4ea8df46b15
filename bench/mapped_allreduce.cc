// mapped_allreduce: what a 2-rank float allreduce on one host costs when each rank
// can read its peer's input and output where they lie, instead of through a
// shared slot: the bound for a kolo path over buffers the ranks can map (memory
// kolo would allocate from a memfd, as MPI_Alloc_mem or NCCL's registered
// buffers): the bound that the shared-memory communicator's in-place path
// (comm/shm/shm_in_place.h) is compared with.
//
//   mapped_allreduce [--min-bytes 1M] [--max-bytes 256M] [--step-factor 4] [--iters 50] [--json]
//
// Two processes, one per CPU of this process's affinity mask, each put their
// input and output in memfds and map the other's through /proc/<pid>/fd. Per
// chunk of 1 MiB, each rank reduces its half of the chunk from both inputs into
// its own output (through a 16 KiB block, then streaming stores, as kolo's
// large outputs), says so, and copies the peer's half out of the peer's output;
// at the end each waits until the other has read all it needs. Results are
// checked. The time is the median over --iters calls of the slower rank's.
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/shm/stream_copy.h"
#include "common/reduce.h"
#include "core/bench_options.h"
#include "cpu_affinity.h"

namespace {

using namespace kolo::bench;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
constexpr std::size_t kBlockBytes = std::size_t{16} << 10;
constexpr int kMaxIters = 1000;

// Per rank: what it publishes to the other, each counter in its own line.
struct alignas(64) RankState {
  std::atomic<std::uint64_t> reduced{0};   // chunks whose reduced half is in its output
  alignas(64) std::atomic<std::uint64_t> done{0};  // calls after which it read all it needs
  alignas(64) std::atomic<int> pid{0};
  int in_fd = -1, out_fd = -1;
  double times_us[kMaxIters];
};

struct Shared {
  RankState rank[2];
  std::atomic<int> ready{0};
};

float* map_fd(int fd, std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw std::runtime_error("mmap of a memfd failed");
  return static_cast<float*>(p);
}

int memfd_of(const char* name, std::size_t bytes) {
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) throw std::runtime_error("memfd_create failed");
  return fd;
}

// The peer's memfd, opened through /proc (needs the right to trace the peer, as
// cross-memory attach does).
int open_peer_fd(int pid, int fd) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int opened = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (opened < 0) throw std::runtime_error("cannot open " + path);
  return opened;
}

void wait_at_least(const std::atomic<std::uint64_t>& counter, std::uint64_t target) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (unsigned spins = 0; counter.load(std::memory_order_acquire) < target; ++spins) {
    if ((spins & 0xffff) == 0 && Clock::now() > deadline) throw std::runtime_error("the peer stopped");
  }
}

void reduce_streaming(float* out, const float* a, const float* b, std::size_t count) {
  alignas(64) float block[kBlockBytes / sizeof(float)];
  for (std::size_t done = 0; done < count;) {
    const std::size_t len = std::min(count - done, kBlockBytes / sizeof(float));
    const void* srcs[2] = {a + done, b + done};
    kolo::reduce_many(block, srcs, 2, len, kolo::DataType::Float32, kolo::ReduceOp::Sum);
    kolo::comm::shm::copy_streaming(out + done, block, len * sizeof(float));
    done += len;
  }
}

// One rank's part: set up, run `iters` calls, check the last result. Returns the
// process's exit status.
int run_rank(Shared& shared, int me, int cpu, std::size_t bytes, int iters) {
  pin_to(cpu);
  const std::size_t count = bytes / sizeof(float), per_chunk = kChunkBytes / sizeof(float);
  RankState& mine = shared.rank[me];
  RankState& peer = shared.rank[1 - me];
  mine.in_fd = memfd_of("kolo-probe-in", bytes);
  mine.out_fd = memfd_of("kolo-probe-out", bytes);
  float* in = map_fd(mine.in_fd, bytes);
  float* out = map_fd(mine.out_fd, bytes);
  for (std::size_t i = 0; i < count; ++i) {
    in[i] = static_cast<float>(me + 1 + static_cast<int>(i % 7));
    out[i] = 0.0f;
  }
  mine.pid.store(getpid(), std::memory_order_release);
  shared.ready.fetch_add(1);
  while (shared.ready.load() < 2) {
  }
  const float* peer_in = map_fd(open_peer_fd(peer.pid.load(), peer.in_fd), bytes);
  const float* peer_out = map_fd(open_peer_fd(peer.pid.load(), peer.out_fd), bytes);
  volatile float touch = 0;  // fault the peer's pages in before timing
  for (std::size_t i = 0; i < count; i += 1024) touch = touch + peer_in[i] + peer_out[i];
  shared.ready.fetch_add(1);
  while (shared.ready.load() < 4) {
  }
  std::uint64_t chunks = 0;
  for (int call = 0; call < iters; ++call) {
    const auto start = Clock::now();
    for (std::size_t base = 0; base < count; base += per_chunk) {
      const std::size_t len = std::min(per_chunk, count - base), half = len / 2 / 16 * 16;
      const std::size_t own_begin = me == 0 ? 0 : half, own_end = me == 0 ? half : len;
      reduce_streaming(out + base + own_begin, in + base + own_begin, peer_in + base + own_begin, own_end - own_begin);
      mine.reduced.store(++chunks, std::memory_order_release);
      wait_at_least(peer.reduced, chunks);
      const std::size_t peer_begin = me == 0 ? half : 0, peer_end = me == 0 ? len : half;
      kolo::comm::shm::copy_streaming(out + base + peer_begin, peer_out + base + peer_begin,
                                      (peer_end - peer_begin) * sizeof(float));
    }
    mine.done.store(static_cast<std::uint64_t>(call + 1), std::memory_order_release);
    wait_at_least(peer.done, static_cast<std::uint64_t>(call + 1));  // neither returns while read
    mine.times_us[call] = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (out[i] != static_cast<float>(3 + 2 * static_cast<int>(i % 7))) {
      std::fprintf(stderr, "mapped_allreduce: rank %d: wrong result at element %zu\n", me, i);
      return 1;
    }
  }
  return 0;
}

double measure(std::size_t bytes, int iters, int cpu0, int cpu1) {
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) throw std::runtime_error("mmap failed");
  auto* shared = new (mem) Shared();
  pid_t children[2];
  for (int me = 0; me < 2; ++me) {
    children[me] = fork();
    if (children[me] == 0) {
      int status = 1;
      try {
        status = run_rank(*shared, me, me == 0 ? cpu0 : cpu1, bytes, iters);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "mapped_allreduce: rank %d: %s\n", me, e.what());
      }
      _exit(status);
    }
  }
  bool ok = true;
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  std::vector<double> slower(static_cast<std::size_t>(iters));
  for (int i = 0; i < iters; ++i) slower[i] = std::max(shared->rank[0].times_us[i], shared->rank[1].times_us[i]);
  munmap(mem, sizeof(Shared));
  if (!ok) throw std::runtime_error("a rank failed (see above)");
  std::sort(slower.begin(), slower.end());
  return slower[slower.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    auto o = parse_bench_options(std::vector<std::string>(argv + 1, argv + argc));
    if (o.show_help) {
      std::cout << bench_usage("mapped_allreduce",
                               "A 2-rank float allreduce reading the peer's buffers through memfd mappings: the "
                               "bound for a path over buffers the ranks can map.");
      return 0;
    }
    const auto cpus = usable_cpus();
    if (cpus.size() < 2) throw std::runtime_error("needs two CPUs in its affinity mask");
    const int iters = std::clamp(o.iters, 1, kMaxIters);
    nlohmann::json results = nlohmann::json::array();
    if (!o.json) std::printf("# mapped_allreduce  2 ranks on CPUs %d and %d, median of %d calls\n#\n#%13s %12s %12s\n",
                             cpus[0], cpus[1], iters, "size (B)", "time (us)", "busbw GB/s");
    for (std::size_t bytes = std::max<std::size_t>(o.min_bytes, kChunkBytes); bytes <= o.max_bytes;
         bytes = std::max(bytes + 1, static_cast<std::size_t>(static_cast<double>(bytes) * o.step_factor))) {
      const std::size_t b = bytes / kChunkBytes * kChunkBytes;
      const double us = measure(b, iters, cpus[0], cpus[1]);
      const double busbw = static_cast<double>(b) / us / 1e3;  // 2 ranks: bus factor 1
      if (o.json) {
        results.push_back({{"bytes", b}, {"median_us", us}, {"busbw_gbps", busbw}});
      } else {
        std::printf("%14zu %12.1f %12.2f\n", b, us, busbw);
      }
    }
    if (o.json) std::cout << nlohmann::json{{"program", "mapped_allreduce"}, {"results", results}}.dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "mapped_allreduce: " << e.what() << "\n";
    return 2;
  }
}
