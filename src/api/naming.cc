#include "api/naming.h"

#include <cstring>
#include <mutex>
#include <unordered_map>

namespace kolo {

std::string auto_name(const char* op, const std::source_location& where) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::uint64_t> counters;
  const char* file = where.file_name();
  if (const char* slash = std::strrchr(file, '/')) file = slash + 1;
  std::string site = std::string(op) + "@" + file + ":" + std::to_string(where.line()) + ":" +
                     std::to_string(where.column());
  std::uint64_t n;
  {
    std::lock_guard lock(mutex);
    n = counters[site]++;
  }
  return site + "#" + std::to_string(n);
}

}  // namespace kolo
