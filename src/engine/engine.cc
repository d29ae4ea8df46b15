// The negotiation cycle. Each cycle, on every rank:
//  a) Take the operations user threads queued. Classify each: a cache hit raises
//     its cache bit; a cached name with a different request invalidates that bit;
//     everything else goes to the coordinator.
//  b) One AND-allreduce over a byte vector agrees on: does anyone need the
//     coordinator, is anyone shutting down, has anyone joined, which cache bits
//     are raised on every rank, which bits someone invalidated.
//  c) Cached responses raised everywhere run at once, in bit order.
//  d) If anyone needs it: each rank sends its uncached requests to rank 0
//     (gatherv), the coordinator answers with the operations now ready (broadcast).
//  e) Every rank executes those responses in the same order (fusing allreduces)
//     and stores them in the response cache, identically on every rank.
// The steady state of training (same tensors every step) thus costs one small
// allreduce per cycle besides the data itself.
#include "engine/engine.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/coarse_clock.h"
#include "common/logging.h"
#include "common/reduce.h"
#include "common/wire.h"
#include "engine/fusion.h"
#include "engine/settings_agreement.h"
#include "engine/stall_inspector.h"
#include "kolo/error.h"

namespace kolo::engine {
namespace {

// Layout of the agreement vector (AND = element-wise min over ranks).
constexpr std::size_t kNoUncached = 0;  // 1 if this rank has nothing for the coordinator
constexpr std::size_t kNoShutdown = 1;  // 1 if this rank is not shutting down
constexpr std::size_t kNotJoined = 2;   // 1 if this rank has not joined
constexpr std::size_t kBusy = 3;        // 1 if this rank has operations pending
constexpr std::size_t kNoStallCheck = 4;  // 0 when rank 0 asks for a stall report
constexpr std::size_t kHeader = 5;      // then `slots` ready bits, then `slots` valid bits

// Eager operations in the agreement step (agreement.h), by default: up to this
// many bytes, in jobs of up to this many ranks. Where the step moves only the
// bytes a rank offers (shared memory), room for a larger payload costs nothing
// until used, and carrying beats a second collective far past 4 KiB (2 ranks,
// API allreduce carried / not: 4 KiB 1.30 / 2.05 us, 16 KiB 2.34 / 3.05, 64 KiB
// 6.9 / 7.8-8.2). 4 KiB keeps the step's block within a quarter of a slot, and
// the step of every rank of a 16-rank job within 64 KiB; 8 bytes unchanged.
// Elsewhere every cycle's block is padded to the largest payload, so it stays small.
constexpr std::size_t kEagerBytesUnpadded = 4096;
constexpr std::size_t kEagerBytesPadded = 64;
constexpr int kEagerMaxRanks = 16;

// Eager needs the response cache (only cached operations are offered).
std::size_t eager_bytes_for(const EngineConfig& config, const comm::Communicator& comm) {
  if (config.cache_capacity == 0) return 0;
  if (config.eager_bytes) return *config.eager_bytes;
  if (comm.size() > kEagerMaxRanks) return 0;
  const std::size_t unpadded = comm.unpadded_block_bytes() / 4 / 8 * 8;
  return unpadded == 0 ? kEagerBytesPadded : std::max(kEagerBytesPadded, std::min(kEagerBytesUnpadded, unpadded));
}

std::size_t bytes_of(const AllreduceCall& call) {
  return static_cast<std::size_t>(num_elements(call.shape)) * element_size(call.dtype);
}

std::exception_ptr error_for(const Response& response) {
  if (response.error_kind == ErrorKind::Mismatch) return std::make_exception_ptr(MismatchError(response.error));
  return std::make_exception_ptr(InvalidArgumentError(response.error));
}

}  // namespace

Engine::Engine(std::unique_ptr<comm::Communicator> comm, EngineConfig config)
    : rank_(comm->rank()),
      size_(comm->size()),
      backend_(comm->name()),
      config_(config),
      comm_(std::move(comm)),
      cache_(config.cache_capacity),
      coordinator_(size_),
      executor_(*comm_),
      agreement_(*comm_, eager_bytes_for(config, *comm_)) {
  const SharedSetting shared[] = {
      {"KOLO_FUSION_THRESHOLD", static_cast<std::int64_t>(config_.fusion_threshold)},
      {"KOLO_CACHE_CAPACITY", static_cast<std::int64_t>(config_.cache_capacity)},
      {"KOLO_EAGER_BYTES", static_cast<std::int64_t>(agreement_.eager_bytes())}};
  check_ranks_agree(*comm_, shared);
  if (!config_.timeline_path.empty()) {
    timeline_ = timeline_at(config_.timeline_path);
    executor_.set_timed(timeline_ != nullptr);
  }
  if (config_.flight_recorder_size > 0) {
    std::string dir = config_.flight_recorder_dir.empty() ? "/tmp/kolo-flight" : config_.flight_recorder_dir;
    recorder_ = std::make_unique<FlightRecorder>(config_.flight_recorder_size, rank_, size_,
                                                 dir + "/rank" + std::to_string(rank_) + ".json");
    recorder_->watch_sigusr1();
  }
  thread_ = std::thread([this] { loop(); });
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

void Engine::shutdown() {
  {
    std::lock_guard lock(mutex_);
    shutdown_requested_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Engine::loop() {
  // How long an idle wait lasts: cycle_time, doubled (up to kMaxIdleStretch
  // times) while user threads drive the cycles themselves. Each wake-up is a
  // context switch on the core the driving thread runs on (kolorun binds a rank
  // to one core); at 1 ms they added about 0.7 us to the mean of an 8-byte
  // allreduce. Work, a driver leaving work behind and shutdown still wake this
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
    // polling: polling took the queue's mutex on every pass, against the driver.
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
    // before their next cycle_time, which is what a test counting collectives
    // saw as one too many.
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
template <class Step>
std::exception_ptr guarded(Step step) {
  try {
    if (step()) return nullptr;
    return std::make_exception_ptr(ShutdownError("kolo was shut down (a rank called kolo::shutdown())"));
  } catch (const Error&) {
    return std::current_exception();
  } catch (const std::exception& e) {
    return std::make_exception_ptr(Error(std::string("kolo background thread failed: ") + e.what()));
  }
}

}  // namespace

void Engine::cycle_once() {
  cycles_.fetch_add(1, std::memory_order_relaxed);
  if (auto reason = guarded([&] { return run_cycle(); })) stop_with(reason);
}

void Engine::stop_with(std::exception_ptr reason) {
  fail_everything(reason);
  finished_ = true;
  wake_.notify_all();
}

Engine::Express Engine::express(const AllreduceCall& call, std::shared_ptr<detail::OpState>& pending) {
  const std::size_t bytes = bytes_of(call);
  // Small enough to ride in the step (which carries no data without eager bytes),
  // or else reduced by one collective right after it.
  const bool carried = agreement_.eager_bytes() > 0 && bytes <= agreement_.eager_bytes();
  return express_step(
      call.name, OpType::Allreduce, bytes, [&] { return cache_.find(call); },
      [&](std::uint32_t bit) {
        if (!carried) return false;
        agreement_.offer(bit, call.input, bytes);
        if (call.prescale != 1.0) scale(agreement_.offered_payload(), num_elements(call.shape), call.dtype, call.prescale);
        return true;
      },
      [&](std::uint32_t bit, bool finished, std::uint64_t seq) {
        if (finished) {
          const Response& response = cache_.response(bit);
          if (carried) {
            executor_.reduce_gathered(response, call.output, agreement_.payloads());
          } else {
            executor_.allreduce_one(response, call.input, call.output);
          }
          return;
        }
        pending = std::make_shared<detail::OpState>(call.name);
        materialize(Entry{call.request(), call.input, call.output, pending}, bit, seq);
      });
}

Engine::Express Engine::express(Entry& entry) {
  const Request& request = entry.request;
  const std::size_t bytes = static_cast<std::size_t>(num_elements(request.shape)) * element_size(request.dtype);
  return express_step(
      request.name, request.op, bytes,
      [&]() -> std::optional<std::uint32_t> {
        if (!request.group.empty()) return std::nullopt;
        const auto lookup = cache_.lookup(request);
        if (lookup.outcome != ResponseCache::Outcome::Hit) return std::nullopt;
        return lookup.bit;
      },
      [&](std::uint32_t bit) {
        // Carried when every rank's input fits the step (decided from the cached
        // response, so alike on every rank): the step is then the whole operation.
        const Response& response = cache_.response(bit);
        if (agreement_.eager_bytes() == 0 || Executor::largest_input_bytes(response, size_) > agreement_.eager_bytes())
          return false;
        // A broadcast needs only the root's data: the other ranks offer none, so
        // their blocks stay short.
        agreement_.offer(bit, entry.input, response.op == OpType::Broadcast && response.root != rank_ ? 0 : bytes);
        return true;
      },
      [&](std::uint32_t bit, bool finished, std::uint64_t seq) {
        if (finished) {
          const bool carried = agreement_.common_offer() == bit;
          executor_.run_one(cache_.response(bit), entry, carried ? &agreement_.payloads() : nullptr);
          entry.state->complete_part(nullptr);
          return;
        }
        materialize(std::move(entry), bit, seq);
      });
}

template <class FindBit, class Offer, class Finish>
Engine::Express Engine::express_step(const std::string& name, OpType op, std::size_t bytes, FindBit find_bit,
                                     Offer offer, Finish finish) {
  std::unique_lock cycle(cycle_mutex_, std::try_to_lock);
  // Anything pending here needs the ordinary cycle (which would also take this
  // operation's step away from the work already waiting). With a timeline the
  // ordinary path runs, which records the operation's spans.
  if (!cycle.owns_lock() || timeline_ || finished_ || !entries_.empty() || !uncached_.empty() || !invalidate_.empty() || joined_)
    return Express::NotApplicable;
  const std::optional<std::uint32_t> bit = find_bit();
  if (!bit) return Express::NotApplicable;
  {
    std::lock_guard lock(mutex_);
    if (!queue_.empty() || shutdown_requested_ || stopped_ || in_flight_.count(name)) return Express::NotApplicable;
    express_name_ = &name;  // submit() refuses the name meanwhile
  }
  cycles_.fetch_add(1, std::memory_order_relaxed);
  // The agreement step exactly as run_cycle() would build it with this operation
  // accepted and ready.
  std::uint8_t* mine = begin_agreement(/*no_uncached=*/true, /*no_shutdown=*/true, /*busy=*/true);
  mine[kHeader + *bit] = 1;
  const bool carried = offer(*bit);
  // Recorded before the step, so that a rank stuck in it names the operation it
  // waits with (kolorun's report on a timeout, SIGUSR1).
  const std::uint64_t seq = recorder_ ? recorder_->begin(name, op, bytes, coarse_now()) : 0;
  // NotApplicable until the step either finished the operation (Done) or made it
  // an ordinary entry (Pending), whose state then reports any failure.
  Express outcome = Express::NotApplicable;
  std::exception_ptr failure = guarded([&] {
    agreement_.exchange();
    if (step_finishes(*bit, carried)) {
      cache_.touch(*bit);
      finish(*bit, true, seq);
      if (recorder_) recorder_->update(seq, OpPhase::Done);
      stalled_ = false;
      outcome = Express::Done;
      return true;
    }
    finish(*bit, false, seq);
    outcome = Express::Pending;
    return settle(true);
  });
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
  if (failure && outcome != Express::Pending) std::rethrow_exception(failure);
  return outcome;
}

std::uint8_t* Engine::begin_agreement(bool no_uncached, bool no_shutdown, bool busy) {
  const std::uint32_t slots = cache_.slots();
  std::uint8_t* mine = agreement_.begin(kHeader + 2 * slots);
  mine[kNoUncached] = no_uncached;
  mine[kNoShutdown] = no_shutdown;
  mine[kNotJoined] = !joined_;
  mine[kBusy] = busy;
  mine[kNoStallCheck] = !stall_check_due();
  std::fill(mine + kHeader + slots, mine + kHeader + 2 * slots, 1);  // nothing invalidated yet
  return mine;
}

bool Engine::step_finishes(std::uint32_t bit, bool carried) const {
  const std::uint32_t slots = cache_.slots();
  const std::uint8_t* agree = agreement_.agreed();
  // Ready everywhere, and the step has no other business. A carried operation
  // also needs every rank to have carried it (a rank may have offered another).
  // It is then finished as the cycle would (execute_eager(), or a batch of this
  // one cached response: the only bit raised here, so the only one ready
  // everywhere), without ever becoming an entry.
  bool done = agree[kNoShutdown] && agree[kNoStallCheck] && agree[kNotJoined] && agree[kNoUncached] &&
              agree[kHeader + bit] && (!carried || agreement_.common_offer() == bit);
  for (std::uint32_t b = 0; done && b < slots; ++b) done = agree[kHeader + slots + b] != 0;
  return done;
}

void Engine::materialize(Entry entry, std::uint32_t bit, std::uint64_t seq) {
  // The ordinary operation the agreement step announced: accepted, with its cache
  // bit pending, so that the rest of the cycle (settle) treats it as such.
  entry.submitted_at = entry.accepted_at = coarse_now();
  entry.seq = seq;
  {
    std::lock_guard lock(mutex_);
    in_flight_.insert(entry.request.name);
  }
  std::string name = entry.request.name;
  Entry& stored = entries_.emplace(std::move(name), std::move(entry)).first->second;
  cached_pending_.emplace_back(bit, &stored);
}

void Engine::drive(const detail::OpState& state, std::chrono::steady_clock::time_point deadline) {
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

void Engine::complete(const std::string& name, std::exception_ptr error) {
  if (auto it = entries_.find(name); it != entries_.end()) complete(it, error);
}

void Engine::complete(EntryMap::iterator it, std::exception_ptr error) {
  auto node = entries_.extract(it);
  auto state = std::move(node.mapped().state);
  if (recorder_) recorder_->update(node.mapped().seq, error ? OpPhase::Failed : OpPhase::Done);
  {
    // Free the name before waking the waiter, so it may reuse it at once.
    std::lock_guard lock(mutex_);
    auto name = in_flight_.extract(node.key());
    if (!name.empty() && spare_names_.size() < kMaxSpareNodes) spare_names_.push_back(std::move(name));
  }
  if (spare_entries_.size() < kMaxSpareNodes) spare_entries_.push_back(std::move(node));
  state->complete_part(error);
}

void Engine::accept(Entry entry) {
  Request& request = entry.request;
  entry.accepted_at = timeline_ ? std::chrono::steady_clock::now() : entry.submitted_at;
  if (recorder_) entry.seq = recorder_->begin(request, entry.submitted_at);
  if (request.op == OpType::Join) joined_ = true;
  auto lookup = config_.cache_capacity > 0 && request.group.empty() ? cache_.lookup(request)
                                                                     : ResponseCache::Lookup{};
  if (lookup.outcome != ResponseCache::Outcome::Hit) {
    if (lookup.outcome == ResponseCache::Outcome::Conflict) invalidate_.push_back(lookup.bit);
    uncached_.push_back(request);
  }
  Entry* stored;
  if (spare_entries_.empty()) {
    std::string name = request.name;
    stored = &entries_.emplace(std::move(name), std::move(entry)).first->second;
  } else {
    // A finished operation's node: its key keeps its capacity, no allocation.
    auto node = std::move(spare_entries_.back());
    spare_entries_.pop_back();
    node.key() = request.name;
    node.mapped() = std::move(entry);
    auto inserted = entries_.insert(std::move(node));
    if (!inserted.inserted) throw Error("internal: operation '" + inserted.node.key() + "' accepted twice");
    stored = &inserted.position->second;
  }
  if (lookup.outcome == ResponseCache::Outcome::Hit) cached_pending_.emplace_back(lookup.bit, stored);
}

bool Engine::run_cycle() {
  bool shutting_down;
  {
    std::lock_guard lock(mutex_);
    fresh_.swap(queue_);  // both keep their capacity: no allocation per submit
    shutting_down = shutdown_requested_;
  }
  bool progressed = !fresh_.empty();
  for (auto& e : fresh_) accept(std::move(e));
  fresh_.clear();

  // b) Agree on the state of every rank (carrying one small allreduce when it can).
  const std::uint32_t slots = cache_.slots();
  std::uint8_t* mine = begin_agreement(uncached_.empty(), !shutting_down, !entries_.empty());
  for (const auto& [bit, entry] : cached_pending_) mine[kHeader + bit] = 1;
  for (auto bit : invalidate_) mine[kHeader + slots + bit] = 0;
  invalidate_.clear();
  offer_eager();
  agreement_.exchange();
  return settle(progressed);
}

bool Engine::settle(bool progressed) {
  const std::uint32_t slots = cache_.slots();
  const std::uint8_t* agree = agreement_.agreed();

  if (!agree[kNoShutdown]) return false;
  if (!agree[kNoStallCheck]) inspect_stalls();
  const bool any_joined = !agree[kNotJoined];
  bool coordinate_now = !agree[kNoUncached] || any_joined;

  // Invalidated bits leave the cache everywhere; requests waiting on them, and all
  // cached requests while a rank has joined, go through the coordinator instead.
  for (std::uint32_t bit = 0; bit < slots; ++bit) {
    if (agree[kHeader + slots + bit]) continue;
    coordinate_now = true;
    cache_.erase(bit);
  }
  std::vector<Response> cached_ready;
  // Keep what is still waiting for other ranks (in place: the vector keeps its
  // capacity from cycle to cycle).
  std::erase_if(cached_pending_, [&](const CachedPending& pending) {
    const auto [bit, entry] = pending;
    const bool valid = agree[kHeader + slots + bit] != 0;
    if (!valid || any_joined) {
      uncached_.push_back(entry->request);
      return true;
    }
    return agree[kHeader + bit] != 0;  // ready everywhere: runs below
  });
  // The allreduce every rank carried in the step, if it is ready and valid everywhere.
  // (slots itself means none.)
  std::uint32_t eager = agreement_.common_offer().value_or(slots);
  if (eager >= slots || any_joined || !agree[kHeader + eager] || !agree[kHeader + slots + eager]) eager = slots;
  // c) Cached responses ready everywhere, in bit order (the same on every rank).
  if (!any_joined) {
    for (std::uint32_t bit = 0; bit < slots; ++bit) {
      if (agree[kHeader + bit] && agree[kHeader + slots + bit]) {
        cache_.touch(bit);
        if (bit == eager) {
          progressed = true;
          execute_eager(bit);
        } else {
          cached_ready.push_back(cache_.response(bit));
        }
      }
    }
  }
  progressed |= !cached_ready.empty();
  execute(cached_ready, false);

  // d, e) The coordinator's round.
  if (coordinate_now) {
    auto responses = coordinate();
    progressed |= !responses.empty();
    execute(responses, !any_joined);
    requeue_evicted();
  }
  stalled_ = agree[kBusy] && !progressed;
  busy_ = !entries_.empty();
  return true;
}

std::vector<Response> Engine::coordinate() {
  const auto mine = encode_requests(uncached_);
  uncached_.clear();

  std::uint64_t my_len = mine.size();
  std::vector<std::uint64_t> lens(size_);
  std::vector<std::size_t> eight(size_, sizeof(std::uint64_t));
  comm_->allgatherv(&my_len, sizeof my_len, lens.data(), eight);
  std::vector<std::size_t> lengths(lens.begin(), lens.end());

  std::vector<std::uint8_t> gathered;
  if (rank_ == 0) {
    std::size_t total = 0;
    for (auto l : lengths) total += l;
    gathered.resize(total);
  }
  comm_->gatherv(mine.data(), mine.size(), rank_ == 0 ? gathered.data() : nullptr, lengths, 0);

  std::vector<std::uint8_t> answer;
  if (rank_ == 0) {
    std::size_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      std::span<const std::uint8_t> part(gathered.data() + offset, lengths[r]);
      offset += lengths[r];
      try {
        coordinator_.add(r, decode_requests(part));
      } catch (const wire::WireError& e) {
        throw PeerFailureError(r, "rank " + std::to_string(r) + " sent a malformed request list: " + e.what());
      }
    }
    answer = encode_responses(coordinator_.take_ready());
  }
  std::uint64_t answer_len = answer.size();
  comm_->broadcast(&answer_len, sizeof answer_len, 0);
  answer.resize(answer_len);
  comm_->broadcast(answer.data(), answer.size(), 0);
  try {
    return decode_responses(answer);
  } catch (const wire::WireError& e) {
    throw PeerFailureError(0, std::string("the coordinator sent a malformed response list: ") + e.what());
  }
}

void Engine::execute(const std::vector<Response>& responses, bool store_in_cache) {
  for (const auto& batch : plan_batches(responses, config_.fusion_threshold)) {
    std::vector<const Response*> parts;
    for (auto i : batch) parts.push_back(&responses[i]);
    const Response& first = *parts.front();
    if (first.error_kind != ErrorKind::None) {
      for (const auto& name : first.names) complete(name, error_for(first));
      continue;
    }
    if (recorder_) {
      for (const Response* r : parts) {
        for (const auto& name : r->names) {
          if (auto it = entries_.find(name); it != entries_.end()) recorder_->update(it->second.seq, OpPhase::Executing);
        }
      }
    }
    executor_.run(parts, entries_);
    if (timeline_) record(parts);
    for (const Response* r : parts) {
      if (store_in_cache && ResponseCache::cacheable(*r)) {
        if (auto it = entries_.find(r->names[0]); it != entries_.end() && it->second.request.group.empty())
          cache_.put(it->second.request, *r);
      }
      if (r->op == OpType::Join) joined_ = false;
      for (const auto& name : r->names) complete(name, nullptr);
    }
  }
}

void Engine::offer_eager() {
  if (agreement_.eager_bytes() == 0 || joined_) return;
  // The lowest ready bit that qualifies: ranks with the same operations ready
  // then offer the same one.
  const CachedPending* chosen = nullptr;
  for (const auto& pending : cached_pending_) {
    if (chosen && chosen->first < pending.first) continue;
    const Response& r = cache_.response(pending.first);
    if (r.op != OpType::Allreduce || r.names.size() != 1) continue;
    if (static_cast<std::size_t>(r.sizes[0]) * element_size(r.dtype) > agreement_.eager_bytes()) continue;
    chosen = &pending;
  }
  if (!chosen) return;
  const Response& r = cache_.response(chosen->first);
  const auto count = static_cast<std::size_t>(r.sizes[0]);
  agreement_.offer(chosen->first, chosen->second->input, count * element_size(r.dtype));
  if (r.prescale != 1.0) scale(agreement_.offered_payload(), count, r.dtype, r.prescale);
}

void Engine::execute_eager(std::uint32_t bit) {
  const Response& response = cache_.response(bit);
  const std::string& name = response.names[0];
  auto it = entries_.find(name);
  if (it == entries_.end()) throw Error("internal: no local operation named '" + name + "' for an eager operation");
  // An allreduce when a cycle offered it (offer_eager); any kind when an express
  // step carried it but did not finish it (a stall check, ...), and handed it here.
  if (response.op == OpType::Allreduce) {
    executor_.reduce_gathered(response, it->second.output, agreement_.payloads());
  } else {
    executor_.run_one(response, it->second, &agreement_.payloads());
  }
  if (timeline_) record({&response});
  complete(it, nullptr);
}

void Engine::requeue_evicted() {
  // A cache insertion may have evicted a bit this rank was waiting on; every rank
  // evicts the same bits, so all of them send those requests again.
  std::erase_if(cached_pending_, [&](const CachedPending& pending) {
    if (cache_.holds(pending.first, pending.second->request.name)) return false;
    uncached_.push_back(pending.second->request);
    return true;
  });
}

bool Engine::stall_check_due() {
  if (rank_ != 0 || config_.stall_check_time.count() == 0) return false;
  // Check several times per threshold so that a stall is reported soon after it
  // crosses it, but never more often than every 100 ms.
  auto interval = std::clamp(config_.stall_check_time / 4, std::chrono::milliseconds(100),
                             std::chrono::milliseconds(10000));
  auto now = coarse_now();
  if (now - last_stall_check_ < interval) return false;
  last_stall_check_ = now;
  return true;
}

void Engine::inspect_stalls() {
  PendingReport mine;
  mine.joined = joined_;
  const auto now = coarse_now();
  for (const auto& [name, e] : entries_) {
    if (e.request.op == OpType::Join) continue;  // waiting for slower ranks to join is normal
    auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - e.submitted_at).count();
    mine.pending.emplace_back(name, age);
  }
  const auto bytes = encode_report(mine);
  std::uint64_t my_len = bytes.size();
  std::vector<std::uint64_t> lens(size_);
  std::vector<std::size_t> eight(size_, sizeof(std::uint64_t));
  comm_->allgatherv(&my_len, sizeof my_len, lens.data(), eight);
  std::vector<std::size_t> lengths(lens.begin(), lens.end());
  std::size_t total = 0;
  for (auto l : lengths) total += l;
  std::vector<std::uint8_t> all(total);
  comm_->allgatherv(bytes.data(), bytes.size(), all.data(), lengths);

  std::vector<PendingReport> reports;
  std::size_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    try {
      reports.push_back(decode_report(std::span(all.data() + offset, lengths[r])));
    } catch (const wire::WireError& e) {
      throw PeerFailureError(r, "rank " + std::to_string(r) + " sent a malformed stall report: " + e.what());
    }
    offset += lengths[r];
  }
  const auto stalls = find_stalls(reports, config_.stall_check_time);
  if (!stalls.empty() && recorder_) recorder_->dump("stall: " + describe(stalls.front()));
  for (const auto& stall : stalls) {
    if (rank_ == 0) KOLO_LOG(Warning, "stall: " + describe(stall));
    if (config_.stall_shutdown_time.count() > 0 && stall.waited_ms >= config_.stall_shutdown_time.count())
      throw PeerFailureError(stall.missing.front(), "kolo stopped the job after a stall (KOLO_STALL_SHUTDOWN_TIME): " +
                                                        describe(stall));
  }
}

void Engine::record(const std::vector<const Response*>& batch) {
  const auto& p = executor_.last_phases();
  const char* op = to_string(batch.front()->op);
  const std::string detail = batch.size() > 1 || p.fused ? "fused batch of " + std::to_string(batch.size()) : "";
  for (const Response* r : batch) {
    for (const auto& name : r->names) {
      auto it = entries_.find(name);
      if (it == entries_.end()) continue;  // a joined rank's zeros
      const Entry& e = it->second;
      timeline_->span(name, "QUEUE", e.submitted_at, e.accepted_at);
      timeline_->span(name, "NEGOTIATE", e.accepted_at, p.start);
      if (p.fused) timeline_->span(name, "COPY_IN_FUSION_BUFFER", p.start, p.comm_start);
      timeline_->span(name, op, p.comm_start, p.comm_end, detail);
      if (p.fused) timeline_->span(name, "COPY_OUT_FUSION_BUFFER", p.comm_end, p.end);
    }
  }
}

}  // namespace kolo::engine
