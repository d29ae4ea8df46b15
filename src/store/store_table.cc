#include "store/store_table.h"

#include <algorithm>
#include <cstring>

namespace kolo::store {

std::vector<StoreTable::WaiterId> StoreTable::set(const std::string& key, Bytes value) {
  data_[key] = std::move(value);
  return wake_waiters_of(key);
}

std::optional<std::int64_t> StoreTable::add(const std::string& key, std::int64_t delta,
                                            std::vector<WaiterId>& woken) {
  auto it = data_.find(key);
  std::uint64_t current = 0;
  if (it != data_.end()) {
    if (it->second.size() != sizeof(current)) return std::nullopt;
    for (int i = 7; i >= 0; --i) current = (current << 8) | it->second[i];
  }
  // Unsigned arithmetic: overflow wraps instead of being undefined.
  const std::uint64_t updated = current + static_cast<std::uint64_t>(delta);
  Bytes encoded(sizeof(updated));
  for (int i = 0; i < 8; ++i) encoded[i] = static_cast<std::uint8_t>(updated >> (8 * i));
  data_[key] = std::move(encoded);
  woken = wake_waiters_of(key);
  return static_cast<std::int64_t>(updated);
}

const StoreTable::Bytes* StoreTable::find(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

bool StoreTable::contains_all(const std::vector<std::string>& keys) const {
  return first_missing(keys, 0) == keys.size();
}

bool StoreTable::erase(const std::string& key) { return data_.erase(key) > 0; }

bool StoreTable::park(WaiterId id, std::vector<std::string> keys) {
  std::size_t missing = first_missing(keys, 0);
  if (missing == keys.size()) return false;
  unpark(id);
  auto [it, inserted] = waiters_.emplace(id, Waiter{std::move(keys), missing});
  register_on(id, it->second.keys[missing]);
  return true;
}

void StoreTable::unpark(WaiterId id) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;
  auto list = waiting_on_.find(it->second.keys[it->second.next_missing]);
  if (list != waiting_on_.end()) {
    auto& ids = list->second;
    ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
    if (ids.empty()) waiting_on_.erase(list);
  }
  waiters_.erase(it);
}

std::size_t StoreTable::first_missing(const std::vector<std::string>& keys, std::size_t from) const {
  for (std::size_t i = from; i < keys.size(); ++i) {
    if (!data_.contains(keys[i])) return i;
  }
  return keys.size();
}

void StoreTable::register_on(WaiterId id, const std::string& key) { waiting_on_[key].push_back(id); }

std::vector<StoreTable::WaiterId> StoreTable::wake_waiters_of(const std::string& key) {
  auto list = waiting_on_.find(key);
  if (list == waiting_on_.end()) return {};
  std::vector<WaiterId> candidates = std::move(list->second);
  waiting_on_.erase(list);

  std::vector<WaiterId> woken;
  for (WaiterId id : candidates) {
    auto it = waiters_.find(id);
    if (it == waiters_.end()) continue;
    Waiter& waiter = it->second;
    std::size_t next = first_missing(waiter.keys, waiter.next_missing);
    // Keys passed earlier may have been erased since: check them all before waking.
    if (next == waiter.keys.size()) next = first_missing(waiter.keys, 0);
    if (next == waiter.keys.size()) {
      woken.push_back(id);
      waiters_.erase(it);
    } else {
      waiter.next_missing = next;
      register_on(id, waiter.keys[next]);
    }
  }
  return woken;
}

}  // namespace kolo::store
