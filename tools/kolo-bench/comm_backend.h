// kolo-bench --mode comm: the communicator alone, without the engine (no
// negotiation, no fusion, no background thread), so that comparing with --mode api
// shows what the engine costs.
#pragma once

#include <memory>

#include "bootstrap/bootstrap.h"
#include "comm/communicator.h"
#include "core/driver.h"
#include "kolo_types.h"

namespace kolo::bench {

// A communicator and the job it was set up in (TCP communicators keep using the
// job's store), destroyed in that order.
struct BenchCommunicator {
  bootstrap::Job job;
  std::unique_ptr<comm::Communicator> comm;
};

// Joins the job and builds the communicator init() would (KOLO_BACKEND and the
// job's layout choose: shm on one host, self for one rank, tcp or hierarchical
// across hosts, through the parameter servers where the job has them) as
// session `generation` (its rendezvous keys and shared-memory names).
BenchCommunicator make_bench_communicator(int generation);

// The session --mode comm runs as: init() is never called there, so it is the
// first, which is also the one parameter servers serve first.
constexpr int kCommModeGeneration = 0;
// A session beside init()'s (numbered 0, 1, ...), which it never meets. No
// parameter server serves it: they serve init()'s sessions in turn.
constexpr int kBesideInitGeneration = 1 << 30;

class CommBackend : public Backend {
 public:
  CommBackend(BenchCommunicator comm, BufferKind buffers);
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  std::string label() const override { return "kolo-comm"; }
  std::map<std::string, std::string> details() const override;
  void validate(const BenchOptions& options) const override;
  BufferMemory allocate(std::size_t bytes) override { return buffers_.allocate(bytes); }
  RunOnce prepare(const BenchOptions& options, const SizePoint& point, void* send, void* recv) override;
  void barrier() override { comm_->barrier(); }
  std::int64_t sum_over_ranks(std::int64_t value) override;

  comm::Communicator& communicator() { return *comm_; }

 private:
  bootstrap::Job job_;  // outlives comm_
  std::unique_ptr<comm::Communicator> comm_;
  BenchBuffers buffers_;
};

}  // namespace kolo::bench
