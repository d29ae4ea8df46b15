#include "harness/netns.h"
#include "harness/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace kolo::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr char kNamePrefix[] = "kolo-";
const fs::path kNetnsDir = "/run/netns";
// Files 'ip netns exec NAME' bind-mounts over /etc inside the namespace.
const fs::path kNetnsEtcDir = "/etc/netns";


std::string describe(const std::vector<std::string>& argv) {
  std::string text;
  for (const auto& word : argv) text += (text.empty() ? "" : " ") + word;
  return text;
}

// Runs `ip ...` and throws with its output when it fails.
void must_run(const std::vector<std::string>& argv) {
  auto result = run_command(argv, 10s);
  if (!result.exited || result.exit_code != 0)
    throw std::runtime_error("'" + describe(argv) + "' failed: " + result.err + result.out);
}

std::vector<pid_t> namespace_pids(const std::string& name) {
  auto result = run_command({"ip", "netns", "pids", name}, 5s);
  std::vector<pid_t> pids;
  std::istringstream words(result.out);
  for (pid_t pid; words >> pid;)
    if (process_alive(pid)) pids.push_back(pid);
  return pids;
}

// Everything in the namespace gets SIGKILL, then the namespace goes.
void kill_and_delete(const std::string& name) {
  const auto deadline = Clock::now() + 3s;
  for (auto pids = namespace_pids(name); !pids.empty() && Clock::now() < deadline; pids = namespace_pids(name)) {
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(20ms);
  }
  run_command({"ip", "netns", "delete", name}, 5s);
  std::error_code ec;
  fs::remove_all(kNetnsEtcDir / name, ec);
}

// Every host's /etc/hosts: localhost plus each host's name and address.
void write_hosts_files(const std::vector<std::string>& names, const std::vector<std::string>& addresses) {
  std::string table = "127.0.0.1 localhost\n::1 localhost\n";
  for (std::size_t i = 0; i < names.size(); ++i) table += addresses[i] + " " + names[i] + "\n";
  for (const auto& name : names) {
    fs::create_directories(kNetnsEtcDir / name);
    std::ofstream file(kNetnsEtcDir / name / "hosts");
    file << table;
    if (!file.flush()) throw std::runtime_error("cannot write " + (kNetnsEtcDir / name / "hosts").string());
  }
}

std::vector<std::string> tc_qdisc_command(const std::string& ns, const std::string& dev, const std::string& qdisc) {
  std::vector<std::string> tc = {"ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root"};
  std::istringstream words(qdisc);
  for (std::string word; words >> word;) tc.push_back(word);
  return tc;
}

std::string random_hex(int digits) {
  std::random_device device;
  std::uniform_int_distribution<int> nibble(0, 15);
  std::string text;
  for (int i = 0; i < digits; ++i) text += "0123456789abcdef"[nibble(device)];
  return text;
}

}  // namespace


void remove_stale_namespaces() {
  // A namespace's /etc/netns folder may outlive it when a run died in between.
  std::set<std::string> stale;
  for (const fs::path& dir : {kNetnsDir, kNetnsEtcDir}) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(kNamePrefix, 0) != 0) continue;
      // kolo-<pid>-...: only namespaces whose creator is gone, so that tests
      // running in parallel keep theirs.
      pid_t creator = 0;
      std::istringstream digits(name.substr(sizeof(kNamePrefix) - 1));
      if ((digits >> creator) && creator > 0 && !process_alive(creator)) stale.insert(name);
    }
  }
  for (const auto& name : stale) kill_and_delete(name);
}

std::optional<std::string> NetnsHosts::unavailable() {
  static const std::optional<std::string> reason = []() -> std::optional<std::string> {
    if (::geteuid() != 0) return "network namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN); this test runs as uid " +
                                 std::to_string(::geteuid());
    const std::string probe = kNamePrefix + std::to_string(::getpid()) + "-probe";
    auto added = run_command({"ip", "netns", "add", probe}, 10s);
    if (!added.exited || added.exit_code != 0)
      return "cannot create a network namespace with 'ip netns add': " + added.err + added.out;
    auto veth = run_command({"ip", "-n", probe, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb"}, 10s);
    run_command({"ip", "netns", "delete", probe}, 10s);
    if (!veth.exited || veth.exit_code != 0) return "cannot create veth pairs: " + veth.err + veth.out;
    return std::nullopt;
  }();
  return reason;
}

bool NetnsHosts::qdisc_available(const std::string& qdisc) {
  if (unavailable()) return false;
  const std::string probe = kNamePrefix + std::to_string(::getpid()) + "-qdisc";
  run_command({"ip", "netns", "add", probe}, 10s);
  run_command({"ip", "-n", probe, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb"}, 10s);
  auto added = run_command(tc_qdisc_command(probe, "va", qdisc), 10s);
  run_command({"ip", "netns", "delete", probe}, 10s);
  return added.exited && added.exit_code == 0;
}

NetnsHosts::NetnsHosts(const NetnsOptions& options) {
  remove_stale_namespaces();
  prefix_ = kNamePrefix + std::to_string(::getpid()) + "-" + random_hex(4);
  // Never 0: the addresses are compared as text with what the programs print,
  // and "fd00:231:0::1" prints as "fd00:231::1".
  const unsigned s = 1 + std::random_device{}() % 255;
  const std::string subnet = options.ipv6 ? "fd00:231:" + std::to_string(s) + "::" : "10.231." + std::to_string(s) + ".";
  const std::string prefix_length = options.ipv6 ? "/64" : "/24";
  try {
    switch_name_ = prefix_ + "-sw";
    run_ip({"netns", "add", switch_name_});
    created_.push_back(switch_name_);
    run_ip({"-n", switch_name_, "link", "add", "name", "br0", "type", "bridge"});
    run_ip({"-n", switch_name_, "link", "set", "br0", "up"});
    for (int i = 0; i < options.hosts; ++i) {
      const std::string name = prefix_ + "-h" + std::to_string(i);
      const std::string port = "p" + std::to_string(i);
      const std::string address = subnet + std::to_string(i + 1);
      run_ip({"netns", "add", name});
      created_.push_back(name);
      run_ip({"-n", name, "link", "set", "lo", "up"});
      run_ip({"-n", name, "link", "add", "name", kInterface, "type", "veth", "peer", "name", port, "netns", switch_name_});
      run_ip({"-n", switch_name_, "link", "set", port, "master", "br0"});
      run_ip({"-n", switch_name_, "link", "set", port, "up"});
      std::vector<std::string> add = {"-n", name, "addr", "add", address + prefix_length, "dev", kInterface};
      if (options.ipv6) add.push_back("nodad");  // usable at once, not after duplicate address detection
      run_ip(add);
      run_ip({"-n", name, "link", "set", kInterface, "up"});
      if (!options.qdisc.empty()) must_run(tc_qdisc_command(name, kInterface, options.qdisc));
      names_.push_back(name);
      addresses_.push_back(address);
    }
    if (options.resolvable_names) write_hosts_files(names_, addresses_);
  } catch (...) {
    for (auto it = created_.rbegin(); it != created_.rend(); ++it) kill_and_delete(*it);
    throw;
  }
}

NetnsHosts::~NetnsHosts() {
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) kill_and_delete(*it);
}

std::string NetnsHosts::unused_address() const {
  const std::string& first = addresses_.front();
  const bool v6 = first.find(':') != std::string::npos;
  return first.substr(0, first.rfind(v6 ? ':' : '.') + 1) + (v6 ? "c8" : "200");
}

std::vector<std::string> NetnsHosts::exec_prefix(int i) const { return {"ip", "netns", "exec", name(i)}; }

std::vector<pid_t> NetnsHosts::pids(int i) const { return namespace_pids(name(i)); }

void NetnsHosts::set_link(int i, bool up) { run_ip({"-n", name(i), "link", "set", kInterface, up ? "up" : "down"}); }

void NetnsHosts::run_ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  must_run(argv);
}

}  // namespace kolo::testing
