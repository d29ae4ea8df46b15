// A rank's program ending by an error, told to the other ranks.
// Internal to kolo and its bindings (kolo.torch), not a stable API.
#pragma once

#include <string>

namespace kolo::runtime {

// This rank's program is ending by an error (an uncaught Python exception): the
// job's engine aborts with `reason`, so that the other ranks get a
// PeerFailureError naming this rank and why instead of an orderly shutdown.
// Nothing when kolo is not running, nor in a new elastic worker that the job
// has not taken in yet.
void fail(const std::string& reason);

}  // namespace kolo::runtime
