#include "api_backend.h"

#include <memory>

#include "kolo/kolo.h"
#include "kolo_types.h"

namespace kolo::bench {
namespace {

Tensor view(void* data, ElemType type, std::size_t count, const ShareableMemory* memory) {
  return Tensor{data, to_kolo(type), Shape{static_cast<std::int64_t>(count)}, memory};
}

}  // namespace

int ApiBackend::rank() const { return kolo::rank(); }
int ApiBackend::size() const { return kolo::size(); }

void ApiBackend::validate(const BenchOptions& o) const {
  if (o.collective == Collective::Reducescatter && o.reduce != ReduceKind::Sum && o.reduce != ReduceKind::Average)
    throw UsageError("kolo's reducescatter reduces with sum or avg only");
}

RunOnce ApiBackend::prepare(const BenchOptions& o, const SizePoint& p, void* send, void* recv) {
  // One name per size: every iteration after the first takes the response cache's
  // fast path, as the steps of a training loop do.
  const std::string name = std::string("kolo-bench/") + to_string(o.collective) + "/" + std::to_string(p.bytes);
  const Tensor input = view(send, o.type, p.send_count, buffers_.memory_of(send));
  switch (o.collective) {
    case Collective::Allreduce: {
      AllreduceOptions options;
      options.op = to_kolo(o.reduce);
      options.name = name;
      if (o.in_place) {
        return [=] {
          kolo::allreduce(input, options);
          return send;
        };
      }
      const Tensor output = view(recv, o.type, p.recv_count, buffers_.memory_of(recv));
      return [=] {
        kolo::allreduce(input, output, options);
        return recv;
      };
    }
    case Collective::Broadcast:
      return [=, root = o.root] {
        kolo::broadcast(input, root, {name});
        return send;
      };
    case Collective::Allgather: {
      // The API allocates the output; keeping the last one alive lets the check read it.
      auto out = std::make_shared<Buffer>();
      return [=] {
        *out = kolo::allgather(input, {name});
        return static_cast<const void*>(out->data());
      };
    }
    case Collective::Alltoall: {
      auto out = std::make_shared<Buffer>();
      return [=] {
        *out = kolo::alltoall(input, {}, {name});
        return static_cast<const void*>(out->data());
      };
    }
    case Collective::Reducescatter: {
      auto out = std::make_shared<Buffer>();
      const ReduceOp op = to_kolo(o.reduce);
      return [=] {
        *out = kolo::reducescatter(input, op, {name});
        return static_cast<const void*>(out->data());
      };
    }
  }
  throw UsageError("unsupported collective");
}

void ApiBackend::barrier() { kolo::barrier({"kolo-bench/barrier"}); }

std::int64_t ApiBackend::sum_over_ranks(std::int64_t value) {
  AllreduceOptions options;
  options.op = ReduceOp::Sum;
  options.name = "kolo-bench/sum-over-ranks";
  kolo::allreduce(make_tensor(&value, 1), options);
  return value;
}

}  // namespace kolo::bench
