#include "options/host_list.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <fstream>
#include <sstream>

#include "launch_error.h"

namespace kolorun {
namespace {

// What a hostfile may hold: far more than any cluster's host list, and a bound on
// what is read of a file that is no hostfile (/dev/zero, a log given by mistake).
constexpr std::size_t kMaxHostfileBytes = 1 << 20;
constexpr std::size_t kMaxHostfileLineBytes = 4096;

// A host name ends up as an argument of ssh (or of the launcher command): one
// that starts with '-' would be read as an option, and spaces or quotes would
// change the words of a remote shell command. Only characters of host names,
// IP addresses and ssh's user@host form are accepted.
void check_host_name(const std::string& host, const std::string& where) {
  if (host.empty()) throw UsageError(where + " has no host name");
  if (host.front() == '-') throw UsageError(where + ": host name '" + host + "' must not start with '-'");
  for (unsigned char c : host) {
    if (std::isalnum(c) || c == '.' || c == '-' || c == '_' || c == '@' || c == '[' || c == ']' || c == ':' ||
        c == '%')
      continue;
    throw UsageError(where + ": host name '" + host + "' has a character that cannot be in a host name");
  }
  // A ':' belongs to an IPv6 address ("[fe80::1]", "fe80::1%eth0"), never to a
  // name: "localhost:2:3" is a slot count too many, not host "localhost:2".
  if (host.find(':') != std::string::npos && host.front() != '[') {
    const std::string address = host.substr(0, host.find('%'));
    in6_addr parsed{};
    if (::inet_pton(AF_INET6, address.c_str(), &parsed) != 1)
      throw UsageError(where + ": host name '" + host +
                       "' has a ':' but is no IPv6 address (write HOST or HOST:SLOTS, an IPv6 address as [ADDR]:SLOTS)");
  }
}

int parse_slots(const std::string& where, const std::string& text) {
  int slots = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, slots);
  if (ec == std::errc::result_out_of_range && !text.empty() && text.front() != '-')
    throw UsageError(where + ": slot count '" + text + "' is too large");
  if (text.empty() || ec != std::errc() || ptr != end || slots <= 0)
    throw UsageError(where + " needs a positive slot count, got '" + text + "'");
  return slots;
}

void add_merged(std::vector<HostSlots>& hosts, HostSlots entry, const std::string& where) {
  if (is_this_host(entry.host)) entry.host = this_hostname();
  for (auto& known : hosts) {
    if (known.host != entry.host) continue;
    if (known.slots > INT_MAX - entry.slots) throw UsageError(where + " gives host '" + entry.host + "' too many slots");
    known.slots += entry.slots;
    return;
  }
  hosts.push_back(std::move(entry));
}

HostSlots parse_list_entry(const std::string& entry, const std::string& flag) {
  const std::string where = flag + " entry '" + entry + "'";
  HostSlots parsed;
  auto colon = entry.rfind(':');
  parsed.host = entry.substr(0, colon);
  check_host_name(parsed.host, where);
  if (colon != std::string::npos) parsed.slots = parse_slots(where, entry.substr(colon + 1));
  return parsed;
}

HostSlots parse_hostfile_line(const std::string& line, const std::string& where) {
  std::istringstream words(line);
  HostSlots parsed;
  words >> parsed.host;
  check_host_name(parsed.host, where);
  bool slots_seen = false;
  for (std::string word; words >> word;) {
    if (word.rfind("slots=", 0) != 0)
      throw UsageError(where + ": expected 'slots=N' after the host name, got '" + word + "'");
    if (slots_seen) throw UsageError(where + " gives slots= twice");
    parsed.slots = parse_slots(where, word.substr(6));
    slots_seen = true;
  }
  return parsed;
}

}  // namespace

std::string this_hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

std::string host_part(const std::string& host) {
  auto at = host.find('@');
  return at == std::string::npos ? host : host.substr(at + 1);
}

bool is_this_host(const std::string& host) {
  return host == "localhost" || host == "127.0.0.1" || host == this_hostname();
}

std::vector<HostSlots> parse_host_list(const std::string& text, const std::string& flag) {
  if (text.empty() || text.back() == ',') throw UsageError(flag + " '" + text + "' has an empty entry");
  std::vector<HostSlots> hosts;
  std::stringstream stream(text);
  for (std::string entry; std::getline(stream, entry, ',');) {
    if (entry.empty()) throw UsageError(flag + " '" + text + "' has an empty entry");
    add_merged(hosts, parse_list_entry(entry, flag), flag + " '" + text + "'");
  }
  return hosts;
}

std::vector<HostSlots> read_hostfile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw UsageError(system_error_text("cannot read hostfile '" + path + "'", errno));
  // One byte past the limit tells a file that is too large (/dev/zero never ends).
  std::string text(kMaxHostfileBytes + 1, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (file.bad()) throw UsageError(system_error_text("cannot read hostfile '" + path + "'", errno));
  text.resize(static_cast<std::size_t>(file.gcount()));
  if (text.size() > kMaxHostfileBytes)
    throw UsageError("hostfile '" + path + "' is larger than " + std::to_string(kMaxHostfileBytes >> 20) +
                     " MiB: a hostfile names hosts, one a line");
  std::vector<HostSlots> hosts;
  std::istringstream lines(text);
  int line_number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_number;
    const std::string where = "hostfile '" + path + "' line " + std::to_string(line_number);
    if (line.size() > kMaxHostfileLineBytes)
      throw UsageError(where + " is longer than " + std::to_string(kMaxHostfileLineBytes) + " bytes");
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    add_merged(hosts, parse_hostfile_line(line, where), where);
  }
  if (hosts.empty()) throw UsageError("hostfile '" + path + "' names no host");
  return hosts;
}

std::string format_host_list(const std::vector<HostSlots>& hosts) {
  std::string text;
  for (const auto& host : hosts) {
    if (!text.empty()) text += ',';
    text += host.host + ":" + std::to_string(host.slots);
  }
  return text;
}

}  // namespace kolorun
