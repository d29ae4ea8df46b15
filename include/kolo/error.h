// The exceptions kolo throws at its public API.
//
// What is recoverable:
//  - InvalidArgumentError and MismatchError concern one operation only; the job
//    goes on and later operations work.
//  - TimeoutError from Handle::wait(timeout) leaves the operation running; wait again.
//  - PeerFailureError and ShutdownError mean the job's communicator is gone: every
//    pending and later operation fails the same way. Shut down and restart.
#pragma once

#include <stdexcept>
#include <string>

namespace kolo {

namespace detail {
// A NUL byte (in an operation's name, a line of a file) would end a message
// wherever it is read as a C string (what(), printf): it is shown as \x00.
inline std::string with_nul_shown(const std::string& text) {
  if (text.find('\0') == std::string::npos) return text;
  std::string shown;
  for (char c : text) {
    if (c == '\0') shown += "\\x00";
    else shown += c;
  }
  return shown;
}
}  // namespace detail

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(detail::with_nul_shown(what)) {}
  explicit Error(const char* what) : std::runtime_error(what) {}
};

// A bad argument detected on this rank, or by the coordinator for every rank.
class InvalidArgumentError : public Error {
 public:
  using Error::Error;
};

// Ranks submitted operations under one name that do not agree (shape, dtype, op...).
class MismatchError : public Error {
 public:
  using Error::Error;
};

// A wait ran out of time. Carries no information about which rank is at fault;
// PeerFailureError does.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// Another rank died, stalled past the peer timeout, or broke the protocol.
class PeerFailureError : public Error {
 public:
  PeerFailureError(int peer_rank, const std::string& what) : Error(what), peer_rank_(peer_rank) {}
  // The failed rank, or -1 when it is not known.
  int peer_rank() const { return peer_rank_; }

 private:
  int peer_rank_;
};

// kolo is not initialized, or was shut down (by this rank or another).
class ShutdownError : public Error {
 public:
  using Error::Error;
};

}  // namespace kolo
