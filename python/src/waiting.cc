// Waiting for kolo's operations from Python.
#include <atomic>
#include <chrono>
#include <mutex>

#include "binding.h"
#include "kolo/error.h"

namespace kolo::python {
namespace {

// Short enough that Ctrl-C acts at once to a person, long enough that a long
// wait wakes rarely. The first slice already drives the engine's cycles on this
// thread (Handle::wait), so a short operation costs no extra wake-up.
constexpr std::chrono::milliseconds kSlice{50};

struct Kept {
  Handle handle;
  std::vector<at::Tensor> tensors;
};

std::mutex kept_mutex;
// Never destroyed: at exit it may still hold tensors, which must not be freed
// after the interpreter is gone.
std::vector<Kept>& kept = *new std::vector<Kept>;
std::atomic<std::size_t> kept_count{0};

}  // namespace

void wait_interruptibly(const Handle& handle) {
  if (!handle.valid()) return;
  if (handle.poll()) return handle.wait();  // rethrows a failure
  for (;;) {
    {
      py::gil_scoped_release released;
      try {
        handle.wait(kSlice);
        return;
      } catch (const TimeoutError&) {
        // Either the slice ran out or the operation itself failed with a timeout.
        if (handle.poll()) return handle.wait();
      }
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

void keep_until_done(Handle handle, std::vector<at::Tensor> tensors) {
  if (!handle.valid() || handle.poll()) return;
  std::lock_guard lock(kept_mutex);
  kept.push_back(Kept{std::move(handle), std::move(tensors)});
  kept_count.store(kept.size(), std::memory_order_relaxed);
}

void release_finished() {
  if (kept_count.load(std::memory_order_relaxed) == 0) return;
  std::vector<Kept> finished;
  {
    std::lock_guard lock(kept_mutex);
    for (auto it = kept.begin(); it != kept.end();) {
      if (it->handle.poll()) {
        finished.push_back(std::move(*it));
        it = kept.erase(it);
      } else {
        ++it;
      }
    }
    kept_count.store(kept.size(), std::memory_order_relaxed);
  }
  // The tensors go here, outside the lock: freeing one may run Python code.
}

}  // namespace kolo::python
