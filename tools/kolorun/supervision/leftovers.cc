#include "supervision/leftovers.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "supervision/job_processes.h"

namespace kolorun {
namespace {

// The live children of this process, from /proc/<pid>/stat's parent field.
std::vector<pid_t> children() {
  const pid_t me = ::getpid();
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    const std::vector<std::string> fields = proc_stat_fields(read_proc_file(name, "stat"));
    if (fields.size() < 2 || fields[0] == "Z") continue;
    if (std::strtol(fields[1].c_str(), nullptr, 10) == me) found.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return found;
}

}  // namespace

void become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

std::vector<pid_t> remove_leftovers(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  const pid_t own_group = ::getpgrp();
  for (;;) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    const std::vector<pid_t> left = children();
    if (left.empty() || std::chrono::steady_clock::now() >= deadline) return left;
    for (pid_t pid : left) {
      // A live process's group id cannot be reused, so the group is the job's;
      // never kolorun's own (a leftover may have joined it), which holds kolorun
      // and the shell's pipeline.
      const pid_t group = ::getpgid(pid);
      if (group > 0 && group != own_group) ::kill(-group, SIGKILL);
      ::kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace kolorun
