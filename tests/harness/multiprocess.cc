#include "harness/multiprocess.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <exception>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>

#include "store/store.h"

namespace kolo::testing {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void run_child(int rank, int size, const std::string& job_id, const std::string& store_addr,
                            const std::string& secret, const SpawnOptions& options,
                            const std::function<void(int)>& body) {
  // Die with the test process, so that a crashed test leaves no rank behind.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  setenv("KOLO_RANK", std::to_string(rank).c_str(), 1);
  setenv("KOLO_SIZE", std::to_string(size).c_str(), 1);
  setenv("KOLO_LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("KOLO_LOCAL_SIZE", std::to_string(size).c_str(), 1);
  setenv("KOLO_CROSS_RANK", "0", 1);
  setenv("KOLO_CROSS_SIZE", "1", 1);
  setenv("KOLO_JOB_ID", job_id.c_str(), 1);
  if (!store_addr.empty()) {
    setenv("KOLO_STORE_ADDR", store_addr.c_str(), 1);
    setenv("KOLO_SECRET", secret.c_str(), 1);
  } else {
    unsetenv("KOLO_STORE_ADDR");
    unsetenv("KOLO_SECRET");
  }
  for (const auto& [key, value] : options.env) setenv(key.c_str(), value.c_str(), 1);

  int code = 0;
  try {
    body(rank);
    if (::testing::Test::HasFailure()) code = 1;
  } catch (const std::exception& e) {
    std::fprintf(stdout, "rank %d: uncaught exception: %s\n", rank, e.what());
    code = 2;
  } catch (...) {
    std::fprintf(stdout, "rank %d: uncaught non-standard exception\n", rank);
    code = 2;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // _exit: the child must not run the parent's atexit handlers or gtest teardown.
  _exit(code);
}

void remove_job_segments(const std::string& job_id) {
  std::error_code ec;
  const std::string prefix = "kolo-" + job_id;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace

std::string make_job_id() {
  std::random_device rd;
  std::uniform_int_distribution<unsigned> dist(0, 15);
  std::string id;
  for (int i = 0; i < 16; ++i) id += "0123456789abcdef"[dist(rd)];
  return id;
}

std::vector<RankOutcome> spawn_ranks(int size, const std::function<void(int rank)>& body,
                                     const SpawnOptions& options) {
  std::fflush(stdout);
  std::fflush(stderr);
  const std::string job_id = make_job_id();
  std::unique_ptr<store::StoreServer> server;
  std::string store_addr, secret;
  if (options.use_store) {
    secret = store::make_secret();
    server = std::make_unique<store::StoreServer>(secret);
    store_addr = "127.0.0.1:" + std::to_string(server->port());
  }

  std::vector<pid_t> pids(size, -1);
  std::vector<RankOutcome> outcomes(size);
  for (int r = 0; r < size; ++r) {
    outcomes[r].rank = r;
    pid_t pid = fork();
    if (pid == 0) run_child(r, size, job_id, store_addr, secret, options, body);
    if (pid < 0) {
      ADD_FAILURE() << "fork failed";
      break;
    }
    pids[r] = pid;
  }

  if (options.on_started) {
    StartedJob started{job_id, store_addr, {}};
    started.pids.assign(pids.begin(), pids.end());
    options.on_started(started);
  }

  const auto deadline = Clock::now() + options.timeout;
  std::optional<Clock::time_point> kill_at;
  int running = 0;
  for (pid_t p : pids) running += p > 0;
  while (running > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < size; ++r) {
        if (pids[r] != pid) continue;
        pids[r] = -1;
        --running;
        auto& out = outcomes[r];
        out.exited = WIFEXITED(status);
        out.exit_code = out.exited ? WEXITSTATUS(status) : -1;
        out.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        if ((!out.exited || out.exit_code != 0) && !kill_at) kill_at = Clock::now() + options.grace;
      }
      continue;
    }
    auto now = Clock::now();
    bool timed_out = now >= deadline;
    if (timed_out || (kill_at && now >= *kill_at)) {
      for (int r = 0; r < size; ++r) {
        if (pids[r] <= 0) continue;
        outcomes[r].timed_out = timed_out;
        kill(pids[r], SIGKILL);
      }
      kill_at = Clock::now() + std::chrono::hours(1);  // kill once; keep reaping
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  remove_job_segments(job_id);
  return outcomes;
}

void run_ranks(int size, const std::function<void(int rank)>& body, const SpawnOptions& options) {
  for (const auto& out : spawn_ranks(size, body, options)) {
    if (out.timed_out) {
      ADD_FAILURE() << "rank " << out.rank << " of " << size << " did not finish within " << options.timeout.count()
                    << " s and was killed";
    } else if (!out.exited) {
      ADD_FAILURE() << "rank " << out.rank << " of " << size << " was killed by signal " << out.signal;
    } else if (out.exit_code != 0) {
      ADD_FAILURE() << "rank " << out.rank << " of " << size << " failed (exit code " << out.exit_code << ")";
    }
  }
}

}  // namespace kolo::testing
