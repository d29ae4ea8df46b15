#include "supervision/job_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>
#include <thread>

#include "unique_fd.h"

namespace kolorun {
namespace {

// A /proc file's whole text; nothing when it cannot be opened (the process is
// gone, or is another user's that this one may not inspect).
std::optional<std::string> read_opened_proc_file(const std::string& pid, const char* name) {
  UniqueFd fd(::open(("/proc/" + pid + "/" + name).c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  std::string text;
  char buffer[16384];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return text;
    text.append(buffer, static_cast<std::size_t>(n));
  }
}

bool holds_entry(std::string_view environment, const std::string& entry) {
  for (std::size_t start = 0; start < environment.size();) {
    std::size_t end = environment.find('\0', start);
    if (end == std::string_view::npos) end = environment.size();
    if (environment.substr(start, end - start) == entry) return true;
    start = end + 1;
  }
  return false;
}

bool matches(const std::string& environment, const JobProcessMatch& match) {
  if (environment.empty() || match.entries.empty()) return false;
  return std::all_of(match.entries.begin(), match.entries.end(),
                     [&](const std::string& entry) { return holds_entry(environment, entry); });
}

constexpr unsigned long kKernelThreadFlag = 0x00200000;  // PF_KTHREAD in /proc/<pid>/stat's flags

// The exec-time environment of `pid`, and whether it can be trusted. A process in
// the middle of execve shows an empty one (its old memory is being dropped, the
// new one's environment not laid out yet, or laid out with a start and no length
// while its strings are counted in): taken for "not the job's", it would outlive
// a sweep that happened to look at that moment. An empty read of a file that
// opened is settled only where /proc/<pid>/stat explains it: a kernel thread, a
// dead process, or an environment that really is empty (env -i): a start and no
// length in a process whose exec is done, which the end of its code, set after
// the environment, tells.
struct Environment {
  std::string text;
  bool settled = true;
};

Environment read_environment(const std::string& pid) {
  const std::optional<std::string> text = read_opened_proc_file(pid, "environ");
  if (!text) return {};  // gone, or not this user's to inspect (nor to kill)
  Environment environment{*text};
  if (!environment.text.empty()) return environment;
  const std::vector<std::string> fields = proc_stat_fields(read_proc_file(pid, "stat"));
  if (fields.size() < 49) return environment;  // gone, or a kernel without these fields
  auto number = [&](std::size_t index) { return std::strtoul(fields[index].c_str(), nullptr, 10); };
  const char state = fields[0].empty() ? '?' : fields[0][0];
  const unsigned long flags = number(6), end_code = number(24), env_start = number(47), env_end = number(48);
  environment.settled = state == 'Z' || state == 'X' || (flags & kKernelThreadFlag) != 0 ||
                         (end_code != 0 && env_end != 0 && env_start == env_end);
  return environment;
}

// Kills `pid` if it still matches. Through a pidfd where the kernel has them
// (5.3+): the process checked is then the one killed, even if `pid` was reused
// between the look and the kill.
void kill_if_matching(pid_t pid, const JobProcessMatch& match) {
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (pidfd.valid()) {
    if (matches(read_environment(std::to_string(pid)).text, match))
      ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
    return;
  }
#endif
  ::kill(pid, SIGKILL);
}

}  // namespace

std::string read_proc_file(const std::string& pid, const char* name) {
  return read_opened_proc_file(pid, name).value_or(std::string());
}

std::vector<std::string> proc_stat_fields(const std::string& stat) {
  std::vector<std::string> fields;
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return fields;
  std::size_t start = stat.find_first_not_of(' ', close + 1);
  while (start != std::string::npos) {
    const std::size_t end = stat.find_first_of(" \n", start);
    fields.push_back(stat.substr(start, end == std::string::npos ? std::string::npos : end - start));
    start = end == std::string::npos ? end : stat.find_first_not_of(" \n", end);
  }
  return fields;
}

JobProcessLook look_for_job_processes(const JobProcessMatch& match) {
  const pid_t me = ::getpid();
  JobProcessLook look;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == me || std::find(match.spared.begin(), match.spared.end(), pid) != match.spared.end()) continue;
    const Environment environment = read_environment(name);
    if (!environment.settled) look.settled = false;
    if (matches(environment.text, match)) look.found.push_back(pid);
  }
  return look;
}

std::vector<pid_t> find_job_processes(const JobProcessMatch& match, std::chrono::milliseconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  for (;;) {
    JobProcessLook look = look_for_job_processes(match);
    if (look.settled || std::chrono::steady_clock::now() >= deadline) return std::move(look.found);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void hide_own_environment() {
  // /proc/self/stat's 50th and 51st fields: where the environment area starts and ends.
  const std::vector<std::string> fields = proc_stat_fields(read_proc_file("self", "stat"));
  if (fields.size() < 49) return;
  const unsigned long start = std::strtoul(fields[47].c_str(), nullptr, 10);
  const unsigned long end = std::strtoul(fields[48].c_str(), nullptr, 10);
  if (end <= start) return;
  std::memset(reinterpret_cast<void*>(start), 0, end - start);
}

bool kill_job_processes(const JobProcessMatch& match, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const JobProcessLook look = look_for_job_processes(match);
    // Done only when no process in the middle of an exec could be one of them.
    if (look.found.empty() && look.settled) return true;
    if (std::chrono::steady_clock::now() >= deadline) return look.found.empty();
    for (pid_t pid : look.found) kill_if_matching(pid, match);
    std::this_thread::sleep_for(std::chrono::milliseconds(look.found.empty() ? 1 : 5));
  }
}

}  // namespace kolorun
