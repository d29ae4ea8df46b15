// Every process of a job on this host, wherever it went: each rank and whatever it
// starts carries the job's KOLO_JOB_ID (and its KOLO_RANK) in its environment,
// also when it was reparented to PID 1 or left the rank's session (setsid), where
// no process group or parent link leads to it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace kolorun {

// What marks a process as the job's: entries ("NAME=value") that must all be in
// its environment as it was exec'd (/proc/<pid>/environ), and pids never touched.
struct JobProcessMatch {
  std::vector<std::string> entries;
  std::vector<pid_t> spared;
};

// The whole of a /proc file of process `pid` ("environ", "stat"); empty when the
// process is gone or cannot be read. Never throws: a process may exit between the
// open and the read, which then fails with ESRCH.
std::string read_proc_file(const std::string& pid, const char* name);

// The live processes that match. Only the processes this user may inspect are seen,
// which are the ones it may kill.
std::vector<pid_t> find_job_processes(const JobProcessMatch& match);

// SIGKILLs the matching processes until a look finds none or `limit` passes (a
// process forking as fast as it is killed, one stuck in the kernel). Returns
// whether none was left.
bool kill_job_processes(const JobProcessMatch& match, std::chrono::milliseconds limit);

// Blanks this process's own exec-time environment as /proc shows it, so that no
// sweep matches it: a watchdog forked from a kolorun that a rank of another job
// started carries that job's id, and must not be killed by that job's sweep
// before its own is done.
void hide_own_environment();

}  // namespace kolorun
