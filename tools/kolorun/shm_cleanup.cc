#include "shm_cleanup.h"

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

}  // namespace kolorun
