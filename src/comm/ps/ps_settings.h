// The parameter-server mode's settings, read by workers (bootstrap) and by
// kolo-server alike, and checked by init() like every transport's.
//
//   KOLO_NUM_SERVERS         0 (default): allreduce among the workers; K > 0:
//                            reduce through K servers (kolorun --num-servers sets it)
//   KOLO_PS_PARTITION_BYTES  allreduces are cut into partitions of at most this
//                            many bytes, spread over the servers (default 4 MiB,
//                            BytePS's; 4 KiB to 1 GiB)
//   KOLO_SERVER_RANK         kolo-server only: which of the K servers it is
#pragma once

#include <cstddef>

#include "common/settings.h"

namespace kolo::comm::ps {

struct PsSettings {
  int servers = 0;
  std::size_t partition_bytes = 4 << 20;

  // Throws InvalidArgumentError naming the variable for a bad value.
  static PsSettings from_env();
};

// kolo-server reads them too, and KOLO_SERVER_RANK only it.
extern const settings::Setting kNumServers, kPartitionBytes, kServerRank;

}  // namespace kolo::comm::ps
