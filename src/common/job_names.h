// The names a job gives its files where every local user can list them
// (/dev/shm, /tmp). With the job's secret they carry a tag keyed by it, so that
// another user can neither predict a name (and create the file first) nor read
// the job id from it. A job without a secret (mpirun, srun without a store) has
// nothing to key them with: its names follow from the job id.
#pragma once

#include <string>
#include <string_view>

namespace kolo {

// 16 hex digits of HMAC-SHA256(secret, "kolo job tag"): the same for every
// process of the job, and for kolorun, which removes what the job leaves.
std::string job_tag(const std::string& secret);

// 16 hex digits of HMAC-SHA256(secret, `label` '\n' `text`).
std::string keyed_hex(const std::string& secret, std::string_view label, std::string_view text);

// Where the job's flight records go unless KOLO_FLIGHT_RECORDER_DIR says:
// /tmp/kolo-flight-<job tag>, or without a secret /tmp/kolo-flight-<job_id>
// (<pid> for a job of one without an id).
std::string job_flight_dir(const std::string& secret, const std::string& job_id);

}  // namespace kolo
