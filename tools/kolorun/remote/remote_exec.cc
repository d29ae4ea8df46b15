#include "remote/remote_exec.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "bootstrap/topology.h"
#include "comm/ps/ps_settings.h"
#include "common/job_names.h"
#include "kolo/error.h"
#include "local/cpu_binding.h"
#include "local/process_spawner.h"
#include "options/program_path.h"
#include "plan/rank_environment.h"
#include "remote/remote_protocol.h"
#include "remote/start_word.h"
#include "store/store.h"
#include "supervision/job_cgroup.h"
#include "supervision/job_watchdog.h"
#include "supervision/shm_cleanup.h"
#include "supervision/signal_channel.h"

extern char** environ;

namespace kolorun {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The spec follows ssh's connection at once; this is only against a peer that
// connected and then said nothing.
constexpr milliseconds kSpecTimeout{60000};

void say(const std::string& label, const std::string& message) {
  std::string line = "kolorun: " + (label.empty() ? std::string() : label + ": ") + message + "\n";
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}


// This host's environment with the spec's entries laid over it.
std::vector<std::string> merged_environment(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string name = variable_name(*entry);
    bool overridden = false;
    for (const auto& o : overrides) overridden = overridden || variable_name(o) == name;
    if (!overridden) env.emplace_back(*entry);
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

// Reads the spec from stdin; the control bytes that came with it are kept.
RemoteSpec read_spec(std::string& control_bytes) {
  RemoteSpecDecoder decoder;
  const auto deadline = Clock::now() + kSpecTimeout;
  char buffer[65536];
  while (!decoder.done()) {
    auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) throw kolo::Error("no job description arrived on stdin within 60 s");
    pollfd fd{STDIN_FILENO, POLLIN, 0};
    if (::poll(&fd, 1, static_cast<int>(left)) <= 0) continue;
    ssize_t n = ::read(STDIN_FILENO, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw kolo::Error("stdin ended before the job description did (started by hand? kolorun starts this)");
    std::size_t used = decoder.feed(std::string_view(buffer, static_cast<std::size_t>(n)));
    control_bytes.append(buffer + used, static_cast<std::size_t>(n) - used);
  }
  return decoder.spec();
}

// Runs and watches one started rank; returns its shell-style status.
class RankWatch {
 public:
  RankWatch(const RemoteSpec& spec, pid_t pid, SignalChannel& signals)
      : spec_(spec), pid_(pid), signals_(signals), deadline_(Clock::now() + spec.host_timeout) {}

  int run(const std::string& early_control) {
    control(early_control);
    while (!status_) {
      std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
      if (stdin_open_) fds.push_back({STDIN_FILENO, POLLIN, 0});
      auto left = std::chrono::ceil<milliseconds>(deadline_ - Clock::now()).count();
      int ready = ::poll(fds.data(), fds.size(), stdin_open_ ? static_cast<int>(std::max<long long>(left, 0)) : -1);
      if (ready < 0 && errno != EINTR) throw kolo::Error(std::string("poll failed: ") + std::strerror(errno));
      if (stdin_open_ && fds.size() > 1 && fds[1].revents != 0) read_control();
      if (fds[0].revents != 0) handle_signals();
      if (stdin_open_ && Clock::now() >= deadline_) {
        say(spec_.label, "no word from kolorun for " + std::to_string((spec_.host_timeout.count() + 999) / 1000) +
                             " s (is the launching host unreachable?); killing the rank");
        lose_contact();
      }
    }
    return *status_;
  }

 private:
  void lose_contact() {
    stdin_open_ = false;
    contact_lost_ = true;
    ::kill(-pid_, SIGKILL);
  }

  void control(std::string_view bytes) {
    for (char byte : bytes) {
      int sig = static_cast<unsigned char>(byte);
      if (sig == kHeartbeatByte || sig > 64) continue;
      signalled_ = true;
      ::kill(-pid_, sig);
    }
  }

  void read_control() {
    char buffer[4096];
    ssize_t n = ::read(STDIN_FILENO, buffer, sizeof(buffer));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      lose_contact();  // kolorun closed the channel, died, or the connection dropped
      return;
    }
    deadline_ = Clock::now() + spec_.host_timeout;
    control(std::string_view(buffer, static_cast<std::size_t>(n)));
  }

  void handle_signals() {
    for (int sig : signals_.drain()) {
      if (sig != SIGCHLD) {
        signalled_ = true;
        ::kill(-pid_, sig);
        continue;
      }
      siginfo_t info{};
      // Peek first: while the rank is an unreaped zombie its group id cannot be
      // reused, so killing what it left behind cannot hit a stranger.
      if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != pid_)
        continue;
      ::kill(-pid_, SIGKILL);
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      finish(status);
    }
  }

  void finish(int status) {
    if (WIFEXITED(status)) {
      status_ = WEXITSTATUS(status);
      return;
    }
    int sig = WTERMSIG(status);
    // kolorun names the exit code only: say which signal, unless it was asked for.
    if (!signalled_ && !contact_lost_)
      say(spec_.label, "was killed by signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")");
    status_ = 128 + sig;
  }

  const RemoteSpec& spec_;
  pid_t pid_;
  SignalChannel& signals_;
  Clock::time_point deadline_;
  bool stdin_open_ = true;
  bool signalled_ = false;
  bool contact_lost_ = false;
  std::optional<int> status_;
};

// The tag that names the job's segments (common/job_names.h); empty without a secret.
std::string job_tag_of(const std::vector<std::string>& env) {
  const auto secret = lookup(env, kolo::store::kSecret.name);
  return secret && !secret->empty() ? kolo::job_tag(*secret) : "";
}

// This rank's (or parameter server's) processes on this host: other ranks of
// the job may run here too, each under a --remote-exec of its own that cleans
// up after it.
WatchdogDuty rank_watchdog_duty(const std::string& job_id, const std::vector<std::string>& env, int rank) {
  WatchdogDuty duty;
  if (job_id.empty()) return duty;  // no entries: nothing matches
  const auto server = lookup(env, kolo::comm::ps::kServerRank.name);
  duty.processes.entries = {"KOLO_JOB_ID=" + job_id,
                            server ? "KOLO_SERVER_RANK=" + *server : "KOLO_RANK=" + std::to_string(rank)};
  duty.job_tag = job_tag_of(env);
  duty.segments_leased = true;
  return duty;
}

int start_and_watch(const RemoteSpec& spec, const std::string& early_control, SignalChannel& signals) {
  std::vector<std::string> env = merged_environment(spec.env);
  // The rank's program is found through the PATH it will run with.
  if (auto path = lookup(env, "PATH")) ::setenv("PATH", path->c_str(), 1);
  if (::chdir(spec.working_directory.c_str()) != 0) {
    say(spec.label, "cannot enter the working directory '" + spec.working_directory + "' on this host: " +
                        std::strerror(errno));
    return 1;
  }
  LaunchSpec launch;
  launch.rank = spec.rank;
  launch.argv = spec.argv;
  launch.env = env;
  launch.cpus = cpus_for_rank(env);
  UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  try {
    launch.program_path = resolve_program(spec.argv.front());
    const std::string job_id = lookup(env, kolo::kJobId.name).value_or("");
    // This rank's own cgroup: other --remote-exec of the job may share the host.
    JobCgroup cgroup("kolo-" + job_tag_of(env) + "-" + std::to_string(::getpid()));
    launch.join_cgroup_fd = cgroup.join_fd();
    WatchdogDuty duty = rank_watchdog_duty(job_id, env, spec.rank);
    duty.cgroup = cgroup.path();
    // Before the lease: a watchdog that inherited its descriptor would hold the
    // lease after this process died.
    JobWatchdog watchdog(std::move(duty));
    HostJobLease lease(job_tag_of(env));
    RankProcess process = start_process(launch, ProcessStdio{dev_null.get(), false});
    const int status = RankWatch(spec, process.pid, signals).run(early_control);
    // What the rank left outside its group (setsid) goes before the lease does.
    watchdog.sweep();
    return status;
  } catch (const LaunchError& e) {
    say(spec.label, e.what());
    return e.exit_code();
  }
}

}  // namespace

int run_remote_exec() {
  // Started by kolorun's local spawner through a launcher command, this process
  // may carry its death signal; its end is driven by stdin instead, so that it can
  // take the rank's whole group down with it.
  ::prctl(PR_SET_PDEATHSIG, 0);
  say_started();
  try {
    SignalChannel signals;
    std::string early_control;
    RemoteSpec spec = read_spec(early_control);
    return start_and_watch(spec, early_control, signals);
  } catch (const kolo::Error& e) {
    say("", std::string("--remote-exec: ") + e.what());
    return 1;
  }
}

}  // namespace kolorun
