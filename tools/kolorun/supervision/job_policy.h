// What an elastic job decides inside the supervisor's loop (elastic/elastic_driver.h):
// whether a failed rank ends the job, and which ranks to start, kill or give up on
// while it runs. A job without one ends at its first failure.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "local/process_spawner.h"

namespace kolorun {

class JobPolicy {
 public:
  virtual ~JobPolicy() = default;

  // Rank `rank` ended with `code` (0: it succeeded), as `text` says. For a
  // failure, true: the job goes on without it.
  virtual bool goes_on_without(int rank, int code, const std::string& text) = 0;

  struct Actions {
    std::vector<LaunchSpec> start;     // new ranks
    std::vector<int> kill;             // ranks to kill (SIGKILL to their groups)
    std::vector<std::string> reports;  // lines for kolorun's stderr
    std::optional<std::pair<int, std::string>> fail;  // end the job: status and why
  };
  // Called on every round of the loop, and at least every period().
  virtual Actions tick() = 0;
  virtual std::chrono::milliseconds period() const = 0;

  // Set by the supervisor while it runs: whether rank `rank`'s process runs on
  // this machine and is stopped (SIGSTOP, a debugger's stop). False otherwise.
  std::function<bool(int rank)> stopped_here;
};

}  // namespace kolorun
