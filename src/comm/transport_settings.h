// Every transport's KOLO_* tunables, read by init() whichever transport the job
// uses: a bad value fails at once, naming the variable, instead of in the first job
// (another backend, another layout) that builds that transport.
#pragma once

namespace kolo::comm {

// Throws InvalidArgumentError for the first bad value.
void check_transport_settings();

}  // namespace kolo::comm
