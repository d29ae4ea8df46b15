// kolo-bench --mode comm: the communicator alone, without the engine (no
// negotiation, no fusion, no background thread), so that comparing with --mode api
// shows what the engine costs.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/driver.h"
#include "kolo_types.h"
#include "store/store.h"

namespace kolo::bench {

// A communicator and the rendezvous store client it was set up through (TCP
// communicators keep using it), destroyed in that order.
struct BenchCommunicator {
  std::unique_ptr<store::StoreClient> store;
  std::unique_ptr<comm::Communicator> comm;
};

// Builds the communicator init() would (KOLO_BACKEND and the job's layout choose:
// shm on one host, self for one rank, gloo or hierarchical across hosts) from the
// environment kolorun sets, under its own job id and store keys (KOLO_JOB_ID +
// "-bench"), so that it never meets the engine's.
BenchCommunicator make_bench_communicator();

class CommBackend : public Backend {
 public:
  CommBackend(BenchCommunicator comm, BufferKind buffers);
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  std::string label() const override { return "kolo-comm"; }
  std::map<std::string, std::string> details() const override;
  void validate(const BenchOptions& options) const override;
  BufferMemory allocate(std::size_t bytes) override { return allocate_as(buffers_, bytes); }
  RunOnce prepare(const BenchOptions& options, const SizePoint& point, void* send, void* recv) override;
  void barrier() override { comm_->barrier(); }
  std::int64_t sum_over_ranks(std::int64_t value) override;

  comm::Communicator& communicator() { return *comm_; }

 private:
  std::unique_ptr<store::StoreClient> store_;  // outlives comm_
  std::unique_ptr<comm::Communicator> comm_;
  BufferKind buffers_;
};

}  // namespace kolo::bench
