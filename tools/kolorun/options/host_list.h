// The hosts a job may use and their slots, as the user gave them: "-H a:2,b:2"
// or a hostfile with lines "a slots=2". Syntax only; host_plan decides which
// ranks go where.
#pragma once

#include <string>
#include <vector>

namespace kolorun {

struct HostSlots {
  std::string host;  // as the user wrote it, or this machine's hostname
  int slots = 1;
};

// Parses "host:slots,host:slots" (slots default to 1). Entries naming the same
// host are merged; every alias of this machine (localhost, 127.0.0.1, its hostname)
// counts as one host named by its hostname. Throws UsageError, naming `flag`.
std::vector<HostSlots> parse_host_list(const std::string& text, const std::string& flag = "-H");

// Reads a hostfile: one host a line, "host" or "host slots=N"; '#' starts a
// comment; blank lines are skipped. Merges like parse_host_list. Throws
// UsageError naming the file and line, and for a file past 1 MiB or a line past
// 4096 bytes.
std::vector<HostSlots> read_hostfile(const std::string& path);

// "a:2,b:1", the -H form of a host list.
std::string format_host_list(const std::vector<HostSlots>& hosts);

// The host of ssh's user@host form ("host" itself when there is no user).
std::string host_part(const std::string& host);

// True for localhost, 127.0.0.1 and this machine's hostname.
bool is_this_host(const std::string& host);
std::string this_hostname();

}  // namespace kolorun
