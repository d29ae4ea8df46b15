#include "supervision/job_watchdog.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

#include "supervision/job_cgroup.h"
#include "supervision/shm_cleanup.h"

namespace kolorun {
namespace {

using std::chrono::milliseconds;

// The words kolorun writes, among the process groups (which are positive).
constexpr pid_t kJobEnded = 0;  // exit without doing anything
constexpr pid_t kSweep = -1;    // kill what is left of the job, then exit

// How long the watchdog keeps killing the job's processes; kolorun waits a little
// longer for it at a normal end.
constexpr milliseconds kSweepLimit{10000};
constexpr milliseconds kSweepWait = kSweepLimit + milliseconds(2000);

[[noreturn]] void watch(int fd, const WatchdogDuty& duty) {
  // Ctrl-C and the like go to kolorun's whole group: the watchdog outlives them
  // and waits for kolorun's word or its death (the pipe's end).
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGQUIT, SIGUSR1, SIGPIPE}) ::signal(sig, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  const int null = ::open("/dev/null", O_RDWR);
  for (int std_fd : {0, 1, 2}) ::dup2(null, std_fd);
  hide_own_environment();
  std::vector<pid_t> groups;
  for (;;) {
    pid_t group = 0;
    const ssize_t n = ::read(fd, &group, sizeof group);
    if (n < 0 && errno == EINTR) continue;
    if (n == static_cast<ssize_t>(sizeof group)) {
      if (group == kJobEnded) ::_exit(0);
      if (group == kSweep) {
        kill_cgroup(duty.cgroup, kSweepLimit);
        kill_job_processes(duty.processes, kSweepLimit);
        ::_exit(0);
      }
      groups.push_back(group);
      continue;
    }
    break;  // the pipe closed without a word: kolorun died
  }
  // The ranks died of their death signal; what stays in their groups reserves
  // the group ids, so these kills reach only the job. They also reach a process
  // that dropped the job's environment (env -i).
  for (pid_t group : groups) ::kill(-group, SIGKILL);
  // Also what left both the groups and the job's environment (setsid, env -i).
  kill_cgroup(duty.cgroup, kSweepLimit);
  kill_job_processes(duty.processes, kSweepLimit);
  std::error_code ec;
  if (!duty.flight_dir.empty()) std::filesystem::remove_all(duty.flight_dir, ec);
  if (duty.segments_leased) {
    remove_job_segments_unless_leased(duty.job_tag);
  } else {
    ShmJanitor::remove_job_segments(duty.job_tag);
  }
  ::_exit(0);
}

}  // namespace

JobWatchdog::JobWatchdog(WatchdogDuty duty) {
  int words[2], done[2];
  if (::pipe2(words, O_CLOEXEC) != 0) return;
  if (::pipe2(done, O_CLOEXEC) != 0) {
    ::close(words[0]);
    ::close(words[1]);
    return;
  }
  duty.processes.spared.push_back(::getpid());
  const pid_t middle = ::fork();
  if (middle == 0) {
    // Twice, so that the watchdog is no child of kolorun and not in the ranks' way.
    ::close(words[1]);
    ::close(done[0]);
    if (::fork() == 0) {
      ::setsid();
      watch(words[0], duty);  // done[1] stays open until the watchdog exits
    }
    ::_exit(0);
  }
  ::close(words[0]);
  ::close(done[1]);
  if (middle < 0) {
    ::close(words[1]);
    ::close(done[0]);
    return;
  }
  while (::waitpid(middle, nullptr, 0) < 0 && errno == EINTR) {
  }
  fd_ = words[1];
  done_fd_ = done[0];
}

JobWatchdog::~JobWatchdog() {
  if (fd_ >= 0) {
    const pid_t ended = kJobEnded;
    [[maybe_unused]] auto n = ::write(fd_, &ended, sizeof ended);
    ::close(fd_);
  }
  if (done_fd_ >= 0) ::close(done_fd_);
}

void JobWatchdog::watch_group(pid_t group) {
  if (fd_ < 0) return;
  [[maybe_unused]] auto n = ::write(fd_, &group, sizeof group);
}

void JobWatchdog::sweep() {
  if (fd_ < 0) return;
  const pid_t word = kSweep;
  [[maybe_unused]] auto n = ::write(fd_, &word, sizeof word);
  ::close(fd_);
  fd_ = -1;
  // The watchdog's exit closes the only write end of the done pipe.
  const auto deadline = std::chrono::steady_clock::now() + kSweepWait;
  for (;;) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    pollfd done{done_fd_, POLLIN, 0};
    const int ready = ::poll(&done, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    char byte;
    if (ready <= 0 || ::read(done_fd_, &byte, 1) <= 0) break;
  }
  ::close(done_fd_);
  done_fd_ = -1;
}

}  // namespace kolorun
