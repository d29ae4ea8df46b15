// The coordinator: runs in rank 0's cycles (whichever thread runs them). It collects every rank's
// requests, decides which operations are ready (submitted by every rank that has
// not joined), validates that the ranks agree, and answers with an ordered list
// of responses that every rank then executes in the same order.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/messages.h"

namespace kolo::engine {

// Checks that the requests of one ready name agree and builds its response (an
// error response when they do not). `by_rank[r]` is empty for ranks that joined.
Response build_response(const std::string& name, const std::vector<std::optional<Request>>& by_rank,
                        bool any_joined);

class Coordinator {
 public:
  explicit Coordinator(int size);

  // Records one rank's new requests (received this cycle).
  void add(int rank, std::vector<Request> requests);

  // Every operation that became ready since the last call, in the order it
  // became ready, then a Join response if every rank has now joined.
  std::vector<Response> take_ready();

  // What is waiting and for whom: name -> ranks that have not submitted it.
  std::vector<std::pair<std::string, std::vector<int>>> waiting() const;

 private:
  struct Pending {
    std::vector<std::optional<Request>> by_rank;
    int submitted = 0;
  };

  bool is_ready(const Pending& pending) const;
  // Whether the ranks that submitted a name disagree on its group (its name or
  // size): then the ranks' groups have different members, and those that only
  // some ranks submitted would never be ready.
  static bool ranks_disagree_on_group(const Pending& pending);
  // Fails the `ready` name with `error` and, with the same message, every member
  // of every group its ranks named: those waiting for other members (groups_)
  // and those waiting for other ranks (table_), which no rank will wait for again.
  void fail_groups(std::unordered_map<std::string, Pending>::iterator ready, const Response& error,
                   std::vector<Response>& out);
  void mark_ready(const std::string& name);
  void join(int rank);

  int size_;
  std::unordered_map<std::string, Pending> table_;
  std::vector<std::string> newly_ready_;
  std::vector<bool> joined_;
  int joined_count_ = 0;
  int last_joined_ = -1;
  // Grouped allreduce: responses wait here until every member is ready.
  std::unordered_map<std::string, std::vector<Response>> groups_;
};

}  // namespace kolo::engine
