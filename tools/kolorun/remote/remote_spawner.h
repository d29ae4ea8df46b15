// Starting ranks on other hosts: `kolorun --remote-exec` there, reached through
// ssh or through a launcher command (any exec prefix, e.g. "ip netns exec {host}"),
// with the rank's spec and then heartbeats and signals on its stdin (see
// remote_protocol.h). The local process (ssh, or the launcher command) is what the
// supervisor watches: it ends when the remote rank ends, with its exit status.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "local/process_spawner.h"

namespace kolorun {

struct RemoteAccess {
  // Words with "{host}" replaced by the host name; empty: ssh.
  std::vector<std::string> launcher_command;
  std::optional<int> ssh_port;
  std::string ssh_identity_file;
  std::vector<std::string> ssh_options;
  std::chrono::milliseconds host_timeout{20000};
  // kolorun's own path: the same path must hold kolorun on every host.
  std::string kolorun_path;
};

// The local command that runs `kolorun --remote-exec` on `host`.
std::vector<std::string> remote_command_line(const RemoteAccess& access, const std::string& host);

// Starts specs with `remote` set on their host, every other spec locally.
// Resolves ssh or the launcher command at once (throws LaunchError when missing).
std::unique_ptr<ProcessSpawner> make_job_spawner(const std::optional<RemoteAccess>& access);

// The path of the running kolorun binary.
std::string own_executable_path();

}  // namespace kolorun
