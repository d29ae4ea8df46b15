#include "comm/mesh/failure_verdict.h"

#include <chrono>

#include "common/logging.h"

namespace kolo::comm {

FailureVerdict::FailureVerdict(store::StoreClient* store, std::string key_prefix, std::string me)
    : store_(store), prefix_(std::move(key_prefix)), me_(std::move(me)) {}

namespace {

// The verdict is worth a moment, not more: with the store's host cut off, or
// kolorun stopped, the failure must still reach the user within
// KOLO_PEER_TIMEOUT plus a second, judged by this rank alone.
constexpr std::chrono::milliseconds kStoreReplyWithin{400};

}  // namespace

std::pair<int, std::string> FailureVerdict::claim(int rank, const std::string& message) {
  if (store_ == nullptr) return {rank, message};
  const std::string verdict_key = prefix_ + "verdict";
  const store::ShortReplies short_replies(kStoreReplyWithin);
  try {
    if (store_->add(prefix_ + "claims", 1) == 1) {
      std::string text = std::to_string(rank) + "\n" + message + " [seen first by " + me_ + "]";
      store_->set(verdict_key, store::Bytes(text.begin(), text.end()));
      return {rank, text.substr(text.find('\n') + 1)};
    }
    // The first claimant writes right after its claim; it may have died in between.
    store::Bytes value = store_->get(verdict_key, kStoreReplyWithin);
    std::string text(value.begin(), value.end());
    auto newline = text.find('\n');
    if (newline == std::string::npos || newline == 0 || newline > 11) return {rank, message};
    return {std::stoi(text.substr(0, newline)), text.substr(newline + 1)};
  } catch (const std::exception& e) {
    KOLO_LOG(Debug, "could not share the failure verdict: " << e.what());
    return {rank, message};
  }
}

std::string rank_name(int job_rank) { return "rank " + std::to_string(job_rank); }

std::string stalled_peer_message(const std::string& who, std::chrono::milliseconds timeout, const std::string& what) {
  return who + " made no progress for " + std::to_string(timeout.count() / 1000.0).substr(0, 5) +
         " s during " + what + " (it stalled or its host is unreachable; KOLO_PEER_TIMEOUT sets the limit)";
}

std::string lost_peer_message(const std::string& who, const std::string& what, const std::string& detail) {
  return "lost the connection to " + who + " during " + what +
         " (the process exited or failed, or its host is unreachable): " + detail;
}

std::string error_text(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
  }
  return "unknown error";
}

}  // namespace kolo::comm
