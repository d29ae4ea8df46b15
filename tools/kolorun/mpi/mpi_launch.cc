#include "mpi/mpi_launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "bootstrap/topology.h"
#include "comm/mesh/mesh_communicator.h"
#include "store/store.h"
#include "launch_error.h"
#include "options/program_path.h"
#include "plan/host_address.h"
#include "remote/env_export.h"

extern char** environ;

namespace kolorun {
namespace {

int required_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) throw LaunchError(std::string(name) + " is not set: --mpi-rank runs only under mpirun", 1);
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || value < 0 || value > (1L << 30))
    throw LaunchError(std::string(name) + "='" + text + "' is not a rank number", 1);
  return static_cast<int>(value);
}

std::string required_text(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') throw LaunchError(std::string(name) + " is not set: start the job with kolorun --mpi", 1);
  return text;
}

}  // namespace

MpiJob make_mpi_job(const LaunchOptions& options, const HostPlan& plan, const JobIdentity& job,
                    const std::vector<std::string>& environment, const std::string& kolorun_path) {
  MpiJob mpi;
  mpi.argv = {"mpirun", "--allow-run-as-root", "--oversubscribe", "--map-by", "slot", "-np",
              std::to_string(plan.size), "-H", format_host_list(plan.hosts)};
  if (options.tag_output) mpi.argv.push_back("--tag-output");
  std::string rsh_args;
  if (options.ssh_port) rsh_args += "-p " + std::to_string(*options.ssh_port);
  if (!options.ssh_identity_file.empty()) rsh_args += (rsh_args.empty() ? "-i " : " -i ") + options.ssh_identity_file;
  if (!rsh_args.empty()) mpi.argv.insert(mpi.argv.end(), {"--mca", "plm_rsh_args", rsh_args});
  if (!options.network_interface.empty()) {
    mpi.argv.insert(mpi.argv.end(), {"--mca", "btl_tcp_if_include", options.network_interface, "--mca",
                                     "oob_tcp_if_include", options.network_interface});
  }

  const std::vector<std::pair<std::string, std::string>> kolo_vars = {
      {"KOLO_JOB_ID", job.job_id},
      {"KOLO_STORE_ADDR", job.store_addr},
      {"KOLO_SECRET", job.secret},
      {kolo::kMpiHosts.name, format_host_list(plan.hosts)},
      {kolo::kMpiHostAddrs.name, format_host_addresses(job.host_addresses)},
      {"KOLO_IFACE", job.network_interface},
  };
  for (const auto& entry : environment) {
    bool replaced = false;
    for (const auto& [name, value] : kolo_vars) replaced = replaced || variable_name(entry) == name;
    if (replaced) continue;
    mpi.env.push_back(entry);
    if (is_exportable(entry)) mpi.argv.insert(mpi.argv.end(), {"-x", variable_name(entry)});
  }
  for (const auto& [name, value] : kolo_vars) {
    if (value.empty()) continue;
    mpi.env.push_back(name + "=" + value);
    mpi.argv.insert(mpi.argv.end(), {"-x", name});
  }
  mpi.argv.insert(mpi.argv.end(), options.mpi_args.begin(), options.mpi_args.end());
  mpi.argv.insert(mpi.argv.end(), {kolorun_path, kMpiRankFlag, "--"});
  mpi.argv.insert(mpi.argv.end(), options.command.begin(), options.command.end());
  return mpi;
}

int run_mpi_rank(const std::vector<std::string>& command) {
  if (command.empty() || command.front().empty()) throw LaunchError("--mpi-rank needs a PROGRAM", 2);
  const int rank = required_int("OMPI_COMM_WORLD_RANK");
  const int size = required_int("OMPI_COMM_WORLD_SIZE");
  const int mpi_local_rank = required_int("OMPI_COMM_WORLD_LOCAL_RANK");
  HostPlan plan = make_host_plan(parse_host_list(required_text(kolo::kMpiHosts.name)), size);
  if (rank >= plan.size) throw LaunchError("OMPI_COMM_WORLD_RANK " + std::to_string(rank) + " is outside the job", 1);
  const RankPlacement& placement = plan.ranks[static_cast<std::size_t>(rank)];
  if (placement.local_rank != mpi_local_rank) {
    throw LaunchError("mpirun placed rank " + std::to_string(rank) + " as local rank " + std::to_string(mpi_local_rank) +
                          " but kolorun's plan has it as local rank " + std::to_string(placement.local_rank) + " on " +
                          placement.host + ": do not change the mapping through --mpi-args",
                      1);
  }
  JobIdentity job;
  job.job_id = required_text(kolo::kJobId.name);
  job.store_addr = required_text(kolo::store::kStoreAddr.name);
  job.secret = required_text(kolo::store::kSecret.name);
  if (const char* iface = std::getenv(kolo::comm::kIface.name)) job.network_interface = iface;
  job.launcher = "mpirun";
  if (const char* addresses = std::getenv(kolo::kMpiHostAddrs.name))
    job.host_addresses = parse_host_addresses(addresses);
  std::vector<std::string> env = make_rank_environment(environment_entries(environ), placement, plan.size, job);

  std::string program = resolve_program(command.front());
  std::vector<char*> argv, envp;
  std::vector<std::string> args = command;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  for (auto& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);
  ::execve(program.c_str(), argv.data(), envp.data());
  if (errno == ENOEXEC) {  // a script without "#!", as execvp would run it
    std::vector<char*> shell_argv{const_cast<char*>("/bin/sh"), program.data()};
    shell_argv.insert(shell_argv.end(), argv.begin() + 1, argv.end());
    ::execve("/bin/sh", shell_argv.data(), envp.data());
  }
  throw LaunchError(system_error_text("cannot execute '" + program + "'", errno), kExitNotFound);
}

}  // namespace kolorun
