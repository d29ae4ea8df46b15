#include "local/cpu_binding.h"

#include <sched.h>

#include <charconv>
#include <optional>

#include "bootstrap/launch_settings.h"
#include "launch_error.h"
#include "plan/rank_environment.h"

namespace kolorun {
namespace {

// An integer variable of `env`, or nullopt when missing or not a plain integer.
std::optional<int> env_int(const std::vector<std::string>& env, const std::string& name) {
  auto text = lookup(env, name);
  if (!text) return std::nullopt;
  int value = 0;
  auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (error != std::errc() || end != text->data() + text->size()) return std::nullopt;
  return value;
}

}  // namespace

CpuBinding parse_cpu_binding(const std::string& flag, const std::string& value) {
  if (value == "core") return CpuBinding::Core;
  if (value == "none") return CpuBinding::None;
  throw UsageError(flag + " '" + value + "' is not a binding: use core (each local rank on its own CPUs) or none");
}

const char* cpu_binding_name(CpuBinding binding) { return binding == CpuBinding::Core ? "core" : "none"; }

std::vector<int> cpu_share(const std::vector<int>& allowed, int local_rank, int local_size) {
  const int cpus = static_cast<int>(allowed.size());
  if (local_size <= 0 || local_rank < 0 || local_rank >= local_size || local_size > cpus) return {};
  const int base = cpus / local_size, extra = cpus % local_size;
  const int first = local_rank * base + std::min(local_rank, extra);
  const int count = base + (local_rank < extra ? 1 : 0);
  return {allowed.begin() + first, allowed.begin() + first + count};
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

std::vector<int> cpus_for_rank(const std::vector<std::string>& env) {
  if (lookup(env, kolo::kCpuBind.name) != "core") return {};
  auto local_rank = env_int(env, kolo::kLocalRank.name);
  auto local_size = env_int(env, kolo::kLocalSize.name);
  if (!local_rank || !local_size) return {};
  return cpu_share(allowed_cpus(), *local_rank, *local_size);
}

}  // namespace kolorun
