// The negotiation cycle, which the background thread (run_cycle) and a waiting
// caller (drive, or express with its own operation) run alike. Each cycle, on
// every rank:
//  a) Take the operations user threads queued. Classify each: a cache hit raises
//     its cache bit; a cached name with a different request invalidates that bit;
//     everything else goes to the coordinator.
//  b) One step (engine/agreement.h) agrees on: does anyone need the coordinator,
//     is anyone shutting down, has anyone joined, which cache bits are raised on
//     every rank, which bits someone invalidated; it carries one small cached
//     operation's inputs when they fit.
//  c) Cached responses raised everywhere run at once, in bit order; the one every
//     rank carried is finished from the gathered inputs.
//  d) If anyone needs it: each rank sends its uncached requests to rank 0
//     (gatherv), the coordinator answers with the operations now ready
//     (broadcast; coordinator_round.cc).
//  e) Every rank executes those responses in the same order (fusing allreduces)
//     and stores them in the response cache, identically on every rank.
// A caller's operation (express) enters at b as a cached operation ready on this
// rank, when nothing else is queued or pending here. When the step finishes it
// (ready everywhere, no other business) it never becomes an entry; otherwise it
// becomes the entry the step announced, and c to e treat it as any other.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "common/coarse_clock.h"
#include "common/wake_slice.h"
#include "engine/engine.h"
#include "engine/fusion.h"
#include "engine/reduction.h"
#include "kolo/error.h"

namespace kolo::engine {
namespace {

// Layout of the agreement vector (AND = element-wise min over ranks).
constexpr std::size_t kNoUncached = 0;  // 1 if this rank has nothing for the coordinator
constexpr std::size_t kNoShutdown = 1;  // 1 if this rank is not shutting down
constexpr std::size_t kNotJoined = 2;   // 1 if this rank has not joined
constexpr std::size_t kBusy = 3;        // 1 if this rank has operations pending
constexpr std::size_t kNoStallCheck = 4;  // 0 when rank 0 asks for a stall report
constexpr std::size_t kSameMembership = 5;  // 0 when a rank knows of a newer membership (elastic)
constexpr std::size_t kHeader = 6;      // then `slots` ready bits, then `slots` valid bits

// An error in one operation's own arithmetic (a size that cannot be, an index
// out of range): every rank computes it from the same response, so every rank
// fails that operation alike, and the engine goes on with the others.
std::exception_ptr operation_failure(const Response& response, const std::logic_error& e) {
  return std::make_exception_ptr(InvalidArgumentError(std::string(to_string(response.op)) + " of '" +
                                                      response.names[0] + "' failed: " + e.what()));
}

std::exception_ptr error_for(const Response& response) {
  if (response.error_kind == ErrorKind::Mismatch) return std::make_exception_ptr(MismatchError(response.error));
  return std::make_exception_ptr(InvalidArgumentError(response.error));
}

// Whether every rank's input for cached `response` fits the step's payload
// (decided from the response, so alike on every rank). Groups bypass the cache,
// so a cached allreduce has one tensor. `allreduce_eager` false: allreduces
// never travel in the step (parameter servers reduce them).
bool fits(const Response& response, std::size_t eager_bytes, int size, bool allreduce_eager) {
  if (response.op == OpType::Allreduce)
    return allreduce_eager &&
           static_cast<std::size_t>(response.sizes[0]) * element_size(response.dtype) <= eager_bytes;
  return Executor::largest_input_bytes(response, size) <= eager_bytes;
}

}  // namespace

// The pieces of the agreement step, inlined into step(), their only caller: the
// 8-byte express allreduce is a few hundred instructions in all, and calls
// between its parts were a tenth of them.
#define KOLO_STEP_INLINE [[gnu::always_inline]] inline

bool Engine::run_cycle() {
  bool shutting_down;
  {
    std::lock_guard lock(mutex_);
    fresh_.swap(queue_);  // both keep their capacity: no allocation per submit
    shutting_down = shutdown_requested_;
  }
  const bool progressed = !fresh_.empty();
  for (auto& e : fresh_) accept(std::move(e));
  fresh_.clear();
  return step(nullptr, shutting_down, progressed);
}

bool Engine::step(CallerOp* op, bool shutting_down, bool progressed) {
  // A short slice a wait of this step takes holds until the step is done.
  const ShortSliceSpan slice_span;
  // b) Agree on the state of every rank (carrying one small operation when it can).
  const std::uint32_t slots = cache_.slots();
  std::uint8_t* mine = begin_agreement(uncached_.empty(), !shutting_down, op || !entries_.empty());
  for (const auto& [bit, entry] : cached_pending_) mine[kHeader + bit] = 1;
  if (op) mine[kHeader + op->bit] = 1;
  for (auto bit : invalidate_) mine[kHeader + slots + bit] = 0;
  invalidate_.clear();
  offer(op);
  if (op) {
    if (timeline_) op->started = std::chrono::steady_clock::now();
    // Recorded before the step, so that a rank stuck in it names the operation
    // it waits with (kolorun's report on a timeout, SIGUSR1).
    if (recorder_) op->seq = recorder_->begin(op->name, op->op, op->bytes, coarse_now());
  }
  agreement_.exchange();
  if (!agreement_.agreed()[kSameMembership]) membership_agreed_ = true;
  if (op) {
    if (step_finishes(*op)) {
      before_completions();
      finish(*op);
      return true;
    }
    hand_over(*op);
    progressed = true;
  }
  return settle(progressed);
}

std::uint8_t* Engine::begin_agreement(bool no_uncached, bool no_shutdown, bool busy) {
  const std::uint32_t slots = cache_.slots();
  std::uint8_t* mine = agreement_.begin(kHeader + 2 * slots);
  mine[kNoUncached] = no_uncached;
  mine[kNoShutdown] = no_shutdown;
  mine[kNotJoined] = !joined_;
  mine[kBusy] = busy;
  mine[kNoStallCheck] = !stall_check_due();
  mine[kSameMembership] = !membership_news_.load(std::memory_order_relaxed);
  std::fill(mine + kHeader + slots, mine + kHeader + 2 * slots, 1);  // nothing invalidated yet
  return mine;
}

std::optional<std::uint32_t> Engine::cached_bit(const CallerOp& op) const {
  if (op.call) return cache_.find(*op.call);
  const Request& request = op.entry->request;
  if (!request.group.empty()) return std::nullopt;
  const auto lookup = cache_.lookup(request);
  if (lookup.outcome != ResponseCache::Outcome::Hit) return std::nullopt;
  return lookup.bit;
}

KOLO_STEP_INLINE void Engine::offer(CallerOp* op) {
  if (agreement_.eager_bytes() == 0 || joined_) return;
  if (op) {
    if (!fits(cache_.response(op->bit), agreement_.eager_bytes(), size_, allreduce_eager_)) return;
    offer(op->bit, op->input, op->bytes);
    op->carried = true;
    return;
  }
  // The lowest ready bit that qualifies: ranks with the same operations ready
  // then offer the same one.
  const CachedPending* chosen = nullptr;
  for (const auto& pending : cached_pending_) {
    if (chosen && chosen->first < pending.first) continue;
    if (!fits(cache_.response(pending.first), agreement_.eager_bytes(), size_, allreduce_eager_)) continue;
    chosen = &pending;
  }
  if (!chosen) return;
  const Request& request = chosen->second->request;
  offer(chosen->first, chosen->second->input, input_bytes(request.dtype, request.shape));
}

KOLO_STEP_INLINE void Engine::offer(std::uint32_t bit, const void* input, std::size_t bytes) {
  const Response& response = cache_.response(bit);
  // A broadcast needs only the root's data: the other ranks offer none, so their
  // blocks stay short.
  const bool root_only = response.op == OpType::Broadcast && response.root != rank_;
  agreement_.offer(bit, input, root_only ? 0 : bytes);
  // The copy is scaled, never the caller's input.
  if (response.op == OpType::Allreduce || response.op == OpType::Reducescatter) {
    const Reduction reduction(response, size_);
    if (reduction.prescales()) reduction.prescale(agreement_.offered_payload(), bytes / element_size(response.dtype));
  }
}

KOLO_STEP_INLINE bool Engine::step_finishes(const CallerOp& op) const {
  const std::uint32_t slots = cache_.slots();
  const std::uint8_t* agree = agreement_.agreed();
  // Ready everywhere, and the step has no other business. A carried operation
  // also needs every rank to have carried it (a rank may have offered another).
  // It is then finished as the rest of the cycle would (execute_carried(), or a
  // batch of this one cached response: the only bit raised here, so the only one
  // ready everywhere), without ever becoming an entry.
  bool done = agree[kNoShutdown] && agree[kNoStallCheck] && agree[kNotJoined] && agree[kNoUncached] &&
              agree[kHeader + op.bit] && (!op.carried || agreement_.common_offer() == op.bit);
  for (std::uint32_t b = 0; done && b < slots; ++b) done = agree[kHeader + slots + b] != 0;
  return done;
}

KOLO_STEP_INLINE void Engine::finish(CallerOp& op) {
  cache_.touch(op.bit);
  const Response& response = cache_.response(op.bit);
  std::exception_ptr failure;
  try {
    executor_.run_one(response, {op.input, op.output, op.placement, op.entry},
                      op.carried ? &agreement_.payloads() : nullptr);
  } catch (const std::logic_error& e) {
    failure = operation_failure(response, e);
  }
  if (op.entry) op.entry->state->complete_part(failure);
  op.failure = op.entry ? nullptr : failure;
  if (timeline_) record(op.name, op.op, op.started, op.started, "");
  if (recorder_) recorder_->update(op.seq, failure ? OpPhase::Failed : OpPhase::Done);
  stalled_ = false;
  op.outcome = Express::Done;
}

void Engine::hand_over(CallerOp& op) {
  // The ordinary operation the agreement step announced: accepted, with its cache
  // bit pending, so that the rest of the cycle (settle) treats it as such.
  Entry entry;
  if (op.entry) {
    entry = std::move(*op.entry);
  } else {
    *op.pending = std::make_shared<detail::OpState>(op.name);
    entry = Entry{op.call->request(), op.input, op.output, *op.pending};
    entry.placement = *op.placement;
  }
  entry.submitted_at = entry.accepted_at = timeline_ ? op.started : coarse_now();
  entry.seq = op.seq;
  {
    std::lock_guard lock(mutex_);
    in_flight_.insert(entry.request.name);
  }
  std::string name = entry.request.name;
  Entry& stored = entries_.emplace(std::move(name), std::move(entry)).first->second;
  cached_pending_.emplace_back(op.bit, &stored);
  op.outcome = Express::Pending;
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
  // The operation every rank carried in the step, if it is ready and valid
  // everywhere (slots itself means none).
  std::uint32_t carried = agreement_.common_offer().value_or(slots);
  if (carried >= slots || any_joined || !agree[kHeader + carried] || !agree[kHeader + slots + carried]) carried = slots;
  // c) Cached responses ready everywhere, in bit order (the same on every rank).
  if (!any_joined) {
    for (std::uint32_t bit = 0; bit < slots; ++bit) {
      if (agree[kHeader + bit] && agree[kHeader + slots + bit]) {
        cache_.touch(bit);
        if (bit == carried) {
          progressed = true;
          before_completions();
          execute_carried(bit);
        } else {
          cached_ready.push_back(cache_.response(bit));
        }
      }
    }
  }
  progressed |= !cached_ready.empty();
  if (!cached_ready.empty()) before_completions();
  execute(cached_ready, false);

  // d, e) The coordinator's round.
  if (coordinate_now) {
    auto responses = coordinate();
    progressed |= !responses.empty();
    if (!responses.empty()) before_completions();
    execute(responses, !any_joined);
    requeue_evicted();
  }
  stalled_ = agree[kBusy] && !progressed;
  busy_ = !entries_.empty();
  return true;
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
    try {
      executor_.run(parts, entries_);
    } catch (const std::logic_error& e) {
      for (const Response* r : parts) {
        for (const auto& name : r->names) complete(name, operation_failure(*r, e));
      }
      continue;
    }
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

void Engine::execute_carried(std::uint32_t bit) {
  const Response& response = cache_.response(bit);
  const std::string& name = response.names[0];
  auto it = entries_.find(name);
  if (it == entries_.end()) throw Error("internal: no local operation named '" + name + "' for a carried operation");
  Entry& entry = it->second;
  try {
    executor_.run_one(response, {entry.input, entry.output, &entry.placement, &entry}, &agreement_.payloads());
  } catch (const std::logic_error& e) {
    complete(it, operation_failure(response, e));
    return;
  }
  if (timeline_) record({&response});
  complete(it, nullptr);
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
    leave_site(node.key());
    auto name = in_flight_.extract(node.key());
    if (!name.empty() && spare_names_.size() < kMaxSpareNodes) spare_names_.push_back(std::move(name));
  }
  if (spare_entries_.size() < kMaxSpareNodes) spare_entries_.push_back(std::move(node));
  state->complete_part(error);
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

void Engine::record(const std::vector<const Response*>& batch) {
  const auto& p = executor_.last_phases();
  const std::string detail = batch.size() > 1 || p.fused ? "fused batch of " + std::to_string(batch.size()) : "";
  for (const Response* r : batch) {
    for (const auto& name : r->names) {
      auto it = entries_.find(name);
      if (it == entries_.end()) continue;  // a joined rank's zeros
      record(name, batch.front()->op, it->second.submitted_at, it->second.accepted_at, detail);
    }
  }
}

void Engine::record(const std::string& name, OpType op, std::chrono::steady_clock::time_point submitted,
                    std::chrono::steady_clock::time_point accepted, const std::string& detail) {
  const auto& p = executor_.last_phases();
  timeline_->span(name, "QUEUE", submitted, accepted);
  timeline_->span(name, "NEGOTIATE", accepted, p.start);
  if (p.fused) timeline_->span(name, "COPY_IN_FUSION_BUFFER", p.start, p.comm_start);
  timeline_->span(name, to_string(op), p.comm_start, p.comm_end, detail);
  if (p.fused) timeline_->span(name, "COPY_OUT_FUSION_BUFFER", p.comm_end, p.end);
}

}  // namespace kolo::engine
