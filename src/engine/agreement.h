// The agreement step of the negotiation cycle (engine.cc, step b), optionally
// carrying one small allreduce with it.
//
// Every cycle the ranks AND their agreement vectors (element-wise min). A cached
// allreduce that is ready then needs a second collective for its data, so a
// blocking 8-byte allreduce cost two synchronizations. With eager bytes > 0 the
// step is instead an allgather of fixed-size blocks:
//
//   [offered bit + 1 | block bytes | payload (eager bytes) | agreement vector]
//
// Each rank offers the input of one cached allreduce it has ready (the lowest such
// bit whose data fits). When every rank offered the same bit and the agreement
// says that bit is ready and valid everywhere, every rank reduces the gathered
// payloads itself, in rank order (as the shared-memory one-step allreduce does, so
// the result is the same bits), and the operation is done in one step. Otherwise
// the payloads are ignored and the operation runs as before. Every rank sees the
// same gathered blocks, so all of them take the same decision.
//
// The gathered step moves eager bytes per rank more than the AND, and an
// allgather's cost grows with the job where an allreduce's does not; the engine
// therefore enables it only for small jobs (EngineConfig::eager_bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "comm/communicator.h"

namespace kolo::engine {

class Agreement {
 public:
  // eager_bytes 0: a plain AND-allreduce, no payload.
  Agreement(comm::Communicator& comm, std::size_t eager_bytes);

  std::size_t eager_bytes() const { return eager_bytes_; }

  // Starts a cycle's step: a zeroed agreement vector of `length` bytes to fill.
  std::uint8_t* begin(std::size_t length);
  // Offers an allreduce's input (at most eager_bytes) under its cache bit. The
  // bytes are copied: the caller may scale the copy in place (offered_payload).
  void offer(std::uint32_t bit, const void* data, std::size_t bytes);
  std::byte* offered_payload();

  // Runs the collective. Afterwards agreed() holds the min over ranks. Throws
  // InvalidArgumentError when the ranks' block sizes differ (KOLO_EAGER_BYTES or
  // KOLO_CACHE_CAPACITY set differently across ranks), and what the communicator
  // throws.
  void exchange();
  const std::uint8_t* agreed() const { return agreed_.data(); }

  // After exchange(): the bit every rank offered, if all offered the same one.
  std::optional<std::uint32_t> common_offer() const { return common_offer_; }
  // After exchange(): each rank's payload, in rank order.
  const std::vector<const void*>& payloads() const { return payloads_; }

 private:
  struct Header {
    std::uint32_t bit_plus_one;  // 0: nothing offered
    std::uint32_t block_bytes;
  };
  std::size_t block_bytes() const;

  comm::Communicator& comm_;
  const std::size_t eager_bytes_;
  std::size_t length_ = 0;
  std::vector<std::uint8_t> agreed_;
  // Eager mode: this rank's block, every rank's blocks, and views into them.
  std::vector<std::byte> mine_, all_;
  std::vector<std::size_t> block_sizes_;
  std::vector<const void*> payloads_, vectors_;
  std::optional<std::uint32_t> common_offer_;
};

}  // namespace kolo::engine
