#include "kolo_types.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

namespace kolo::bench {

DataType to_kolo(ElemType type) {
  switch (type) {
    case ElemType::Float32: return DataType::Float32;
    case ElemType::Float64: return DataType::Float64;
    case ElemType::Float16: return DataType::Float16;
    case ElemType::BFloat16: return DataType::BFloat16;
    case ElemType::Int32: return DataType::Int32;
    case ElemType::Int64: return DataType::Int64;
    case ElemType::Int8: return DataType::Int8;
    case ElemType::UInt8: return DataType::UInt8;
  }
  return DataType::Float32;
}

ReduceOp to_kolo(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::Sum: return ReduceOp::Sum;
    case ReduceKind::Average: return ReduceOp::Average;
    case ReduceKind::Min: return ReduceOp::Min;
    case ReduceKind::Max: return ReduceOp::Max;
  }
  return ReduceOp::Sum;
}

BufferKind parse_buffer_kind(const std::string& text) {
  if (text == "kolo") return BufferKind::Kolo;
  if (text == "plain") return BufferKind::Plain;
  throw UsageError("--buffers needs kolo or plain, got '" + text + "'");
}

const char* to_string(BufferKind kind) { return kind == BufferKind::Kolo ? "kolo" : "plain"; }

BufferMemory BenchBuffers::allocate(std::size_t bytes) {
  if (kind_ == BufferKind::Plain) return aligned_memory(bytes);
  auto buffer = std::make_shared<Buffer>(
      Buffer::shareable(DataType::UInt8, Shape{static_cast<std::int64_t>(std::max<std::size_t>(64, bytes))}));
  std::memset(buffer->data(), 0, buffer->nbytes());  // fault the pages in before anything is timed
  made_.push_back(buffer);
  return BufferMemory(buffer, buffer->as<std::byte>());
}

const ShareableMemory* BenchBuffers::memory_of(const void* data) const {
  for (const auto& made : made_) {
    if (const auto buffer = made.lock(); buffer && buffer->data() == data) return buffer->memory();
  }
  return nullptr;
}

}  // namespace kolo::bench
