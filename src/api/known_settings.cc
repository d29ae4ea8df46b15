#include "api/known_settings.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "common/logging.h"

namespace kolo::detail {
namespace {

constexpr std::string_view kPrefix = "KOLO_";
// Kept for kolo's own test harness (KOLO_TEST_TIME_SCALE), which runs ranks of
// kolo programs with them set: they are not settings of kolo.
constexpr std::string_view kTestPrefix = "KOLO_TEST_";

// Edit distance (insertions, deletions, substitutions), small strings only.
std::size_t distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string warning_for(std::string_view name) {
  std::string message = std::string(name) + " is not a kolo setting and is ignored";
  std::string_view closest;
  std::size_t best = SIZE_MAX;
  for (auto known : known_settings()) {
    const auto d = distance(name, known);
    if (d < best) best = d, closest = known;
  }
  // A third of the name's letters wrong is no longer a misspelling of it.
  if (best <= std::max<std::size_t>(2, (name.size() - kPrefix.size()) / 3))
    message += " (did you mean " + std::string(closest) + "?)";
  return message;
}

}  // namespace

const std::vector<std::string_view>& known_settings() {
  static const std::vector<std::string_view> names = {
      // The job's layout and rendezvous, set by kolorun (or by hand, docs/architecture.md).
      "KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", "KOLO_CROSS_RANK", "KOLO_CROSS_SIZE",
      "KOLO_JOB_ID", "KOLO_LAUNCHER", "KOLO_STORE_ADDR", "KOLO_SECRET", "KOLO_RENDEZVOUS_FILE", "KOLO_HOSTNAME",
      "KOLO_HOST_ADDR", "KOLO_IFACE", "KOLO_CPU_BIND", "KOLO_MPI_HOSTS", "KOLO_MPI_HOST_ADDRS",
      // The engine.
      "KOLO_BACKEND", "KOLO_HIERARCHICAL", "KOLO_CYCLE_TIME", "KOLO_FUSION_THRESHOLD", "KOLO_CACHE_CAPACITY",
      "KOLO_EAGER_BYTES", "KOLO_PEER_TIMEOUT", "KOLO_START_TIMEOUT", "KOLO_WAKE_SLICE_US", "KOLO_STALL_CHECK_TIME",
      "KOLO_STALL_SHUTDOWN_TIME",
      // Diagnostics.
      "KOLO_LOG_LEVEL", "KOLO_TIMELINE", "KOLO_TIMELINE_ALL_RANKS", "KOLO_FLIGHT_RECORDER_DIR",
      "KOLO_FLIGHT_RECORDER_SIZE",
      // Memory.
      "KOLO_SHAREABLE_BUFFERS", "KOLO_BUFFER_CACHE_BYTES", "KOLO_TUNE_MALLOC",
      // The transports.
      "KOLO_SHM_SLOT_BYTES", "KOLO_SHM_SMALL_BYTES", "KOLO_SHM_MAPPED_BYTES", "KOLO_SHM_SINGLE_COPY",
      "KOLO_SHM_FIRST_STEP",
      "KOLO_TCP_SMALL_BYTES", "KOLO_TCP_ROUND_BYTES", "KOLO_TCP_SPIN_US", "KOLO_TCP_CONGESTION",
      "KOLO_GLOO_SMALL_BYTES",
      "KOLO_GLOO_ROUND_BYTES", "KOLO_MPI_SMALL_BYTES", "KOLO_MPI_SPIN_US", "KOLO_MPI_POLL_US",
      // Parameter servers.
      "KOLO_NUM_SERVERS", "KOLO_PS_PARTITION_BYTES", "KOLO_SERVER_RANK",
  };
  return names;
}

std::vector<std::string> unknown_setting_warnings(const char* const* environment) {
  std::vector<std::string> warnings;
  for (auto entry = environment; entry && *entry; ++entry) {
    const std::string_view text(*entry);
    if (text.substr(0, kPrefix.size()) != kPrefix || text.substr(0, kTestPrefix.size()) == kTestPrefix) continue;
    const auto name = text.substr(0, text.find('='));
    const auto& known = known_settings();
    if (std::find(known.begin(), known.end(), name) == known.end()) warnings.push_back(warning_for(name));
  }
  return warnings;
}

void warn_about_unknown_settings() {
  for (const auto& warning : unknown_setting_warnings(environ)) KOLO_LOG(Warning, warning);
}

}  // namespace kolo::detail
