#include "elastic/host_discovery.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

#include "launch_error.h"
#include "unique_fd.h"

namespace kolorun {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxOutput = 1 << 20;
constexpr std::size_t kMaxHosts = 4096;
constexpr int kMaxSlots = 1 << 16;

// What is wrong with an entry, or empty when nothing is.
std::string parse_entry(std::string_view entry, int default_slots, HostSlots& out) {
  const auto colon = entry.rfind(':');
  std::string_view host = entry.substr(0, colon);
  out.slots = default_slots;
  if (colon != std::string_view::npos) {
    const std::string_view count = entry.substr(colon + 1);
    int slots = 0;
    const auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), slots);
    if (ec != std::errc() || end != count.data() + count.size() || slots <= 0 || slots > kMaxSlots)
      return "slots '" + std::string(count) + "' are not a whole number from 1 to 65536";
    out.slots = slots;
  }
  if (host.empty() || host.size() > 255) return "a host name must have 1 to 255 characters";
  if (std::any_of(host.begin(), host.end(), [](char c) { return c <= ' ' || c == 0x7f || c == ','; }))
    return "a host name may not hold white space, control characters or commas";
  out.host = std::string(host);
  return "";
}

}  // namespace

std::vector<HostSlots> parse_elastic_hosts(const std::string& text, char separator, int default_slots,
                                           const std::string& source) {
  std::vector<HostSlots> hosts;
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto end = rest.find(separator);
    std::string_view entry = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    while (!entry.empty() && (entry.back() == '\r' || entry.back() == ' ')) entry.remove_suffix(1);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    if (entry.empty()) continue;
    HostSlots parsed;
    const std::string problem = parse_entry(entry, default_slots, parsed);
    if (!problem.empty()) {
      std::string shown(entry.substr(0, 80));
      for (char& c : shown)
        if (static_cast<unsigned char>(c) < ' ') c = '?';
      throw UsageError(source + ": '" + shown + "': " + problem);
    }
    auto same = std::find_if(hosts.begin(), hosts.end(), [&](const HostSlots& h) { return h.host == parsed.host; });
    if (same != hosts.end()) {
      same->slots += parsed.slots;
      if (same->slots > kMaxSlots)
        throw UsageError(source + ": host " + same->host + " has more than " + std::to_string(kMaxSlots) + " slots");
    } else {
      if (hosts.size() >= kMaxHosts) throw UsageError(source + ": more than " + std::to_string(kMaxHosts) + " hosts");
      hosts.push_back(std::move(parsed));
    }
  }
  return hosts;
}

DiscoveryRun::DiscoveryRun(std::string script, int default_slots, std::chrono::milliseconds timeout)
    : script_(std::move(script)), default_slots_(default_slots), timeout_(timeout), deadline_(Clock::now() + timeout) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw LaunchError(system_error_text("pipe for the discovery script", errno), 1);
  UniqueFd write_end(pipe_fds[1]);
  read_end_ = UniqueFd(pipe_fds[0]);
  pid_ = ::fork();
  if (pid_ < 0) throw LaunchError(system_error_text("fork for the discovery script", errno), 1);
  if (pid_ == 0) {
    ::setpgid(0, 0);  // its own group: a timeout kills what it started too
    ::dup2(write_end.get(), 1);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execl("/bin/sh", "sh", "-c", script_.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(pid_, pid_);
}

DiscoveryRun::~DiscoveryRun() {
  if (pid_ > 0) finish();
}

void DiscoveryRun::finish() {
  ::kill(-pid_, SIGKILL);  // whatever it left running in its group, or itself
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

[[noreturn]] void DiscoveryRun::fail(const std::string& why) {
  finish();
  throw LaunchError("the host discovery script '" + script_ + "' " + why, 1);
}

std::optional<std::vector<HostSlots>> DiscoveryRun::poll(std::chrono::milliseconds wait) {
  const auto until = std::min(deadline_, Clock::now() + wait);
  char buffer[4096];
  while (read_end_.valid()) {
    const ssize_t n = ::read(read_end_.get(), buffer, sizeof buffer);
    if (n > 0) {
      output_.append(buffer, static_cast<std::size_t>(n));
      if (output_.size() > kMaxOutput) fail("printed more than 1 MiB");
      continue;
    }
    if (n == 0) {
      read_end_.reset();  // its output is complete
      break;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) fail(system_error_text("could not be read", errno));
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) break;
    pollfd fd{read_end_.get(), POLLIN, 0};
    ::poll(&fd, 1, static_cast<int>(left));
  }
  int status = 0;
  pid_t done = 0;
  while (!read_end_.valid()) {
    done = ::waitpid(pid_, &status, WNOHANG);
    if (done != 0 || Clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (done <= 0) {
    if (Clock::now() >= deadline_)
      fail("did not finish within " + std::to_string(timeout_.count() / 1000.0).substr(0, 5) + " s");
    return std::nullopt;
  }
  pid_ = -1;
  ::kill(-done, SIGKILL);  // whatever it left running in its group
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    throw LaunchError("the host discovery script '" + script_ + "' exited with code " +
                          std::to_string(WEXITSTATUS(status)),
                      1);
  if (WIFSIGNALED(status))
    throw LaunchError("the host discovery script '" + script_ + "' was killed by signal " +
                          std::to_string(WTERMSIG(status)),
                      1);
  try {
    return parse_elastic_hosts(output_, '\n', default_slots_, "the host discovery script's output");
  } catch (const UsageError& e) {
    std::string what = e.what();
    what.erase(what.rfind(" (see kolorun --help)"));
    throw LaunchError(what, 1);
  }
}

std::vector<HostSlots> discover_hosts(const std::string& script, int default_slots,
                                      std::chrono::milliseconds timeout) {
  DiscoveryRun run(script, default_slots, timeout);
  for (;;) {
    if (auto hosts = run.poll(timeout)) return *hosts;
  }
}

std::vector<HostSlots> initial_elastic_hosts(const std::string& hosts, const std::string& hostfile,
                                             const std::string& script, int slots_per_host) {
  if (!script.empty()) return discover_hosts(script, slots_per_host, kDiscoveryScriptTimeout);
  if (!hostfile.empty()) return read_hostfile(hostfile);
  if (!hosts.empty()) return parse_elastic_hosts(hosts, ',', 1, "-H");
  return {};
}

}  // namespace kolorun
