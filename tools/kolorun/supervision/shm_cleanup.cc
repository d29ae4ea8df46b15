#include "supervision/shm_cleanup.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>

namespace kolorun {

int ShmJanitor::remove_job_segments(const std::string& job_id) {
  if (job_id.empty()) return 0;
  const std::string prefix = "kolo-" + job_id;
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (entry.path().filename().string().rfind(prefix, 0) != 0) continue;
    std::error_code remove_ec;
    if (std::filesystem::remove(entry.path(), remove_ec)) ++removed;
  }
  return removed;
}

namespace {

// Only names that ShmJanitor would clean up: never a path made of odd input.
bool plain_job_id(const std::string& job_id) {
  return !job_id.empty() && job_id.find('/') == std::string::npos && job_id.find("..") == std::string::npos;
}

std::string lease_path(const std::string& job_id) { return "/dev/shm/kolo-" + job_id + "-hostlease"; }

}  // namespace

HostJobLease::HostJobLease(std::string job_id) : job_id_(std::move(job_id)) {
  if (!plain_job_id(job_id_)) return;
  fd_ = ::open(lease_path(job_id_).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ >= 0 && ::flock(fd_, LOCK_SH) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

HostJobLease::~HostJobLease() {
  if (fd_ < 0) return;
  // Let go first, then see whether anyone else still holds it: of the leases that
  // end together at least one finds the file free.
  ::flock(fd_, LOCK_UN);
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) ShmJanitor::remove_job_segments(job_id_);
  ::close(fd_);
}

void remove_job_segments_unless_leased(const std::string& job_id) {
  if (!plain_job_id(job_id)) return;
  const int fd = ::open(lease_path(job_id).c_str(), O_RDWR | O_CLOEXEC);
  if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return;
  }
  ShmJanitor::remove_job_segments(job_id);
  if (fd >= 0) ::close(fd);
}

}  // namespace kolorun
