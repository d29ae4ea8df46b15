// Which of kolorun's environment variables travel to ranks on other hosts (over
// the control channel, or as `mpirun -x NAME`). Everything does, except what
// describes this host or this login session and would be wrong over there.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kolorun {

// "NAME=value" -> true when NAME may be sent to another host.
bool is_exportable(std::string_view entry);

// The exportable entries of `env` (normally environ).
std::vector<std::string> exportable_environment(const char* const* env);

}  // namespace kolorun
