#include "supervision/shm_cleanup.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>

namespace kolorun {

int ShmJanitor::remove_job_segments(const std::string& job_tag) {
  if (job_tag.empty()) return 0;
  const std::string prefix = "kolo-" + job_tag + "-";
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
bool plain_job_tag(const std::string& job_tag) {
  return !job_tag.empty() && job_tag.find('/') == std::string::npos && job_tag.find("..") == std::string::npos;
}

std::string lease_path(const std::string& job_tag) { return "/dev/shm/kolo-" + job_tag + "-hostlease"; }

}  // namespace

HostJobLease::HostJobLease(std::string job_tag) : job_tag_(std::move(job_tag)) {
  if (!plain_job_tag(job_tag_)) return;
  fd_ = ::open(lease_path(job_tag_).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
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
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) ShmJanitor::remove_job_segments(job_tag_);
  ::close(fd_);
}

void remove_job_segments_unless_leased(const std::string& job_tag) {
  if (!plain_job_tag(job_tag)) return;
  const int fd = ::open(lease_path(job_tag).c_str(), O_RDWR | O_CLOEXEC);
  if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return;
  }
  ShmJanitor::remove_job_segments(job_tag);
  if (fd >= 0) ::close(fd);
}

}  // namespace kolorun
