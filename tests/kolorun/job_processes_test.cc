// How kolorun finds a job's processes through /proc (tools/kolorun/supervision/
// job_processes.*), which its watchdog's sweep relies on: a process in the middle
// of an exec shows /proc no environment for a moment, and must not be taken for
// one outside the job.
#include "supervision/job_processes.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/temp_dir.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A child running `argv` with exactly `environment`; killed and reaped at the end.
class Child {
 public:
  Child(std::vector<std::string> argv, std::vector<std::string> environment) {
    std::vector<char*> args, env;
    for (auto& arg : argv) args.push_back(arg.data());
    for (auto& entry : environment) env.push_back(entry.data());
    args.push_back(nullptr);
    env.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execve(args[0], args.data(), env.data());
      ::_exit(127);
    }
  }
  ~Child() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    reap();
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // Waits for the child's end; its status.
  int reap() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
};

// Until `pid` runs with the job's environment (a forked child shows its parent's
// until its exec).
bool wait_until_found(pid_t pid, const kolorun::JobProcessMatch& match) {
  for (const auto end = Clock::now() + 5s; Clock::now() < end; std::this_thread::sleep_for(1ms))
    if (kolorun::find_job_processes(match) == std::vector<pid_t>{pid}) return true;
  return false;
}

std::string unique_job_id(const char* what) { return std::string(what) + "-" + std::to_string(::getpid()); }

// A shell that execs itself again and again: most of its life is exec.
std::string write_reexec_script(const kolo::testing::TempDir& dir) {
  const std::string script = dir.file("reexec.sh");
  std::ofstream(script) << "exec /bin/sh \"$0\"\n";
  return script;
}

TEST(JobProcesses, AProcessThatKeepsExecingIsFoundAtEveryLook) {
  kolo::testing::TempDir dir("job_processes_test");
  const std::string job = unique_job_id("reexec-found");
  Child child({"/bin/sh", write_reexec_script(dir)}, {"KOLO_JOB_ID=" + job, "PATH=/usr/bin:/bin"});
  ASSERT_GT(child.pid(), 0);
  const kolorun::JobProcessMatch match{{"KOLO_JOB_ID=" + job}, {}};
  ASSERT_TRUE(wait_until_found(child.pid(), match));
  int looks = 0, misses = 0;
  for (const auto end = Clock::now() + 1500ms; Clock::now() < end; ++looks) {
    const std::vector<pid_t> found = kolorun::find_job_processes(match, 5s);
    if (found != std::vector<pid_t>{child.pid()}) ++misses;
  }
  EXPECT_EQ(misses, 0) << "of " << looks << " looks";
}

TEST(JobProcesses, TheSweepLeavesNoProcessThatKeepsExecing) {
  kolo::testing::TempDir dir("job_processes_test");
  const std::string script = write_reexec_script(dir);
  for (int round = 0; round < 100; ++round) {
    const std::string job = unique_job_id("reexec-swept") + "-" + std::to_string(round);
    Child child({"/bin/sh", script}, {"KOLO_JOB_ID=" + job, "PATH=/usr/bin:/bin"});
    ASSERT_GT(child.pid(), 0);
    const kolorun::JobProcessMatch match{{"KOLO_JOB_ID=" + job}, {}};
    ASSERT_TRUE(wait_until_found(child.pid(), match));
    std::this_thread::sleep_for(std::chrono::microseconds(round % 10 * 100));  // at another point of its cycle
    ASSERT_TRUE(kolorun::kill_job_processes(match, 5s));
    // Killed, it may still be on its way out (its memory gone, not yet a
    // zombie: /proc then shows no environment to match); missed, it would exec
    // on for good. Its end, and the signal that ended it, tell which.
    int status = 0;
    const pid_t pid = child.pid();
    pid_t ended = 0;
    for (const auto end = Clock::now() + 2s; ended == 0 && Clock::now() < end; std::this_thread::sleep_for(1ms))
      ended = ::waitpid(pid, &status, WNOHANG);
    ASSERT_EQ(ended, pid) << "round " << round << ": the sweep ended with the process still running";
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  }
}

// A process started with no environment at all (env -i) reads empty too, for
// good: it is no mid-exec process to wait for.
TEST(JobProcesses, AProcessWithAnEmptyEnvironmentIsNoReasonToWait) {
  Child empty({"/bin/sleep", "30"}, {});
  ASSERT_GT(empty.pid(), 0);
  std::this_thread::sleep_for(100ms);  // past its exec
  const auto start = Clock::now();
  EXPECT_TRUE(kolorun::find_job_processes({{"KOLO_JOB_ID=" + unique_job_id("none")}, {}}, 5s).empty());
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST(JobProcesses, ProcStatFieldsStartAfterTheCommandName) {
  const auto fields = kolorun::proc_stat_fields("42 (a (tricky) name) S 7 42 42 0 -1 4194560 9\n");
  ASSERT_EQ(fields.size(), 8u);
  EXPECT_EQ(fields[0], "S");
  EXPECT_EQ(fields[1], "7");
  EXPECT_EQ(fields[6], "4194560");
  EXPECT_EQ(fields[7], "9");
  EXPECT_TRUE(kolorun::proc_stat_fields("").empty());
}

}  // namespace
