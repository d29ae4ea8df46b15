// The engine: one background thread per process that negotiates and executes
// every collective. Threading model:
//  - User threads only call submit() (and read Handles): they append to a queue
//    under `mutex_` and never touch the communicator.
//  - The background thread owns everything else (entries, cache, coordinator,
//    executor, communicator) and runs one negotiation cycle after another.
//  - shutdown() asks the thread to stop; the ranks agree on it in the next cycle,
//    every pending operation fails with ShutdownError, and the thread exits.
// The cycle itself is described in engine.cc and docs/architecture.md.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "engine/agreement.h"
#include "engine/config.h"
#include "engine/coordinator.h"
#include "engine/entry.h"
#include "engine/executor.h"
#include "engine/flight_recorder.h"
#include "engine/response_cache.h"
#include "engine/timeline.h"

namespace kolo::engine {

class Engine {
 public:
  Engine(std::unique_ptr<comm::Communicator> comm, EngineConfig config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues operations (several at once for a group). Throws InvalidArgumentError
  // when a name is already in flight on this rank or a request is past what a
  // message carries (check_sendable, messages.h), and the engine's terminal error
  // (ShutdownError, PeerFailureError) once it has stopped.
  // `wake` false: the caller is about to wait (and so drive the cycles itself),
  // the background thread need not be woken.
  // The entries are moved from (a span, so that a single operation needs no vector).
  void submit(std::span<Entry> entries, bool wake = true);

  // The express path of a blocking allreduce: in the steady state of a loop of
  // blocking allreduces (nothing else pending on this rank, the operation cached),
  // the calling thread runs the negotiation step itself, without queue, entry or
  // handle; an operation small enough rides in the step (KOLO_EAGER_BYTES), a
  // larger one is reduced by one collective right after it.
  //  - NotApplicable: nothing was done; submit the operation as usual.
  //  - Done: the output holds the result.
  //  - Pending: the step ran but did not finish the operation (a peer was not
  //    ready, or the step had other business); it now continues as an ordinary
  //    operation whose state is `pending`: wait on it.
  // Throws what the operation would have thrown when the step itself fails.
  enum class Express { NotApplicable, Done, Pending };
  Express express(const AllreduceCall& call, std::shared_ptr<detail::OpState>& pending);
  // The same for a blocking allgather, broadcast, alltoall or reducescatter: the
  // step, then the operation's one collective. Done: `entry.state` is complete
  // and holds the output. Pending: `entry` was moved into the engine; wait on its
  // state.
  Express express(Entry& entry);

  // Stops the background thread after failing what is pending. Idempotent.
  void shutdown();

  // Starts writing the timeline to `path` (rank 0's, or every rank's with
  // KOLO_TIMELINE_ALL_RANKS), closing the one being written; an empty path stops
  // it. Throws InvalidArgumentError when the file cannot be opened. Waits for a
  // running cycle.
  void set_timeline(const std::string& path);

  // Runs negotiation cycles on the calling thread until `state` completes, the
  // engine stops or `deadline` passes. A blocking caller thus does the work
  // itself instead of paying two thread handoffs; when another thread holds the
  // cycle, it simply waits. Never throws.
  void drive(const detail::OpState& state, std::chrono::steady_clock::time_point deadline);

  int rank() const { return rank_; }
  // The communicator's name ("shm", "gloo", ...).
  const std::string& backend() const { return backend_; }
  // Null when disabled.
  const FlightRecorder* flight_recorder() const { return recorder_.get(); }
  int size() const { return size_; }

 private:
  void loop();
  // The timeline this rank writes at `path`, or null when it writes none.
  std::unique_ptr<Timeline> timeline_at(std::string path) const;
  // Runs one cycle; on the job's end or a failure, fails everything and finishes.
  // Requires cycle_mutex_.
  void cycle_once();
  // Fails everything and finishes the engine (after a cycle threw or the job ended).
  void stop_with(std::exception_ptr reason);
  // One negotiation cycle; false when the job is shutting down.
  bool run_cycle();
  // What follows the agreement step of a cycle (steps c to e); `progressed`: the
  // cycle already took new operations. False when the job is shutting down.
  bool settle(bool progressed);
  // This rank's agreement vector for the next step: its header, and every cache
  // bit valid; the caller raises the ready bits (and clears invalidated ones).
  std::uint8_t* begin_agreement(bool no_uncached, bool no_shutdown, bool busy);
  // Both express paths: takes the cycle if it is free and nothing is pending,
  // runs one agreement step with the operation's cache bit (`find_bit`) ready and
  // its payload carried when `offer(bit)` says so, then `finish(bit, true, seq)`
  // runs the operation, or `finish(bit, false, seq)` makes it an entry
  // (materialize); `seq` is its flight record.
  template <class FindBit, class Offer, class Finish>
  Express express_step(const std::string& name, OpType op, std::size_t bytes, FindBit find_bit, Offer offer,
                       Finish finish);
  // Whether the step just exchanged finishes the express operation of `bit`
  // (`carried`: its input rode in the step).
  bool step_finishes(std::uint32_t bit, bool carried) const;
  // Makes an express operation the ordinary entry the agreement step announced.
  void materialize(Entry entry, std::uint32_t bit, std::uint64_t seq);
  void accept(Entry entry);
  std::vector<Response> coordinate();
  void execute(const std::vector<Response>& responses, bool store_in_cache);
  void complete(const std::string& name, std::exception_ptr error);
  void complete(EntryMap::iterator it, std::exception_ptr error);
  void fail_everything(std::exception_ptr error);
  void requeue_evicted();
  // Puts one ready cached allreduce into this cycle's agreement step.
  void offer_eager();
  // Finishes the operation every rank carried in the agreement step.
  void execute_eager(std::uint32_t bit);
  void record(const std::vector<const Response*>& batch);
  bool stall_check_due();
  void inspect_stalls();

  const int rank_;
  const int size_;
  const std::string backend_;
  const EngineConfig config_;
  std::unique_ptr<comm::Communicator> comm_;

  // Shared with user threads, guarded by mutex_.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Entry> queue_;
  std::set<std::string> in_flight_;
  bool shutdown_requested_ = false;
  const std::string* express_name_ = nullptr;  // the express operation running now, if any
  std::uint64_t drive_exits_ = 0;  // a driving user thread left work behind (wakes the background thread)
  std::exception_ptr stopped_;  // set once the thread has stopped: what later submits throw
  // Nodes of finished operations' names and entries (below), reused for new
  // ones: a steady stream of operations allocates neither nodes nor name strings.
  static constexpr std::size_t kMaxSpareNodes = 64;
  std::vector<std::set<std::string>::node_type> spare_names_;

  // Whoever runs cycles holds cycle_mutex_: the background thread, or a user thread
  // in drive(). Everything below it belongs to the holder.
  std::mutex cycle_mutex_;
  std::atomic<bool> finished_{false};  // the engine has stopped; cycles are over
  std::atomic<std::uint64_t> cycles_{0};  // cycles run so far, by any thread
  std::atomic<bool> busy_{false};      // operations are pending (read by the idle wait)
  std::atomic<bool> stalled_{false};   // every rank had work and nothing progressed last cycle
  EntryMap entries_;
  std::vector<EntryMap::node_type> spare_entries_;
  std::vector<Request> uncached_;           // to send to the coordinator next
  // Cache hits waiting for other ranks: bit, and the entry in entries_ (map
  // nodes stay put; an entry leaves this list before it is completed).
  using CachedPending = std::pair<std::uint32_t, Entry*>;
  std::vector<CachedPending> cached_pending_;
  std::vector<std::uint32_t> invalidate_;   // cache bits this rank found stale
  std::vector<Entry> fresh_;                // this cycle's share of queue_
  bool joined_ = false;
  std::chrono::steady_clock::time_point last_stall_check_ = std::chrono::steady_clock::now();
  ResponseCache cache_;
  Coordinator coordinator_;  // used on rank 0 only
  Executor executor_;
  Agreement agreement_;
  std::unique_ptr<Timeline> timeline_;  // null unless KOLO_TIMELINE is set for this rank
  std::unique_ptr<FlightRecorder> recorder_;  // null when KOLO_FLIGHT_RECORDER_SIZE=0

  std::thread thread_;
};

}  // namespace kolo::engine
