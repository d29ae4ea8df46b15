// The process-wide kolo session behind the free functions of the public API.
#pragma once

#include <memory>

#include "engine/engine.h"

namespace kolo::runtime {

// The running engine; throws ShutdownError when kolo is not initialized. Shared,
// so that a concurrent shutdown() cannot free it under a submitting thread.
std::shared_ptr<engine::Engine> engine();

}  // namespace kolo::runtime
