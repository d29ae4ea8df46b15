// The settings kolo reads only later (at the first large Buffer, the first log
// line) or only for some jobs (the transports this job does not use), read once
// more by init(), so that a bad value fails there, with the
// variable, the value and what is allowed, instead of in the middle of training.
#pragma once

namespace kolo::detail {

// Throws InvalidArgumentError for the first bad value.
void check_late_settings();

}  // namespace kolo::detail
