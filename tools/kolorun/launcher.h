// kolorun from command line to exit status: parse, plan, check PROGRAM, start the
// store, run the job, clean up.
#pragma once

#include <string>
#include <vector>

namespace kolorun {

// Returns kolorun's exit status; throws LaunchError for anything that stops the
// job from starting.
int run_launcher(const std::vector<std::string>& args);

}  // namespace kolorun
