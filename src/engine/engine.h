// The engine of one process set: negotiates and executes every collective of
// this rank, through a cycle that the background thread and a waiting caller
// run alike. Which thread may touch what is written once, in
// docs/thread_model.md; the cycle is described in cycle.cc and
// docs/engine.md. Files: engine.cc (the thread, submission, driving),
// cycle.cc (the cycle), coordinator_round.cc (the coordinator's round and the
// stall reports).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
  // the calling thread runs the cycle itself with its operation in the step,
  // without queue, entry or handle; an operation small enough rides in the step
  // (KOLO_EAGER_BYTES), a larger one is reduced by one collective right after it.
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

  // Stops the background thread after failing what is pending, with a
  // ShutdownError that says `why` (by default: a rank called kolo::shutdown()).
  // Idempotent.
  void shutdown(const std::string& why = "");
  // Names why a shutdown that is coming will happen, before it does: the peers
  // may end first, and this rank's pending operations then fail with `why`
  // instead of the default. An empty `why` restores the default.
  void expect_shutdown(const std::string& why);
  // This rank has failed (its program is ending by an error): aborts the
  // communicator, so that every pending operation here fails and the other ranks
  // name this rank, with `reason`, instead of seeing an orderly shutdown. Callable
  // from any thread; shutdown() still follows.
  void abort(const std::string& reason) { comm_->abort(reason); }

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

  // Elastic jobs: this rank learned that the job has a newer membership (any
  // thread may call it). Every rank then hears it through the next cycles'
  // agreement step.
  void note_new_membership() { membership_news_.store(true, std::memory_order_relaxed); }
  // Whether some rank knew of a newer membership at the cycle that completed this
  // rank's latest operation. Ranks that have completed the same operations give
  // the same answer (each cycle is collective), so after a step's collectives all
  // ranks reset at the same step, and asking runs no collective.
  bool membership_changed() const { return changed_at_completion_.load(std::memory_order_acquire); }

  // The error that stopped the engine (what later submits throw), or null while it runs.
  std::exception_ptr stopped_reason();

  int rank() const { return rank_; }
  // The communicator's name ("shm", "gloo", ...).
  const std::string& backend() const { return backend_; }
  bool works_in_shared_buffers() const { return comm_->capabilities().works_in_shared_buffers; }
  // Null when disabled.
  const FlightRecorder* flight_recorder() const { return recorder_.get(); }
  int size() const { return size_; }

 private:
  // The operation a waiting caller brings to a cycle it runs itself (express):
  // it rides in the cycle's agreement step without being queued, and becomes an
  // entry only when that step does not finish it.
  struct CallerOp {
    const std::string& name;
    OpType op;
    std::size_t bytes;  // this rank's input
    const void* input;
    void* output;
    const comm::Placement* placement;            // the call's or the entry's
    Entry* entry;                                // any kind but allreduce: moved into the engine on hand-over
    const AllreduceCall* call;                   // an allreduce: the call, no entry
    std::shared_ptr<detail::OpState>* pending;   // an allreduce handed over: its new state
    // Filled by the cycle.
    std::uint32_t bit = 0;  // its cache bit
    bool carried = false;   // its input rides in the step
    std::uint64_t seq = 0;  // its flight record
    std::chrono::steady_clock::time_point started{};  // the step's start, for the timeline
    Express outcome = Express::NotApplicable;
    // A call's own failure when the step finished it (the engine goes on).
    std::exception_ptr failure{};
  };

  // engine.cc: the thread and driving.
  // The constructor's checks and set-up, then the thread.
  void start();
  void loop();
  // The timeline this rank writes at `path`, or null when it writes none.
  std::unique_ptr<Timeline> timeline_at(std::string path) const;
  // Runs one cycle; on the job's end or a failure, fails everything and finishes.
  // Requires cycle_mutex_.
  void cycle_once();
  // Fails everything and finishes the engine (after a cycle threw or the job ended).
  void stop_with(std::exception_ptr reason);
  void fail_everything(std::exception_ptr error);
  // Both express paths: runs the caller's cycle if the cycle is free, nothing
  // else is queued or pending, and the operation is cached.
  Express express(CallerOp& op);

  // cycle.cc: the cycle.
  // One negotiation cycle of the background thread or a driving caller; false
  // when the job is shutting down.
  bool run_cycle();
  // The agreement step and what follows it, with the caller's operation or
  // without; `progressed`: the cycle already took new operations.
  bool step(CallerOp* op, bool shutting_down, bool progressed);
  // This rank's agreement vector for the next step: its header, and every cache
  // bit valid; the caller raises the ready bits (and clears invalidated ones).
  std::uint8_t* begin_agreement(bool no_uncached, bool no_shutdown, bool busy);
  // The cache bit of the caller's operation, if the cache holds it as it is.
  std::optional<std::uint32_t> cached_bit(const CallerOp& op) const;
  // Puts one ready cached operation into the step: the caller's, or else the
  // lowest pending one that fits.
  void offer(CallerOp* op);
  void offer(std::uint32_t bit, const void* input, std::size_t bytes);
  // Whether the step just exchanged finishes the caller's operation.
  bool step_finishes(const CallerOp& op) const;
  // Finishes the caller's operation in its own step.
  void finish(CallerOp& op);
  // Makes the caller's operation the ordinary entry the step announced.
  void hand_over(CallerOp& op);
  // What follows the agreement step (steps c to e). False when the job is
  // shutting down.
  bool settle(bool progressed);
  void accept(Entry entry);
  void execute(const std::vector<Response>& responses, bool store_in_cache);
  // Finishes the pending operation every rank carried in the agreement step.
  void execute_carried(std::uint32_t bit);
  void complete(const std::string& name, std::exception_ptr error);
  void complete(EntryMap::iterator it, std::exception_ptr error);
  void requeue_evicted();
  void record(const std::vector<const Response*>& batch);
  void record(const std::string& name, OpType op, std::chrono::steady_clock::time_point submitted,
              std::chrono::steady_clock::time_point accepted, const std::string& detail);

  // coordinator_round.cc: the coordinator's round and the stall reports.
  std::vector<Response> coordinate();
  bool stall_check_due();
  void inspect_stalls();

  const int rank_;
  const int size_;
  const std::string backend_;
  const EngineConfig config_;
  std::unique_ptr<comm::Communicator> comm_;
  // False in parameter-server mode: no allreduce is finished from the inputs the
  // agreement step gathered among the ranks (Communicator::among_ranks).
  const bool allreduce_eager_;

  // Shared with user threads, guarded by mutex_.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Entry> queue_;
  std::set<std::string> in_flight_;
  // Unnamed call sites (engine/call_site.h) with operations in flight: which
  // thread submits there, and how many.
  struct SiteUse {
    std::uint64_t thread = 0;  // this_thread_serial()
    int in_flight = 0;
  };
  std::map<std::string, SiteUse, std::less<>> sites_in_flight_;
  // Counts `name`'s call site in (submit) or out (complete); true when another
  // thread has operations of that site in flight. Requires mutex_.
  bool enter_site(const std::string& name);
  void leave_site(const std::string& name);
  bool shutdown_requested_ = false;
  static constexpr const char* kDefaultShutdownWhy = "kolo was shut down (a rank called kolo::shutdown())";
  std::string shutdown_why_ = kDefaultShutdownWhy;
  std::string shutdown_why();  // takes mutex_
  const std::string* express_name_ = nullptr;  // the express operation running now, if any
  std::uint64_t drive_exits_ = 0;  // a driving user thread left work behind (wakes the background thread)
  std::exception_ptr stopped_;  // set once the thread has stopped: what later submits throw
  // Nodes of finished operations' names and entries (below), reused for new
  // ones: a steady stream of operations allocates neither nodes nor name strings.
  static constexpr std::size_t kMaxSpareNodes = 64;
  std::vector<std::set<std::string>::node_type> spare_names_;

  // Whoever runs cycles holds cycle_mutex_: the background thread, or a user thread
  // in drive() or express(). Everything below it belongs to the holder.
  std::mutex cycle_mutex_;
  std::atomic<bool> membership_news_{false};     // note_new_membership()
  bool membership_agreed_ = false;               // an agreement step said some rank had news
  std::atomic<bool> changed_at_completion_{false};  // membership_changed()
  // Before a cycle completes operations: what their waiters may ask next.
  void before_completions() {
    if (membership_agreed_) changed_at_completion_.store(true, std::memory_order_release);
  }
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
