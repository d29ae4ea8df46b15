#include "harness/netns.h"

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

bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  if (!std::getline(stat, content)) return false;
  auto paren = content.rfind(')');
  return paren != std::string::npos && paren + 2 < content.size() && content[paren + 2] != 'Z';
}

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

Subprocess::Subprocess(const std::vector<std::string>& argv) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw std::runtime_error("pipe2 failed");
  }
  std::vector<std::string> storage = argv;
  std::vector<char*> args;
  for (auto& arg : storage) args.push_back(arg.data());
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  start_ = Clock::now();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(99);
    int null_fd = ::open("/dev/null", O_RDONLY);
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  if (pid_ < 0) {
    ::close(out_fd_);
    ::close(err_fd_);
    throw std::runtime_error("fork failed");
  }
  ::setpgid(pid_, pid_);
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !reaped_) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

Subprocess::Result Subprocess::wait(std::chrono::milliseconds timeout) {
  Result result;
  const auto deadline = Clock::now() + timeout;
  auto drain = [](const pollfd& p, int& fd, std::string& into) {
    if (fd < 0 || p.revents == 0) return;
    char buffer[65536];
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      into.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      ::close(fd);
      fd = -1;
    }
  };
  while (out_fd_ >= 0 || err_fd_ >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      result.timed_out = true;
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      break;
    }
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    if (::poll(fds, 2, static_cast<int>(left)) <= 0) continue;
    drain(fds[0], out_fd_, result.out);
    drain(fds[1], err_fd_, result.err);
  }
  int status = 0;
  ::waitpid(pid_, &status, 0);
  reaped_ = true;
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_);
  result.exited = WIFEXITED(status);
  result.exit_code = result.exited ? WEXITSTATUS(status) : -1;
  result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return result;
}

Subprocess::Result run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  Subprocess process(argv);
  return process.wait(timeout);
}

void remove_stale_namespaces() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kNetnsDir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kNamePrefix, 0) != 0) continue;
    // kolo-<pid>-...: only namespaces whose creator is gone, so that tests running
    // in parallel keep theirs.
    pid_t creator = 0;
    std::istringstream digits(name.substr(sizeof(kNamePrefix) - 1));
    if (!(digits >> creator) || creator <= 0 || process_alive(creator)) continue;
    kill_and_delete(name);
  }
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
  const std::string subnet = "10.231." + std::to_string(std::random_device{}() % 256) + ".";
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
      run_ip({"-n", name, "addr", "add", address + "/24", "dev", kInterface});
      run_ip({"-n", name, "link", "set", kInterface, "up"});
      if (!options.qdisc.empty()) must_run(tc_qdisc_command(name, kInterface, options.qdisc));
      names_.push_back(name);
      addresses_.push_back(address);
    }
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
  return first.substr(0, first.rfind('.') + 1) + "200";
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
