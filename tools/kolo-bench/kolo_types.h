// The benchmark's element types and reductions as kolo's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/bench_types.h"
#include "core/driver.h"
#include "kolo/types.h"

namespace kolo::bench {

DataType to_kolo(ElemType type);
ReduceOp to_kolo(ReduceKind kind);

// Where kolo's backends put the sweep's buffers: plain aligned memory (memory
// kolo did not allocate, such as a tensor library's), or shareable
// kolo::Buffers (Buffer::shareable: memory the shm communicator works in place of).
enum class BufferKind { Kolo, Plain };
BufferKind parse_buffer_kind(const std::string& text);
const char* to_string(BufferKind kind);

// A kolo backend's buffers, which remember the shareable memory of the Buffers
// they made, so that the backend's calls carry it as a Buffer's views do.
class BenchBuffers {
 public:
  explicit BenchBuffers(BufferKind kind) : kind_(kind) {}
  BufferKind kind() const { return kind_; }
  BufferMemory allocate(std::size_t bytes);
  // The shareable memory of the buffer at `data` that allocate() returned and
  // is still alive; null for any other address, and for plain memory.
  const ShareableMemory* memory_of(const void* data) const;

 private:
  BufferKind kind_;
  std::vector<std::weak_ptr<Buffer>> made_;
};

}  // namespace kolo::bench
