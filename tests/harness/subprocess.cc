#include "harness/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kolo::testing {

using Clock = std::chrono::steady_clock;

Subprocess::Subprocess(const std::vector<std::string>& argv, const Environment& env) {
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
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
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

Subprocess::Result run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                               const Subprocess::Environment& env) {
  Subprocess process(argv, env);
  return process.wait(timeout);
}

bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  if (!std::getline(stat, content)) return false;
  auto paren = content.rfind(')');
  return paren != std::string::npos && paren + 2 < content.size() && content[paren + 2] != 'Z';
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

void print_stacks_of(pid_t pid, const std::string& who) {
  const auto gdb = run_command({"gdb", "-batch", "-nx", "-p", std::to_string(pid), "-ex", "thread apply all bt"},
                               std::chrono::seconds(60));
  if (!gdb.exited || gdb.exit_code != 0) {
    std::printf("(no stacks of %s: gdb did not run: %s)\n", who.c_str(), gdb.err.c_str());
    return;
  }
  std::printf("stacks of %s (pid %d):\n", who.c_str(), static_cast<int>(pid));
  for (const auto& line : lines_of(gdb.out))
    if (line.rfind('#', 0) == 0 || line.rfind("Thread", 0) == 0) std::printf("  %s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace kolo::testing
