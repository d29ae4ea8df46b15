// Settings every rank must share: the engine's cycles (the agreement step's
// layout, the fused batches) are only the same collectives on every rank when
// these are the same. Checked once, when the engine starts, so that every rank
// gets one message naming the setting and the ranks, instead of one rank failing
// the first operation and the others being told only that it stopped.
#pragma once

#include <cstdint>
#include <span>

#include "comm/communicator.h"

namespace kolo::engine {

using comm::SharedSetting;

// One allgather of every rank's values; throws InvalidArgumentError on every rank,
// with the same message, when any of them differ. Each must be declared
// Scope::AllRanks (common/settings.h).
void check_ranks_agree(comm::Communicator& comm, std::span<const SharedSetting> settings);

}  // namespace kolo::engine
