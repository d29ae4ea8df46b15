#include "kolo/internal/fail.h"

#include "api/runtime.h"
#include "kolo/error.h"

namespace kolo::runtime {

void fail(const std::string& reason) {
  std::shared_ptr<engine::Engine> running;
  try {
    // A new elastic worker the job has not taken in has no one to tell: taking
    // it in first would pull the others into a generation that fails at once.
    if (is_planned()) return;
    running = engine();
  } catch (const ShutdownError&) {
    return;  // not initialized, already shut down, or a forked child
  }
  running->abort(reason);
}

}  // namespace kolo::runtime
