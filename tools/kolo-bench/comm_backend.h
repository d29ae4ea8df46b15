// kolo-bench --mode comm: the communicator alone, without the engine (no
// negotiation, no fusion, no background thread), so that comparing with --mode api
// shows what the engine costs.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/driver.h"

namespace kolo::bench {

// Builds the communicator init() would (shm for a job on one host, self for one
// rank) from the environment kolorun sets, under its own job id
// (KOLO_JOB_ID + "-bench"), so that its shared memory never meets the engine's.
std::unique_ptr<comm::Communicator> make_bench_communicator();

class CommBackend : public Backend {
 public:
  explicit CommBackend(std::unique_ptr<comm::Communicator> comm);
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  std::string label() const override { return "kolo-comm"; }
  std::map<std::string, std::string> details() const override;
  void validate(const BenchOptions& options) const override;
  RunOnce prepare(const BenchOptions& options, const SizePoint& point, void* send, void* recv) override;
  void barrier() override { comm_->barrier(); }
  std::int64_t sum_over_ranks(std::int64_t value) override;

  comm::Communicator& communicator() { return *comm_; }

 private:
  std::unique_ptr<comm::Communicator> comm_;
};

}  // namespace kolo::bench
