// Runs one job to its end: starts every rank through a ProcessSpawner, relays
// their output, and decides the job's exit status.
//
// The end of a job, in every case:
//  - all ranks exit 0: exit status 0;
//  - a rank exits non-zero or is killed: it is named on stderr, every other rank's
//    process group gets SIGTERM, and the status is its exit code (128+signal);
//  - kolorun gets SIGINT/SIGTERM/SIGHUP: the signal goes to every rank's process
//    group and the status is 128+signal (a second such signal kills at once);
//  - --timeout passes: SIGTERM to every rank, status 124;
//  - a rank's program cannot be executed: named, the others are stopped, status 127.
// With a flight recorder directory, a failure or timeout first sends SIGUSR1 to
// every rank still running (each writes its flight record), waits flight_wait,
// then stops the job and prints which rank is behind and on which tensor.
// SIGUSR1 to kolorun does the same without stopping the job.
// Remote ranks are signalled through their control channel (remote_control.h),
// and hear a heartbeat every heartbeat_interval (from a thread of its own).
// Ranks still running kill_grace after being asked to stop get SIGKILL. When a
// rank's main process exits, whatever is left in its process group is killed, so
// nothing outlives the job.
//
// One poll loop over a signalfd and the ranks' output pipes; the only other
// thread sends remote ranks' heartbeats.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "local/process_spawner.h"
#include "supervision/job_policy.h"
#include "supervision/signal_channel.h"

namespace kolorun {

struct SupervisorSettings {
  bool tag_output = true;
  bool verbose = false;
  std::optional<std::chrono::milliseconds> timeout;
  std::chrono::milliseconds kill_grace{5000};
  // After the last rank exits, how long to wait for output still in flight from
  // processes that escaped its process group.
  std::chrono::milliseconds output_drain{2000};
  // How often remote ranks hear that kolorun is alive.
  std::chrono::milliseconds heartbeat_interval{2000};
  // Where the ranks write their flight records (KOLO_FLIGHT_RECORDER_DIR); empty:
  // no records are requested or reported.
  std::string flight_dir;
  int size = 0;
  std::chrono::milliseconds flight_wait{1000};
  // Elastic jobs: decides whether a failure ends the job, and starts and kills
  // ranks while it runs (job_policy.h). Null: the first failure ends the job.
  JobPolicy* policy = nullptr;
  // Called with each local rank's process group as it starts (job_watchdog.h); a
  // remote rank's local process is its --remote-exec, which cleans up its host.
  std::function<void(pid_t)> on_rank_started;
};

class JobSupervisor {
 public:
  JobSupervisor(ProcessSpawner& spawner, SignalChannel& signals, SupervisorSettings settings, int stdout_fd = 1,
                int stderr_fd = 2);
  ~JobSupervisor();
  JobSupervisor(const JobSupervisor&) = delete;
  JobSupervisor& operator=(const JobSupervisor&) = delete;

  // Returns the job's exit status.
  int run(const std::vector<LaunchSpec>& ranks);

  // Writes "kolorun: message" on stderr, in order with the ranks' relayed lines.
  void report(const std::string& message);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolorun
