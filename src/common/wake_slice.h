// A short scheduler time slice for a thread that has to wait for a peer.
//
// Beside busy processes (data-loading workers, another job) a rank that waits
// for its peer runs only once the process on its CPU has used up its time slice
// (milliseconds), and a collective pays that at every hand-off: woken after a
// sleep, and preempted while it copies. Linux's EEVDF scheduler (6.12 and later)
// lets a thread ask for a shorter slice (sched_attr.sched_runtime): its deadline
// then comes before theirs, and it runs as soon as it is fair to. Its share of
// the CPU stays the same; only the waits get shorter.
//
// A thread asks when it first has to sleep for a peer, so that a collective
// whose peers answer at once costs nothing more, and holds the short slice until
// the work it waited for is done: inside a span (an engine step, a caller driving
// its operation) until the outermost span ends, outside one until the sleep
// ends. Then its own slice comes back, so that it computes as before. Where the
// kernel refuses or ignores the request nothing changes.
#pragma once

#include <chrono>
#include <cstdint>

namespace kolo {

// Around a communicator's sleep for a peer. A zero slice does nothing
// (KOLO_WAKE_SLICE_US=0).
class ShortSliceWhileAsleep {
 public:
  explicit ShortSliceWhileAsleep(std::chrono::microseconds slice);
  ~ShortSliceWhileAsleep();
  ShortSliceWhileAsleep(const ShortSliceWhileAsleep&) = delete;
  ShortSliceWhileAsleep& operator=(const ShortSliceWhileAsleep&) = delete;

 private:
  bool took_ = false;
};

// Around one collective's work on this thread (an engine step): a short slice
// taken inside holds until the outermost span ends.
class ShortSliceSpan {
 public:
  ShortSliceSpan();
  ~ShortSliceSpan();
  ShortSliceSpan(const ShortSliceSpan&) = delete;
  ShortSliceSpan& operator=(const ShortSliceSpan&) = delete;
};

// The slice a caller's wait for an operation asks for (ShortSliceWhileAsleep
// in the engine's operation state), set by the engine from its settings.
void set_caller_wake_slice(std::chrono::microseconds slice);
std::chrono::microseconds caller_wake_slice();

// KOLO_WAKE_SLICE_US (0, or 100 to 100000; default 100), checked: the short
// slice in microseconds, 0 for none.
std::chrono::microseconds wake_slice_from_env();

// A thread's slice as the kernel reports it, in nanoseconds (for the tests):
// `tid` 0 is the calling thread; 0 where it cannot be read or the thread is not
// scheduled fairly.
std::uint64_t slice_ns_of_thread(int tid = 0);

}  // namespace kolo
