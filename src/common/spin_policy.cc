#include "common/spin_policy.h"

#include <atomic>

namespace kolo {
namespace {

thread_local bool background = false;
std::atomic<int> waiting_callers{0};

}  // namespace

void mark_background_thread() { background = true; }

CallerWaits::CallerWaits() { waiting_callers.fetch_add(1, std::memory_order_relaxed); }

CallerWaits::~CallerWaits() { waiting_callers.fetch_sub(1, std::memory_order_relaxed); }

bool yield_to_computation() { return background && waiting_callers.load(std::memory_order_relaxed) == 0; }

}  // namespace kolo
