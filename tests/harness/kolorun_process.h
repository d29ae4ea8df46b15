// kolorun started by a test as a real child process (see subprocess.h): its
// output captured, its exit status, and a timeout after which it is killed.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "harness/subprocess.h"

namespace kolo::testing {

using RunResult = Subprocess::Result;

inline std::vector<std::string> kolorun_command(const std::string& kolorun, const std::vector<std::string>& args) {
  std::vector<std::string> argv{kolorun};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

class KolorunProcess : public Subprocess {
 public:
  KolorunProcess(const std::string& kolorun, const std::vector<std::string>& args)
      : Subprocess(kolorun_command(kolorun, args)) {}
};

inline RunResult run_kolorun_at(const std::string& kolorun, const std::vector<std::string>& args,
                                std::chrono::milliseconds timeout) {
  return run_command(kolorun_command(kolorun, args), timeout);
}

}  // namespace kolo::testing
