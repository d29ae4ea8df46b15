#include "common/wake_slice.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "common/settings.h"
#include "kolo/error.h"

namespace kolo {
namespace {

// struct sched_attr of sched_setattr(2); glibc 2.36 declares no wrapper.
struct SchedAttr {
  std::uint32_t size;
  std::uint32_t sched_policy;
  std::uint64_t sched_flags;
  std::int32_t sched_nice;
  std::uint32_t sched_priority;
  std::uint64_t sched_runtime;
  std::uint64_t sched_deadline;
  std::uint64_t sched_period;
  std::uint32_t sched_util_min;
  std::uint32_t sched_util_max;
};

constexpr std::uint64_t kResetOnFork = 0x01;  // SCHED_FLAG_RESET_ON_FORK

bool get_attr(SchedAttr& attr, int tid = 0) {
  std::memset(&attr, 0, sizeof attr);
  return ::syscall(SYS_sched_getattr, tid, &attr, sizeof attr, 0) == 0;
}

bool set_runtime(const SchedAttr& now, std::uint64_t runtime) {
  SchedAttr attr{};
  attr.size = sizeof attr;
  attr.sched_policy = now.sched_policy;
  attr.sched_flags = now.sched_flags & kResetOnFork;
  attr.sched_nice = now.sched_nice;
  attr.sched_runtime = runtime;
  return ::syscall(SYS_sched_setattr, 0, &attr, 0) == 0;
}

bool fairly_scheduled(const SchedAttr& attr) {
  return attr.sched_policy == SCHED_OTHER || attr.sched_policy == SCHED_BATCH;
}

// What the kernel does with a chosen slice, probed once on the first thread
// that asks (and restored there): whether it keeps one at all, and its default,
// which it reports as a thread's slice when none was chosen, so that the default
// is restored as "no choice" rather than as a chosen slice of the same length.
struct KernelSlices {
  bool kept = false;
  std::uint64_t default_ns = 0;
};

KernelSlices probe(const SchedAttr& now, std::uint64_t wanted) {
  KernelSlices k;
  SchedAttr seen;
  k.kept = set_runtime(now, wanted) && get_attr(seen) && seen.sched_runtime == wanted;
  if (set_runtime(now, 0) && get_attr(seen)) k.default_ns = seen.sched_runtime;
  if (now.sched_runtime != k.default_ns) set_runtime(now, now.sched_runtime);
  return k;
}

// This thread's short slice, if it holds one, and what it had before.
struct ThreadSlice {
  int spans = 0;
  bool held = false;
  SchedAttr own{};              // policy, flags and nice to restore
  std::uint64_t own_runtime = 0;  // 0: the kernel's default slice
};
thread_local ThreadSlice this_thread;

// The slice a caller's wait for an operation asks for, set by the engine.
std::atomic<std::int64_t> caller_slice_us{0};

bool take(std::chrono::microseconds slice) {
  ThreadSlice& t = this_thread;
  if (t.held || slice.count() <= 0) return false;
  SchedAttr now;
  if (!get_attr(now) || !fairly_scheduled(now)) return false;
  const auto wanted = static_cast<std::uint64_t>(std::chrono::nanoseconds(slice).count());
  static const KernelSlices kernel = probe(now, wanted);
  if (!kernel.kept || now.sched_runtime == wanted || !set_runtime(now, wanted)) return false;
  t.held = true;
  t.own = now;
  t.own_runtime = now.sched_runtime == kernel.default_ns ? 0 : now.sched_runtime;
  return true;
}

void give_back() {
  ThreadSlice& t = this_thread;
  if (!t.held) return;
  t.held = false;
  set_runtime(t.own, t.own_runtime);
}

}  // namespace

ShortSliceWhileAsleep::ShortSliceWhileAsleep(std::chrono::microseconds slice) : took_(take(slice)) {}

ShortSliceWhileAsleep::~ShortSliceWhileAsleep() {
  if (took_ && this_thread.spans == 0) give_back();
}

void set_caller_wake_slice(std::chrono::microseconds slice) {
  caller_slice_us.store(slice.count(), std::memory_order_relaxed);
}

std::chrono::microseconds caller_wake_slice() {
  return std::chrono::microseconds(caller_slice_us.load(std::memory_order_relaxed));
}

KOLO_SETTING(kWakeSlice, {.name = "KOLO_WAKE_SLICE_US", .kind = settings::Kind::Integer, .fallback = "100", .min = 0,
                          .max = 100000, .check = [] { wake_slice_from_env(); },
                          .doc = "the scheduler slice a thread asks for once it sleeps for a peer"});

std::chrono::microseconds wake_slice_from_env() {
  const auto us = kWakeSlice.integer();
  if (us > 0 && us < 100)
    throw InvalidArgumentError(std::string(kWakeSlice.name) + "='" + std::to_string(us) +
                               "' is below the kernel's shortest slice; allowed: 0 (the kernel's own slice) or "
                               "100 to 100000");
  return std::chrono::microseconds(us);
}

ShortSliceSpan::ShortSliceSpan() { ++this_thread.spans; }

ShortSliceSpan::~ShortSliceSpan() {
  if (--this_thread.spans == 0) give_back();
}

std::uint64_t slice_ns_of_thread(int tid) {
  SchedAttr attr;
  return get_attr(attr, tid) && fairly_scheduled(attr) ? attr.sched_runtime : 0;
}

}  // namespace kolo
