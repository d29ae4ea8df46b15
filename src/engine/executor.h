// Executes negotiated responses on the communicator: copies tensors into and out
// of the fusion buffer, applies scale factors, allocates outputs.
#pragma once

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/communicator.h"
#include "engine/entry.h"

namespace kolo::engine {

using EntryMap = std::unordered_map<std::string, Entry>;

class Executor {
 public:
  explicit Executor(comm::Communicator& comm) : comm_(comm) {}

  // Runs one batch: a single response, or several fused allreduce responses.
  // Entries this rank does not hold (it has joined) contribute zeros. Results are
  // written to the entries' outputs and states; completing them is the caller's
  // job. Communicator failures propagate as kolo::Error.
  void run(const std::vector<const Response*>& batch, EntryMap& entries);

  // One allreduce straight through the communicator, out of place when it can
  // (the same collective run() makes for a batch of this one response).
  void allreduce_one(const Response& response, const void* input, void* output);

  // One allgather, broadcast, alltoall or reducescatter (the collective run()
  // makes for a batch of this one response); the output goes to the entry's
  // state or buffer. With `gathered` (every rank's input, in rank order, as the
  // agreement step carried them) no collective is needed: the output is taken
  // from those, with the same bits.
  void run_one(const Response& response, Entry& entry, const std::vector<const void*>* gathered = nullptr);
  // The largest input of any rank for `response` (an allgather's or alltoall's
  // differ): every rank's fits the agreement step's payload when this does.
  static std::size_t largest_input_bytes(const Response& response, int size);

  // Finishes an allreduce whose inputs every rank already gathered (one per
  // rank, in rank order): reduces them into the entry's output, in rank order.
  void reduce_gathered(const Response& response, void* output, const std::vector<const void*>& inputs);

  // When the phases of the last run() began and ended, for the timeline.
  struct Phases {
    std::chrono::steady_clock::time_point start, comm_start, comm_end, end;
    bool fused = false;
  };
  const Phases& last_phases() const { return phases_; }
  // Only the timeline reads the phases: without it the clock is not read (each
  // read costs ~30 ns here, several per operation).
  void set_timed(bool timed) { timed_ = timed; }

 private:
  void allreduce(const std::vector<const Response*>& batch, EntryMap& entries);
  // allreduce_one without the phases' start.
  void reduce_direct(const Response& response, const void* input, void* output);
  // run_one without the phases.
  void run_single(const Response& response, Entry& entry, const std::vector<const void*>* gathered);
  void allgather(const Response& response, Entry& entry, const std::vector<const void*>* gathered);
  void broadcast(const Response& response, Entry& entry, const std::vector<const void*>* gathered);
  void alltoall(const Response& response, Entry& entry, const std::vector<const void*>* gathered);
  void reducescatter(const Response& response, Entry& entry, const std::vector<const void*>* gathered);
  // Divides by the job size (Average) and applies postscale.
  void finish_reduction(void* data, std::size_t count, DataType dtype, ReduceOp op, double postscale);
  std::byte* fusion_buffer(std::size_t bytes);
  void stamp(std::chrono::steady_clock::time_point& at) const {
    if (timed_) at = std::chrono::steady_clock::now();
  }

  comm::Communicator& comm_;
  std::vector<std::byte> fusion_;
  // Per-rank scratch of the single-entry collectives, kept across calls (an
  // allocation is a noticeable part of a small blocking call).
  std::vector<std::size_t> send_sizes_, recv_sizes_;
  std::vector<const void*> blocks_;
  Phases phases_;
  bool timed_ = false;
};

}  // namespace kolo::engine
