// The stall inspector: finds operations that some ranks submitted long ago and
// others never did, and names the ranks that are behind.
//
// Every `check interval` rank 0 raises a flag in the cycle's agreement vector; then
// every rank shares the names and ages of its pending operations (allgatherv), so
// all ranks hold the same reports and reach the same verdict: rank 0 logs each
// stall, and past KOLO_STALL_SHUTDOWN_TIME every rank stops with an error naming
// the first rank that is behind.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kolo::engine {

struct PendingReport {
  bool joined = false;
  // Name and how long ago (milliseconds) this rank submitted it.
  std::vector<std::pair<std::string, std::int64_t>> pending;
};

std::vector<std::uint8_t> encode_report(const PendingReport& report);
PendingReport decode_report(std::span<const std::uint8_t> bytes);

struct Stall {
  std::string name;
  std::int64_t waited_ms = 0;   // longest any rank has waited
  std::vector<int> submitted;   // ranks that submitted it
  std::vector<int> missing;     // ranks that did not (and have not joined)
};

// Operations pending on some rank for at least `threshold` that other ranks have
// not submitted, longest wait first (then by name). Deterministic in its input.
std::vector<Stall> find_stalls(const std::vector<PendingReport>& by_rank, std::chrono::milliseconds threshold);

// "'grad.w' has waited 61.2 s for rank(s) 2, 3 (submitted by 0, 1)"
std::string describe(const Stall& stall);

}  // namespace kolo::engine
