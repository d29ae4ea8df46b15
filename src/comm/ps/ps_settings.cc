#include "comm/ps/ps_settings.h"

#include "comm/ps/ps_protocol.h"
#include "common/env.h"

namespace kolo::comm::ps {

PsSettings PsSettings::from_env() {
  PsSettings s;
  s.servers = static_cast<int>(env::get_int_in("KOLO_NUM_SERVERS", 0, 0, 4096));
  s.partition_bytes = static_cast<std::size_t>(env::get_int_in(
      "KOLO_PS_PARTITION_BYTES", static_cast<std::int64_t>(s.partition_bytes), 4096, kMaxPushBytes));
  return s;
}

}  // namespace kolo::comm::ps
