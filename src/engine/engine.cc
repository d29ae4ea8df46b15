// The engine's thread and driving: construction, submission, the background
// thread's loop, a waiting caller driving cycles (drive) or running its
// operation's own cycle (express), and the end of the engine. The cycle itself is
// cycle.cc; who may touch what, docs/thread_model.md.
#include "engine/engine.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "common/coarse_clock.h"
#include "common/spin_policy.h"
#include "common/wake_slice.h"
#include "engine/call_site.h"
#include "engine/settings_agreement.h"
#include "kolo/error.h"

namespace kolo::engine {
namespace {

// Eager operations in the agreement step (agreement.h) by default: the
// communicator's choice (Communicator::eager_bytes_default), in jobs of up to
// this many ranks (the step is an allgather, whose cost grows with the job).
constexpr int kEagerMaxRanks = 16;

// Eager needs the response cache (only cached operations are offered).
std::size_t eager_bytes_for(const EngineConfig& config, const comm::Communicator& comm) {
  if (config.cache_capacity == 0) return 0;
  if (config.eager_bytes) return *config.eager_bytes;
  if (comm.size() > kEagerMaxRanks) return 0;
  return comm.capabilities().eager_bytes_default;
}

}  // namespace

Engine::Engine(std::unique_ptr<comm::Communicator> comm, EngineConfig config)
    : rank_(comm->rank()),
      size_(comm->size()),
      backend_(comm->name()),
      config_(config),
      comm_(std::move(comm)),
      allreduce_eager_(comm_->reduces_among_ranks()),
      cache_(config.cache_capacity),
      coordinator_(size_),
      executor_(*comm_),
      agreement_(comm_->among_ranks(), eager_bytes_for(config, comm_->among_ranks())) {
  try {
    start();
  } catch (const std::exception& e) {
    // The peers wait for this rank in their first step: an abort tells them why
    // (a closed communicator would read as ranks that ran different collectives).
    comm_->abort(e.what());
    throw;
  }
}

void Engine::start() {
  std::vector<SharedSetting> shared{
      {kFusionThreshold.name, static_cast<std::int64_t>(config_.fusion_threshold)},
      {kCacheCapacity.name, static_cast<std::int64_t>(config_.cache_capacity)},
      {kEagerBytes.name, static_cast<std::int64_t>(agreement_.eager_bytes())}};
  const auto transport = comm_->shared_settings();
  shared.insert(shared.end(), transport.begin(), transport.end());
  check_ranks_agree(*comm_, shared);
  if (!config_.timeline_path.empty()) {
    timeline_ = timeline_at(config_.timeline_path);
    executor_.set_timed(timeline_ != nullptr);
  }
  if (config_.flight_recorder_size > 0) {
    std::string dir = config_.flight_recorder_dir.empty() ? "/tmp/kolo-flight" : config_.flight_recorder_dir;
    const bool in_world = !config_.flight_recorder_world.empty();
    if (in_world) dir += "/" + config_.flight_recorder_world;
    recorder_ = std::make_unique<FlightRecorder>(config_.flight_recorder_size, rank_, size_,
                                                 dir + "/rank" + std::to_string(rank_) + ".json", in_world ? 2 : 1);
    recorder_->watch_sigusr1();
  }
  set_caller_wake_slice(config_.wake_slice);
  thread_ = std::thread([this] {
    mark_background_thread();
    loop();
  });
}

Engine::~Engine() { shutdown(); }

std::unique_ptr<Timeline> Engine::timeline_at(std::string path) const {
  if (rank_ != 0 && !config_.timeline_all_ranks) return nullptr;
  if (config_.timeline_all_ranks) {
    auto dot = path.rfind(".json");
    std::string suffix = ".rank" + std::to_string(rank_);
    path = dot == std::string::npos ? path + suffix : path.insert(dot, suffix);
  }
  return std::make_unique<Timeline>(path, rank_);
}

void Engine::set_timeline(const std::string& path) {
  // Opened before the locks: a file that cannot be opened fails the call alone.
  std::unique_ptr<Timeline> next = path.empty() ? nullptr : timeline_at(path);
  std::unique_ptr<Timeline> previous;
  {
    // Both locks: submissions read timeline_ under mutex_, cycles under cycle_mutex_.
    std::lock_guard cycle(cycle_mutex_);
    std::lock_guard lock(mutex_);
    previous = std::move(timeline_);
    timeline_ = std::move(next);
    executor_.set_timed(timeline_ != nullptr);
  }
  // `previous` closes here, outside the locks: it flushes its writer thread.
}

std::exception_ptr Engine::stopped_reason() {
  std::lock_guard lock(mutex_);
  return stopped_;
}

void Engine::submit(std::span<Entry> entries, bool wake) {
  std::lock_guard lock(mutex_);
  if (stopped_) std::rethrow_exception(stopped_);
  if (shutdown_requested_) throw ShutdownError("kolo is shutting down");
  std::set<std::string> names;  // a group's names among themselves
  for (const auto& e : entries) {
    check_sendable(e.request);
    const bool taken = in_flight_.count(e.request.name) || (express_name_ && *express_name_ == e.request.name);
    if (taken || (entries.size() > 1 && !names.insert(e.request.name).second))
      throw InvalidArgumentError("an operation named '" + e.request.name +
                                 "' is already in flight on this rank; wait for it or use another name");
  }
  // Exact times only for the timeline; stall ages and flight records need
  // milliseconds (common/coarse_clock.h).
  const auto now = timeline_ ? std::chrono::steady_clock::now() : coarse_now();
  for (auto& e : entries) {
    e.submitted_at = now;
    if (enter_site(e.request.name)) e.request.racing_site = true;
    if (spare_names_.empty()) {
      in_flight_.insert(e.request.name);
    } else {
      auto node = std::move(spare_names_.back());
      spare_names_.pop_back();
      node.value() = e.request.name;
      in_flight_.insert(std::move(node));
    }
    queue_.push_back(std::move(e));
  }
  if (wake) wake_.notify_one();
}

bool Engine::enter_site(const std::string& name) {
  const std::string_view site = call_site_of(name);
  if (site.empty()) return false;
  auto it = sites_in_flight_.find(site);
  if (it == sites_in_flight_.end()) it = sites_in_flight_.emplace(std::string(site), SiteUse{}).first;
  SiteUse& use = it->second;
  const bool racing = use.in_flight > 0 && use.thread != this_thread_serial();
  if (use.in_flight == 0) use.thread = this_thread_serial();
  ++use.in_flight;
  return racing;
}

void Engine::leave_site(const std::string& name) {
  const std::string_view site = call_site_of(name);
  if (site.empty()) return;
  if (auto it = sites_in_flight_.find(site); it != sites_in_flight_.end() && --it->second.in_flight <= 0)
    sites_in_flight_.erase(it);
}

std::string Engine::shutdown_why() {
  std::lock_guard lock(mutex_);
  return shutdown_why_;
}

void Engine::expect_shutdown(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (shutdown_requested_) return;
  shutdown_why_ = why.empty() ? kDefaultShutdownWhy : why;
}

void Engine::shutdown(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    if (!shutdown_requested_ && !why.empty()) shutdown_why_ = why;
    shutdown_requested_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Engine::loop() {
  // How long an idle wait lasts: cycle_time, doubled (up to kMaxIdleStretch
  // times) while user threads drive the cycles themselves. Each wake-up is a
  // context switch on the core the driving thread runs on (kolorun binds a rank
  // to one core), a cost to every blocking call. Work, a driver leaving work behind and shutdown still wake this
  // thread at once, and it is back to cycle_time as soon as it runs a cycle.
  constexpr int kMaxIdleStretch = 32;
  auto idle_wait = config_.cycle_time;
  // Ranks with work go straight into negotiation, where they wait for peers in
  // the communicator; idle ranks join every cycle_time. When every rank has
  // work but none could progress (each waits for something the others have not
  // submitted), all of them wait a cycle_time instead of spinning. Under mutex_.
  auto has_work = [&] { return !queue_.empty() || shutdown_requested_ || (busy_ && !stalled_) || finished_; };
  while (!finished_) {
    bool woke_for_work = false;
    {
      std::unique_lock lock(mutex_);
      const std::uint64_t cycles_before = cycles_.load(std::memory_order_relaxed);
      const auto until = std::chrono::steady_clock::now() + idle_wait;
      while (!has_work() && wake_.wait_until(lock, until) == std::cv_status::no_timeout) {
      }
      woke_for_work = has_work();
      // Idle, but a user thread ran cycles meanwhile (Engine::drive): this rank
      // has taken part in negotiation, and an idle cycle now would only take the
      // cycle from that thread and cost it two context switches.
      if (!woke_for_work && cycles_.load(std::memory_order_relaxed) != cycles_before) {
        idle_wait = std::min(idle_wait * 2, config_.cycle_time * kMaxIdleStretch);
        continue;
      }
    }
    // A user thread driving cycles (Engine::drive) already does this work. Wait
    // until it stops (it wakes this thread when it leaves work behind) instead of
    // polling, which would take the queue's mutex on every pass, against the driver.
    std::unique_lock cycle(cycle_mutex_, std::try_to_lock);
    if (!cycle.owns_lock()) {
      std::unique_lock lock(mutex_);
      const std::uint64_t exits = drive_exits_;
      wake_.wait_for(lock, idle_wait, [&] { return shutdown_requested_ || finished_ || drive_exits_ != exits; });
      continue;
    }
    // Woken for work that a driving thread has done meanwhile (it finished the
    // operation in the cycle it ran while this thread waited for the lock): an
    // idle cycle now would be one this rank's peers have no reason to join
    // before their next cycle_time, and a collective more than the work needs.
    if (woke_for_work) {
      std::lock_guard lock(mutex_);
      if (!has_work()) continue;
    }
    idle_wait = config_.cycle_time;
    if (!finished_) cycle_once();
  }
}

namespace {

// Runs one step of a cycle; the reason to stop the engine, or null to go on.
// `ended()` says why, when the step found the engine shut down.
template <class Step, class Ended>
std::exception_ptr guarded(Step step, Ended ended) {
  try {
    if (step()) return nullptr;
    return std::make_exception_ptr(ShutdownError(ended()));
  } catch (const Error&) {
    return std::current_exception();
  } catch (const std::exception& e) {
    return std::make_exception_ptr(Error(std::string("a kolo cycle failed: ") + e.what()));
  }
}

}  // namespace

void Engine::cycle_once() {
  cycles_.fetch_add(1, std::memory_order_relaxed);
  if (auto reason = guarded([&] { return run_cycle(); }, [&] { return shutdown_why(); })) stop_with(reason);
}

void Engine::stop_with(std::exception_ptr reason) {
  fail_everything(reason);
  finished_ = true;
  wake_.notify_all();
}

Engine::Express Engine::express(const AllreduceCall& call, std::shared_ptr<detail::OpState>& pending) {
  CallerOp op{.name = call.name,
              .op = OpType::Allreduce,
              .bytes = input_bytes(call.dtype, call.shape),
              .input = call.input,
              .output = call.output,
              .placement = &call.placement,
              .entry = nullptr,
              .call = &call,
              .pending = &pending};
  return express(op);
}

Engine::Express Engine::express(Entry& entry) {
  const Request& request = entry.request;
  CallerOp op{.name = request.name,
              .op = request.op,
              .bytes = input_bytes(request.dtype, request.shape),
              .input = entry.input,
              .output = entry.output,
              .placement = &entry.placement,
              .entry = &entry,
              .call = nullptr,
              .pending = nullptr};
  return express(op);
}

Engine::Express Engine::express(CallerOp& op) {
  std::unique_lock cycle(cycle_mutex_, std::try_to_lock);
  // Anything pending here needs the ordinary cycle (which would also take this
  // operation's step away from the work already waiting).
  if (!cycle.owns_lock() || finished_ || !entries_.empty() || !uncached_.empty() || !invalidate_.empty() || joined_)
    return Express::NotApplicable;
  const std::optional<std::uint32_t> bit = cached_bit(op);
  if (!bit) return Express::NotApplicable;
  op.bit = *bit;
  {
    std::lock_guard lock(mutex_);
    if (!queue_.empty() || shutdown_requested_ || stopped_ || in_flight_.count(op.name)) return Express::NotApplicable;
    express_name_ = &op.name;  // submit() refuses the name meanwhile
  }
  cycles_.fetch_add(1, std::memory_order_relaxed);
  // The outcome stays NotApplicable until the step either finished the operation
  // (Done) or made it an ordinary entry (Pending), whose state then reports any
  // failure.
  std::exception_ptr failure =
      guarded([&] { return step(&op, /*shutting_down=*/false, /*progressed=*/false); }, [&] { return shutdown_why(); });
  if (failure) stop_with(failure);
  cycle.unlock();  // before waking the background thread, which then takes the cycle
  {
    std::lock_guard lock(mutex_);
    express_name_ = nullptr;
    // Work that other threads queued meanwhile, or that this step left pending, is
    // the background thread's (as when a driving thread leaves: drive()).
    if (!queue_.empty() || busy_) {
      ++drive_exits_;
      wake_.notify_one();
    }
  }
  // Failed before it became an ordinary operation: nobody else will report it.
  if (failure && op.outcome != Express::Pending) std::rethrow_exception(failure);
  if (op.failure) std::rethrow_exception(op.failure);
  return op.outcome;
}

void Engine::drive(const detail::OpState& state, std::chrono::steady_clock::time_point deadline) {
  // A short slice a wait takes while driving holds until the caller's operation is done.
  const ShortSliceSpan slice_span;
  const bool forever = deadline == std::chrono::steady_clock::time_point::max();
  while (!state.done() && (forever || std::chrono::steady_clock::now() < deadline)) {
    std::unique_lock cycle(cycle_mutex_, std::try_to_lock);
    if (!cycle.owns_lock() || finished_ || stalled_) {
      // Another thread runs the cycle, or every rank waits on another: let the
      // background thread pace things and wake us when the operation completes.
      if (cycle.owns_lock()) cycle.unlock();
      state.wait_done_until(std::min(deadline, std::chrono::steady_clock::now() + config_.cycle_time));
      continue;
    }
    cycle_once();
  }
  // Operations submitted asynchronously may still be pending: hand them to the
  // background thread.
  if (busy_ || !state.done()) {
    {
      std::lock_guard lock(mutex_);
      ++drive_exits_;
    }
    wake_.notify_one();
  }
}

void Engine::fail_everything(std::exception_ptr error) {
  // Why, for the flight record and for the peers (the communicator's abort tells
  // the ranks still waiting on this one).
  std::string why = "kolo stopped";
  try {
    std::rethrow_exception(error);
  } catch (const ShutdownError& e) {
    why = e.what();  // an orderly end: nothing to record
  } catch (const PeerFailureError& e) {
    why = e.what();
    const int blamed = e.peer_rank() != rank_ ? e.peer_rank() : -1;
    if (recorder_) recorder_->dump("error: " + why, blamed);
  } catch (const std::exception& e) {
    why = e.what();
    if (recorder_) recorder_->dump("error: " + why);
  } catch (...) {
  }
  std::vector<Entry> queued;
  {
    std::lock_guard lock(mutex_);
    stopped_ = error;
    queued.swap(queue_);
    in_flight_.clear();
    sites_in_flight_.clear();
  }
  for (auto& e : queued) e.state->complete_part(error);
  for (auto& [name, e] : entries_) e.state->complete_part(error);
  cached_pending_.clear();  // points into entries_
  entries_.clear();
  try {
    comm_->abort(why);
  } catch (...) {
  }
}

}  // namespace kolo::engine
