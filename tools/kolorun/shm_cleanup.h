// Removes the shared-memory segments a job's ranks may leave in /dev/shm (named
// kolo-<job id>...), when the job ends however it ends.
#pragma once

#include <string>

namespace kolorun {

class ShmJanitor {
 public:
  explicit ShmJanitor(std::string job_id) : job_id_(std::move(job_id)) {}
  ~ShmJanitor() { remove_job_segments(job_id_); }
  ShmJanitor(const ShmJanitor&) = delete;
  ShmJanitor& operator=(const ShmJanitor&) = delete;

  // Returns how many segments were removed.
  static int remove_job_segments(const std::string& job_id);

 private:
  std::string job_id_;
};

}  // namespace kolorun
