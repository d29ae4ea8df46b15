// kolorun's end of a remote rank's control channel (see remote_protocol.h): the
// spec first, then heartbeats and signals. Writes never block: what the pipe
// cannot take now waits in an outbox and goes out on the next call. Thread-safe:
// the supervisor signals while the heartbeat thread beats.
#pragma once

#include <mutex>
#include <string>

#include "unique_fd.h"

namespace kolorun {

class RemoteControl {
 public:
  // `pipe`: the write end of the remote process's stdin.
  RemoteControl(UniqueFd pipe, std::string spec_bytes);

  // A heartbeat byte, unless older bytes are still waiting (they prove life too).
  void heartbeat();
  // Asks the remote side to deliver `sig` to the rank's process group. SIGKILL
  // closes the channel instead: the remote side kills the group when its stdin
  // ends, which also works when the spec has not even been read yet.
  void send_signal(int sig);
  // Ends the channel (the remote side kills whatever is left).
  void close();
  bool closed() const;

 private:
  void flush_locked();
  void close_locked();

  mutable std::mutex mutex_;
  UniqueFd pipe_;
  std::string outbox_;
};

}  // namespace kolorun
