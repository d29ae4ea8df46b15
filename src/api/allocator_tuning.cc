#include "api/allocator_tuning.h"

#include <malloc.h>

#include <mutex>

#include "common/env.h"

namespace kolo::detail {
namespace {

constexpr int kMmapThreshold = 32 << 20;  // glibc's largest allowed value on 64-bit
constexpr int kTrimThreshold = 1 << 30;

}  // namespace

bool tune_allocator_for_training() {
  if (!env::get_bool("KOLO_TUNE_MALLOC", true)) return false;
  static bool applied = false;
  static std::once_flag once;
  std::call_once(once, [] {
    applied = ::mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 && ::mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
  });
  return applied;
}

}  // namespace kolo::detail
