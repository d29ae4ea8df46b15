// An elastic job's hosts as its discovery script prints them (parse_elastic_hosts,
// tools/kolorun/elastic/host_discovery.h): anything a script may print. Malformed
// output must be a UsageError (any other exception is a crash). Properties: every
// host has a name without white space, commas or control characters and at least
// one slot; printed back as "host:slots" lines it parses to the same list.
#include <cstddef>
#include <cstdint>
#include <string>

#include "elastic/host_discovery.h"
#include "fuzz_check.h"
#include "launch_error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<kolorun::HostSlots> hosts;
  try {
    hosts = kolorun::parse_elastic_hosts(text, '\n', 2, "fuzz");
  } catch (const kolorun::UsageError&) {
    return 0;
  }
  std::string printed;
  for (const auto& h : hosts) {
    FUZZ_CHECK(!h.host.empty() && h.host.size() <= 255 && h.slots > 0);
    for (char c : h.host) FUZZ_CHECK(static_cast<unsigned char>(c) > ' ' && c != ',' && c != 0x7f);
    printed += h.host + ":" + std::to_string(h.slots) + "\n";
  }
  const auto again = kolorun::parse_elastic_hosts(printed, '\n', 2, "fuzz");
  FUZZ_CHECK(again.size() == hosts.size());
  for (std::size_t i = 0; i < hosts.size(); ++i)
    FUZZ_CHECK(again[i].host == hosts[i].host && again[i].slots == hosts[i].slots);
  return 0;
}
