// kolo::Buffer (kolo/types.h): small Buffers on the heap, large ones mappings of
// their own, shareable by policy (memory/shareable_memory.h) and reused through
// the mapping cache (memory/mapping_cache.h).
#include "kolo/types.h"

#include <cstring>
#include <new>
#include <string>

#include "common/tensor_bytes.h"
#include "memory/mapping_cache.h"
#include "memory/shareable_memory.h"

namespace kolo {
namespace {

// From this size on a buffer is a mapping of its own, aligned to and advised for
// transparent huge pages.
constexpr std::size_t kHugePage = std::size_t{2} << 20;

std::size_t mapping_bytes(std::size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

// A fresh mapping for a Buffer of `bytes`: shareable (a memfd, which peers on
// this host can map: memory/shareable_memory.h) when asked and not refused,
// with its descriptor in `memory`; private anonymous memory otherwise. Aligned
// to and advised for huge pages either way. Reads as zeros.
std::byte* map_aligned(std::size_t bytes, bool shareable, ShareableMemory*& memory) {
  const std::size_t length = mapping_bytes(bytes);
  memory = shareable ? detail::map_shareable(length, kHugePage) : nullptr;
  void* p = memory ? memory->base : detail::map_at_alignment(length, kHugePage, -1);
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<std::byte*>(p);
}

// A mapping the cache kept for a Buffer of `bytes` (shareable or private, as
// asked), or nullptr. Its contents are whatever its last Buffer left.
std::byte* reuse(std::size_t bytes, bool shareable, ShareableMemory*& memory) {
  auto& cache = detail::MappingCache::process();
  if (shareable) {
    memory = cache.take_shareable(mapping_bytes(bytes));
    return memory ? memory->base : nullptr;
  }
  memory = nullptr;
  return static_cast<std::byte*>(cache.take(mapping_bytes(bytes)));
}

}  // namespace

void detail::BufferRelease::operator()(std::byte* p) const noexcept {
  if (p == nullptr) return;
  // A mapping was allocated through the cache, which therefore exists.
  if (memory) {
    detail::MappingCache::process().give(memory);
  } else if (mapped) {
    detail::MappingCache::process().give(p, mapping_bytes(bytes));
  } else {
    delete[] p;
  }
}

Buffer::Buffer(DataType dtype, Shape shape, bool zeroed, bool shareable) : dtype_(dtype), shape_(std::move(shape)) {
  const std::size_t bytes = detail::checked_nbytes(dtype, shape_, [] { return std::string("kolo::Buffer"); });
  std::byte* p = nullptr;
  ShareableMemory* memory = nullptr;
  // Large Buffers are mappings (shareable by policy); small ones too when they
  // are to be shareable (the file holds only the pages touched).
  const bool wants = bytes > 0 && (bytes >= kHugePage || shareable) && detail::wants_shareable(shareable);
  const bool mapped = bytes >= kHugePage || wants;
  if (mapped) {
    p = reuse(bytes, wants, memory);
    if (p == nullptr) {
      p = map_aligned(bytes, wants, memory);
    } else if (zeroed) {
      std::memset(p, 0, bytes);
    }
  } else if (bytes > 0) {
    p = zeroed ? new std::byte[bytes]() : new std::byte[bytes];
  }
  bytes_ = std::unique_ptr<std::byte[], detail::BufferRelease>(p, detail::BufferRelease{bytes, mapped, memory});
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
