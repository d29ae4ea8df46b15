#include "launcher.h"

#include <cstdlib>
#include <filesystem>

#include <algorithm>
#include <iostream>
#include <optional>

#include "elastic/elastic_driver.h"
#include "elastic/host_discovery.h"
#include "launch_error.h"
#include "mpi/mpi_launch.h"
#include "options/options.h"
#include "options/program_path.h"
#include "plan/host_address.h"
#include "plan/host_plan.h"
#include "plan/rank_environment.h"
#include "plan/server_plan.h"
#include "plan/ip_address.h"
#include "plan/store_endpoint.h"
#include "remote/env_export.h"
#include "remote/remote_spawner.h"
#include "bootstrap/launch_settings.h"
#include "common/job_names.h"
#include "engine/config.h"
#include "store/store.h"
#include "supervision/job_supervisor.h"
#include "supervision/job_cgroup.h"
#include "supervision/job_watchdog.h"
#include "supervision/shm_cleanup.h"
#include "supervision/signal_channel.h"

extern char** environ;

namespace kolorun {
namespace {

HostPlan plan_job(const LaunchOptions& options, const std::vector<HostSlots>& elastic_hosts) {
  // An elastic job's plan only chooses the store's address and how to reach
  // the hosts; its workers are placed by the elastic driver.
  if (options.elastic) return make_host_plan(elastic_hosts, std::nullopt);
  std::vector<HostSlots> hosts;
  if (!options.hostfile.empty()) {
    hosts = read_hostfile(options.hostfile);
  } else if (!options.hosts.empty()) {
    hosts = parse_host_list(options.hosts);
  } else {
    hosts = {{this_hostname(), *options.num_proc}};
  }
  return make_host_plan(hosts, options.num_proc);
}

bool has_local_rank(const HostPlan& plan) {
  for (const auto& host : plan.hosts)
    if (is_this_host(host.host)) return true;
  return false;
}

std::optional<RemoteAccess> remote_access(const LaunchOptions& options, const HostPlan& plan) {
  // A discovery script may name other hosts later.
  const bool later = options.elastic && !options.elastic->discovery_script.empty();
  if (!spans_other_hosts(plan) && !later) return std::nullopt;
  RemoteAccess access;
  access.launcher_command = options.launcher_command;
  access.ssh_port = options.ssh_port;
  access.ssh_identity_file = options.ssh_identity_file;
  access.ssh_options = options.ssh_options;
  access.host_timeout = options.host_timeout;
  access.kolorun_path = own_executable_path();
  return access;
}

// kolo-server, installed beside kolorun (also on the other hosts).
std::string server_program() {
  const std::string self = own_executable_path();
  return self.substr(0, self.rfind('/') + 1) + "kolo-server";
}

// The servers' specs, after the ranks' (so that a rank and a server found dead
// together name the rank first). A server has no CPU share: it is no rank.
void add_server_specs(std::vector<LaunchSpec>& specs, const std::vector<ServerPlacement>& servers,
                      const HostPlan& plan, bool multi_host, const JobIdentity& job) {
  const std::vector<std::string> local_base = environment_entries(environ);
  const std::vector<std::string> remote_base = exportable_environment(environ);
  const std::string program = server_program();
  for (const auto& placement : servers) {
    LaunchSpec spec;
    spec.rank = plan.size + placement.server;
    spec.server = placement.server;
    spec.remote = !is_this_host(placement.host);
    spec.program_path = spec.remote ? program : resolve_program(program);
    spec.argv = {program};
    spec.env = make_server_environment(spec.remote ? remote_base : local_base, placement.server, placement.host,
                                       plan.size, job);
    if (multi_host) {
      spec.host = placement.host;
      spec.label = "server " + std::to_string(placement.server) + " on host " + placement.host;
    }
    specs.push_back(std::move(spec));
  }
}

std::vector<LaunchSpec> make_launch_specs(const HostPlan& plan, const std::string& program_path,
                                          const std::vector<std::string>& command, const JobIdentity& job,
                                          bool multi_host) {
  const std::vector<std::string> local_base = environment_entries(environ);
  const std::vector<std::string> remote_base = exportable_environment(environ);
  std::vector<LaunchSpec> specs;
  for (const auto& placement : plan.ranks) {
    LaunchSpec spec;
    spec.rank = placement.rank;
    spec.program_path = program_path;
    spec.argv = command;
    spec.remote = !is_this_host(placement.host);
    spec.env = make_rank_environment(spec.remote ? remote_base : local_base, placement, plan.size, job);
    // A remote rank's share is chosen on its host, by the kolorun that starts it.
    if (!spec.remote) spec.cpus = cpus_for_rank(spec.env);
    if (multi_host) {
      spec.host = placement.host;
      spec.label = "rank " + std::to_string(placement.rank) + " on host " + placement.host;
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

SupervisorSettings supervisor_settings(const LaunchOptions& options) {
  SupervisorSettings settings;
  settings.tag_output = options.tag_output;
  settings.verbose = options.verbose;
  settings.timeout = options.timeout;
  settings.kill_grace = options.kill_grace;
  // Several heartbeats per host timeout, so one late one does not count as silence.
  settings.heartbeat_interval = std::clamp(options.host_timeout / 4, std::chrono::milliseconds(100),
                                           std::chrono::milliseconds(5000));
  return settings;
}

// The whole mpirun job as one supervised process, its output passed through as
// mpirun writes it (mpirun tags it itself).
int run_mpi(const LaunchOptions& options, const HostPlan& plan, const JobIdentity& job, SignalChannel& signals,
            const std::string& store_reason) {
  MpiJob mpi = make_mpi_job(options, plan, job, environment_entries(environ), own_executable_path());
  LaunchSpec spec;
  spec.program_path = resolve_program(mpi.argv.front());
  spec.argv = mpi.argv;
  spec.env = mpi.env;
  spec.label = "mpirun";
  SupervisorSettings settings = supervisor_settings(options);
  settings.tag_output = false;
  auto spawner = make_local_spawner();
  JobSupervisor supervisor(*spawner, signals, settings);
  if (options.verbose) {
    std::string line;
    for (const auto& word : mpi.argv) line += (line.empty() ? "" : " ") + word;
    supervisor.report("job " + job.job_id + ", store at " + job.store_addr + " (" + store_reason + "): " + line);
  }
  return supervisor.run({spec});
}

// An elastic job: the driver places the workers and writes each generation to
// the store, through a client of kolorun's own store.
int run_elastic(const LaunchOptions& options, const std::vector<HostSlots>& hosts, const std::string& program_path,
                const JobIdentity& job, ProcessSpawner& spawner, SignalChannel& signals, JobWatchdog& watchdog,
                int join_cgroup_fd, bool multi_host) {
  const std::vector<std::string> local_base = environment_entries(environ);
  const std::vector<std::string> remote_base = exportable_environment(environ);
  const ElasticOptions& elastic = *options.elastic;
  auto address = kolo::store::parse_store_address(job.store_addr);
  JobIdentity placed = job;
  auto make_spec = [&](int worker, const std::string& host) {
    // Another name of this machine (an elastic job's hosts are its names) is
    // reached where the store is.
    if (is_this_host(host) && !placed.host_addresses.count(host) && placed.network_interface.empty())
      placed.host_addresses[host] = address.host;
    LaunchSpec spec;
    spec.rank = worker;
    spec.program_path = program_path;
    spec.argv = options.command;
    spec.remote = !is_this_host(host);
    spec.env = make_worker_environment(spec.remote ? remote_base : local_base, worker, host, placed, elastic.timeout);
    spec.label = "worker " + std::to_string(worker);
    if (multi_host || !elastic.discovery_script.empty()) {
      spec.host = host;
      spec.label += " on host " + host;
    }
    spec.join_cgroup_fd = join_cgroup_fd;
    return spec;
  };
  auto store = kolo::store::StoreClient::connect(address.host, address.port, job.secret, std::chrono::seconds(10));
  // Without -np: every slot -H gives, or --min-np workers on discovered hosts.
  int slots = 0;
  for (const auto& h : hosts) slots += h.slots;
  const int np = options.num_proc.value_or(elastic.discovery_script.empty() ? slots : elastic.min_np.value_or(1));
  ElasticDriver driver(elastic, np, hosts, make_spec, std::move(store), options.verbose);
  SupervisorSettings settings = supervisor_settings(options);
  settings.flight_dir = job.flight_dir;
  settings.policy = &driver;
  settings.on_rank_started = [&watchdog](pid_t group) { watchdog.watch_group(group); };
  JobSupervisor supervisor(spawner, signals, settings);
  const std::vector<LaunchSpec> specs = driver.start();
  if (options.verbose)
    supervisor.report("elastic job " + job.job_id + ": " + program_path + ", store at " + job.store_addr + ", " +
                      std::to_string(specs.size()) + " worker(s) to start");
  return supervisor.run(specs);
}

// The flight directory kolorun chose for the job goes when kolorun ends, however
// the job ended (a signal to kolorun, a failure, success): kolorun has reported
// the records in it. One the user chose (KOLO_FLIGHT_RECORDER_DIR) stays.
class OwnFlightDirectory {
 public:
  explicit OwnFlightDirectory(std::string path) : path_(std::move(path)) {}
  ~OwnFlightDirectory() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  OwnFlightDirectory(const OwnFlightDirectory&) = delete;
  OwnFlightDirectory& operator=(const OwnFlightDirectory&) = delete;

 private:
  std::string path_;
};

// KOLO_FLIGHT_RECORDER_DIR as the user chose it, or empty. In a rank of another
// kolo job (a rank that starts a job of its own) the variable can name that job's
// own directory, which its kolorun set: the new job takes a directory of its own,
// so that neither job reads the other's records as its ranks'.
std::string user_flight_dir() {
  const char* dir = std::getenv(kolo::engine::kFlightRecorderDir.name);
  if (!dir || !*dir) return "";
  const char* secret = std::getenv(kolo::store::kSecret.name);
  const char* job_id = std::getenv(kolo::kJobId.name);
  if (secret && *secret && dir == kolo::job_flight_dir(secret, job_id ? job_id : "")) return "";
  return dir;
}

}  // namespace

int run_launcher(const std::vector<std::string>& args) {
  ParsedCommandLine parsed = parse_command_line(args);
  if (parsed.action == CommandLineAction::ShowHelp) {
    std::cout << help_text();
    return 0;
  }
  if (parsed.action == CommandLineAction::ShowVersion) {
    std::cout << "kolorun (kolo) " << KOLORUN_VERSION << "\n";
    return 0;
  }
  const LaunchOptions& options = parsed.options;
  // Everything that can be wrong with the input is found before anything starts.
  std::vector<HostSlots> elastic_hosts;
  if (options.elastic) {
    elastic_hosts = initial_elastic_hosts(options.hosts, options.hostfile, options.elastic->discovery_script,
                                          options.elastic->slots_per_host.value_or(1));
    if (elastic_hosts.empty()) elastic_hosts = {{this_hostname(), *options.num_proc}};
  }
  HostPlan plan = plan_job(options, elastic_hosts);
  const std::vector<ServerPlacement> servers = make_server_plan(plan, options.num_servers, options.server_hosts);
  // Ranks' and servers' hosts: where the store must be reachable from.
  const HostPlan job_hosts = hosts_of_job(plan, servers);
  // A program that exists only on the other hosts is found there.
  std::string program_path =
      has_local_rank(plan) || options.mpi ? resolve_program(options.command.front()) : options.command.front();
  StoreEndpoint endpoint = choose_store_endpoint(job_hosts, options.network_interface);
  std::optional<RemoteAccess> access = options.mpi ? std::nullopt : remote_access(options, job_hosts);
  auto spawner = make_job_spawner(access);

  // Before the store's thread exists, so that it inherits the blocked signals.
  SignalChannel signals;
  JobIdentity job;
  job.job_id = make_job_id();
  job.secret = kolo::store::make_secret();
  // The job's segments and flight directory are named by its secret's tag.
  const std::string tag = kolo::job_tag(job.secret);
  ShmJanitor janitor(tag);
  job.network_interface = options.network_interface;
  job.host_addresses = host_addresses(job_hosts, endpoint.address, options.network_interface);
  job.num_servers = static_cast<int>(servers.size());
  job.hosts = static_cast<int>(job_hosts.hosts.size());
  job.cpu_binding = cpu_binding_name(options.cpu_binding);
  // Flight records go where the user said, or to a directory of this job's.
  const std::string chosen_flight_dir = user_flight_dir();
  job.flight_dir = chosen_flight_dir.empty() ? kolo::job_flight_dir(job.secret, job.job_id) : chosen_flight_dir;
  // Declared before the watchdog and the supervisor: it goes after they are done.
  OwnFlightDirectory own_flight_dir(chosen_flight_dir.empty() ? job.flight_dir : "");
  // Before the watchdog, which kills what is in it; goes after it.
  JobCgroup cgroup("kolo-" + tag);
  // Before the store's thread: the watchdog is forked from a process of one thread.
  WatchdogDuty duty;
  duty.processes.entries = {"KOLO_JOB_ID=" + job.job_id};
  duty.job_tag = tag;
  duty.flight_dir = chosen_flight_dir.empty() ? job.flight_dir : "";
  duty.cgroup = cgroup.path();
  JobWatchdog watchdog(std::move(duty));
  kolo::store::StoreServer store(job.secret, endpoint.address, 0);
  job.store_addr = address_with_port(endpoint.address, store.port());
  if (options.mpi) {
    const int status = run_mpi(options, plan, job, signals, endpoint.reason);
    watchdog.sweep();
    return status;
  }

  if (options.elastic) {
    const int status = run_elastic(options, elastic_hosts, program_path, job, *spawner, signals, watchdog,
                                   cgroup.join_fd(), spans_other_hosts(job_hosts));
    watchdog.sweep();
    return status;
  }

  SupervisorSettings settings = supervisor_settings(options);
  settings.flight_dir = job.flight_dir;
  settings.size = plan.size;
  settings.on_rank_started = [&watchdog](pid_t group) { watchdog.watch_group(group); };
  JobSupervisor supervisor(*spawner, signals, settings);
  if (options.verbose) {
    std::string placed;
    for (const auto& s : servers) placed += "\n  server " + std::to_string(s.server) + " on " + s.host;
    supervisor.report("job " + job.job_id + ": " + program_path + ", store at " + job.store_addr + " (" +
                      endpoint.reason + "), " + plan.describe() + placed);
  }
  const bool multi_host = spans_other_hosts(job_hosts);
  std::vector<LaunchSpec> specs = make_launch_specs(plan, program_path, options.command, job, multi_host);
  add_server_specs(specs, servers, plan, multi_host, job);
  for (auto& spec : specs) spec.join_cgroup_fd = cgroup.join_fd();
  int status = supervisor.run(specs);
  watchdog.sweep();
  return status;
}

}  // namespace kolorun
