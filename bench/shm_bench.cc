// Allreduce bandwidth and latency of the shared-memory communicator.
//
//   shm_bench [-n RANKS] [-b MIN_BYTES] [-e MAX_BYTES] [-f FACTOR] [-t float32|float16|bfloat16|float64|int32]
//             [-o sum|min|max|product] [-w SECONDS]
//
// Forks RANKS processes on this host, which join one shm job and allreduce every
// size from MIN_BYTES to MAX_BYTES (multiplying by FACTOR). For each size it
// prints the time of one allreduce (the slowest rank's average), the bus
// bandwidth in the nccl-tests convention (algbw = bytes / time,
// busbw = algbw * 2 (n - 1) / n) and the CPU time of one allreduce (the
// busiest rank's), which a loaded machine disturbs much less than the time.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "comm/shm/shm_communicator.h"
#include "common/env.h"
#include "kolo/error.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  int ranks = 2;
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{256} << 20;
  std::size_t factor = 2;
  kolo::DataType dtype = kolo::DataType::Float32;
  kolo::ReduceOp op = kolo::ReduceOp::Sum;
  double seconds_per_size = 0.3;  // target measuring time per size
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [-n RANKS] [-b MIN_BYTES] [-e MAX_BYTES] [-f FACTOR] [-t DTYPE] [-o OP] [-w SECONDS]\n"
               "sizes accept K/M/G suffixes; DTYPE: float32 float16 bfloat16 float64 int32; OP: sum min max product\n",
               argv0);
  std::exit(2);
}

kolo::DataType parse_dtype(const std::string& s) {
  if (s == "float32") return kolo::DataType::Float32;
  if (s == "float16") return kolo::DataType::Float16;
  if (s == "bfloat16") return kolo::DataType::BFloat16;
  if (s == "float64") return kolo::DataType::Float64;
  if (s == "int32") return kolo::DataType::Int32;
  throw kolo::InvalidArgumentError("unknown dtype " + s);
}

kolo::ReduceOp parse_op(const std::string& s) {
  if (s == "sum") return kolo::ReduceOp::Sum;
  if (s == "min") return kolo::ReduceOp::Min;
  if (s == "max") return kolo::ReduceOp::Max;
  if (s == "product") return kolo::ReduceOp::Product;
  throw kolo::InvalidArgumentError("unknown op " + s);
}

Config parse_args(int argc, char** argv) {
  Config c;
  int opt;
  while ((opt = ::getopt(argc, argv, "n:b:e:f:t:o:w:h")) != -1) {
    switch (opt) {
      case 'n': c.ranks = static_cast<int>(kolo::env::parse_int(optarg, "-n")); break;
      case 'b': c.min_bytes = static_cast<std::size_t>(kolo::env::parse_int(optarg, "-b")); break;
      case 'e': c.max_bytes = static_cast<std::size_t>(kolo::env::parse_int(optarg, "-e")); break;
      case 'f': c.factor = static_cast<std::size_t>(kolo::env::parse_int(optarg, "-f")); break;
      case 't': c.dtype = parse_dtype(optarg); break;
      case 'o': c.op = parse_op(optarg); break;
      case 'w': c.seconds_per_size = kolo::env::parse_double(optarg, "-w"); break;
      default: usage(argv[0]);
    }
  }
  if (c.ranks < 1 || c.factor < 2 || c.min_bytes < 1 || c.max_bytes < c.min_bytes) usage(argv[0]);
  return c;
}

std::string random_job_id() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, "bench-%08x%08x", rd(), rd());
  return buf;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// CPU time (user + system) this process has used: on a shared, loaded machine it
// says more about the cost of an operation than the wall clock does.
double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// The slowest rank's value, so that every rank prints and decides alike.
double max_over_ranks(kolo::comm::Communicator& comm, double value) {
  double out = 0;
  comm.allreduce(&value, &out, 1, kolo::DataType::Float64, kolo::ReduceOp::Max);
  return out;
}

// One checked allreduce: every rank contributes rank + 1 everywhere.
void verify(kolo::comm::Communicator& comm, std::vector<std::byte>& send, std::vector<std::byte>& recv,
            std::size_t count) {
  auto* in = reinterpret_cast<float*>(send.data());
  auto* out = reinterpret_cast<float*>(recv.data());
  std::fill(in, in + count, static_cast<float>(comm.rank() + 1));
  std::fill(out, out + count, -1.0f);
  comm.allreduce(in, out, count, kolo::DataType::Float32, kolo::ReduceOp::Sum);
  const float expected = static_cast<float>(comm.size() * (comm.size() + 1) / 2);
  for (std::size_t i = 0; i < count; ++i) {
    if (out[i] != expected) {
      throw kolo::Error("wrong result at element " + std::to_string(i) + " of " + std::to_string(count) + ": " +
                        std::to_string(out[i]) + " instead of " + std::to_string(expected));
    }
  }
}

void run_rank(int rank, const Config& config, const std::string& job_id) {
  auto comm = kolo::comm::make_shm_communicator(rank, config.ranks, job_id, {});
  const std::size_t es = kolo::element_size(config.dtype);
  std::vector<std::byte> send(std::max(config.max_bytes, es)), recv(send.size());
  // Touch everything once so that page faults are not measured.
  std::memset(send.data(), 0, send.size());
  std::memset(recv.data(), 0, recv.size());
  if (rank == 0) {
    std::printf("# kolo shm allreduce, %d ranks, %s %s\n", config.ranks, kolo::to_string(config.dtype),
                kolo::to_string(config.op));
    std::printf("%12s %12s %8s %12s %12s %12s %12s\n", "bytes", "count", "iters", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", "cpu(us)");
  }
  for (std::size_t bytes = config.min_bytes; bytes <= config.max_bytes; bytes *= config.factor) {
    const std::size_t count = std::max<std::size_t>(1, bytes / es);
    auto once = [&] { comm->allreduce(send.data(), recv.data(), count, config.dtype, config.op); };
    // Warm up, then pick the iteration count from the warm-up's speed. Every
    // decision about how many collectives to run must be the same on all ranks.
    once();
    comm->barrier();
    const int warm = bytes >= (std::size_t{16} << 20) ? 2 : 20;
    auto t0 = Clock::now();
    for (int i = 0; i < warm; ++i) once();
    double per_op = max_over_ranks(*comm, seconds_since(t0) / warm);
    int iters = std::clamp(static_cast<int>(config.seconds_per_size / per_op), 3, 100000);
    comm->barrier();
    t0 = Clock::now();
    const double cpu0 = cpu_seconds();
    for (int i = 0; i < iters; ++i) once();
    const double cpu = max_over_ranks(*comm, (cpu_seconds() - cpu0) / iters);
    double time = max_over_ranks(*comm, seconds_since(t0) / iters);
    if (config.dtype == kolo::DataType::Float32 && config.op == kolo::ReduceOp::Sum) verify(*comm, send, recv, count);
    if (rank == 0) {
      double actual = static_cast<double>(count * es);
      double algbw = actual / time / 1e9;
      double busbw = algbw * 2.0 * (config.ranks - 1) / config.ranks;
      std::printf("%12zu %12zu %8d %12.2f %12.3f %12.3f %12.2f\n", count * es, count, iters, time * 1e6, algbw, busbw,
                  cpu * 1e6);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Config config = parse_args(argc, argv);
  const std::string job_id = random_job_id();
  std::vector<pid_t> children;
  for (int r = 0; r < config.ranks; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int code = 0;
      try {
        run_rank(r, config, job_id);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stdout);
      ::_exit(code);
    }
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    children.push_back(pid);
  }
  int failures = 0;
  for (std::size_t i = 0; i < children.size(); ++i) {
    int status = 0;
    pid_t pid = ::wait(&status);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failures;
      // One rank failed: the others would only fail in turn.
      for (pid_t c : children) {
        if (c != pid) ::kill(c, SIGKILL);
      }
    }
  }
  std::string leftover = "/dev/shm/kolo-" + job_id + "-shm";
  ::unlink(leftover.c_str());
  return failures == 0 ? 0 : 1;
}
