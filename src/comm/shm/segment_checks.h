// Whether a shared-memory segment found under the job's name is the job's own.
// Any local user can create a file of any name in /dev/shm, and a rank that
// mapped one would hand its data to that user and take theirs for its peers'.
// So a rank maps only a segment that belongs to its own user, that no other
// user may open (no group or other bits in its mode), and whose header carries
// the job's nonce, which only a holder of the job's secret can compute.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <string>

#include "common/sha256.h"
#include "comm/shm/shm_layout.h"
#include "kolo/error.h"

namespace kolo::comm::shm {

using Nonce = crypto::Sha256Digest;
static_assert(sizeof(Nonce) == kNonceBytes);

// HMAC-SHA256(secret, "kolo shm nonce" '\n' name), which rank 0 writes into the
// header. Without a secret it follows from the name alone, and only the owner
// and mode checks keep other users out.
Nonce segment_nonce(const std::string& secret, const std::string& name);

// Empty when `st` is a plain file of this process's user that no other user may
// open; else what is wrong with it, e.g. "it belongs to uid 65534, not to uid
// 1000 that this job runs as; its mode 0666 lets other users open it".
std::string ownership_problem(const struct stat& st);

// Empty when the segment mapped at `base` (`bytes` long) carries `nonce`.
std::string nonce_problem(const std::byte* base, std::size_t bytes, const Nonce& nonce);

// The error of a rank that will not map the segment `name`: names the file and why.
Error refusal(const std::string& name, const std::string& why);

// Rank 0's error when the job's segment `name` exists already: a stale segment
// of this job when it is this user's, private and carries `nonce`; else a
// refusal that says what is wrong with it.
Error existing_segment_error(const std::string& name, const Nonce& nonce);

}  // namespace kolo::comm::shm
