// Removes the shared-memory segments a job's ranks may leave in /dev/shm (named
// kolo-<job tag>-..., the tag keyed by the job's secret: common/job_names.h),
// when the job ends however it ends.
#pragma once

#include <string>

namespace kolorun {

class ShmJanitor {
 public:
  explicit ShmJanitor(std::string job_tag) : job_tag_(std::move(job_tag)) {}
  ~ShmJanitor() { remove_job_segments(job_tag_); }
  ShmJanitor(const ShmJanitor&) = delete;
  ShmJanitor& operator=(const ShmJanitor&) = delete;

  // Returns how many segments were removed.
  static int remove_job_segments(const std::string& job_tag);

 private:
  std::string job_tag_;
};

// On a host that kolorun only reaches remotely, each rank's --remote-exec holds a
// shared lock on a file of the job's; the last one to let go removes the job's
// segments on that host. Best effort: a host whose ranks all die by SIGKILL
// keeps its segments until the next reboot.
class HostJobLease {
 public:
  explicit HostJobLease(std::string job_tag);
  ~HostJobLease();
  HostJobLease(const HostJobLease&) = delete;
  HostJobLease& operator=(const HostJobLease&) = delete;

 private:
  std::string job_tag_;
  int fd_ = -1;
};

// Removes the job's segments on this host unless some --remote-exec of the job
// still holds its lease there (for a --remote-exec that died without letting go).
void remove_job_segments_unless_leased(const std::string& job_tag);

}  // namespace kolorun
