// "Hosts" for multi-host tests, made of Linux network namespaces on this machine.
//
// NetnsHosts creates N namespaces (kolo-<test pid>-<random>-h<i>), each with
// loopback up and one interface, kolo0, holding 10.231.<s>.<i+1>/24 (or, IPv6
// only, fd00:231:<s>::<i+1>/64: NetnsOptions::ipv6). The kolo0
// interfaces are veth pairs whose other ends sit on a bridge inside a further
// namespace (...-sw), so the hosts reach each other and nothing else: no address
// is ever added to this machine's own interfaces. Optionally each kolo0 gets a
// netem qdisc (delay, rate), and the host names may resolve to the addresses
// (NetnsOptions::resolvable_names). The destructor kills whatever still runs in the
// namespaces and deletes them, also when the test failed; the constructor first
// removes namespaces left by test processes that no longer exist.
//
// Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and the ip command; tests ask
// NetnsHosts::unavailable() and skip when it says why not.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "harness/subprocess.h"

namespace kolo::testing {

struct NetnsOptions {
  int hosts = 2;
  // A root qdisc for every kolo0, as tc words: "netem delay 2ms rate 1gbit",
  // "tbf rate 1gbit burst 64kb latency 50ms"; empty: none.
  std::string qdisc;
  // Each host's name resolves to its address inside every host: 'ip netns exec'
  // bind-mounts /etc/netns/<namespace>/hosts over /etc/hosts, and NetnsHosts
  // writes that file (removed with the namespaces). Off: the names resolve nowhere.
  bool resolvable_names = false;
  // IPv6 only: kolo0 holds fd00:231:<s>::<i+1>/64 and no IPv4 address.
  bool ipv6 = false;
};

class NetnsHosts {
 public:
  static constexpr const char* kInterface = "kolo0";

  // Why namespaces cannot be made here, or nullopt when they can (probed once).
  static std::optional<std::string> unavailable();
  // Whether this kernel takes `qdisc` (e.g. netem may not be built in).
  static bool qdisc_available(const std::string& qdisc);

  // Throws std::runtime_error (with the failing command's output) when setup fails.
  explicit NetnsHosts(const NetnsOptions& options);
  ~NetnsHosts();
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  int size() const { return static_cast<int>(names_.size()); }
  // The namespace name of host i; tests use it as the host name too.
  const std::string& name(int i) const { return names_.at(static_cast<std::size_t>(i)); }
  // 10.231.<s>.<i+1> (fd00:231:<s>::<i+1>)
  const std::string& address(int i) const { return addresses_.at(static_cast<std::size_t>(i)); }
  // An address in the hosts' subnet that no host has.
  std::string unused_address() const;
  // {"ip", "netns", "exec", name(i)}
  std::vector<std::string> exec_prefix(int i) const;
  // Processes running in host i's namespace (zombies excluded).
  std::vector<pid_t> pids(int i) const;
  // Takes host i's kolo0 down or up: the host becomes unreachable, or comes back.
  void set_link(int i, bool up);

 private:
  void run_ip(const std::vector<std::string>& args);
  void remove_namespace(const std::string& name);

  std::string prefix_;  // kolo-<pid>-<random>
  std::string switch_name_;
  std::vector<std::string> names_, addresses_;
  std::vector<std::string> created_;
};

// Namespaces named kolo-<pid>-... whose creating process is gone (a crashed or
// killed test run): their processes are killed and the namespaces deleted, with
// their /etc/netns folders.
void remove_stale_namespaces();

}  // namespace kolo::testing
