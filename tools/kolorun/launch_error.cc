#include "launch_error.h"

#include <cstring>

namespace kolorun {

UsageError::UsageError(const std::string& what) : LaunchError(what + " (see kolorun --help)", kExitUsage) {}

std::string system_error_text(const std::string& what, int error_number) {
  return what + ": " + std::strerror(error_number);
}

}  // namespace kolorun
