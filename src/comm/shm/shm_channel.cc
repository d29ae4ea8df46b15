#include "comm/shm/shm_channel.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <sstream>
#include <thread>

#include "comm/shm/process_liveness.h"
#include "common/cpu_relax.h"
#include "common/spin_policy.h"
#include "common/wake_slice.h"
#include "kolo/error.h"

namespace kolo::comm::shm {
namespace {

using Clock = std::chrono::steady_clock;

// A sleeping waiter wakes at least this often to check for abort, peer death and
// the peer timeout, even when nobody wakes it.
constexpr auto kSleepSlice = std::chrono::milliseconds(20);
// How long a waiter polls before it sleeps: long enough to cover a peer that is
// some microseconds behind. It polls with pause instructions for the first few
// microseconds (a peer running on another core answers within them). Where the
// ranks outnumber their CPUs it yields between polls from the first, as the
// peer it waits for may be queued behind it for its CPU; a poller sharing a CPU
// with its peer would otherwise burn its whole budget on every step. Elsewhere
// it yields after the first few microseconds only while the application
// computes beside it (common/spin_policy.h): beside a busy process a yield hands
// that process the CPU for the rest of its time slice (milliseconds under
// EEVDF), and a 4 MiB allreduce took a slice instead of 150 us.
constexpr auto kPureSpin = std::chrono::microseconds(5);
constexpr auto kSpinBudget = std::chrono::microseconds(50);

// Wraparound-safe "value has reached target" for counters that only move forward
// and are compared within a small window.
bool reached(std::uint32_t value, std::uint32_t target) {
  return static_cast<std::int32_t>(value - target) >= 0;
}

std::uint32_t* futex_word(std::atomic<std::uint32_t>* word) { return reinterpret_cast<std::uint32_t*>(word); }

// Shared (not FUTEX_PRIVATE) futexes: the words live in memory mapped by several
// processes.
bool futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, std::chrono::nanoseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000000000), static_cast<long>(timeout.count() % 1000000000)};
  long rc = ::syscall(SYS_futex, futex_word(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
  return rc == 0 || errno != ETIMEDOUT;  // false: the slice ran out
}

void futex_wake_all(std::atomic<std::uint32_t>* word) {
  ::syscall(SYS_futex, futex_word(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// CPUs any rank of the segment may run on: the union of their affinity masks.
// Ranks bound to their own cores (kolorun --bind-to core, mpirun) each see one
// CPU, but together they see as many as there are ranks: not oversubscribed.
int cpus_of_all_ranks(const RankControl* controls, int size) {
  int count = 0;
  for (std::size_t word = 0; word < kCpuMaskWords; ++word) {
    std::uint64_t bits = 0;
    for (int r = 0; r < size; ++r) bits |= controls[r].cpus[word];
    count += std::popcount(bits);
  }
  return count;
}

std::string seconds_text(Clock::duration d) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << std::chrono::duration<double>(d).count() << " s";
  return out.str();
}

std::uint32_t progress_of(const RankControl& c) {
  return c.posted.value.load(std::memory_order_relaxed) + c.reduced.value.load(std::memory_order_relaxed) +
         c.consumed.value.load(std::memory_order_relaxed);
}

}  // namespace

ShmChannel::ShmChannel(JoinedSegment segment, int rank, const CommunicatorOptions& options)
    : mapping_(std::move(segment.mapping)),
      layout_(segment.layout),
      small_bytes_(segment.small_bytes),
      mapped_bytes_(segment.mapped_bytes),
      single_copy_(segment.single_copy),
      rank_(rank),
      options_(options),
      step_(segment.first_step) {
  oversubscribed_ = layout_.size > cpus_of_all_ranks(&control(0), layout_.size);
  spin_budget_ = kSpinBudget;
  known_consumed_.assign(static_cast<std::size_t>(layout_.size), step_);
  scratch_.resize(static_cast<std::size_t>(layout_.size) * kFlaggedBytes);
}

ShmChannel::~ShmChannel() {
  RankControl& me = control(rank_);
  std::uint32_t active = static_cast<std::uint32_t>(RankState::Active);
  me.state.compare_exchange_strong(active, static_cast<std::uint32_t>(RankState::Closed), std::memory_order_release);
  wake_own_sleepers();
}

RankControl& ShmChannel::control(int rank) const {
  return reinterpret_cast<RankControl*>(mapping_.base() + layout_.control_offset)[rank];
}

FlaggedLine* ShmChannel::flagged(int rank) const {
  const std::size_t area = static_cast<std::size_t>(rank) * 2 + (step_ & 1u);
  return reinterpret_cast<FlaggedLine*>(mapping_.base() + layout_.flagged_offset) + area * kFlaggedLines;
}

std::byte* ShmChannel::slot(int rank) const {
  std::size_t index = static_cast<std::size_t>(rank) * 2 + (step_ & 1u);
  return mapping_.base() + layout_.data_offset + index * layout_.slot_bytes;
}

// ---- steps ---------------------------------------------------------------------------

void ShmChannel::acquire_slot() {
  mid_step_ = true;
  // The slot was last used two steps ago (step_ - 2); every rank must have
  // finished it, i.e. published consumed >= step_ - 1.
  const std::uint32_t target = step_ - 1;
  for (int d = 1; d < size(); ++d) {
    int peer = (rank_ + d) % size();
    if (reached(known_consumed_[peer], target)) continue;
    wait_until(peer, control(peer).consumed, target);
    known_consumed_[peer] = target;
  }
}

void ShmChannel::note_peer_reached_step(int peer) {
  if (reached(step_, known_consumed_[peer])) known_consumed_[peer] = step_;
}

void ShmChannel::post() {
  mid_step_ = true;
  publish(control(rank_).posted, step_ + 1);
}
void ShmChannel::post_reduced() { publish(control(rank_).reduced, step_ + 1); }
void ShmChannel::wait_posted(int peer) {
  wait_until(peer, control(peer).posted, step_ + 1);
  note_peer_reached_step(peer);
}
void ShmChannel::wait_reduced(int peer) {
  wait_until(peer, control(peer).reduced, step_ + 1);
  note_peer_reached_step(peer);
}

void ShmChannel::finish_step() {
  publish(control(rank_).consumed, step_ + 1);
  ++step_;
  ++flag_step_;
  mid_step_ = false;
}

// ---- flagged lines -------------------------------------------------------------------

void ShmChannel::write_flagged(const std::byte* data, std::size_t bytes) {
  FlaggedLine* lines = flagged(rank_);
  const std::uint64_t flag = flag_step_ + 1;
  for (std::size_t i = 0, at = 0; at < bytes; ++i, at += kFlaggedLineData) {
    std::memcpy(lines[i].data, data + at, std::min(kFlaggedLineData, bytes - at));
    lines[i].step.store(flag, std::memory_order_release);
  }
  post();  // for readers that fell asleep, and for the failure checks
}

void ShmChannel::wait_flagged_line(int peer, const FlaggedLine& line, std::size_t bytes) {
  const std::uint64_t flag = flag_step_ + 1;
  auto arrived = [&] { return line.step.load(std::memory_order_acquire) == flag; };
  if (arrived() || spin(arrived)) return;
  // The peer posts after its last line: wait for that, sleeping if need be and
  // watching for its failure; then every line it sent is there.
  wait_until(peer, control(peer).posted, step_ + 1);
  if (!arrived()) {
    throw InvalidArgumentError(rank_name(peer) + " sent fewer than the " + std::to_string(bytes) + " bytes " +
                               rank_name(rank_) + " expects in " + operation_ +
                               ": the ranks' sizes differ");
  }
}

void ShmChannel::read_flagged(int peer, std::byte* out, std::size_t bytes) {
  if (bytes == 0) return;  // nothing was sent, and nothing is proven about the peer
  const FlaggedLine* lines = flagged(peer);
  for (std::size_t i = 0, at = 0; at < bytes; ++i, at += kFlaggedLineData) {
    wait_flagged_line(peer, lines[i], bytes);
    std::memcpy(out + at, lines[i].data, std::min(kFlaggedLineData, bytes - at));
  }
  note_peer_reached_step(peer);
}

std::uint32_t ShmChannel::read_flagged_self_sized(int peer, std::byte* out, std::size_t max_bytes,
                                                  std::size_t flagged_limit) {
  const FlaggedLine* lines = flagged(peer);
  wait_flagged_line(peer, lines[0], sizeof(std::uint32_t));
  const std::uint32_t length = self_sized_length(lines[0].data, max_bytes, peer);
  note_peer_reached_step(peer);
  if (length > flagged_limit) return length;
  for (std::size_t i = 0, at = 0; at < length; ++i, at += kFlaggedLineData) {
    if (i > 0) wait_flagged_line(peer, lines[i], length);
    std::memcpy(out + at, lines[i].data, std::min<std::size_t>(kFlaggedLineData, length - at));
  }
  return length;
}

// Dekker-style pairing with sleep_until: the publisher stores the value and then
// reads `sleepers`; a sleeper increments `sleepers` and then re-reads the value
// (both sequentially consistent), so at least one of them sees the other. The
// common case, nobody asleep, costs no system call.
void ShmChannel::publish(Counter& counter, std::uint32_t value) {
  counter.value.store(value, std::memory_order_seq_cst);
  if (counter.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(&counter.value);
}

// ---- waiting -------------------------------------------------------------------------

void ShmChannel::wait_until(int peer, Counter& counter, std::uint32_t target) {
  if (reached(counter.value.load(std::memory_order_acquire), target)) return;
  if (spin_until(counter, target)) return;
  sleep_until(peer, counter, target);
}

bool ShmChannel::spin_until(const Counter& counter, std::uint32_t target) const {
  return spin([&] { return reached(counter.value.load(std::memory_order_acquire), target); });
}

template <class Ready>
bool ShmChannel::spin(Ready ready) const {
  const auto start = Clock::now();
  for (std::uint32_t i = 1;; ++i) {
    cpu_relax();
    if (ready()) return true;
    if ((i & 15u) == 0) {
      const auto spent = Clock::now() - start;
      if (aborted_.load(std::memory_order_relaxed) || spent > spin_budget_) return false;
      if (oversubscribed_ || (spent > kPureSpin && yield_to_computation())) ::sched_yield();
    }
  }
}

void ShmChannel::sleep_until(int peer, Counter& counter, std::uint32_t target) {
  const ShortSliceWhileAsleep short_slice(options_.wake_slice);
  const RankControl& peer_control = control(peer);
  auto last_progress = Clock::now();
  std::uint32_t last_seen = progress_of(peer_control);
  auto next_check = last_progress + kSleepSlice;
  while (true) {
    throw_if_aborted();
    bool slice_ran_out = false;
    counter.sleepers.fetch_add(1, std::memory_order_seq_cst);
    std::uint32_t value = counter.value.load(std::memory_order_seq_cst);
    if (!reached(value, target)) {
      sleeping_on_.store(&counter.value, std::memory_order_seq_cst);
      if (!aborted_.load(std::memory_order_seq_cst)) slice_ran_out = !futex_wait(&counter.value, value, kSleepSlice);
      sleeping_on_.store(nullptr, std::memory_order_relaxed);
    }
    counter.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(counter.value.load(std::memory_order_acquire), target)) return;
    throw_if_aborted();

    auto now = Clock::now();
    std::uint32_t seen = progress_of(peer_control);
    if (seen != last_seen) {
      last_seen = seen;
      last_progress = now;
    }
    if (slice_ran_out || now >= next_check) {
      check_peer(peer, counter, target, now - last_progress);
      next_check = now + kSleepSlice;
    }
  }
}

void ShmChannel::check_peer(int peer, const Counter& counter, std::uint32_t target, Clock::duration stalled_for) const {
  const RankControl& pc = control(peer);
  // A peer may publish its last counter and then close, abort or exit: judge it
  // only after it has certainly not delivered what we wait for.
  auto not_delivered = [&] { return !reached(counter.value.load(std::memory_order_acquire), target); };
  const std::string who = rank_name(peer) + " (pid " + std::to_string(pc.pid.load()) + ")";
  const std::string context = rank_name(rank_) + " was waiting for it in " + operation_;
  const auto state = static_cast<RankState>(pc.state.load(std::memory_order_acquire));
  switch (state) {
    case RankState::Aborted:
    case RankState::Failed: {
      if (!not_delivered()) return;
      std::string reason(pc.reason, strnlen(pc.reason, kReasonBytes));
      // A peer that gave up because another rank failed passes the blame on
      // (unless it blames this rank, which is evidently still running).
      const int upstream = pc.failed_peer.load(std::memory_order_acquire) - 1;
      const char* verb = state == RankState::Failed ? " failed: " : " aborted: ";
      blame(upstream >= 0 && upstream != rank_ ? upstream : peer, who + verb + reason + " (" + context + ")");
    }
    case RankState::Closed:
      if (!not_delivered()) return;
      blame(peer, who + " closed its communicator (" + context +
                      "): the ranks did not run the same sequence of collectives");
    case RankState::Active: break;
  }
  if (process_is_dead(pc.pid.load(std::memory_order_acquire)) && not_delivered()) {
    blame(peer, who + " died (" + context + ")");
  }
  if (stalled_for < options_.peer_timeout) return;

  // Blame the rank furthest behind: the peer we wait for may itself be waiting
  // for it.
  int laggard = peer;
  std::int32_t laggard_behind = static_cast<std::int32_t>(step_ - pc.consumed.value.load());
  for (int r = 0; r < size(); ++r) {
    auto behind = static_cast<std::int32_t>(step_ - control(r).consumed.value.load());
    if (r != rank_ && behind > laggard_behind) {
      laggard = r;
      laggard_behind = behind;
    }
  }
  const std::string culprit =
      rank_name(laggard) + " (pid " + std::to_string(control(laggard).pid.load()) + ")";
  blame(laggard, culprit + " made no progress for " + seconds_text(stalled_for) + " (" + context +
                                      (laggard == peer ? "" : " " + who) + "; peer timeout " +
                                      seconds_text(options_.peer_timeout) +
                                      "): the process may be stopped, deadlocked or overloaded");
}

std::string ShmChannel::rank_name(int rank) const {
  return "rank " + std::to_string(job_rank(rank));
}

void ShmChannel::blame(int culprit, const std::string& message) const {
  failed_peer_.store(culprit, std::memory_order_relaxed);
  throw PeerFailureError(culprit, message);
}

// ---- abort ---------------------------------------------------------------------------

void ShmChannel::abort(const std::string& reason) {
  {
    std::lock_guard lock(abort_mutex_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
    // After a failure the peers keep its message: it names the rank to blame.
    publish_state(RankState::Aborted, reason);
    aborted_.store(true, std::memory_order_seq_cst);
  }
  if (auto* word = sleeping_on_.load(std::memory_order_seq_cst)) futex_wake_all(word);
  wake_own_sleepers();
}

void ShmChannel::publish_failure(const std::string& message) {
  {
    std::lock_guard lock(abort_mutex_);
    publish_state(RankState::Failed, message);
  }
  wake_own_sleepers();
}

void ShmChannel::publish_state(RankState state, const std::string& reason) {
  RankControl& me = control(rank_);
  const auto current = static_cast<RankState>(me.state.load(std::memory_order_relaxed));
  if (current == RankState::Failed || current == RankState::Aborted) return;
  std::size_t n = std::min(reason.size(), kReasonBytes - 1);
  std::memcpy(me.reason, reason.data(), n);
  me.reason[n] = '\0';
  me.failed_peer.store(failed_peer_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  me.state.store(static_cast<std::uint32_t>(state), std::memory_order_release);
}

void ShmChannel::throw_if_aborted() const {
  if (!aborted_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(abort_mutex_);
  throw ShutdownError(abort_reason_);
}

void ShmChannel::wake_own_sleepers() {
  RankControl& me = control(rank_);
  for (Counter* c : {&me.posted, &me.reduced, &me.consumed}) futex_wake_all(&c->value);
}

}  // namespace kolo::comm::shm
