// Tensor fusion: several small allreduces become one communicator call over a
// fusion buffer, because each call has a fixed cost (synchronization between
// ranks) that dominates for small tensors.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/messages.h"

namespace kolo::engine {

// Groups `responses` into batches, each executed as one communicator call.
// Allreduce responses that agree on dtype, reduce op and scale factors are fused
// while the batch stays within `threshold` bytes (a larger tensor runs alone);
// every other response is a batch of its own. Batches keep the order of their
// first response. Deterministic: every rank plans the same batches.
std::vector<std::vector<std::size_t>> plan_batches(const std::vector<Response>& responses, std::size_t threshold);

// Bytes an allreduce response moves.
std::size_t allreduce_bytes(const Response& response);

}  // namespace kolo::engine
