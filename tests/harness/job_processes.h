// The processes of a kolo job on this machine, whatever became of their parents
// and sessions: each rank and what it starts carry the job's KOLO_JOB_ID in the
// environment they were exec'd with. Found as kolorun's watchdog finds them, so a
// process caught in the middle of an exec is looked at again, not missed.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "supervision/job_processes.h"

namespace kolo::testing {

inline std::vector<pid_t> processes_of_job(const std::string& job_id) {
  return kolorun::find_job_processes({{"KOLO_JOB_ID=" + job_id}, {}});
}

}  // namespace kolo::testing
