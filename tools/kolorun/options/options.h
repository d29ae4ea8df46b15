// kolorun's command line. Flags mirror horovodrun's where the meaning is the same.
//
// Parsing stops at the first argument that is not a flag (or after "--"): that is
// PROGRAM, and it and everything after it are the rank's command, passed through
// untouched even when they look like kolorun flags.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "local/cpu_binding.h"

namespace kolorun {

// Elastic mode (horovodrun's flags): the job survives failed workers while at
// least min_np remain, and takes in new ones up to max_np.
struct ElasticOptions {
  std::optional<int> min_np, max_np;  // absent: -np
  // Prints "host" or "host:slots" per line; run about every discovery_interval.
  std::string discovery_script;
  std::chrono::milliseconds discovery_interval{1000};
  std::optional<int> slots_per_host;  // slots of a host the script prints bare
  std::optional<int> reset_limit;     // membership changes before the job fails
  // A failed worker's host is excluded; with a range, it is back after a random
  // time in it (else never).
  std::optional<std::pair<std::chrono::milliseconds, std::chrono::milliseconds>> cooldown;
  // How long the job may have fewer than min_np workers (and each worker may wait
  // for the job to re-form).
  std::chrono::milliseconds timeout{600000};
};

struct LaunchOptions {
  // -np: how many ranks; defaults to the slot count of -H.
  std::optional<int> num_proc;
  // -H: "host:slots,host:slots"; empty (and no hostfile) means this host with -np slots.
  std::string hosts;
  // --hostfile: lines "host slots=N".
  std::string hostfile;
  // How to reach other hosts: ssh with these settings, or the launcher command
  // (words, "{host}" replaced by the host name) in its place.
  std::optional<int> ssh_port;
  std::string ssh_identity_file;
  std::vector<std::string> ssh_options;  // each passed as "-o OPTION", before kolorun's own
  std::vector<std::string> launcher_command;
  // The interface whose IPv4 address the job's store listens on; passed to the
  // ranks as KOLO_IFACE.
  std::string network_interface;
  // --bind-to: each local rank on its own share of the CPUs (core), or not (none).
  CpuBinding cpu_binding = CpuBinding::Core;
  // A host that gives no sign of life for this long counts as unreachable.
  std::chrono::milliseconds host_timeout{20000};
  // Hand the job to mpirun instead of starting the ranks.
  bool mpi = false;
  std::vector<std::string> mpi_args;
  bool verbose = false;
  // Prefix every output line with "[rank]<stdout>:" / "[rank]<stderr>:".
  bool tag_output = true;
  // End the whole job after this long.
  std::optional<std::chrono::milliseconds> timeout;
  // After asking the ranks to stop (SIGTERM or a forwarded signal), how long they
  // may take before they are killed.
  std::chrono::milliseconds kill_grace{5000};
  // --num-servers: parameter servers (kolo-server processes) that reduce the
  // workers' allreduces; absent: none, the ranks allreduce among themselves.
  std::optional<int> num_servers;
  // --server-hosts: "host:servers,..." where the servers run (filled in order);
  // empty: on the ranks' hosts in turn (co-located).
  std::string server_hosts;
  // --min-np, --max-np or --host-discovery-script: the job is elastic.
  std::optional<ElasticOptions> elastic;
  // PROGRAM and its arguments.
  std::vector<std::string> command;
};

enum class CommandLineAction { Launch, ShowHelp, ShowVersion };

struct ParsedCommandLine {
  CommandLineAction action = CommandLineAction::Launch;
  LaunchOptions options;
};

// Throws UsageError on anything malformed.
ParsedCommandLine parse_command_line(const std::vector<std::string>& args);

std::string help_text();

}  // namespace kolorun
