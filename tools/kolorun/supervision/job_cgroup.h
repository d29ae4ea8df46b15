// A cgroup (v2) that holds the job's processes on this host, where kolorun may
// make one (a writable cgroup2 mount: root, or a delegated subtree). A process
// cannot leave it by calling setsid, clearing its environment or losing its
// parent, so the watchdog (job_watchdog.h) kills everything the ranks started
// with one write to cgroup.kill. Without a cgroup, the sweep by the job id in
// the environment (job_processes.h) is all there is.
#pragma once

#include <chrono>
#include <string>

#include "unique_fd.h"

namespace kolorun {

class JobCgroup {
 public:
  // Makes `name` below kolorun's own cgroup in the cgroup2 hierarchy; path()
  // stays empty when the kernel or the permissions do not allow it.
  explicit JobCgroup(const std::string& name);
  // Removes the cgroup once it is empty (kill_cgroup empties it).
  ~JobCgroup();
  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;

  const std::string& path() const { return path_; }
  // cgroup.procs, open for writing (close-on-exec): a child writes "0" to it
  // between fork and exec to move itself in. -1 without a cgroup.
  int join_fd() const { return join_.get(); }

 private:
  std::string path_;
  UniqueFd join_;
};

// The cgroup2 directory of this process ("/sys/fs/cgroup/unified/..."), or empty.
std::string own_cgroup_dir();

// Kills every process in the cgroup at `path` and in those below it, waits (up
// to `limit`) until none is left, and removes the directories. Nothing for an
// empty path.
void kill_cgroup(const std::string& path, std::chrono::milliseconds limit);

}  // namespace kolorun
