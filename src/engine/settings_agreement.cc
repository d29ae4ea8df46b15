#include "engine/settings_agreement.h"

#include <map>
#include <string>
#include <vector>

#include "common/settings.h"
#include "kolo/error.h"

namespace kolo::engine {

void check_ranks_agree(comm::Communicator& comm, std::span<const SharedSetting> settings) {
  // The declarations say which settings must agree (Scope::AllRanks), for the
  // README and the tests: a comparison they do not declare is a bug, in a job of
  // one too.
  for (const auto& s : settings) {
    const auto* declared = ::kolo::settings::find(s.name);
    if (declared == nullptr || declared->scope != ::kolo::settings::Scope::AllRanks)
      throw InvalidArgumentError("internal: " + s.name + " is compared across ranks but not declared Scope::AllRanks");
  }
  const int n = comm.size();
  const std::size_t count = settings.size();
  if (n == 1 || count == 0) return;
  std::vector<std::int64_t> mine(count), all(count * static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < count; ++i) mine[i] = settings[i].value;
  const std::vector<std::size_t> sizes(static_cast<std::size_t>(n), count * sizeof(std::int64_t));
  comm.allgatherv(mine.data(), count * sizeof(std::int64_t), all.data(), sizes);
  std::string message;
  for (std::size_t i = 0; i < count; ++i) {
    std::map<std::int64_t, std::vector<int>> ranks_by_value;
    for (int r = 0; r < n; ++r) ranks_by_value[all[static_cast<std::size_t>(r) * count + i]].push_back(r);
    if (ranks_by_value.size() == 1) continue;
    std::string values;
    for (const auto& [value, ranks] : ranks_by_value) {
      values += (values.empty() ? "" : "; ") + std::to_string(value) + (ranks.size() == 1 ? " on rank " : " on ranks ");
      for (std::size_t k = 0; k < ranks.size(); ++k) values += (k ? ", " : "") + std::to_string(ranks[k]);
    }
    message += (message.empty() ? "" : "; and ") + settings[i].name + " is " + values;
  }
  if (!message.empty())
    throw InvalidArgumentError("kolo: the ranks' settings differ: " + message +
                               ". Every rank must have the same value (set it for the whole job).");
}

}  // namespace kolo::engine
