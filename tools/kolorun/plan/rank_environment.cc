#include "plan/rank_environment.h"

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <utility>

#include "common/env.h"
#include "kolo/error.h"
#include "launch_error.h"

namespace kolorun {

std::string make_job_id() {
  std::array<std::uint8_t, 8> bytes{};
  std::size_t filled = 0;
  while (filled < bytes.size()) {
    ssize_t n = ::getrandom(bytes.data() + filled, bytes.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw LaunchError(system_error_text("cannot make a job id", errno), 1);
    filled += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (auto byte : bytes) {
    id += kHex[byte >> 4];
    id += kHex[byte & 0xf];
  }
  return id;
}

std::vector<std::string> environment_entries(const char* const* env) {
  std::vector<std::string> entries;
  for (const char* const* entry = env; entry != nullptr && *entry != nullptr; ++entry) entries.emplace_back(*entry);
  return entries;
}

std::string variable_name(const std::string& entry) { return entry.substr(0, entry.find('=')); }

std::optional<std::string> lookup(const std::vector<std::string>& env, const std::string& name) {
  for (const auto& entry : env)
    if (variable_name(entry) == name) return entry.substr(name.size() + 1);
  return std::nullopt;
}

namespace {

using Variables = std::vector<std::pair<std::string, std::string>>;

// KOLO_HOST_ADDR and KOLO_IFACE of a process on `host`.
void add_host_variables(Variables& vars, const std::string& host, const JobIdentity& job) {
  if (auto address = job.host_addresses.find(host); address != job.host_addresses.end())
    vars.emplace_back("KOLO_HOST_ADDR", address->second);
  if (!job.network_interface.empty()) vars.emplace_back("KOLO_IFACE", job.network_interface);
}

// glibc's allocator backs its heap and large blocks with transparent huge pages
// (where the system's setting is madvise or always), unless KOLO_TUNE_MALLOC
// is off or GLIBC_TUNABLES already says. A tunable is read only when the
// process starts, so kolorun sets it; init() does the rest of the tuning
// (src/api/allocator_tuning.h). A process touches fresh memory a page at a
// time: on a VM each 4 KiB fault costs about 12 us, and a worker that joins an
// elastic job, or any first step, spends most of its time there; with 2 MiB
// pages the same memory is ready several times faster.
void add_allocator_tunables(Variables& vars, const std::vector<std::string>& base) {
  if (const auto tune = lookup(base, "KOLO_TUNE_MALLOC")) {
    try {
      if (!kolo::env::parse_bool(*tune, "KOLO_TUNE_MALLOC")) return;
    } catch (const kolo::InvalidArgumentError&) {
      return;  // each rank's init() refuses the value, naming it
    }
  }
  const std::string tunables = lookup(base, "GLIBC_TUNABLES").value_or("");
  if (tunables.find("glibc.malloc.hugetlb") != std::string::npos) return;
  vars.emplace_back("GLIBC_TUNABLES", tunables + (tunables.empty() ? "" : ":") + "glibc.malloc.hugetlb=1");
}

// `base` without the variables kolorun sets, then kolorun's.
std::vector<std::string> laid_over(const std::vector<std::string>& base, const Variables& vars) {
  auto set_by_kolorun = [&](const std::string& entry) {
    auto name = entry.substr(0, entry.find('='));
    for (const auto& [var, value] : vars)
      if (var == name) return true;
    return false;
  };
  std::vector<std::string> env;
  for (const auto& entry : base) {
    if (!set_by_kolorun(entry)) env.push_back(entry);
  }
  for (const auto& [var, value] : vars) env.push_back(var + "=" + value);
  return env;
}

// A rank's identity in kolorun's own environment (a job started by a rank) would
// be misread as that of a server or an elastic worker, which get none.
std::vector<std::string> without_rank_identity(const std::vector<std::string>& base) {
  std::vector<std::string> env;
  for (const auto& entry : base) {
    const std::string name = variable_name(entry);
    if (name != "KOLO_RANK" && name != "KOLO_SIZE" && name != "KOLO_LOCAL_RANK" && name != "KOLO_LOCAL_SIZE" &&
        name != "KOLO_CROSS_RANK" && name != "KOLO_CROSS_SIZE" && name.rfind("HOROVOD_", 0) != 0)
      env.push_back(entry);
  }
  return env;
}

}  // namespace

std::vector<std::string> make_rank_environment(const std::vector<std::string>& base, const RankPlacement& rank,
                                               int size, const JobIdentity& job) {
  Variables kolo_vars = {
      {"KOLO_RANK", std::to_string(rank.rank)},
      {"KOLO_SIZE", std::to_string(size)},
      {"KOLO_LOCAL_RANK", std::to_string(rank.local_rank)},
      {"KOLO_LOCAL_SIZE", std::to_string(rank.local_size)},
      {"KOLO_CROSS_RANK", std::to_string(rank.cross_rank)},
      {"KOLO_CROSS_SIZE", std::to_string(rank.cross_size)},
      {"KOLO_HOSTNAME", rank.host},
      {"KOLO_JOB_ID", job.job_id},
      {"KOLO_STORE_ADDR", job.store_addr},
      {"KOLO_SECRET", job.secret},
      {"KOLO_LAUNCHER", job.launcher},
      {"KOLO_CPU_BIND", job.cpu_binding},
  };
  add_host_variables(kolo_vars, rank.host, job);
  add_allocator_tunables(kolo_vars, base);
  if (job.num_servers > 0) kolo_vars.emplace_back("KOLO_NUM_SERVERS", std::to_string(job.num_servers));
  if (!job.flight_dir.empty()) kolo_vars.emplace_back("KOLO_FLIGHT_RECORDER_DIR", job.flight_dir);
  // What horovodrun sets, for scripts written for Horovod that read it.
  kolo_vars.insert(kolo_vars.end(), {
      {"HOROVOD_RANK", std::to_string(rank.rank)},
      {"HOROVOD_SIZE", std::to_string(size)},
      {"HOROVOD_LOCAL_RANK", std::to_string(rank.local_rank)},
      {"HOROVOD_LOCAL_SIZE", std::to_string(rank.local_size)},
      {"HOROVOD_CROSS_RANK", std::to_string(rank.cross_rank)},
      {"HOROVOD_CROSS_SIZE", std::to_string(rank.cross_size)},
      {"HOROVOD_HOSTNAME", rank.host},
  });
  return laid_over(base, kolo_vars);
}

std::vector<std::string> make_worker_environment(const std::vector<std::string>& base, int worker,
                                                 const std::string& host, const JobIdentity& job,
                                                 std::chrono::milliseconds elastic_timeout) {
  Variables kolo_vars = {
      {"KOLO_ELASTIC_WORKER", std::to_string(worker)},
      {"KOLO_ELASTIC_TIMEOUT", std::to_string(static_cast<double>(elastic_timeout.count()) / 1000.0)},
      {"KOLO_HOSTNAME", host},
      {"KOLO_JOB_ID", job.job_id},
      {"KOLO_STORE_ADDR", job.store_addr},
      {"KOLO_SECRET", job.secret},
      {"KOLO_LAUNCHER", job.launcher},
      {"KOLO_CPU_BIND", "none"},
  };
  add_host_variables(kolo_vars, host, job);
  add_allocator_tunables(kolo_vars, base);
  if (!job.flight_dir.empty()) kolo_vars.emplace_back("KOLO_FLIGHT_RECORDER_DIR", job.flight_dir);
  return laid_over(without_rank_identity(base), kolo_vars);
}

std::vector<std::string> make_server_environment(const std::vector<std::string>& base, int server,
                                                 const std::string& host, int size, const JobIdentity& job) {
  Variables kolo_vars = {
      {"KOLO_SERVER_RANK", std::to_string(server)},
      {"KOLO_NUM_SERVERS", std::to_string(job.num_servers)},
      {"KOLO_SIZE", std::to_string(size)},
      {"KOLO_CROSS_SIZE", std::to_string(job.hosts)},
      {"KOLO_HOSTNAME", host},
      {"KOLO_JOB_ID", job.job_id},
      {"KOLO_STORE_ADDR", job.store_addr},
      {"KOLO_SECRET", job.secret},
      {"KOLO_LAUNCHER", job.launcher},
  };
  add_host_variables(kolo_vars, host, job);
  add_allocator_tunables(kolo_vars, base);
  return laid_over(without_rank_identity(base), kolo_vars);
}

}  // namespace kolorun
