// Cleanup for the one end of a job kolorun cannot handle itself: kolorun (or a
// --remote-exec) killed by SIGKILL or crashing. Its ranks then die of their death
// signal, but what they started does not, and the job's flight directory and
// shared-memory segments stay.
//
// A watchdog process, started before kolorun has any thread or rank and detached
// from it (it is not kolorun's child: kolorun's children are the job's leftovers,
// leftovers.h), waits on a pipe whose write end only kolorun holds (close-on-exec,
// so no rank inherits it). kolorun tells it each local rank's process group as
// the rank starts. Should the pipe close without a last word, kolorun died,
// however: the watchdog SIGKILLs the ranks' groups and every process of the job
// on this host (job_processes.h: found by the job id in its environment, also
// after setsid or reparenting to PID 1) until none is left, removes the job's
// own flight directory (none of its records will be reported) and /dev/shm
// segments, and exits. At a normal end kolorun asks for a sweep (the processes
// only: kolorun itself reports the records and removes the segments) and waits
// until it is done, so that nothing of the job runs once kolorun has returned.
// The watchdog ignores the terminal's signals (Ctrl-C reaches kolorun's whole
// group) and holds none of kolorun's standard streams.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

#include "supervision/job_processes.h"

namespace kolorun {

struct WatchdogDuty {
  // The job's processes on this host; kolorun (the watchdog's creator) and the
  // watchdog are always spared.
  JobProcessMatch processes;
  // The tag of the job's /dev/shm segments (common/job_names.h), which go when
  // kolorun dies; empty: none.
  std::string job_tag;
  // On a host kolorun reaches remotely, other --remote-exec of the job may still
  // run there: their segments go only when none holds the host lease
  // (shm_cleanup.h).
  bool segments_leased = false;
  // The job's own flight directory, removed when kolorun dies; empty when the
  // user chose it (KOLO_FLIGHT_RECORDER_DIR) or on a remote host.
  std::string flight_dir;
  // The cgroup that holds the ranks and all they start (job_cgroup.h); empty
  // when there is none.
  std::string cgroup;
};

class JobWatchdog {
 public:
  // Without a watchdog (fork refused) the job runs as before.
  explicit JobWatchdog(WatchdogDuty duty);
  // Lets the watchdog go without a sweep, unless sweep() came first.
  ~JobWatchdog();
  JobWatchdog(const JobWatchdog&) = delete;
  JobWatchdog& operator=(const JobWatchdog&) = delete;

  void watch_group(pid_t group);

  // The job ended: kills what is left of it on this host and returns once that is
  // done (or after a bounded wait). The watchdog then exits.
  void sweep();

 private:
  int fd_ = -1;       // the write end of the word pipe
  int done_fd_ = -1;  // the read end of a pipe only the watchdog writes: EOF when it exits
};

}  // namespace kolorun
