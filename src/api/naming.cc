#include "api/naming.h"

#include <mutex>
#include <unordered_map>

namespace kolo {

std::string auto_name(const char* op, const std::source_location& where) {
  return auto_name(op, where.file_name(), where.line(), where.column());
}

std::string auto_name(const char* op, std::string_view file, unsigned line, unsigned column) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::uint64_t> counters;
  if (auto slash = file.rfind('/'); slash != std::string_view::npos) file.remove_prefix(slash + 1);
  std::string site(op);
  site += '@';
  site += file;
  site += ':';
  site += std::to_string(line);
  site += ':';
  site += std::to_string(column);
  std::uint64_t n;
  {
    std::lock_guard lock(mutex);
    n = counters[site]++;
  }
  return site + "#" + std::to_string(n);
}

}  // namespace kolo
