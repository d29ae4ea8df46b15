// "Hosts" for multi-host tests, made of Linux network namespaces on this machine.
//
// NetnsHosts creates N namespaces (kolo-<test pid>-<random>-h<i>), each with
// loopback up and one interface, kolo0, holding 10.231.<s>.<i+1>/24. The kolo0
// interfaces are veth pairs whose other ends sit on a bridge inside a further
// namespace (...-sw), so the hosts reach each other and nothing else: no address
// is ever added to this machine's own interfaces. Optionally each kolo0 gets a
// netem qdisc (delay, rate). The destructor kills whatever still runs in the
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

namespace kolo::testing {

// A command started as a child of the test (no shell), with its stdout and
// stderr captured. It dies with the test (PR_SET_PDEATHSIG), and the destructor
// kills it (its whole process group) if it still runs.
class Subprocess {
 public:
  struct Result {
    bool exited = false;  // else killed by a signal, or by wait()'s timeout
    int exit_code = -1;
    int signal = 0;
    bool timed_out = false;
    std::string out, err;
    std::chrono::milliseconds elapsed{0};
  };

  explicit Subprocess(const std::vector<std::string>& argv);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // Collects output until the command exits and closes its pipes; kills its
  // process group at `timeout`.
  Result wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int out_fd_ = -1, err_fd_ = -1;
  std::chrono::steady_clock::time_point start_;
};

// Runs a command to its end (or `timeout`).
Subprocess::Result run_command(const std::vector<std::string>& argv,
                               std::chrono::milliseconds timeout = std::chrono::seconds(10));

struct NetnsOptions {
  int hosts = 2;
  // A root qdisc for every kolo0, as tc words: "netem delay 2ms rate 1gbit",
  // "tbf rate 1gbit burst 64kb latency 50ms"; empty: none.
  std::string qdisc;
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
  // 10.231.<s>.<i+1>
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
// killed test run): their processes are killed and the namespaces deleted.
void remove_stale_namespaces();

}  // namespace kolo::testing
