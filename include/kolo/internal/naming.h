// Names for operations the user did not name.
// Internal to kolo and its bindings (kolo.torch), not a stable API.
#pragma once

#include <source_location>
#include <string>
#include <string_view>

namespace kolo {

// "<op>@<file>:<line>:<column>#<n>", where n counts how often this call site has
// submitted: the same on every rank that runs the same program, unlike a global
// counter, which drifts as soon as ranks take different paths elsewhere. Only the
// file's base name is used, so ranks whose programs lie in other folders agree.
std::string auto_name(const char* op, const std::source_location& where);
// The same for a call site that is not C++ (a Python caller's file and line).
std::string auto_name(const char* op, std::string_view file, unsigned line, unsigned column);

// Every session counts from 0 (init() calls it): a worker that joins an elastic
// job's running ranks names its operations as they do from the same point on.
void reset_auto_names();

}  // namespace kolo
