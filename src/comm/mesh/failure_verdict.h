// The job-wide verdict on which rank failed first.
//
// When a rank fails, its neighbours see it first; they give up and close their
// own connections, and the ranks waiting on *them* see only that. So that every
// rank names the rank that failed first, not the neighbour that closed on it,
// the first rank to claim the store's counter writes its judgement and every
// later claimant adopts it. Keys live under one prefix per job and init()
// generation, shared by every communicator of the job (flat, cross-host groups,
// hierarchical); ranks are global job ranks.
#pragma once

#include <chrono>
#include <exception>
#include <string>
#include <utility>

#include "store/store.h"

namespace kolo::comm {

class FailureVerdict {
 public:
  // `store` may be null: every rank then judges alone. `me` names this process
  // in the verdict ("rank 2", "server 0").
  FailureVerdict(store::StoreClient* store, std::string key_prefix, std::string me);

  // Offers this rank's judgement (`rank` failed, as `message` explains) and
  // returns the verdict: this one if it was first, else the first one. Never
  // throws; without a reachable store it returns this rank's own judgement.
  // `rank` is -1 for a process that is no rank of the job (a parameter server).
  std::pair<int, std::string> claim(int rank, const std::string& message);

 private:
  store::StoreClient* store_;
  std::string prefix_;
  std::string me_;
};

// How every TCP communicator words the failure of peer `who` ("rank 3",
// "server 1") during collective `what`: no progress for `timeout`, or a lost
// connection (`detail` from the transport).
std::string stalled_peer_message(const std::string& who, std::chrono::milliseconds timeout, const std::string& what);
std::string lost_peer_message(const std::string& who, const std::string& what, const std::string& detail);
// "rank <job_rank>".
std::string rank_name(int job_rank);
// The message of `error` (for wrapping it in another error).
std::string error_text(std::exception_ptr error);

}  // namespace kolo::comm
