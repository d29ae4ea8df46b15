#include "kolo/internal/naming.h"

#include <mutex>
#include <unordered_map>

namespace kolo {

std::string auto_name(const char* op, const std::source_location& where) {
  return auto_name(op, where.file_name(), where.line(), where.column());
}

namespace {
std::mutex g_mutex;
std::unordered_map<std::string, std::uint64_t> g_counters;  // by call site
}  // namespace

void reset_auto_names() {
  std::lock_guard lock(g_mutex);
  g_counters.clear();
}

std::string auto_name(const char* op, std::string_view file, unsigned line, unsigned column) {
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
    std::lock_guard lock(g_mutex);
    n = g_counters[site]++;
  }
  return site + "#" + std::to_string(n);
}

}  // namespace kolo
