#include "kolo/internal/fail.h"

#include "api/runtime.h"
#include "kolo/error.h"

namespace kolo::runtime {

void fail(const std::string& reason) {
  std::shared_ptr<engine::Engine> running;
  try {
    running = engine();
  } catch (const ShutdownError&) {
    return;  // not initialized, already shut down, or a forked child
  }
  running->abort(reason);
}

}  // namespace kolo::runtime
