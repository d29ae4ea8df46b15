#include "kolo/types.h"

#include <sys/mman.h>

#include <cstring>
#include <new>

#include "common/mapping_cache.h"
#include "common/shareable_memory.h"
#include "common/tensor_bytes.h"
#include "kolo/error.h"

namespace kolo {

std::size_t element_size(DataType dtype) {
  switch (dtype) {
    case DataType::UInt8:
    case DataType::Int8:
    case DataType::Bool: return 1;
    case DataType::Int16:
    case DataType::Float16:
    case DataType::BFloat16: return 2;
    case DataType::Int32:
    case DataType::Float32: return 4;
    case DataType::Int64:
    case DataType::Float64: return 8;
  }
  throw InvalidArgumentError("invalid data type " + std::to_string(static_cast<int>(dtype)));
}

const char* to_string(DataType dtype) {
  switch (dtype) {
    case DataType::UInt8: return "uint8";
    case DataType::Int8: return "int8";
    case DataType::Int16: return "int16";
    case DataType::Int32: return "int32";
    case DataType::Int64: return "int64";
    case DataType::Float16: return "float16";
    case DataType::BFloat16: return "bfloat16";
    case DataType::Float32: return "float32";
    case DataType::Float64: return "float64";
    case DataType::Bool: return "bool";
  }
  return "invalid";
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Average: return "average";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Product: return "product";
  }
  return "invalid";
}

bool is_floating_point(DataType dtype) {
  return dtype == DataType::Float16 || dtype == DataType::BFloat16 || dtype == DataType::Float32 ||
         dtype == DataType::Float64;
}

bool is_valid(DataType dtype) { return static_cast<int>(dtype) < kNumDataTypes; }
bool is_valid(ReduceOp op) { return static_cast<int>(op) < kNumReduceOps; }

std::int64_t num_elements(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

detail::ShapeFault detail::shape_fault(DataType dtype, const Shape& shape, std::size_t& bytes) {
  // The dimensions other than zeros must fit together as well: a shape that
  // holds nothing may still describe rows (allgather's, alltoall's) that do not.
  std::int64_t n = static_cast<std::int64_t>(element_size(dtype));
  bool empty = false;
  for (auto d : shape) {
    if (d < 0) return ShapeFault::Negative;
    if (d == 0) empty = true;
    else if (__builtin_mul_overflow(n, d, &n)) return ShapeFault::Overflow;
  }
  bytes = empty ? 0 : static_cast<std::size_t>(n);
  return ShapeFault::None;
}

void detail::throw_shape_fault(ShapeFault fault, DataType dtype, const Shape& shape, const std::string& what) {
  if (fault == ShapeFault::Negative) throw InvalidArgumentError(what + " has a negative dimension " + to_string(shape));
  throw InvalidArgumentError(what + " of shape " + to_string(shape) + " and dtype " + to_string(dtype) +
                             " has more bytes than an int64 counts");
}

std::string to_string(const Shape& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

namespace {

// From this size on a buffer is a mapping of its own, aligned to and advised for
// transparent huge pages.
constexpr std::size_t kHugePage = std::size_t{2} << 20;

std::size_t mapping_bytes(std::size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

// Shareable (a memfd, which peers on this host can map: common/shareable_memory.h)
// when asked and not refused; private anonymous memory otherwise. Aligned to and
// advised for huge pages either way.
std::byte* map_aligned(std::size_t bytes, bool shareable) {
  const std::size_t length = mapping_bytes(bytes);
  void* p = shareable ? detail::map_shareable(length, kHugePage) : nullptr;
  if (p == nullptr) p = detail::map_at_alignment(length, kHugePage, -1);
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<std::byte*>(p);
}

}  // namespace

void detail::BufferRelease::operator()(std::byte* p) const noexcept {
  if (p == nullptr) return;
  // A mapping was allocated through the cache, which therefore exists.
  if (mapped) detail::MappingCache::process().give(p, mapping_bytes(bytes));
  else delete[] p;
}

Buffer::Buffer(DataType dtype, Shape shape, bool zeroed, bool shareable) : dtype_(dtype), shape_(std::move(shape)) {
  const std::size_t bytes = detail::checked_nbytes(dtype, shape_, [] { return std::string("kolo::Buffer"); });
  std::byte* p = nullptr;
  // Large Buffers are mappings (shareable by policy); small ones too when they
  // are to be shareable (the file holds only the pages touched).
  const bool wants = bytes > 0 && (bytes >= kHugePage || shareable) && detail::wants_shareable(shareable);
  const bool mapped = bytes >= kHugePage || wants;
  if (mapped) {
    p = static_cast<std::byte*>(detail::MappingCache::process().take(mapping_bytes(bytes), wants));
    if (p == nullptr) {
      p = map_aligned(bytes, wants);  // a fresh mapping reads as zeros
    } else if (zeroed) {
      std::memset(p, 0, bytes);
    }
  } else if (bytes > 0) {
    p = zeroed ? new std::byte[bytes]() : new std::byte[bytes];
  }
  bytes_ = std::unique_ptr<std::byte[], detail::BufferRelease>(p, detail::BufferRelease{bytes, mapped});
}

Buffer::Buffer(DataType dtype, Shape shape) : Buffer(dtype, std::move(shape), true) {}

Buffer Buffer::uninitialized(DataType dtype, Shape shape) { return Buffer(dtype, std::move(shape), false); }

Buffer Buffer::shareable(DataType dtype, Shape shape) { return Buffer(dtype, std::move(shape), true, true); }

// A Buffer without memory (default, moved from, or of no elements) copies as one.
Buffer::Buffer(const Buffer& other) : dtype_(other.dtype_), shape_(other.shape_) {
  if (!other.bytes_) return;
  Buffer fresh(other.dtype_, other.shape_, false);
  std::memcpy(fresh.bytes_.get(), other.bytes_.get(), other.nbytes());
  bytes_ = std::move(fresh.bytes_);
}

// The moved-from Buffer is left as a default one: no memory, no bytes, no
// elements (the unique_ptr alone would keep its deleter's size).
Buffer::Buffer(Buffer&& other) noexcept
    : dtype_(other.dtype_), shape_(std::move(other.shape_)), bytes_(std::move(other.bytes_)) {
  other.clear();
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    dtype_ = other.dtype_;
    shape_ = std::move(other.shape_);
    bytes_ = std::move(other.bytes_);
    other.clear();
  }
  return *this;
}

void Buffer::clear() noexcept {
  dtype_ = DataType::UInt8;
  shape_ = {0};
  bytes_ = std::unique_ptr<std::byte[], detail::BufferRelease>();
}

Buffer& Buffer::operator=(const Buffer& other) {
  if (this != &other) *this = Buffer(other);
  return *this;
}

}  // namespace kolo
