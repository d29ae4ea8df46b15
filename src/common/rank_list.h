// A list of ranks as messages write it.
#pragma once

#include <string>
#include <vector>

namespace kolo {

// "[0, 2, 3]".
inline std::string describe_ranks(const std::vector<int>& ranks) {
  std::string out = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "]";
}

}  // namespace kolo
