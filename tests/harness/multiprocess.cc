#include "harness/multiprocess.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <exception>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>

#include "common/job_names.h"
#include "harness/subprocess.h"
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

// The job's rendezvous store, in a process of its own rather than a thread of the
// test process: the ranks are forked (not exec'd) from the test process, and a
// fork while another thread holds a lock hands the child a lock nobody will
// release. The store thread did: GCC 12's ASan allocator takes no lock around
// fork(), and a rank forked while the store thread was allocating deadlocked in
// its first allocation of that size (seen as "rank 0 made no progress" in the
// first collective); kolo's own locks (logging) are exposed the same way. Forked
// from a test process that is still single-threaded, the store process itself is
// safe, and so are the ranks forked after it.
class StoreProcess {
 public:
  explicit StoreProcess(const std::string& secret) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    pid_ = fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      run_child(secret, fds[1]);
    }
    ::close(fds[1]);
    if (pid_ > 0) port_ = read_port(fds[0]);
    ::close(fds[0]);
    if (pid_ < 0 || port_ <= 0) {
      stop();
      throw std::runtime_error("the test's store process did not start");
    }
  }
  ~StoreProcess() { stop(); }
  StoreProcess(const StoreProcess&) = delete;
  StoreProcess& operator=(const StoreProcess&) = delete;

  int port() const { return port_; }

 private:
  [[noreturn]] static void run_child(const std::string& secret, int port_fd) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int port = 0;
    try {
      store::StoreServer server(secret);
      port = server.port();
      if (::write(port_fd, &port, sizeof port) != static_cast<ssize_t>(sizeof port)) _exit(1);
      ::close(port_fd);
      for (;;) pause();  // until the test kills it
    } catch (const std::exception& e) {
      std::fprintf(stderr, "test store process: %s\n", e.what());
    }
    _exit(1);
  }

  static int read_port(int fd) {
    pollfd p{fd, POLLIN, 0};
    int port = 0;
    if (poll(&p, 1, 30000) == 1 && ::read(fd, &port, sizeof port) == static_cast<ssize_t>(sizeof port)) return port;
    return 0;
  }

  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    // ECHILD when the ranks' reaping loop (waitpid(-1)) already took it.
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

  pid_t pid_ = -1;
  int port_ = 0;
};

// A parameter server of the job: the real kolo-server program.
pid_t start_server(int server, int servers, int workers, const std::string& job_id, const std::string& store_addr,
                   const std::string& secret, const SpawnOptions& options) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (const auto& [key, value] : options.env) setenv(key.c_str(), value.c_str(), 1);
  setenv("KOLO_SERVER_RANK", std::to_string(server).c_str(), 1);
  setenv("KOLO_NUM_SERVERS", std::to_string(servers).c_str(), 1);
  setenv("KOLO_SIZE", std::to_string(workers).c_str(), 1);
  setenv("KOLO_JOB_ID", job_id.c_str(), 1);
  setenv("KOLO_STORE_ADDR", store_addr.c_str(), 1);
  setenv("KOLO_SECRET", secret.c_str(), 1);
  execl(KOLO_SERVER_PATH, "kolo-server", static_cast<char*>(nullptr));
  std::fprintf(stderr, "cannot run %s: %s\n", KOLO_SERVER_PATH, std::strerror(errno));
  _exit(127);
}

void record(RankOutcome& out, int status) {
  out.exited = WIFEXITED(status);
  out.exit_code = out.exited ? WEXITSTATUS(status) : -1;
  out.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

// Named by the job id, or with a secret by its tag (common/job_names.h).
void remove_job_segments(const std::string& job_id, const std::string& secret) {
  std::error_code ec;
  const std::string by_id = "kolo-" + job_id;
  const std::string by_tag = secret.empty() ? by_id : "kolo-" + job_tag(secret) + "-";
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(by_id, 0) == 0 || name.rfind(by_tag, 0) == 0) std::filesystem::remove(entry.path(), ec);
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
  std::unique_ptr<StoreProcess> store;
  std::string store_addr, secret;
  if (options.use_store) {
    secret = store::make_secret();
    store = std::make_unique<StoreProcess>(secret);
    store_addr = "127.0.0.1:" + std::to_string(store->port());
  }

  SpawnOptions rank_options = options;
  if (options.servers > 0) rank_options.env["KOLO_NUM_SERVERS"] = std::to_string(options.servers);
  std::vector<pid_t> pids(size, -1);
  std::vector<RankOutcome> outcomes(size);
  for (int r = 0; r < size; ++r) {
    outcomes[r].rank = r;
    pid_t pid = fork();
    if (pid == 0) run_child(r, size, job_id, store_addr, secret, rank_options, body);
    if (pid < 0) {
      ADD_FAILURE() << "fork failed";
      break;
    }
    pids[r] = pid;
  }
  std::vector<pid_t> server_pids(options.servers, -1);
  std::vector<RankOutcome> server_outcomes(options.servers);
  for (int s = 0; s < options.servers; ++s) {
    server_outcomes[s].server = s;
    server_pids[s] = start_server(s, options.servers, size, job_id, store_addr, secret, options);
    if (server_pids[s] < 0) ADD_FAILURE() << "fork failed";
  }
  auto reap_server = [&](pid_t pid, int status) {
    for (int s = 0; s < options.servers; ++s) {
      if (server_pids[s] != pid) continue;
      server_pids[s] = -1;
      record(server_outcomes[s], status);
      return true;
    }
    return false;
  };

  if (options.on_started) {
    StartedJob started{job_id, store_addr, secret, {}, {}};
    started.pids.assign(pids.begin(), pids.end());
    started.server_pids.assign(server_pids.begin(), server_pids.end());
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
      if (reap_server(pid, status)) continue;
      for (int r = 0; r < size; ++r) {
        if (pids[r] != pid) continue;
        pids[r] = -1;
        --running;
        auto& out = outcomes[r];
        record(out, status);
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
        // Where it hung: a rank that outlives its failed or late job is a finding.
        print_stacks_of(pids[r], "rank " + std::to_string(r));
        kill(pids[r], SIGKILL);
      }
      kill_at = Clock::now() + std::chrono::hours(1);  // kill once; keep reaping
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // The job is over: its store goes, and the servers must see that and leave.
  store.reset();
  const auto servers_due = Clock::now() + options.server_exit_wait;
  for (;;) {
    int status = 0;
    const bool any = std::any_of(server_pids.begin(), server_pids.end(), [](pid_t p) { return p > 0; });
    if (!any) break;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      reap_server(pid, status);
      continue;
    }
    if (Clock::now() >= servers_due) {
      for (int s = 0; s < options.servers; ++s) {
        if (server_pids[s] <= 0) continue;
        server_outcomes[s].timed_out = true;
        kill(server_pids[s], SIGKILL);
        while (waitpid(server_pids[s], nullptr, 0) < 0 && errno == EINTR) {
        }
        server_pids[s] = -1;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  remove_job_segments(job_id, secret);
  outcomes.insert(outcomes.end(), server_outcomes.begin(), server_outcomes.end());
  return outcomes;
}

void run_ranks(int size, const std::function<void(int rank)>& body, const SpawnOptions& options) {
  for (const auto& out : spawn_ranks(size, body, options)) {
    if (out.server >= 0) {
      if (out.timed_out)
        ADD_FAILURE() << "server " << out.server << " did not leave within " << options.server_exit_wait.count()
                      << " ms of the job's end and was killed";
      else if (!out.exited || out.exit_code != 0)
        ADD_FAILURE() << "server " << out.server << " ended with exit code " << out.exit_code << ", signal "
                      << out.signal;
      continue;
    }
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
