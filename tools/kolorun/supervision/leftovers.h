// What a job leaves behind when its ranks are gone: processes the ranks started
// and did not wait for, even those that left the rank's process group (setsid).
//
// kolorun is the job's subreaper (PR_SET_CHILD_SUBREAPER): a process of the job
// whose parent dies becomes kolorun's child instead of init's. So once every rank
// has been reaped, kolorun's children are exactly the job's leftovers, and when it
// has none, nothing of the job runs on this host.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <vector>

namespace kolorun {

// Makes kolorun the subreaper of everything it starts from now on.
void become_subreaper();

// SIGKILLs kolorun's children and their process groups and reaps them, until it
// has none or `limit` passes. Returns the pids still there at the limit (a process
// stuck in the kernel, say). Call only once no rank runs: every child is a leftover.
std::vector<pid_t> remove_leftovers(std::chrono::milliseconds limit);

}  // namespace kolorun
