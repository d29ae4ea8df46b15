// Commands started by tests as real child processes, and facts about processes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace kolo::testing {

// A command started as a child of the test (no shell), with its stdout and
// stderr captured. It dies with the test (PR_SET_PDEATHSIG), and the destructor
// kills it (its whole process group) if it still runs.
class Subprocess {
 public:
  struct Result {
    bool exited = false;  // else killed by a signal, or by wait()'s timeout
    int exit_code = -1;
    int signal = 0;
    bool timed_out = false;
    std::string out, err;
    std::chrono::milliseconds elapsed{0};
  };

  using Environment = std::vector<std::pair<std::string, std::string>>;
  // `env` is added to (or overrides) the test's environment for the command.
  explicit Subprocess(const std::vector<std::string>& argv, const Environment& env = {});
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // Collects output until the command exits and closes its pipes; kills its
  // process group at `timeout`.
  Result wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int out_fd_ = -1, err_fd_ = -1;
  std::chrono::steady_clock::time_point start_;
};

// Runs a command to its end (or `timeout`).
Subprocess::Result run_command(const std::vector<std::string>& argv,
                               std::chrono::milliseconds timeout = std::chrono::seconds(10),
                               const Subprocess::Environment& env = {});

// A live process (a zombie counts as gone: it runs nothing).
bool process_alive(pid_t pid);

std::vector<std::string> lines_of(const std::string& text);

// Prints where process `pid` (`who`: "rank 2") is: its threads' stacks through
// gdb, for a process a test is about to kill because it did not finish.
void print_stacks_of(pid_t pid, const std::string& who);

}  // namespace kolo::testing
