// Errors that end kolorun before or while it starts a job. Each carries the exit
// status kolorun returns for it, so that scripts can tell a typo (2) from a
// missing program (127) or a program that cannot be executed (126).
#pragma once

#include <string>

#include "kolo/error.h"

namespace kolorun {

inline constexpr int kExitUsage = 2;
inline constexpr int kExitTimeout = 124;  // as timeout(1)
inline constexpr int kExitOutputLost = 74;  // EX_IOERR: the job succeeded, its output was not all written
inline constexpr int kExitNotExecutable = 126;  // as a POSIX shell
inline constexpr int kExitNotFound = 127;       // as a POSIX shell
inline constexpr int kExitHostUnreachable = 255;  // as ssh, for a host that was not reached

class LaunchError : public kolo::Error {
 public:
  LaunchError(const std::string& what, int exit_code) : kolo::Error(what), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Malformed command line: exit status 2, and the message points at --help.
class UsageError : public LaunchError {
 public:
  explicit UsageError(const std::string& what);
};

// "what: strerror(errno)" for a failed system call.
std::string system_error_text(const std::string& what, int error_number);

}  // namespace kolorun
