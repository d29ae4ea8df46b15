// Executes negotiated responses on the communicator: copies tensors into and out
// of the fusion buffer, applies scale factors (engine/reduction.h), allocates
// outputs.
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

  // One cached operation outside a batch: an allreduce of `input` into `output`
  // (out of place when it can; the collective run() makes for a batch of this
  // one response), or an allgather, broadcast, alltoall or reducescatter of
  // `entry`, whose output goes to the entry's state or buffer. With `gathered`
  // (every rank's input, in rank order, as the agreement step carried them) no
  // collective is needed: the result is taken from those, with the same bits.
  struct Operand {
    const void* input;
    void* output;
    const comm::Placement* placement;  // the shareable memory input and output lie in, if any
    Entry* entry;  // null for an allreduce a caller runs without one (Engine::express)
  };
  // Inline: it is the express path's whole dispatch.
  void run_one(const Response& response, Operand operand, const std::vector<const void*>* gathered) {
    if (timed_) {
      phases_ = Phases{};
      stamp(phases_.start);
      phases_.comm_start = phases_.start;
    }
    if (response.op != OpType::Allreduce) {
      run_single(response, *operand.entry, gathered);
    } else if (gathered) {
      reduce_gathered(response, operand.output, *gathered);
    } else {
      reduce_direct(response, operand.input, operand.output, *operand.placement);
    }
    if (timed_) {
      stamp(phases_.end);
      if (phases_.comm_end < phases_.comm_start) phases_.comm_end = phases_.end;
    }
  }
  // The largest input of any rank for `response` (an allgather's or alltoall's
  // differ): every rank's fits the agreement step's payload when this does.
  static std::size_t largest_input_bytes(const Response& response, int size);

  // When the phases of the last run() or run_one() began and ended, for the timeline.
  struct Phases {
    std::chrono::steady_clock::time_point start, comm_start, comm_end, end;
    bool fused = false;
  };
  const Phases& last_phases() const { return phases_; }
  // Only the timeline reads the phases: without it the clock is not read (a
  // read costs tens of nanoseconds, several per operation).
  void set_timed(bool timed) { timed_ = timed; }

 private:
  void allreduce(const std::vector<const Response*>& batch, EntryMap& entries);
  // One allreduce through the communicator, in `output`.
  void reduce_direct(const Response& response, const void* input, void* output, comm::Placement placement);
  // One allreduce from the gathered inputs, reduced here in rank order.
  void reduce_gathered(const Response& response, void* output, const std::vector<const void*>& inputs);
  // An operation other than allreduce, without the phases.
  void run_single(const Response& response, Entry& entry, const std::vector<const void*>* gathered);
  void allgather(const Response& response, Entry& entry, const std::vector<const void*>* gathered);
  void broadcast(const Response& response, Entry& entry, const std::vector<const void*>* gathered);
  void alltoall(const Response& response, Entry& entry, const std::vector<const void*>* gathered);
  void reducescatter(const Response& response, Entry& entry, const std::vector<const void*>* gathered);
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
  std::vector<comm::Region> regions_;  // a fused allreduce's, reused
  Phases phases_;
  bool timed_ = false;
};

}  // namespace kolo::engine
