// Accepting on a listening socket that anyone who reaches the port may connect
// to (the store's, each rank's): the limit both keep on connections that have
// not proved the job's secret yet, and what both do when accept runs out of
// descriptors.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "common/logging.h"
#include "net/socket.h"

namespace kolo::net {

// Connections still authenticating, per listening socket: a new one beyond this
// closes the oldest, so that idle strangers cannot keep the job's own processes out.
inline constexpr std::size_t kMaxUnauthenticated = 128;

enum class AcceptResult { Accepted, NoneWaiting, OutOfDescriptors };

// One non-blocking, close-on-exec accept, retried on EINTR and ECONNABORTED.
// OutOfDescriptors: EMFILE, ENFILE, ENOBUFS or ENOMEM, left in errno.
AcceptResult accept_connection(int listener, Fd& accepted);

// Out of descriptors, the connection waiting stays readable, so polling the
// listener again at once would spin: it rests for a moment instead, with a
// warning at most once a second.
class AcceptPause {
 public:
  static constexpr std::chrono::milliseconds kRest{100};

  // `who` opens the warning ("store", "tcp: rank 2").
  explicit AcceptPause(std::string who) : who_(std::move(who)) {}
  // After accept_connection returned OutOfDescriptors.
  void start();
  // True when a rest was on and is over at `now` (it ends then).
  bool end_if_over(Deadline now);
  bool resting() const { return until_.has_value(); }
  // When the rest ends, while one is on.
  std::optional<Deadline> until() const { return until_; }

 private:
  std::string who_;
  std::optional<Deadline> until_;
  log::Throttle warnings_{std::chrono::seconds(1)};
};

}  // namespace kolo::net
