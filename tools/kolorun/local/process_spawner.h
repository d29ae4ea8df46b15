// Starting one rank's process. The supervisor sees only this interface, so that
// ranks on other hosts (started through ssh or a launcher command) sit beside
// local ones.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launch_error.h"
#include "remote/remote_control.h"
#include "unique_fd.h"

namespace kolorun {

struct LaunchSpec {
  int rank = 0;
  std::string program_path;       // resolved PROGRAM (local ranks)
  std::vector<std::string> argv;  // argv[0] is PROGRAM as the user wrote it
  std::vector<std::string> env;   // "NAME=value"
  // Where it runs: empty for a job on this host only. A remote rank's program is
  // found on its own host.
  std::string host;
  bool remote = false;
  // Who this process is in kolorun's messages ("rank 3 on host h1", "mpirun");
  // empty: "rank N (pid P)".
  std::string label;
  // The CPUs it may run on (see cpu_binding.h); empty: kolorun's own affinity.
  std::vector<int> cpus;
  // >= 0: parameter server `server` (kolo-server), not a rank: it serves the
  // ranks, and is stopped once they have all ended (job_supervisor.h).
  int server = -1;
  // >= 0: the job's cgroup.procs (job_cgroup.h), which the process joins
  // before it runs anything, so that nothing it starts can leave the job.
  int join_cgroup_fd = -1;
};

// A started rank. It leads its own process group (pgid == pid), so signalling
// -pid reaches everything it started too. Its stdin is /dev/null (a remote rank's
// is the control channel); its stdout and stderr arrive on the two pipes.
struct RankProcess {
  pid_t pid = -1;
  UniqueFd stdout_pipe;
  UniqueFd stderr_pipe;
  // Remote ranks: signals and heartbeats go through this instead of kill().
  std::shared_ptr<RemoteControl> control;
  // Extra words for an exit status that means more than the rank's own code
  // (ssh's 255); empty when there is nothing to add.
  std::function<std::string(int exit_code)> explain_exit;
  // Remote ranks: how long after its start the local process may take to show
  // that `kolorun --remote-exec` runs at the far end (remote/start_word.h), and
  // the command, as messages name it. No timeout: nothing is awaited.
  std::optional<std::chrono::milliseconds> start_timeout;
  std::string launcher_command;
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

// How a process started on this host is wired: its stdin, and whether its output
// is captured on pipes (else it shares kolorun's own stdout and stderr).
struct ProcessStdio {
  int stdin_fd = -1;
  bool capture_output = true;
};

// Fork and exec spec.program_path on this host, in a new process group, dying
// with the caller (PR_SET_PDEATHSIG). Throws like ProcessSpawner::spawn.
RankProcess start_process(const LaunchSpec& spec, const ProcessStdio& stdio);

// start_process with stdin /dev/null and captured output.
std::unique_ptr<ProcessSpawner> make_local_spawner();

}  // namespace kolorun
