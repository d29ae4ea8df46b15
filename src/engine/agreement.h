// The agreement step of the negotiation cycle (engine.cc, step b), optionally
// carrying one small operation's data with it.
//
// Every cycle the ranks AND their agreement vectors (element-wise min). A cached
// allreduce that is ready then needs a second collective for its data, so a
// blocking 8-byte allreduce cost two synchronizations. With eager bytes > 0 the
// step is instead an allgather of self-sized blocks
// (Communicator::allgather_self_sized):
//
//   [block bytes | offered bit + 1 | eager bytes | vector bytes | agreement vector | payload]
//
// Each rank offers the input of one cached operation it has ready (the lowest such
// bit whose data fits). When every rank offered the same bit and the agreement
// says that bit is ready and valid everywhere, every rank finishes the operation
// from the gathered payloads (an allreduce reduces them in rank order, as the
// shared-memory one-step allreduce does, so the result is the same bits), and the
// operation is done in one step. Otherwise the payloads are ignored and the
// operation runs as before. Every rank sees the same gathered blocks, so all of
// them take the same decision.
//
// A block carries only the payload its rank offered, so on a transport that moves
// only the bytes used (shared memory) eager bytes cost nothing until used; on the
// others every block is padded to its largest size. An allgather's cost grows
// with the job where an allreduce's does not; the engine therefore enables eager
// only for small jobs (EngineConfig::eager_bytes).
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
  // Offers an operation's input (at most eager_bytes) under its cache bit. The
  // bytes are copied: the caller may scale the copy in place (offered_payload).
  void offer(std::uint32_t bit, const void* data, std::size_t bytes);
  std::byte* offered_payload();

  // Runs the collective. Afterwards agreed() holds the min over ranks. Throws
  // InvalidArgumentError when the ranks' blocks disagree (KOLO_EAGER_BYTES or
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
    std::uint32_t block_bytes;   // first: the self-sized allgather reads it
    std::uint32_t bit_plus_one;  // 0: nothing offered
    std::uint32_t eager_bytes;   // these two must agree across ranks
    std::uint32_t vector_bytes;
  };
  // Where the payload starts: after the header and the vector, 8-byte aligned.
  std::size_t payload_offset() const;

  comm::Communicator& comm_;
  const std::size_t eager_bytes_;
  std::size_t length_ = 0;
  std::vector<std::uint8_t> agreed_;
  // Eager mode: this rank's block, every rank's blocks (each at a multiple of
  // the largest block), and views into them.
  std::vector<std::byte> mine_, all_;
  Header header_{};  // copied to the front of mine_ by exchange()
  std::vector<const void*> payloads_, vectors_;
  std::optional<std::uint32_t> common_offer_;
};

}  // namespace kolo::engine
