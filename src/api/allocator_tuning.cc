#include "api/allocator_tuning.h"

#include <malloc.h>

#include <mutex>

#include "common/settings.h"

namespace kolo::detail {
namespace {

constexpr int kMmapThreshold = 32 << 20;  // glibc's largest allowed value on 64-bit
constexpr int kTrimThreshold = 1 << 30;

KOLO_SETTING(kTuneMalloc, {.name = "KOLO_TUNE_MALLOC", .kind = settings::Kind::Flag, .fallback = "1",
                           .doc = "init() keeps large blocks on glibc's heap and does not trim it; kolorun asks "
                                  "glibc for huge pages"});

}  // namespace

bool tune_allocator_for_training() {
  if (!kTuneMalloc.flag()) return false;
  static bool applied = false;
  static std::once_flag once;
  std::call_once(once, [] {
    applied = ::mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 && ::mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
  });
  return applied;
}

}  // namespace kolo::detail
