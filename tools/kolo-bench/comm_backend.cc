#include "comm_backend.h"

#include <vector>

#include "kolo/error.h"
#include "kolo_types.h"

namespace kolo::bench {

BenchCommunicator make_bench_communicator(int generation) {
  auto job = bootstrap::Job::join(generation);
  auto comm = job.communicator();
  return BenchCommunicator{std::move(job), std::move(comm)};
}

CommBackend::CommBackend(BenchCommunicator comm, BufferKind buffers)
    : job_(std::move(comm.job)), comm_(std::move(comm.comm)), buffers_(buffers) {}

std::map<std::string, std::string> CommBackend::details() const {
  return {{"communicator", comm_->name()}, {"buffers", to_string(buffers_.kind())}};
}

void CommBackend::validate(const BenchOptions& o) const {
  if (o.reduce == ReduceKind::Average)
    throw UsageError("--reduce avg is done by kolo's engine, not its communicator: use --mode api");
}

RunOnce CommBackend::prepare(const BenchOptions& o, const SizePoint& p, void* send, void* recv) {
  comm::Communicator* c = comm_.get();
  const DataType dtype = to_kolo(o.type);
  const std::size_t elem = elem_size(o.type);
  const auto n = static_cast<std::size_t>(c->size());
  const comm::Placement placement{buffers_.memory_of(send), buffers_.memory_of(recv)};
  switch (o.collective) {
    case Collective::Allreduce: {
      const ReduceOp op = to_kolo(o.reduce);
      return [=] {
        c->allreduce(send, recv, p.send_count, dtype, op, {}, placement);
        return recv;
      };
    }
    case Collective::Broadcast:
      return [=, root = o.root] {
        c->broadcast(send, p.send_count * elem, root);
        return send;
      };
    case Collective::Allgather: {
      auto blocks = std::make_shared<std::vector<std::size_t>>(n, p.block_count * elem);
      return [=] {
        c->allgatherv(send, p.block_count * elem, recv, *blocks, placement);
        return recv;
      };
    }
    case Collective::Alltoall: {
      auto blocks = std::make_shared<std::vector<std::size_t>>(n, p.block_count * elem);
      return [=] {
        c->alltoallv(send, *blocks, recv, *blocks);
        return recv;
      };
    }
    case Collective::Reducescatter: {
      auto counts = std::make_shared<std::vector<std::size_t>>(n, p.block_count);
      const ReduceOp op = to_kolo(o.reduce);
      return [=] {
        c->reduce_scatter(send, recv, *counts, dtype, op);
        return recv;
      };
    }
  }
  throw UsageError("unsupported collective");
}

std::int64_t CommBackend::sum_over_ranks(std::int64_t value) {
  comm_->allreduce(&value, &value, 1, DataType::Int64, ReduceOp::Sum);
  return value;
}

}  // namespace kolo::bench
