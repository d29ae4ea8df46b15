// Names for operations the user did not name.
#pragma once

#include <source_location>
#include <string>

namespace kolo {

// "<op>@<file>:<line>:<column>#<n>", where n counts how often this call site has
// submitted: the same on every rank that runs the same program, unlike a global
// counter, which drifts as soon as ranks take different paths elsewhere.
std::string auto_name(const char* op, const std::source_location& where);

}  // namespace kolo
