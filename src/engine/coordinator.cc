#include "engine/coordinator.h"

#include <algorithm>

namespace kolo::engine {

Coordinator::Coordinator(int size) : size_(size), joined_(size, false) {}

bool Coordinator::is_ready(const Pending& pending) const {
  for (int r = 0; r < size_; ++r) {
    if (!pending.by_rank[r] && !joined_[r]) return false;
  }
  return pending.submitted > 0;
}

void Coordinator::mark_ready(const std::string& name) {
  if (std::find(newly_ready_.begin(), newly_ready_.end(), name) == newly_ready_.end()) newly_ready_.push_back(name);
}

void Coordinator::join(int rank) {
  if (joined_[rank]) return;
  joined_[rank] = true;
  ++joined_count_;
  last_joined_ = rank;
  // Operations that waited only for this rank are ready now.
  for (const auto& [name, pending] : table_) {
    if (is_ready(pending)) mark_ready(name);
  }
}

void Coordinator::add(int rank, std::vector<Request> requests) {
  for (auto& request : requests) {
    if (request.op == OpType::Join) {
      join(rank);
      continue;
    }
    auto [it, inserted] = table_.try_emplace(request.name);
    if (inserted) it->second.by_rank.resize(size_);
    auto& slot = it->second.by_rank[rank];
    if (!slot) ++it->second.submitted;
    slot = std::move(request);
    if (is_ready(it->second)) mark_ready(it->first);
  }
}

bool Coordinator::ranks_disagree_on_group(const Pending& pending) {
  const Request* first = nullptr;
  for (const auto& r : pending.by_rank) {
    if (!r) continue;
    if (!first) first = &*r;
    else if (r->group != first->group || r->group_size != first->group_size) return true;
  }
  return false;
}

void Coordinator::fail_groups(std::unordered_map<std::string, Pending>::iterator ready, const Response& error,
                              std::vector<Response>& out) {
  std::vector<std::string> groups;
  for (const auto& r : ready->second.by_rank) {
    if (r && !r->group.empty() && std::find(groups.begin(), groups.end(), r->group) == groups.end())
      groups.push_back(r->group);
  }
  table_.erase(ready);
  out.push_back(error);
  auto failed = [&](const std::string& name) {
    Response r = error;
    r.names = {name};
    out.push_back(std::move(r));
  };
  for (const auto& group : groups) {
    if (auto members = groups_.find(group); members != groups_.end()) {
      for (auto& member : members->second) out.push_back(std::move(member));
      groups_.erase(members);
    }
    // A rank submits a group's members together, so every member any rank
    // will submit is here already.
    for (auto it = table_.begin(); it != table_.end();) {
      const bool member = std::any_of(it->second.by_rank.begin(), it->second.by_rank.end(),
                                      [&](const auto& r) { return r && r->group == group; });
      if (!member) {
        ++it;
        continue;
      }
      failed(it->first);
      it = table_.erase(it);
    }
  }
}

std::vector<Response> Coordinator::take_ready() {
  std::vector<Response> out;
  for (const auto& name : newly_ready_) {
    auto it = table_.find(name);
    if (it == table_.end()) continue;
    Response response = build_response(name, it->second.by_rank, joined_count_ > 0);
    const Request& first = **std::find_if(it->second.by_rank.begin(), it->second.by_rank.end(),
                                         [](const auto& r) { return r.has_value(); });
    std::string group = first.group;
    std::int32_t group_size = first.group_size;
    if (ranks_disagree_on_group(it->second)) {
      fail_groups(it, response, out);
      continue;
    }
    table_.erase(it);
    if (group.empty()) {
      out.push_back(std::move(response));
      continue;
    }
    auto& members = groups_[group];
    members.push_back(std::move(response));
    if (static_cast<std::int32_t>(members.size()) >= group_size) {
      for (auto& member : members) out.push_back(std::move(member));
      groups_.erase(group);
    }
  }
  newly_ready_.clear();

  if (joined_count_ == size_) {
    Response done;
    done.op = OpType::Join;
    done.names = {"kolo.join"};
    done.last_joined = last_joined_;
    out.push_back(std::move(done));
    std::fill(joined_.begin(), joined_.end(), false);
    joined_count_ = 0;
    last_joined_ = -1;
  }
  return out;
}

std::vector<std::pair<std::string, std::vector<int>>> Coordinator::waiting() const {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  for (const auto& [name, pending] : table_) {
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (!pending.by_rank[r] && !joined_[r]) missing.push_back(r);
    }
    out.emplace_back(name, std::move(missing));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kolo::engine
