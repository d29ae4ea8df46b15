// The processes of a kolo job on this machine, whatever became of their parents
// and sessions: each rank and what it starts carry the job's KOLO_JOB_ID in the
// environment they were exec'd with.
#pragma once

#include <sys/types.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace kolo::testing {

inline std::vector<pid_t> processes_of_job(const std::string& job_id) {
  const std::string entry = "KOLO_JOB_ID=" + job_id;
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& dir : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = dir.path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::ifstream in(dir.path() / "environ", std::ios::binary);
    const std::string environment((std::istreambuf_iterator<char>(in)), {});
    for (std::size_t start = 0; start < environment.size();) {
      std::size_t end = environment.find('\0', start);
      if (end == std::string::npos) end = environment.size();
      if (environment.compare(start, end - start, entry) == 0) {
        found.push_back(static_cast<pid_t>(std::stol(name)));
        break;
      }
      start = end + 1;
    }
  }
  return found;
}

}  // namespace kolo::testing
