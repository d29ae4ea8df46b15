// The store's data and the requests parked on it, without any networking: the
// server thread owns one StoreTable and is its only user (not thread-safe).
//
// A parked request (GET or WAIT) waits for a list of keys. It is registered under
// the first key it still misses only, so that setting a key costs time for the
// requests waiting on that key, not for every parked request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace kolo::store {

class StoreTable {
 public:
  using Bytes = std::vector<std::uint8_t>;
  using WaiterId = std::uint64_t;

  // Stores `value` and returns the parked requests this completes (now unparked).
  std::vector<WaiterId> set(const std::string& key, Bytes value);
  // Adds to the 8-byte little-endian integer at `key` (absent counts as 0),
  // wrapping on overflow. Returns nullopt, changing nothing, when the value there
  // is not 8 bytes. `woken` receives the parked requests this completes.
  std::optional<std::int64_t> add(const std::string& key, std::int64_t delta, std::vector<WaiterId>& woken);
  const Bytes* find(const std::string& key) const;
  bool contains_all(const std::vector<std::string>& keys) const;
  bool erase(const std::string& key);

  // Parks `id` until every key exists. Returns false, parking nothing, when they
  // all exist already. An id may be parked once at a time.
  bool park(WaiterId id, std::vector<std::string> keys);
  // Forgets a parked request (timed out, or its connection closed). No-op if absent.
  void unpark(WaiterId id);
  std::size_t parked_count() const { return waiters_.size(); }
  std::size_t size() const { return data_.size(); }

 private:
  struct Waiter {
    std::vector<std::string> keys;
    std::size_t next_missing = 0;
  };

  // The index of the first key of `keys` at or after `from` that is absent, or
  // keys.size() when none is.
  std::size_t first_missing(const std::vector<std::string>& keys, std::size_t from) const;
  void register_on(WaiterId id, const std::string& key);
  std::vector<WaiterId> wake_waiters_of(const std::string& key);

  std::unordered_map<std::string, Bytes> data_;
  std::unordered_map<WaiterId, Waiter> waiters_;
  std::unordered_map<std::string, std::vector<WaiterId>> waiting_on_;
};

}  // namespace kolo::store
