#include "engine/response_cache.h"

namespace kolo::engine {

ResponseCache::ResponseCache(std::size_t capacity) : capacity_(capacity) {}

ResponseCache::Lookup ResponseCache::lookup(const Request& request) const {
  auto it = by_name_.find(request.name);
  if (it == by_name_.end()) return {};
  const auto& entry = *entries_[it->second];
  return {entry.request == request ? Outcome::Hit : Outcome::Conflict, it->second};
}

std::optional<std::uint32_t> ResponseCache::find(const AllreduceCall& call) const {
  auto it = by_name_.find(call.name);
  if (it == by_name_.end()) return std::nullopt;
  const Request& r = entries_[it->second]->request;
  const bool same = r.op == OpType::Allreduce && r.dtype == call.dtype && r.reduce_op == call.op &&
                    r.shape == call.shape && r.prescale == call.prescale && r.postscale == call.postscale &&
                    r.root == 0 && r.splits.empty() && r.group.empty() && r.group_size == 0;
  if (!same) return std::nullopt;
  return it->second;
}

bool ResponseCache::cacheable(const Response& response) {
  if (response.error_kind != ErrorKind::None || response.names.size() != 1) return false;
  switch (response.op) {
    case OpType::Allreduce:
    case OpType::Allgather:
    case OpType::Broadcast:
    case OpType::Alltoall:
    case OpType::Reducescatter: return true;
    default: return false;
  }
}

void ResponseCache::put(const Request& local_request, const Response& response) {
  if (capacity_ == 0) return;
  if (auto it = by_name_.find(local_request.name); it != by_name_.end()) erase(it->second);
  std::uint32_t bit = 0;
  if (count_ >= capacity_) {
    // Evict the least recently used entry and reuse its bit.
    std::uint64_t oldest = UINT64_MAX;
    for (std::uint32_t b = 0; b < entries_.size(); ++b) {
      if (entries_[b] && entries_[b]->last_used < oldest) {
        oldest = entries_[b]->last_used;
        bit = b;
      }
    }
    erase(bit);
  } else {
    // The lowest free bit, so that the bit vector stays short.
    while (bit < entries_.size() && entries_[bit]) ++bit;
    if (bit == entries_.size()) entries_.emplace_back();
  }
  entries_[bit] = Entry{local_request, response, ++clock_};
  by_name_[local_request.name] = bit;
  ++count_;
}

void ResponseCache::touch(std::uint32_t bit) {
  if (bit < entries_.size() && entries_[bit]) entries_[bit]->last_used = ++clock_;
}

void ResponseCache::erase(std::uint32_t bit) {
  if (bit >= entries_.size() || !entries_[bit]) return;
  by_name_.erase(entries_[bit]->request.name);
  entries_[bit].reset();
  --count_;
}

bool ResponseCache::holds(std::uint32_t bit, const std::string& name) const {
  return bit < entries_.size() && entries_[bit] && entries_[bit]->request.name == name;
}

}  // namespace kolo::engine
