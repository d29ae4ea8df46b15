// The response cache: the steady-state fast path of negotiation.
//
// After an operation has been negotiated and executed, every rank stores its own
// request and the coordinator's response under a bit position. Every rank
// modifies the cache only while executing responses, in the same order, so bit
// positions and evictions agree on all ranks without any message. When a rank
// submits a request equal to its cached one, it only raises that bit; when a bit
// is raised on every rank (one small AND-allreduce per cycle), all ranks execute
// the cached response without asking the coordinator.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/entry.h"
#include "engine/messages.h"

namespace kolo::engine {

class ResponseCache {
 public:
  explicit ResponseCache(std::size_t capacity);

  enum class Outcome { Miss, Hit, Conflict };
  struct Lookup {
    Outcome outcome = Outcome::Miss;
    std::uint32_t bit = 0;
  };
  // Hit: the name is cached with an equal request. Conflict: cached with another
  // request (shape changed, ...): the bit must be invalidated on every rank.
  Lookup lookup(const Request& request) const;

  // The bit of a cached allreduce that `call` would hit (Outcome::Hit of lookup),
  // compared field by field instead of through a Request.
  std::optional<std::uint32_t> find(const AllreduceCall& call) const;

  static bool cacheable(const Response& response);

  // Stores an executed response; may evict the least recently used entry.
  void put(const Request& local_request, const Response& response);
  // Marks a cached response as used (executed) now.
  void touch(std::uint32_t bit);
  void erase(std::uint32_t bit);

  // Bit positions in use so far; the same on every rank.
  std::uint32_t slots() const { return static_cast<std::uint32_t>(entries_.size()); }
  bool holds(std::uint32_t bit, const std::string& name) const;
  const Response& response(std::uint32_t bit) const { return entries_[bit]->response; }

 private:
  struct Entry {
    Request request;
    Response response;
    std::uint64_t last_used = 0;
  };
  std::size_t capacity_;
  std::uint64_t clock_ = 0;
  std::size_t count_ = 0;
  std::vector<std::optional<Entry>> entries_;
  std::unordered_map<std::string, std::uint32_t> by_name_;
};

}  // namespace kolo::engine
