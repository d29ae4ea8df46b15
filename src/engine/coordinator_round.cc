// The coordinator's round of a cycle (step d: every rank's new requests to rank
// 0, its responses to all) and the stall reports a cycle exchanges when rank 0
// asks for one.
#include <algorithm>

#include "common/coarse_clock.h"
#include "common/logging.h"
#include "common/wire.h"
#include "engine/engine.h"
#include "engine/stall_inspector.h"
#include "kolo/error.h"

namespace kolo::engine {

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

}  // namespace kolo::engine
