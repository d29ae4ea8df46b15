#include "supervision/job_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <thread>

#include "unique_fd.h"

namespace kolorun {
namespace {

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

// Kills `pid` if it still matches. Through a pidfd where the kernel has them
// (5.3+): the process checked is then the one killed, even if `pid` was reused
// between the look and the kill.
void kill_if_matching(pid_t pid, const JobProcessMatch& match) {
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (pidfd.valid()) {
    if (matches(read_proc_file(std::to_string(pid), "environ"), match))
      ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
    return;
  }
#endif
  ::kill(pid, SIGKILL);
}

}  // namespace

std::string read_proc_file(const std::string& pid, const char* name) {
  UniqueFd fd(::open(("/proc/" + pid + "/" + name).c_str(), O_RDONLY | O_CLOEXEC));
  std::string text;
  if (!fd.valid()) return text;
  char buffer[16384];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return text;
    text.append(buffer, static_cast<std::size_t>(n));
  }
}

std::vector<pid_t> find_job_processes(const JobProcessMatch& match) {
  const pid_t me = ::getpid();
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == me || std::find(match.spared.begin(), match.spared.end(), pid) != match.spared.end()) continue;
    if (matches(read_proc_file(name, "environ"), match)) found.push_back(pid);
  }
  return found;
}

void hide_own_environment() {
  // /proc/self/stat's 50th and 51st fields: where the environment area starts and ends.
  UniqueFd fd(::open("/proc/self/stat", O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return;
  char buffer[4096];
  const ssize_t n = ::read(fd.get(), buffer, sizeof buffer - 1);
  if (n <= 0) return;
  buffer[n] = '\0';
  const char* after_name = std::strrchr(buffer, ')');
  if (after_name == nullptr) return;
  // Fields from the 3rd (state) on, after the parenthesized command name.
  const char* field = after_name + 2;
  for (int index = 3; index < 50 && field != nullptr; ++index) {
    field = std::strchr(field, ' ');
    if (field != nullptr) ++field;
  }
  unsigned long start = 0, end = 0;
  if (field == nullptr || std::sscanf(field, "%lu %lu", &start, &end) != 2 || end <= start) return;
  std::memset(reinterpret_cast<void*>(start), 0, end - start);
}

bool kill_job_processes(const JobProcessMatch& match, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const std::vector<pid_t> left = find_job_processes(match);
    if (left.empty()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    for (pid_t pid : left) kill_if_matching(pid, match);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace kolorun
