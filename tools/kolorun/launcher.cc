#include "launcher.h"

#include <iostream>

#include "host_plan.h"
#include "job_supervisor.h"
#include "launch_error.h"
#include "options.h"
#include "program_path.h"
#include "rank_environment.h"
#include "shm_cleanup.h"
#include "signal_channel.h"
#include "store/store.h"

extern char** environ;

namespace kolorun {
namespace {

HostPlan plan_job(const LaunchOptions& options) {
  std::vector<HostSlots> hosts = options.hosts.empty()
                                     ? std::vector<HostSlots>{{this_hostname(), *options.num_proc}}
                                     : parse_host_list(options.hosts);
  require_single_host(hosts);
  return make_host_plan(hosts, options.num_proc);
}

std::vector<LaunchSpec> make_launch_specs(const HostPlan& plan, const std::string& program_path,
                                          const std::vector<std::string>& command, const JobIdentity& job) {
  std::vector<LaunchSpec> specs;
  for (const auto& placement : plan.ranks) {
    LaunchSpec spec;
    spec.rank = placement.rank;
    spec.program_path = program_path;
    spec.argv = command;
    spec.env = make_rank_environment(environ, placement, plan.size, job);
    specs.push_back(std::move(spec));
  }
  return specs;
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
  HostPlan plan = plan_job(options);
  std::string program_path = resolve_program(options.command.front());

  // Before the store's thread exists, so that it inherits the blocked signals.
  SignalChannel signals;
  JobIdentity job;
  job.job_id = make_job_id();
  ShmJanitor janitor(job.job_id);
  job.secret = kolo::store::make_secret();
  kolo::store::StoreServer store(job.secret, "127.0.0.1", 0);
  job.store_addr = "127.0.0.1:" + std::to_string(store.port());

  SupervisorSettings settings;
  settings.tag_output = options.tag_output;
  settings.verbose = options.verbose;
  settings.timeout = options.timeout;
  settings.kill_grace = options.kill_grace;
  auto spawner = make_local_spawner();
  JobSupervisor supervisor(*spawner, signals, settings);
  if (options.verbose) {
    supervisor.report("job " + job.job_id + ": " + program_path + ", store at " + job.store_addr + ", " +
                      plan.describe());
  }
  return supervisor.run(make_launch_specs(plan, program_path, options.command, job));
}

}  // namespace kolorun
