// Whether a peer process on this host still exists.
#pragma once

#include <sys/types.h>

namespace kolo::comm::shm {

// True when `pid` no longer runs: it does not exist, or it is a zombie (exited
// but not yet reaped) or dead according to /proc/<pid>/stat. A process owned by
// another user counts as alive.
bool process_is_dead(pid_t pid);

}  // namespace kolo::comm::shm
