#include "harness/kolorun_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>
#include <stdexcept>

namespace kolo::testing {
namespace {

using Clock = std::chrono::steady_clock;

void drain(const pollfd& p, int& fd, std::string& into) {
  if (fd < 0 || p.revents == 0) return;
  char buffer[65536];
  ssize_t n = read(fd, buffer, sizeof(buffer));
  if (n > 0) {
    into.append(buffer, static_cast<std::size_t>(n));
  } else if (n == 0 || errno != EINTR) {
    close(fd);
    fd = -1;
  }
}

}  // namespace

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

KolorunProcess::KolorunProcess(const std::string& kolorun, const std::vector<std::string>& args) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  std::vector<std::string> storage{kolorun};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  start_ = Clock::now();
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execv(kolorun.c_str(), argv.data());
    _exit(99);
  }
  close(out[1]);
  close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
}

KolorunProcess::~KolorunProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) close(out_fd_);
  if (err_fd_ >= 0) close(err_fd_);
}

RunResult KolorunProcess::wait(std::chrono::milliseconds timeout) {
  RunResult result;
  const auto deadline = Clock::now() + timeout;
  while (out_fd_ >= 0 || err_fd_ >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      result.timed_out = true;
      kill(pid_, SIGKILL);
      break;
    }
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    if (poll(fds, 2, static_cast<int>(left)) <= 0) continue;
    drain(fds[0], out_fd_, result.out);
    drain(fds[1], err_fd_, result.err);
  }
  int status = 0;
  waitpid(pid_, &status, 0);
  reaped_ = true;
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_);
  result.exited = WIFEXITED(status);
  result.exit_code = result.exited ? WEXITSTATUS(status) : -1;
  result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return result;
}

RunResult run_kolorun_at(const std::string& kolorun, const std::vector<std::string>& args,
                         std::chrono::milliseconds timeout) {
  KolorunProcess process(kolorun, args);
  return process.wait(timeout);
}

}  // namespace kolo::testing
