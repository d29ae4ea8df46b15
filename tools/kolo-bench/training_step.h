// kolo-bench --mode step: what the engine costs in a training step. ResNet-50's 161
// gradients are submitted asynchronously in reverse layer order, as backward
// produces them, then waited for; the same bytes as one fused allreduce through the
// API, and as one allreduce on the communicator alone, give the floor.
#pragma once

#include <ostream>

#include "core/bench_options.h"

namespace kolo::bench {

// Requires kolo::init(). Returns 0, or 1 when --check found a wrong value.
int run_training_step(const BenchOptions& options, std::ostream& out);

}  // namespace kolo::bench
