// kolorun started as a real child process of a test, with its stdout and stderr
// captured, an exit status, and a timeout after which it is killed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace kolo::testing {

struct RunResult {
  bool exited = false;
  int exit_code = -1;
  int signal = 0;
  bool timed_out = false;
  std::string out, err;
  std::chrono::milliseconds elapsed{0};
};

std::vector<std::string> lines_of(const std::string& text);

// kolorun started as a child of the test, with its stdout and stderr captured.
// It dies with the test (PR_SET_PDEATHSIG), and its ranks die with it.
class KolorunProcess {
 public:
  // `kolorun` is the binary's path; `args` its arguments.
  KolorunProcess(const std::string& kolorun, const std::vector<std::string>& args);
  ~KolorunProcess();
  KolorunProcess(const KolorunProcess&) = delete;
  KolorunProcess& operator=(const KolorunProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Collects output until kolorun exits and closes its pipes; kills it at `timeout`.
  RunResult wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int out_fd_ = -1, err_fd_ = -1;
  std::chrono::steady_clock::time_point start_;
};

RunResult run_kolorun_at(const std::string& kolorun, const std::vector<std::string>& args,
                         std::chrono::milliseconds timeout);

}  // namespace kolo::testing
