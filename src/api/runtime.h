// The process-wide kolo session behind the free functions of the public API.
#pragma once

#include <memory>

#include "engine/engine.h"

namespace kolo::runtime {

// The running engine; throws ShutdownError when kolo is not initialized. Shared,
// so that a concurrent shutdown() cannot free it under a submitting thread.
std::shared_ptr<engine::Engine> engine();

// Throws ShutdownError in a process forked from one where kolo was initialized:
// such a child inherits no session (runtime.cc), and what it inherited (pending
// operations' handles) must not wait on the parent's engine.
void check_not_forked();

}  // namespace kolo::runtime
