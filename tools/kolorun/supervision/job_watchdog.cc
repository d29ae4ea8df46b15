#include "supervision/job_watchdog.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

#include "supervision/shm_cleanup.h"

namespace kolorun {
namespace {

constexpr pid_t kJobEnded = 0;  // the word that the job ended, among the groups

[[noreturn]] void watch(int fd, const std::string& job_id, const std::string& flight_dir) {
  // Ctrl-C and the like go to kolorun's whole group: the watchdog outlives them
  // (kolorun tells it when the job ends), and holds none of kolorun's output.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGQUIT, SIGUSR1, SIGPIPE}) ::signal(sig, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  const int null = ::open("/dev/null", O_RDWR);
  for (int std_fd : {0, 1, 2}) ::dup2(null, std_fd);
  std::vector<pid_t> groups;
  for (;;) {
    pid_t group = 0;
    const ssize_t n = ::read(fd, &group, sizeof group);
    if (n < 0 && errno == EINTR) continue;
    if (n == static_cast<ssize_t>(sizeof group)) {
      if (group == kJobEnded) ::_exit(0);
      groups.push_back(group);
      continue;
    }
    break;  // the pipe closed without the word: kolorun died
  }
  // The ranks died of their death signal; what stays in their groups reserves
  // the group ids, so these kills reach only the job.
  for (pid_t group : groups) ::kill(-group, SIGKILL);
  std::error_code ec;
  if (!flight_dir.empty()) std::filesystem::remove_all(flight_dir, ec);
  ShmJanitor::remove_job_segments(job_id);
  ::_exit(0);
}

}  // namespace

JobWatchdog::JobWatchdog(std::string job_id, std::string flight_dir) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return;
  const pid_t middle = ::fork();
  if (middle == 0) {
    // Twice, so that the watchdog is no child of kolorun (whose leftovers,
    // leftovers.h, are its children) and not in the ranks' way.
    ::close(fds[1]);
    if (::fork() == 0) {
      ::setsid();
      watch(fds[0], job_id, flight_dir);
    }
    ::_exit(0);
  }
  ::close(fds[0]);
  if (middle < 0) {
    ::close(fds[1]);
    return;
  }
  while (::waitpid(middle, nullptr, 0) < 0 && errno == EINTR) {
  }
  fd_ = fds[1];
}

JobWatchdog::~JobWatchdog() {
  if (fd_ < 0) return;
  const pid_t ended = kJobEnded;
  [[maybe_unused]] auto n = ::write(fd_, &ended, sizeof ended);
  ::close(fd_);
}

void JobWatchdog::watch_group(pid_t group) {
  if (fd_ < 0) return;
  [[maybe_unused]] auto n = ::write(fd_, &group, sizeof group);
}

}  // namespace kolorun
