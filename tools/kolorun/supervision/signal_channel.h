// Delivers the signals kolorun acts on (child exits, and SIGINT/SIGTERM/SIGHUP to
// forward) through a file descriptor that the supervisor's poll loop reads, so no
// work happens in an asynchronous signal handler.
#pragma once

#include <vector>

#include "unique_fd.h"

namespace kolorun {

class SignalChannel {
 public:
  // Blocks the signals in the calling thread and opens the descriptor. Create it
  // on the main thread before starting any other thread (the store's), so that
  // every thread inherits the mask and no thread takes a signal's default action.
  SignalChannel();

  int fd() const { return fd_.get(); }
  // The signals that arrived since the last call (each at most once: the kernel
  // merges repeats of a pending signal).
  std::vector<int> drain();

  // For a forked child before exec: async-signal-safe. Unblocks every signal and
  // restores the default action of every one (also those kolorun inherited
  // ignored), so the rank starts the way an interactive shell would start it.
  static void reset_for_child();

 private:
  UniqueFd fd_;
};

}  // namespace kolorun
