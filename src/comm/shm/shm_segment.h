// Creating, finding and mapping a job's POSIX shared-memory segment, with no
// other service: rank 0 creates it (segment_name), the others wait for it to
// appear and be marked ready, every rank registers its pid, and once all ranks
// have mapped it the name is unlinked so that nothing is left in /dev/shm even if
// ranks crash later. No rank maps a segment the job did not create
// (segment_checks.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/shm/shm_layout.h"

namespace kolo::comm::shm {

// An mmap'ed region, unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* base, std::size_t bytes) : base_(base), bytes_(bytes) {}
  ~Mapping();
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  std::byte* base() const { return static_cast<std::byte*>(base_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
};

// KOLO_SHM_SINGLE_COPY (shm_single_copy.h), as rank 0 read it for the job.
enum class SingleCopyMode : std::uint32_t { Auto, Always, Never };

struct SegmentConfig {
  std::size_t slot_bytes = 0;
  std::size_t small_bytes = 0;
  // Allreduce and allgatherv of at least this many bytes whose buffers every
  // rank places in shareable memory read and write the ranks' buffers in place
  // (shm_in_place.h).
  std::size_t mapped_bytes = 0;
  // Step number the job starts at; every counter starts there. Only tests set it
  // (close to 2^32, to run through the counters' wraparound).
  std::uint32_t first_step = 0;
  SingleCopyMode single_copy = SingleCopyMode::Auto;
};

struct JoinedSegment {
  Mapping mapping;
  Layout layout;
  std::size_t small_bytes = 0;
  std::size_t mapped_bytes = 0;
  std::uint32_t first_step = 0;
  SingleCopyMode single_copy = SingleCopyMode::Auto;
};

// The segment's name: with the job's secret "/kolo-<job tag>-<keyed hash of
// job_id>-shm" (common/job_names.h), which other users cannot predict and which
// does not show the job id; without one "/kolo-<job_id>-shm". Throws
// InvalidArgumentError for a job id that is empty, too long or has characters
// other than [A-Za-z0-9._-].
std::string segment_name(const std::string& job_id, const std::string& secret = {});

// Joins the job: creates (rank 0, with `config`) or attaches to (other ranks, who
// take the configuration from the header) the segment, publishes this rank's pid,
// waits until all `size` ranks have attached and unlinks the name.
// `secret` (the job's, or empty) makes the nonce that rank 0 writes into the
// header and the others check.
// Errors: kolo::Error for a segment of that name that the job did not create
// (any rank: another user's, open to other users, or without the job's nonce)
// or a stale one of this job (rank 0), TimeoutError naming the ranks that did
// not show up within `timeout`, PeerFailureError when a rank that attached dies
// before the others arrive, MismatchError when the segment was made for another
// job size.
JoinedSegment join_segment(const std::string& name, int rank, int size, const SegmentConfig& config,
                           std::chrono::milliseconds timeout, const std::string& secret = {});

}  // namespace kolo::comm::shm
