// Cleanup for the one end of a job kolorun cannot handle itself: kolorun killed
// by SIGKILL (or crashing). Its local ranks then die of their death signal, but
// what they started does not, and the job's flight directory and shared-memory
// segments stay.
//
// A watchdog process, started before kolorun has any thread and detached from it
// (it is not kolorun's child), waits on a pipe. kolorun tells it each rank's
// process group as the rank starts, and that the job ended when it ends. Should
// the pipe close without that word, kolorun died: the watchdog SIGKILLs the
// ranks' groups and removes the job's flight directory (only one kolorun made)
// and /dev/shm segments, then exits. It ignores the terminal's signals and holds
// none of kolorun's output.
#pragma once

#include <sys/types.h>

#include <string>

namespace kolorun {

class JobWatchdog {
 public:
  // `flight_dir`: the job's own flight directory, removed if kolorun dies; empty
  // when the user chose it (KOLO_FLIGHT_RECORDER_DIR). Without a watchdog (fork
  // refused) the job runs as before.
  JobWatchdog(std::string job_id, std::string flight_dir);
  // The job ended: the watchdog exits doing nothing.
  ~JobWatchdog();
  JobWatchdog(const JobWatchdog&) = delete;
  JobWatchdog& operator=(const JobWatchdog&) = delete;

  void watch_group(pid_t group);

 private:
  int fd_ = -1;  // the write end of the pipe
};

}  // namespace kolorun
