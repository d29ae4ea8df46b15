#include "comm/ps/ps_settings.h"

#include "comm/ps/ps_protocol.h"

namespace kolo::comm::ps {

using settings::Scope;
constexpr auto kInteger = settings::Kind::Integer;  // ps::Kind is the protocol's

// A worker that counted other servers, or cut other partitions, would send the
// servers pieces the others do not.
KOLO_SETTING(kNumServers, {.name = "KOLO_NUM_SERVERS", .kind = kInteger, .fallback = "0", .min = 0,
                           .max = 4096, .scope = Scope::AllRanks,
                           .doc = "reduce every allreduce through this many parameter servers"});
KOLO_SETTING(kPartitionBytes, {.name = "KOLO_PS_PARTITION_BYTES", .kind = kInteger, .fallback = "4M",
                               .min = 4096, .max = kMaxPushBytes, .scope = Scope::AllRanks,
                               .doc = "the largest partition of an allreduce a server reduces"});
KOLO_SETTING(kServerRank, {.name = "KOLO_SERVER_RANK", .kind = kInteger, .fallback = "set by kolorun", .min = 0,
                           .max = 4095, .tools_only = true, .doc = "which parameter server a kolo-server process is"});

PsSettings PsSettings::from_env() {
  PsSettings s;
  s.servers = static_cast<int>(kNumServers.integer());
  s.partition_bytes = static_cast<std::size_t>(kPartitionBytes.integer(static_cast<std::int64_t>(s.partition_bytes)));
  return s;
}

}  // namespace kolo::comm::ps
