// kolorun's host lists: -H "host:slots,..." (parse_host_list) and hostfiles
// (read_hostfile, through an in-memory file). Malformed input must be a
// UsageError (any other exception is a crash). Property: a parsed list printed
// back with format_host_list parses to the same hosts and slots.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "launch_error.h"
#include "options/host_list.h"

namespace {

bool same(const std::vector<kolorun::HostSlots>& a, const std::vector<kolorun::HostSlots>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].host != b[i].host || a[i].slots != b[i].slots) return false;
  return true;
}

void check_round_trip(const std::vector<kolorun::HostSlots>& hosts) {
  FUZZ_CHECK(!hosts.empty());
  for (const auto& h : hosts) FUZZ_CHECK(!h.host.empty() && h.slots > 0);
  FUZZ_CHECK(same(kolorun::parse_host_list(kolorun::format_host_list(hosts)), hosts));
}

void check_host_list(const std::string& text) {
  std::vector<kolorun::HostSlots> hosts;
  try {
    hosts = kolorun::parse_host_list(text);
  } catch (const kolorun::UsageError&) {
    return;
  }
  check_round_trip(hosts);
}

void check_hostfile(const std::uint8_t* data, std::size_t size) {
  static const int fd = memfd_create("hostfile", 0);
  FUZZ_CHECK(fd >= 0);
  FUZZ_CHECK(ftruncate(fd, 0) == 0);
  FUZZ_CHECK(pwrite(fd, data, size, 0) == static_cast<ssize_t>(size));
  std::vector<kolorun::HostSlots> hosts;
  try {
    hosts = kolorun::read_hostfile("/proc/self/fd/" + std::to_string(fd));
  } catch (const kolorun::UsageError&) {
    return;
  }
  check_round_trip(hosts);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check_host_list(std::string(reinterpret_cast<const char*>(data), size));
  check_hostfile(data, size);
  return 0;
}
