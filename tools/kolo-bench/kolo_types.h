// The benchmark's element types and reductions as kolo's.
#pragma once

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
BufferMemory allocate_as(BufferKind kind, std::size_t bytes);

}  // namespace kolo::bench
