#include "supervision/job_supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <filesystem>
#include <fstream>
#include <cerrno>
#include <cstring>
#include <functional>
#include <iterator>
#include <sstream>

#include "flight_report.h"
#include "remote/heartbeat_sender.h"
#include "remote/start_word.h"
#include "supervision/leftovers.h"
#include "supervision/output_relay.h"

namespace kolorun {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::size_t kReadChunk = 64 * 1024;
// Reads per stream per poll round: enough to keep up, few enough to stay fair.
constexpr int kReadsPerRound = 4;
enum Stream { kStdout = 0, kStderr = 1 };

std::string seconds_text(milliseconds duration) {
  std::ostringstream out;
  out << static_cast<double>(duration.count()) / 1000.0 << " s";
  return out.str();
}

// "exited with code 3" / "was killed by signal 9 (Killed)", and the matching
// shell-style status (the code, or 128+signal).
std::pair<std::string, int> describe_wait_status(int status) {
  if (WIFEXITED(status)) return {"exited with code " + std::to_string(WEXITSTATUS(status)), WEXITSTATUS(status)};
  int sig = WTERMSIG(status);
  return {"was killed by signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")", 128 + sig};
}

// Once a remote rank has been told to die (its control channel closed), how long
// its local ssh / launcher process may take to report back before it is killed
// here: the remote host may be unreachable.
constexpr milliseconds kRemoteKillWait{3000};

// How long a rank's failure that blames a rank still running waits for that
// rank's own (JobSupervisor::wait_for_blamed).
constexpr milliseconds kBlamedRankWait{2000};

struct RankState {
  int rank = 0;
  int server = -1;  // >= 0: a parameter server, not a rank
  pid_t pid = -1;
  std::string label;  // empty: "rank N (pid P)"
  bool running = false;
  UniqueFd pipes[2];
  std::unique_ptr<LineRelay> relays[2];
  std::shared_ptr<RemoteControl> control;
  std::function<std::string(int)> explain_exit;
  // A remote rank until its --remote-exec said it started (start_word.h).
  std::unique_ptr<StartWordFilter> start_word;
  std::optional<Clock::time_point> start_deadline;
  // Told to die through its control channel: when its local process is killed
  // if it has not ended (the remote host may be unreachable).
  std::optional<Clock::time_point> remote_kill_deadline;
  milliseconds start_timeout{0};
  std::string launcher_command;
  bool awaiting_start() const { return start_word && !start_word->seen() && start_deadline.has_value(); }

  std::string who() const {
    if (!label.empty()) return label;
    return (server >= 0 ? "server " + std::to_string(server) : "rank " + std::to_string(rank)) + " (pid " +
           std::to_string(pid) + ")";
  }
  // The tag of its output lines: "3" or "server 1".
  std::string tag() const { return server >= 0 ? "server " + std::to_string(server) : std::to_string(rank); }
  // "rank 2 (pid 7) exited with code 3" / "rank 2 on host h1: exited with code 3"
  std::string event(const std::string& what) const { return who() + (label.empty() ? " " : ": ") + what; }
};

}  // namespace

struct JobSupervisor::Impl {
  Impl(ProcessSpawner& spawner, SignalChannel& signals, SupervisorSettings settings, int stdout_fd, int stderr_fd)
      : spawner(spawner), signals(signals), settings(settings), out(stdout_fd), err(stderr_fd) {}

  ~Impl() {
    // Reached with ranks still running only when the loop itself failed: leave
    // nothing behind.
    for (auto& r : ranks) {
      if (!r.running) continue;
      ::kill(-r.pid, SIGKILL);
      while (::waitpid(r.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    out.flush();
    err.flush();
  }

  ProcessSpawner& spawner;
  SignalChannel& signals;
  SupervisorSettings settings;
  OutputSink out, err;
  std::vector<RankState> ranks;
  std::vector<char> read_buffer = std::vector<char>(kReadChunk);

  // The records this job reads: those written since it started (a second's slack
  // for the coarse clock of file times), not an earlier job's in a directory the
  // user keeps.
  const kolo::flight::WrittenSince records_since =
      std::filesystem::file_time_type::clock::now() - std::chrono::seconds(1);
  std::optional<int> exit_status;  // set by what first ended the job
  bool stopping = false;
  bool killed = false;
  std::optional<Clock::time_point> job_deadline, kill_deadline, drain_deadline;
  // Between asking the ranks for their flight records and reading them.
  std::optional<Clock::time_point> flight_deadline;
  bool stop_after_flight = false;  // stop the job once the records are in
  bool servers_told = false;  // every rank has ended and the servers were asked to stop
  // A failure waiting for the one it blames (wait_for_blamed).
  struct HeldFailure {
    int code;
    std::string text;
    Clock::time_point until;
    int blamed;       // the rank it waits for
    std::string why;  // its record's reason
  };
  std::vector<HeldFailure> held_failures;
  bool output_lost[2] = {false, false};  // by stream: a write failed other than for a closed reader
  std::unique_ptr<HeartbeatSender> heartbeats;  // only when some rank is remote
  std::optional<Clock::time_point> next_policy_tick;  // when settings.policy is asked again

  void report(const std::string& message) {
    err.append_line("kolorun: ", message);
    err.flush();
  }

  void signal_rank(RankState& r, int sig) {
    if (r.control && !r.control->closed()) {
      r.control->send_signal(sig);
      if (sig == SIGKILL && !r.remote_kill_deadline) r.remote_kill_deadline = Clock::now() + kRemoteKillWait;
      return;
    }
    ::kill(-r.pid, sig);
  }

  void signal_running(int sig) {
    for (auto& r : ranks)
      if (r.running) signal_rank(r, sig);
  }

  // Ends the job: records its status (the first cause wins), tells the ranks with
  // `sig`, and arms the kill deadline.
  void stop_job(int status, int sig, const std::string& message) {
    if (!exit_status) exit_status = status;
    if (!message.empty()) report(message);
    signal_running(sig);
    if (!stopping) {
      stopping = true;
      kill_deadline = Clock::now() + settings.kill_grace;
    }
  }

  // A failure or timeout: with a flight recorder, ask every rank for its record
  // first and stop the job once they had time to write it.
  void stop_job_after_records(int status, const std::string& message) {
    if (settings.flight_dir.empty()) {
      stop_job(status, SIGTERM, message);
      return;
    }
    if (!exit_status) exit_status = status;
    report(message);
    if (!flight_deadline) request_records();
    stop_after_flight = true;
  }

  // SIGUSR1 goes to each process whose kolo engine announced itself with a pid
  // file, and only if it belongs to one of our ranks' process groups; the rest of
  // a rank's group (a wrapper script, say) would die of it.
  // The job's flight directory, then those of the worlds its ranks formed
  // (init with a list of ranks: a directory w<hash> each, inside the job's).
  std::vector<std::filesystem::path> record_dirs() const {
    std::vector<std::filesystem::path> dirs{settings.flight_dir};
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(settings.flight_dir, ec)) {
      std::error_code kind;
      if (entry.is_directory(kind) && entry.path().filename().string().rfind('w', 0) == 0) dirs.push_back(entry.path());
    }
    std::sort(dirs.begin() + 1, dirs.end());
    return dirs;
  }

  void request_records() {
    std::vector<std::filesystem::path> pid_files;
    for (const auto& dir : record_dirs()) {
      std::error_code ec;
      for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) pid_files.push_back(entry.path());
    }
    for (const auto& path : pid_files) {
      if (path.extension() != ".pid") continue;
      std::ifstream in(path);
      pid_t pid = 0;
      if (!(in >> pid) || pid <= 0) continue;
      pid_t group = ::getpgid(pid);
      for (const auto& r : ranks) {
        if (r.running && !r.control && group == r.pid) ::kill(pid, SIGUSR1);
      }
    }
    flight_deadline = Clock::now() + settings.flight_wait;
  }

  void records_are_in() {
    flight_deadline.reset();
    // No directory: the program is not a kolo program (or never reached init()),
    // and kept no flight record to report on.
    const auto dirs = record_dirs();
    for (std::size_t i = 0; i < dirs.size(); ++i) {
      std::error_code missing;
      const auto files = kolo::flight::record_files(dirs[i].string(), missing, records_since);
      if (missing || (files.empty() && dirs.size() > 1)) continue;  // the job's own, when worlds took its place
      // A world's size is its own: the report counts the ranks its records name.
      report("flight recorder (" + dirs[i].string() + (i > 0 ? ", a world of some of the job's ranks" : "") +
             "):\n" + kolo::flight::report_for_directory(dirs[i].string(), i == 0 ? settings.size : 0, records_since));
    }
    if (stop_after_flight) stop_job(*exit_status, SIGTERM, "");
  }

  void kill_remaining() {
    for (auto& r : ranks) {
      if (!r.running) continue;
      report(r.event("did not stop within " + seconds_text(settings.kill_grace) + "; killing it"));
      signal_rank(r, SIGKILL);
    }
    killed = true;
  }

  void start_ranks(const std::vector<LaunchSpec>& specs) {
    for (const auto& spec : specs) {
      if (stopping) break;
      // Elastic jobs may start their first remote rank after the others.
      if (spec.remote && !heartbeats) heartbeats = std::make_unique<HeartbeatSender>(settings.heartbeat_interval);
      RankState state;
      state.rank = spec.rank;
      state.server = spec.server;
      try {
        RankProcess process = spawner.spawn(spec);
        state.pid = process.pid;
        if (settings.on_rank_started && !spec.remote) settings.on_rank_started(process.pid);
        state.label = spec.label;
        state.pipes[kStdout] = std::move(process.stdout_pipe);
        state.pipes[kStderr] = std::move(process.stderr_pipe);
        state.control = std::move(process.control);
        if (state.control && heartbeats) heartbeats->add(state.control);
        state.explain_exit = std::move(process.explain_exit);
        if (process.start_timeout) {
          state.start_word = std::make_unique<StartWordFilter>();
          state.start_timeout = *process.start_timeout;
          state.start_deadline = Clock::now() + *process.start_timeout;
          state.launcher_command = std::move(process.launcher_command);
        }
      } catch (const LaunchError& e) {
        stop_job(e.exit_code(), SIGTERM, e.what());
        break;
      }
      state.running = true;
      state.relays[kStdout] = std::make_unique<LineRelay>(line_prefix(state.tag(), "stdout", settings.tag_output), out);
      state.relays[kStderr] = std::make_unique<LineRelay>(line_prefix(state.tag(), "stderr", settings.tag_output), err);
      if (settings.verbose) {
        report(state.label.empty() ? state.event("started")
                                   : state.label + " started (local pid " + std::to_string(state.pid) + ")");
      }
      ranks.push_back(std::move(state));
      handle_signals();  // an interrupt while starting stops the start
    }
  }

  void on_rank_exit(RankState& r, int status) {
    r.running = false;
    if (r.control) r.control->close();
    auto [how, code] = describe_wait_status(status);
    if (r.explain_exit && WIFEXITED(status)) {
      std::string explanation = r.explain_exit(code);
      if (!explanation.empty()) how += " (" + explanation + ")";
    }
    // The word may still be in the pipe, behind the exit's signal.
    while (r.awaiting_start() && r.pipes[kStdout].valid() && read_output(r, kStdout)) {
    }
    if (r.awaiting_start()) {
      r.start_deadline.reset();
      how += " before kolorun --remote-exec ran there (launcher command: " + r.launcher_command + ")";
      if (code == 0) code = kExitHostUnreachable;
    }
    std::string text = r.event(how);
    // A server asked to stop because the ranks are done has not failed, however it ends.
    bool failed = code != 0 && !(r.server >= 0 && servers_told);
    const bool policy_says = settings.policy && r.server < 0 && !stopping && !stop_after_flight;
    if (policy_says && settings.policy->goes_on_without(r.rank, code, text) && failed) {
      report(text);
      next_policy_tick.reset();  // the policy acts on it at once
    } else if (failed && !stopping && !stop_after_flight) {
      if (wait_for_blamed(r, code, text)) return;
      stop_job_after_records(code, text);
      report_held_failures();
    } else if (settings.verbose) {
      report(text);
    }
  }

  // A rank that failed because another did (its flight record blames a rank that
  // still runs) exits about when the one it blames does, and sometimes first.
  // Its failure waits a moment for the blamed rank's, so that the job's first
  // failure line and exit status are the cause's. True when it was held.
  bool wait_for_blamed(const RankState& r, int code, const std::string& text) {
    if (settings.flight_dir.empty() || r.server >= 0) return false;
    const int blamed = kolo::flight::blamed_rank(settings.flight_dir, r.rank, records_since);
    if (blamed < 0 || blamed == r.rank) return false;
    const bool running = std::any_of(ranks.begin(), ranks.end(), [&](const RankState& o) {
      return o.running && o.server < 0 && o.rank == blamed;
    });
    if (!running) return false;
    std::string why = kolo::flight::record_reason(settings.flight_dir, r.rank, records_since);
    if (why.rfind("error: ", 0) == 0) why.erase(0, 7);
    const auto until = held_failures.empty() ? Clock::now() + kBlamedRankWait : held_failures.front().until;
    held_failures.push_back(HeldFailure{code, text, until, blamed, why});
    return true;
  }

  // The held failures after the blamed rank's; alone once their wait is over,
  // the first then saying which rank failed first.
  void report_held_failures() {
    std::vector<HeldFailure> held;
    held.swap(held_failures);
    for (const auto& h : held) {
      if (!stopping && !stop_after_flight) {
        stop_job_after_records(h.code, "rank " + std::to_string(h.blamed) + " failed first: " +
                                           (h.why.empty() ? "its flight record tells no more" : h.why) + "; " +
                                           h.text);
      } else {
        report(h.text);
      }
    }
  }

  void reap_exited() {
    std::vector<RankState*> exited;
    for (auto& r : ranks) {
      if (!r.running) continue;
      siginfo_t info{};
      // Peek first: while the rank is an unreaped zombie its pid, and so its process
      // group id, cannot be reused, so killing the group cannot hit a stranger.
      if (::waitid(P_PID, static_cast<id_t>(r.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) continue;
      if (info.si_pid != r.pid) continue;
      exited.push_back(&r);
    }
    // Ranks found dead together (kolorun was slow to look): the first failure
    // reported decides the job's status, so a rank that died because another
    // failed (its flight record blames that rank) comes after the one it blames.
    if (exited.size() > 1 && !settings.flight_dir.empty()) {
      std::set<int> blamers;  // each record is read once
      for (const RankState* r : exited) {
        const int b = kolo::flight::blamed_rank(settings.flight_dir, r->rank, records_since);
        if (std::any_of(exited.begin(), exited.end(), [&](const RankState* o) { return o->rank == b; })) blamers.insert(r->rank);
      }
      std::stable_partition(exited.begin(), exited.end(), [&](const RankState* r) { return !blamers.count(r->rank); });
    }
    for (RankState* r : exited) {
      ::kill(-r->pid, SIGKILL);  // whatever the rank left behind in its group
      int status = 0;
      while (::waitpid(r->pid, &status, 0) < 0 && errno == EINTR) {
      }
      on_rank_exit(*r, status);
    }
  }

  void handle_signals() {
    for (int sig : signals.drain()) {
      if (sig == SIGCHLD) {
        reap_exited();
      } else if (sig == SIGTSTP) {
        // Ctrl-Z reaches only the terminal's foreground group, kolorun's: each
        // rank leads a group of its own. They stop with kolorun and go on with it.
        signal_running(SIGSTOP);
        ::raise(SIGSTOP);
        signal_running(SIGCONT);
      } else if (sig == SIGUSR1) {
        if (!settings.flight_dir.empty() && !flight_deadline) {
          report("received SIGUSR1; asking every rank for its flight record");
          request_records();
        }
      } else if (stopping) {
        report(std::string("received SIG") + ::sigabbrev_np(sig) + " again; killing every rank now");
        signal_running(SIGKILL);
        killed = true;
      } else {
        stop_job(128 + sig, sig, std::string("received SIG") + ::sigabbrev_np(sig) + "; stopping every rank");
      }
    }
  }

  void close_stream(RankState& r, int stream) {
    if (stream == kStdout && r.start_word) r.relays[stream]->consume(r.start_word->finish());
    r.relays[stream]->finish();
    r.pipes[stream].reset();
  }

  // Returns whether more may be waiting (this round's reads were all full).
  bool read_output(RankState& r, int stream) {
    for (int i = 0; i < kReadsPerRound; ++i) {
      ssize_t n = ::read(r.pipes[stream].get(), read_buffer.data(), read_buffer.size());
      if (n > 0) {
        std::string_view bytes(read_buffer.data(), static_cast<std::size_t>(n));
        if (stream == kStdout && r.start_word) {
          const std::string passed = r.start_word->consume(bytes);
          if (r.start_word->seen()) r.start_deadline.reset();
          r.relays[stream]->consume(passed);
        } else {
          r.relays[stream]->consume(bytes);
        }
        if (static_cast<std::size_t>(n) < read_buffer.size()) return false;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return false;
      close_stream(r, stream);  // end of stream, or an error that ends it
      return false;
    }
    return true;
  }

  bool any_running() const {
    for (const auto& r : ranks)
      if (r.running) return true;
    return false;
  }

  bool any_rank_running() const {
    for (const auto& r : ranks)
      if (r.running && r.server < 0) return true;
    return false;
  }

  // Parameter servers serve the ranks until the job ends: once every rank has
  // ended they are asked to stop, and killed after the grace like any process.
  void stop_servers_after_ranks() {
    if (servers_told || any_rank_running()) return;
    servers_told = true;
    bool any = false;
    for (auto& r : ranks) {
      if (!r.running || r.server < 0) continue;
      signal_rank(r, SIGTERM);
      any = true;
    }
    if (any && !kill_deadline) kill_deadline = Clock::now() + settings.kill_grace;
  }

  bool any_stream_open() const {
    for (const auto& r : ranks)
      if (r.pipes[kStdout].valid() || r.pipes[kStderr].valid()) return true;
    return false;
  }

  void apply_policy() {
    if (!settings.policy || stopping || stop_after_flight) return;
    JobPolicy::Actions actions = settings.policy->tick();
    for (const auto& line : actions.reports) report(line);
    for (int rank : actions.kill) {
      for (auto& r : ranks)
        if (r.running && r.server < 0 && r.rank == rank) signal_rank(r, SIGKILL);
    }
    if (actions.fail) {
      stop_job_after_records(actions.fail->first, actions.fail->second);
      return;
    }
    start_ranks(actions.start);
    next_policy_tick = Clock::now() + settings.policy->period();
  }

  void check_deadlines(Clock::time_point now) {
    if (settings.policy && (!next_policy_tick || now >= *next_policy_tick)) apply_policy();
    stop_servers_after_ranks();
    if (job_deadline && !stopping && !stop_after_flight && now >= *job_deadline) {
      stop_job_after_records(kExitTimeout, "the job did not finish within " + seconds_text(*settings.timeout) +
                                                " (--timeout); stopping it");
    }
    if (flight_deadline && now >= *flight_deadline) records_are_in();
    if (!held_failures.empty() && now >= held_failures.front().until) report_held_failures();
    for (auto& r : ranks) {
      if (!r.running || !r.awaiting_start() || now < *r.start_deadline) continue;
      // kolorun itself may have been what stalled (blocked writing output into a
      // pipe nobody read): the start word may already wait unread in the pipe.
      if (r.pipes[kStdout].valid()) read_output(r, kStdout);
      if (!r.awaiting_start()) continue;
      r.start_deadline.reset();
      stop_job(kExitHostUnreachable, SIGTERM,
               r.event("kolorun --remote-exec did not start there within " + seconds_text(r.start_timeout) +
                       " (--host-timeout) of the launcher command: " + r.launcher_command + "; killing it"));
      ::kill(-r.pid, SIGKILL);
    }
    if (kill_deadline && !killed && now >= *kill_deadline) kill_remaining();
    for (auto& r : ranks) {
      if (!r.running || !r.remote_kill_deadline || now < *r.remote_kill_deadline) continue;
      ::kill(-r.pid, SIGKILL);
      r.remote_kill_deadline.reset();
    }
    if (!any_running() && !drain_deadline) drain_deadline = now + settings.output_drain;
    if (drain_deadline && now >= *drain_deadline) {
      for (auto& r : ranks)
        for (int s : {kStdout, kStderr})
          if (r.pipes[s].valid()) close_stream(r, s);
    }
  }

  int poll_timeout_ms(Clock::time_point now) const {
    std::optional<Clock::time_point> next;
    auto consider = [&](const std::optional<Clock::time_point>& t, bool pending) {
      if (t && pending && (!next || *t < *next)) next = t;
    };
    consider(job_deadline, !stopping);
    consider(kill_deadline, !killed);
    consider(drain_deadline, true);
    for (const auto& r : ranks) consider(r.remote_kill_deadline, r.running);
    consider(flight_deadline, true);
    if (!held_failures.empty()) consider(held_failures.front().until, true);
    for (const auto& r : ranks) consider(r.start_deadline, r.running);
    if (settings.policy && !stopping && any_rank_running()) {
      if (!next_policy_tick) return 0;  // the policy acts now
      consider(next_policy_tick, true);
    }
    if (!next) return -1;
    auto wait = std::chrono::ceil<milliseconds>(*next - now).count();
    return static_cast<int>(std::clamp<long long>(wait, 0, 60'000));
  }

  void poll_once() {
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
    std::vector<std::pair<RankState*, int>> owners{{nullptr, 0}};
    for (auto& r : ranks) {
      for (int s : {kStdout, kStderr}) {
        if (!r.pipes[s].valid()) continue;
        fds.push_back({r.pipes[s].get(), POLLIN, 0});
        owners.emplace_back(&r, s);
      }
    }
    int ready = ::poll(fds.data(), fds.size(), poll_timeout_ms(Clock::now()));
    if (ready < 0 && errno != EINTR) throw LaunchError(system_error_text("poll failed", errno), 1);
    for (std::size_t i = 1; ready > 0 && i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_output(*owners[i].first, owners[i].second);
    }
    out.flush();
    err.flush();
    close_streams_of_broken_sinks();
    if (ready > 0 && fds[0].revents != 0) handle_signals();
  }

  // kolorun's own stdout or stderr is gone (`kolorun ... | head`): the ranks'
  // streams into it are closed, so that a rank writing there gets SIGPIPE, as in
  // a shell pipeline, instead of kolorun reading and dropping its output forever.
  // Any other failure (a full disk) loses output while the job goes on: it is
  // said once, and the job's exit is not 0.
  void close_streams_of_broken_sinks() {
    for (auto [sink, stream] : {std::pair{&out, kStdout}, std::pair{&err, kStderr}}) {
      if (!sink->broken()) continue;
      if (sink->error() == EPIPE) {
        for (auto& r : ranks)
          if (r.pipes[stream].valid()) close_stream(r, stream);
      } else if (!output_lost[stream]) {
        output_lost[stream] = true;
        report(system_error_text(std::string("cannot write the ranks' output to kolorun's ") +
                                     (stream == kStdout ? "stdout" : "stderr") + "; it is lost from here on",
                                 sink->error()));
      }
    }
  }

  // Whether rank `rank` has a local process in the stopped state ('T' or 't' in
  // /proc/PID/stat). A remote rank's process here is its connection: never.
  bool stopped_here(int rank) const {
    for (const auto& r : ranks) {
      if (r.rank != rank || r.server >= 0 || !r.running || r.control) continue;
      std::ifstream in("/proc/" + std::to_string(r.pid) + "/stat");
      std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const auto name_end = stat.rfind(')');  // the command's name may hold spaces and parentheses
      return name_end != std::string::npos && name_end + 2 < stat.size() &&
             (stat[name_end + 2] == 'T' || stat[name_end + 2] == 't');
    }
    return false;
  }

  int run(const std::vector<LaunchSpec>& specs) {
    if (settings.policy) settings.policy->stopped_here = [this](int rank) { return stopped_here(rank); };
    struct ForgetProbe {
      JobPolicy* policy;
      ~ForgetProbe() {
        if (policy) policy->stopped_here = nullptr;
      }
    } forget{settings.policy};
    if (settings.timeout) job_deadline = Clock::now() + *settings.timeout;
    become_subreaper();
    start_ranks(specs);
    while (any_running() || any_stream_open()) {
      poll_once();
      check_deadlines(Clock::now());
    }
    // No process of the job outlives kolorun: what the ranks left (their
    // groups were killed as each ended) is kolorun's now, and goes.
    const auto stuck = remove_leftovers(settings.kill_grace);
    if (!stuck.empty()) {
      std::string pids;
      for (pid_t pid : stuck) pids += (pids.empty() ? "" : ", ") + std::to_string(pid);
      report("processes the job left could not be killed within " + seconds_text(settings.kill_grace) +
             " (--kill-grace): pid(s) " + pids);
    }
    report_held_failures();  // the ranks they blamed ended without failing
    // Every rank ended before the records were due: whatever was written is in.
    if (flight_deadline) records_are_in();
    out.flush();
    err.flush();
    close_streams_of_broken_sinks();
    if (exit_status.value_or(0) == 0 && (output_lost[kStdout] || output_lost[kStderr])) return kExitOutputLost;
    return exit_status.value_or(0);
  }
};

JobSupervisor::JobSupervisor(ProcessSpawner& spawner, SignalChannel& signals, SupervisorSettings settings,
                             int stdout_fd, int stderr_fd)
    : impl_(std::make_unique<Impl>(spawner, signals, settings, stdout_fd, stderr_fd)) {}

JobSupervisor::~JobSupervisor() = default;

int JobSupervisor::run(const std::vector<LaunchSpec>& ranks) { return impl_->run(ranks); }

void JobSupervisor::report(const std::string& message) { impl_->report(message); }

}  // namespace kolorun
