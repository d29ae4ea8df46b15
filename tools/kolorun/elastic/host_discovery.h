// The hosts of an elastic job: what -H gives, or what --host-discovery-script
// prints now. Unlike a launch plan's host list, two names of this machine
// (localhost, 127.0.0.1) stay two hosts, as Horovod's elastic mode has them.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "options/host_list.h"
#include "unique_fd.h"

namespace kolorun {

// Lines (or -H entries) "host" or "host:slots"; bare hosts get `default_slots`.
// Blank lines are skipped; a name repeated adds its slots. Throws UsageError
// naming `source` and the entry for anything else (a bad number, white space in
// a name, more than 4096 hosts).
std::vector<HostSlots> parse_elastic_hosts(const std::string& text, char separator, int default_slots,
                                           const std::string& source);

// One run of a discovery script (through /bin/sh -c, in a process group of its
// own), read without blocking so that kolorun's loop goes on meanwhile.
class DiscoveryRun {
 public:
  // Starts it. Throws LaunchError when it cannot.
  DiscoveryRun(std::string script, int default_slots, std::chrono::milliseconds timeout);
  // Kills it (and what it started) if it still runs.
  ~DiscoveryRun();
  DiscoveryRun(const DiscoveryRun&) = delete;
  DiscoveryRun& operator=(const DiscoveryRun&) = delete;

  // Waits up to `wait` for it to end: then its hosts; nullopt while it runs.
  // Throws as discover_hosts() does, once.
  std::optional<std::vector<HostSlots>> poll(std::chrono::milliseconds wait);

 private:
  void finish();
  [[noreturn]] void fail(const std::string& why);

  std::string script_;
  int default_slots_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point deadline_;
  pid_t pid_ = -1;
  UniqueFd read_end_;
  std::string output_;
};

// Runs `script` (through /bin/sh -c) and parses what it prints. Throws
// LaunchError when it cannot run, exits non-zero, is killed, prints more than
// 1 MiB or runs past `timeout` (it is then killed), and UsageError for output
// that is not a host list.
std::vector<HostSlots> discover_hosts(const std::string& script, int default_slots,
                                      std::chrono::milliseconds timeout);

// How long one run of a discovery script may take before it is killed.
inline constexpr std::chrono::milliseconds kDiscoveryScriptTimeout{10000};

// An elastic job's hosts at its start: -H (each name its own host), the
// hostfile, or the discovery script's first list (whose failure fails the job).
std::vector<HostSlots> initial_elastic_hosts(const std::string& hosts, const std::string& hostfile,
                                             const std::string& script, int slots_per_host);

}  // namespace kolorun
