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

// The fields of a /proc/<pid>/stat text after the parenthesized command name:
// [0] is the state (the 3rd field), [1] the parent, [6] the flags, [24] where
// the code ends, [47] and [48] where the environment area starts and ends.
// Empty for an empty text.
std::vector<std::string> proc_stat_fields(const std::string& stat);

// One pass over /proc: the live processes that match, and whether every process
// could be told apart (not settled: one was in the middle of an exec, when /proc
// shows no environment, and may be the job's). Only the processes this user may
// inspect are seen, which are the ones it may kill.
struct JobProcessLook {
  std::vector<pid_t> found;
  bool settled = true;
};
JobProcessLook look_for_job_processes(const JobProcessMatch& match);

// The live processes that match, looking again (for up to `patience`) while a
// pass was not settled.
std::vector<pid_t> find_job_processes(const JobProcessMatch& match,
                                      std::chrono::milliseconds patience = std::chrono::milliseconds(1000));

// SIGKILLs the matching processes until a settled look finds none or `limit`
// passes (a process forking as fast as it is killed, one stuck in the kernel).
// Returns whether none was left.
bool kill_job_processes(const JobProcessMatch& match, std::chrono::milliseconds limit);

// Blanks this process's own exec-time environment as /proc shows it, so that no
// sweep matches it: a watchdog forked from a kolorun that a rank of another job
// started carries that job's id, and must not be killed by that job's sweep
// before its own is done.
void hide_own_environment();

}  // namespace kolorun
