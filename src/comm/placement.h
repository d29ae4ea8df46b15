// The memory a collective's buffers lie in, when the caller knows it: views of
// shareable kolo::Buffers carry it (Tensor::memory, memory/shareable_memory.h),
// the engine passes it along with the pointers. The shared-memory communicator
// works in place of buffers that are shareable on every rank
// (shm/shm_in_place.h); every other transport ignores it. Null: plain memory,
// which is copied whatever memory the pointer is in.
#pragma once

namespace kolo {
struct ShareableMemory;
}  // namespace kolo

namespace kolo::comm {

struct Placement {
  const ShareableMemory* send = nullptr;  // holds the send buffer
  const ShareableMemory* recv = nullptr;  // holds the receive buffer
};

}  // namespace kolo::comm
