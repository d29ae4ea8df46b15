// One tensor operation submitted on this rank and not yet completed.
#pragma once

#include <chrono>
#include <memory>

#include "engine/messages.h"
#include "engine/op_state.h"
#include "kolo/types.h"

namespace kolo::engine {

struct Entry {
  Request request;
  Tensor input;   // null data for barrier and join
  Tensor output;  // allreduce and broadcast write here (equal to input when in place)
  std::shared_ptr<detail::OpState> state;
  std::chrono::steady_clock::time_point submitted_at{};
  std::chrono::steady_clock::time_point accepted_at{};  // taken by the background thread
  std::uint64_t seq = 0;  // in the flight recorder
};

}  // namespace kolo::engine
