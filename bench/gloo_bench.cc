// gloo_bench: the same sweep as kolo-bench on raw Gloo over TCP (Gloo is what
// PyTorch's CPU data parallelism and Horovod's default controller use). Run it
// under kolorun, which gives each rank KOLO_RANK, KOLO_SIZE and a fresh KOLO_JOB_ID:
//   kolorun -np 2 gloo_bench --op allreduce --algorithm ring --check
// On one host over loopback; across hosts on the address of kolorun's
// --network-interface or KOLO_HOST_ADDR (the hosts must share the temporary
// directory, as network-namespace hosts on one machine do: bench/compare_hosts.py).
// Ranks meet through a gloo FileStore in a directory named after the job (a
// directory left from an earlier job would make gloo abort, so each job gets its
// own, and rank 0 removes it at the end).
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include "core/driver.h"

namespace {

using namespace kolo::bench;

enum class Algorithm { Ring, Bcube, RingChunked, HalvingDoubling };

Algorithm parse_algorithm(const std::string& text) {
  if (text == "ring") return Algorithm::Ring;
  if (text == "bcube") return Algorithm::Bcube;
  if (text == "ring-chunked") return Algorithm::RingChunked;
  if (text == "halving-doubling") return Algorithm::HalvingDoubling;
  throw UsageError("--algorithm needs ring, bcube, ring-chunked or halving-doubling, got '" + text + "'");
}

const char* to_string(Algorithm a) {
  switch (a) {
    case Algorithm::Ring: return "ring";
    case Algorithm::Bcube: return "bcube";
    case Algorithm::RingChunked: return "ring-chunked";
    case Algorithm::HalvingDoubling: return "halving-doubling";
  }
  return "?";
}

int env_int(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) throw UsageError(std::string(name) + " is not set: start gloo_bench with kolorun -np N");
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || v < 0 || v > 1 << 20) throw UsageError(std::string(name) + " is malformed");
  return static_cast<int>(v);
}

std::string store_dir_for_job() {
  const char* job = std::getenv("KOLO_JOB_ID");
  if (job == nullptr || *job == '\0') throw UsageError("KOLO_JOB_ID is not set: start gloo_bench with kolorun -np N");
  for (const char* c = job; *c; ++c)
    if (!std::isalnum(static_cast<unsigned char>(*c)) && *c != '-' && *c != '_') throw UsageError("KOLO_JOB_ID is malformed");
  std::string dir = (std::filesystem::temp_directory_path() / ("kolo-gloo-bench-" + std::string(job))).string();
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error("cannot create " + dir + ": " + std::strerror(errno));
  return dir;
}

// A reduction as the new-style gloo API wants it, and as the old-style classes do.
template <typename T>
gloo::AllreduceOptions::Func reduce_fn(ReduceKind k) {
  using Fn = void (*)(void*, const void*, const void*, size_t);
  switch (k) {
    case ReduceKind::Sum: return static_cast<Fn>(&gloo::sum<T>);
    case ReduceKind::Min: return static_cast<Fn>(&gloo::min<T>);
    case ReduceKind::Max: return static_cast<Fn>(&gloo::max<T>);
    case ReduceKind::Average: break;
  }
  throw UsageError("gloo has no average reduction; use --reduce sum");
}

template <typename T>
const gloo::ReductionFunction<T>* reduction_function(ReduceKind k) {
  switch (k) {
    case ReduceKind::Sum: return gloo::ReductionFunction<T>::sum;
    case ReduceKind::Min: return gloo::ReductionFunction<T>::min;
    case ReduceKind::Max: return gloo::ReductionFunction<T>::max;
    case ReduceKind::Average: break;
  }
  throw UsageError("gloo has no average reduction; use --reduce sum");
}

class GlooBackend : public Backend {
 public:
  GlooBackend(Algorithm algorithm, std::shared_ptr<gloo::Context> context, std::string store_dir)
      : algorithm_(algorithm), context_(std::move(context)), store_dir_(std::move(store_dir)) {}

  ~GlooBackend() override {
    // main() passes a barrier after the sweep, so no peer reads the store any more;
    // on an error path a peer may still be connecting and will time out.
    if (context_->rank == 0) {
      std::error_code ignored;
      std::filesystem::remove_all(store_dir_, ignored);
    }
  }

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  std::string label() const override { return std::string("gloo-") + to_string(algorithm_); }
  std::map<std::string, std::string> details() const override { return {{"transport", "tcp"}}; }

  void validate(const BenchOptions& o) const override {
    if (o.collective == Collective::Reducescatter)
      throw UsageError("gloo_bench does not time reducescatter (gloo offers it only inside its halving-doubling)");
    if (o.collective != Collective::Allreduce && algorithm_ != Algorithm::Ring)
      throw UsageError("--algorithm applies to allreduce only");
    switch (o.type) {
      case ElemType::Float32: case ElemType::Float64: case ElemType::Int32: case ElemType::Int64:
      case ElemType::Int8: case ElemType::UInt8: break;
      default: throw UsageError(std::string("gloo_bench does not time ") + kolo::bench::to_string(o.type));
    }
    if (o.collective == Collective::Allreduce) (void)reduce_fn<float>(o.reduce);
  }

  RunOnce prepare(const BenchOptions& o, const SizePoint& p, void* send, void* recv) override {
    switch (o.type) {
      case ElemType::Float32: return prepare_typed<float>(o, p, send, recv);
      case ElemType::Float64: return prepare_typed<double>(o, p, send, recv);
      case ElemType::Int32: return prepare_typed<std::int32_t>(o, p, send, recv);
      case ElemType::Int64: return prepare_typed<std::int64_t>(o, p, send, recv);
      case ElemType::Int8: return prepare_typed<std::int8_t>(o, p, send, recv);
      case ElemType::UInt8: return prepare_typed<std::uint8_t>(o, p, send, recv);
      default: break;
    }
    throw UsageError("unsupported type");
  }

  void barrier() override {
    gloo::BarrierOptions options(context_);
    options.setTag(kBarrierTag);
    gloo::barrier(options);
  }

  std::int64_t sum_over_ranks(std::int64_t value) override {
    gloo::AllreduceOptions options(context_);
    options.setOutput(&value, 1);
    options.setReduceFunction(reduce_fn<std::int64_t>(ReduceKind::Sum));
    options.setTag(kSumTag);
    gloo::allreduce(options);
    return value;
  }

 private:
  static constexpr std::uint32_t kBarrierTag = 1;
  static constexpr std::uint32_t kSumTag = 2;
  static constexpr std::uint32_t kBenchTag = 3;

  template <typename T>
  RunOnce prepare_typed(const BenchOptions& o, const SizePoint& p, void* send_raw, void* recv_raw) {
    T* send = static_cast<T*>(send_raw);
    T* recv = static_cast<T*>(recv_raw);
    switch (o.collective) {
      case Collective::Allreduce: return prepare_allreduce<T>(o, p, send, recv);
      case Collective::Broadcast: {
        // Options are built once per size and reused, the cheapest way to drive gloo.
        auto options = std::make_shared<gloo::BroadcastOptions>(context_);
        options->setOutput(send, p.send_count);
        options->setRoot(o.root);
        options->setTag(kBenchTag);
        return [=] {
          gloo::broadcast(*options);
          return send;
        };
      }
      case Collective::Allgather: {
        auto options = std::make_shared<gloo::AllgatherOptions>(context_);
        options->setInput(send, p.send_count);
        options->setOutput(recv, p.recv_count);
        options->setTag(kBenchTag);
        return [=] {
          gloo::allgather(*options);
          return recv;
        };
      }
      case Collective::Alltoall: {
        auto options = std::make_shared<gloo::AlltoallOptions>(context_);
        options->setInput(send, p.send_count);
        options->setOutput(recv, p.recv_count);
        options->setTag(kBenchTag);
        return [=] {
          gloo::alltoall(*options);
          return recv;
        };
      }
      case Collective::Reducescatter: break;
    }
    throw UsageError("unsupported collective");
  }

  template <typename T>
  RunOnce prepare_allreduce(const BenchOptions& o, const SizePoint& p, T* send, T* recv) {
    const std::size_t count = p.send_count;
    if (algorithm_ == Algorithm::Ring || algorithm_ == Algorithm::Bcube) {
      auto options = std::make_shared<gloo::AllreduceOptions>(context_);
      if (!o.in_place) options->setInput(send, count);
      options->setOutput(recv, count);
      options->setAlgorithm(algorithm_ == Algorithm::Ring ? gloo::AllreduceOptions::Algorithm::RING
                                                          : gloo::AllreduceOptions::Algorithm::BCUBE);
      options->setReduceFunction(reduce_fn<T>(o.reduce));
      options->setTag(kBenchTag);
      return [=] {
        gloo::allreduce(*options);
        return recv;
      };
    }
    // The older algorithm classes reduce in place: out of place costs a copy first,
    // as it would for their users.
    const std::vector<T*> ptrs{recv};
    std::shared_ptr<gloo::Algorithm> algorithm;
    if (algorithm_ == Algorithm::RingChunked) {
      algorithm = std::make_shared<gloo::AllreduceRingChunked<T>>(context_, ptrs, static_cast<int>(count),
                                                                  reduction_function<T>(o.reduce));
    } else {
      algorithm = std::make_shared<gloo::AllreduceHalvingDoubling<T>>(context_, ptrs, static_cast<int>(count),
                                                                      reduction_function<T>(o.reduce));
    }
    const bool copy = !o.in_place;
    return [=] {
      if (copy) std::memcpy(recv, send, count * sizeof(T));
      algorithm->run();
      return recv;
    };
  }

  Algorithm algorithm_;
  std::shared_ptr<gloo::Context> context_;
  std::string store_dir_;
};

std::unique_ptr<GlooBackend> connect(Algorithm algorithm) {
  const int rank = env_int("KOLO_RANK");
  const int size = env_int("KOLO_SIZE");
  if (rank >= size) throw UsageError("KOLO_RANK must be below KOLO_SIZE");
  const std::string dir = store_dir_for_job();
  gloo::transport::tcp::attr attr;
  attr.ai_family = AF_INET;
  // Across hosts, the address kolo's own TCP communicators would use: kolorun's
  // --network-interface (KOLO_IFACE), else this host's KOLO_HOST_ADDR; on one
  // host, loopback.
  const char* iface = std::getenv("KOLO_IFACE");
  const char* host_addr = std::getenv("KOLO_HOST_ADDR");
  if (iface != nullptr && *iface != '\0') attr.iface = iface;
  else attr.hostname = host_addr != nullptr && *host_addr != '\0' ? host_addr : "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(std::chrono::seconds(60));
  context->connectFullMesh(store, device);
  return std::make_unique<GlooBackend>(algorithm, std::move(context), dir);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Algorithm algorithm = Algorithm::Ring;
    const std::vector<ExtraFlag> extras = {
        {"--algorithm", "ring|bcube|ring-chunked|halving-doubling", "gloo's allreduce algorithm (ring)",
         [&](const std::string& v) { algorithm = parse_algorithm(v); }},
    };
    const auto options = parse_bench_options(std::vector<std::string>(argv + 1, argv + argc), extras);
    if (options.show_help) {
      std::cout << bench_usage("gloo_bench", "Times raw Gloo collectives over TCP; run under kolorun -np N.",
                               extras);
      return 0;
    }
    auto backend = connect(algorithm);
    const int status = run_sweep(options, *backend, "gloo_bench", std::cout);
    backend->barrier();  // nobody removes the store directory while a peer may still read it
    return status;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "gloo_bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_bench: %s\n", e.what());
    return 1;
  }
}
