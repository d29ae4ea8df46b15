// Starting one rank's process. The supervisor sees only this interface, so that a
// remote spawner (ssh to another host) can sit beside the local one.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "launch_error.h"
#include "unique_fd.h"

namespace kolorun {

struct LaunchSpec {
  int rank = 0;
  std::string program_path;       // resolved PROGRAM
  std::vector<std::string> argv;  // argv[0] is PROGRAM as the user wrote it
  std::vector<std::string> env;   // "NAME=value"
};

// A started rank. It leads its own process group (pgid == pid), so signalling
// -pid reaches everything it started too. Its stdin is /dev/null; its stdout and
// stderr arrive on the two pipes.
struct RankProcess {
  pid_t pid = -1;
  UniqueFd stdout_pipe;
  UniqueFd stderr_pipe;
};

// The rank's program could not be started (exec failed in the child); the child
// has been reaped. exit_code() is 127 (126 for a permission problem).
class SpawnError : public LaunchError {
 public:
  using LaunchError::LaunchError;
};

class ProcessSpawner {
 public:
  virtual ~ProcessSpawner() = default;
  // Throws SpawnError when the program cannot be executed, LaunchError when the
  // system cannot make the process (fork, pipes).
  virtual RankProcess spawn(const LaunchSpec& spec) = 0;
};

// Fork and exec on this host. The child dies with kolorun (PR_SET_PDEATHSIG).
std::unique_ptr<ProcessSpawner> make_local_spawner();

}  // namespace kolorun
