#include "bootstrap/elastic_membership.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "kolo/error.h"

namespace kolo::elastic {
namespace {

// Only a number's canonical spelling (no leading zeros, no "-0"), so that each
// record has one encoding.
std::optional<int> parse_int(std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || std::to_string(value) != text) return std::nullopt;
  return value;
}

bool valid_host(std::string_view host) {
  if (host.empty() || host.size() > 255) return false;
  return std::none_of(host.begin(), host.end(), [](char c) { return c <= ' ' || c == 0x7f; });
}

[[noreturn]] void bad_record(int generation, const std::string& why) {
  throw InvalidArgumentError("kolo elastic: the membership of generation " + std::to_string(generation) +
                             " in the job's store is not valid: " + why);
}

}  // namespace

int Membership::rank_of(int worker) const {
  for (std::size_t r = 0; r < members.size(); ++r)
    if (members[r].worker == worker) return static_cast<int>(r);
  return -1;
}

std::vector<int> Membership::host_indices() const {
  std::vector<std::string> order;
  std::vector<int> indices;
  for (const auto& m : members) {
    auto it = std::find(order.begin(), order.end(), m.host);
    if (it == order.end()) it = order.insert(order.end(), m.host);
    indices.push_back(static_cast<int>(it - order.begin()));
  }
  return indices;
}

std::vector<Member> in_rank_order(std::vector<Member> members) {
  std::map<std::string, int> oldest;  // host -> its oldest worker
  for (const auto& m : members) {
    auto [it, fresh] = oldest.emplace(m.host, m.worker);
    if (!fresh) it->second = std::min(it->second, m.worker);
  }
  std::sort(members.begin(), members.end(), [&](const Member& a, const Member& b) {
    const int ha = oldest.at(a.host), hb = oldest.at(b.host);
    return ha != hb ? ha < hb : a.worker < b.worker;
  });
  return members;
}

std::string encode_membership(const Membership& membership) {
  std::string text;
  for (const auto& m : membership.members) text += std::to_string(m.worker) + " " + m.host + "\n";
  return text;
}

Membership decode_membership(std::string_view text, int generation) {
  Membership out;
  out.generation = generation;
  std::set<int> seen;
  while (!text.empty()) {
    const auto end = text.find('\n');
    if (end == std::string_view::npos) bad_record(generation, "its last line has no end");
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end + 1);
    const auto space = line.find(' ');
    if (space == std::string_view::npos) bad_record(generation, "a line is not 'worker host'");
    const auto worker = parse_int(line.substr(0, space));
    const std::string_view host = line.substr(space + 1);
    if (!worker || *worker < 0) bad_record(generation, "a worker id is not a number");
    if (!valid_host(host)) bad_record(generation, "a host name is empty, too long or has white space");
    if (!seen.insert(*worker).second) bad_record(generation, "worker " + std::to_string(*worker) + " is listed twice");
    if (out.members.size() >= static_cast<std::size_t>(kMaxMembers)) bad_record(generation, "too many members");
    out.members.push_back(Member{*worker, std::string(host)});
  }
  if (out.members.empty()) bad_record(generation, "it has no members");
  return out;
}

std::string membership_key(int generation) { return "elastic/membership/" + std::to_string(generation); }

std::string reset_key(int worker) { return "elastic/reset/" + std::to_string(worker); }

std::string ready_key(int worker) { return "elastic/ready/" + std::to_string(worker); }

std::string encode_reset_request(const ResetRequest& request) {
  return std::to_string(request.generation) + " " + std::to_string(request.blamed_rank);
}

std::optional<ResetRequest> decode_reset_request(std::string_view text) {
  const auto space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const auto generation = parse_int(text.substr(0, space));
  const auto blamed = parse_int(text.substr(space + 1));
  if (!generation || !blamed || *generation < 0 || *blamed < -1) return std::nullopt;
  return ResetRequest{*generation, *blamed};
}

}  // namespace kolo::elastic
