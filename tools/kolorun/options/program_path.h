// Finds PROGRAM the way execvp would, before any rank starts, so that a typo is
// one clear error instead of N failed ranks.
#pragma once

#include <string>

namespace kolorun {

// A name containing '/' is used as it is; any other is searched in PATH (an empty
// PATH entry means the current directory; no PATH means /bin:/usr/bin). Returns
// the path to execute. Throws LaunchError with exit status 127 when nothing is
// found and 126 when what is found is a directory or not executable.
std::string resolve_program(const std::string& name);

}  // namespace kolorun
