// Whether a thread that polls while it waits for a peer yields its CPU between
// polls, where its ranks have a CPU each (where they outnumber their CPUs the
// communicators always yield: the peer may be queued for this very CPU).
//
// A collective that the engine's thread runs in the background while no caller
// waits for any operation overlaps the application's own computation (the
// backward pass), which wants the same CPUs: a yield lets it run, and a
// ResNet-50 training step measured about 4 % faster so. Once a caller waits, or
// where the caller's thread runs the collective itself, the collective is what
// the application waits for: a yield would hand the CPU to whatever else runs
// there, another process for the rest of its time slice (milliseconds), while
// the peer's bytes arrive within microseconds.
#pragma once

namespace kolo {

// Marks the calling thread, for its lifetime, as one that runs collectives in
// the background (an engine's).
void mark_background_thread();

// Held by a caller while it waits for an operation (Handle::wait).
class CallerWaits {
 public:
  CallerWaits();
  ~CallerWaits();
  CallerWaits(const CallerWaits&) = delete;
  CallerWaits& operator=(const CallerWaits&) = delete;
};

// True on a background thread while no caller of this process waits.
bool yield_to_computation();

}  // namespace kolo
