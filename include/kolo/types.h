// Element types, reduction ops and non-owning tensor views: the vocabulary every
// other kolo header is written in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kolo {

// Wire-stable values: they are serialized in negotiation messages, never reorder.
enum class DataType : std::uint8_t {
  UInt8 = 0,
  Int8 = 1,
  Int32 = 2,
  Int64 = 3,
  Float16 = 4,
  BFloat16 = 5,
  Float32 = 6,
  Float64 = 7,
  Bool = 8,
  Int16 = 9,
};
inline constexpr int kNumDataTypes = 10;

// Average is Sum followed by a division by the number of ranks. On Bool, Sum and
// Max are logical OR, Min and Product logical AND.
enum class ReduceOp : std::uint8_t {
  Sum = 0,
  Average = 1,
  Min = 2,
  Max = 3,
  Product = 4,
};
inline constexpr int kNumReduceOps = 5;

namespace detail {
[[noreturn]] void throw_invalid_data_type(DataType dtype);
}  // namespace detail

// Inline: every operation asks it several times on its way.
inline std::size_t element_size(DataType dtype) {
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
  detail::throw_invalid_data_type(dtype);
}
const char* to_string(DataType dtype);
const char* to_string(ReduceOp op);
bool is_floating_point(DataType dtype);
// True when `value` names a defined enumerator (used to reject garbage from casts
// and from the wire).
bool is_valid(DataType dtype);
bool is_valid(ReduceOp op);

using Shape = std::vector<std::int64_t>;

// Number of elements of a shape; an empty shape is a scalar with one element.
std::int64_t num_elements(const Shape& shape);
std::string to_string(const Shape& shape);

// Memory that the other processes of this host can map: a shareable Buffer's
// (Buffer::shareable below). Opaque; only Buffers make it.
struct ShareableMemory;

// A view of contiguous host memory: kolo never owns or frees `data`. The memory
// must stay valid until the operation that uses it has completed.
struct Tensor {
  void* data = nullptr;
  DataType dtype = DataType::Float32;
  Shape shape;
  // The shareable memory `data` lies in (Buffer::view() and Buffer::memory()
  // give it), or null. A view of part of a shareable Buffer may keep its Buffer's
  // memory, since `data` is found inside it. Only views whose memory holds their
  // data are worked on in place of the ranks' memory (see Buffer); for any
  // other, kolo copies, whatever memory `data` points to.
  const ShareableMemory* memory = nullptr;

  std::int64_t numel() const { return num_elements(shape); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(dtype); }
};

// Convenience constructor for a 1-D view over a typed array.
template <typename T>
Tensor make_tensor(T* data, std::int64_t count);

namespace detail {
// Frees a Buffer's memory; knows the size, which a mapping needs.
struct BufferRelease {
  std::size_t bytes = 0;
  bool mapped = false;  // a mapping of its own (large or shareable), else new[]
  ShareableMemory* memory = nullptr;  // the mapping's, when it is shareable
  void operator()(std::byte* p) const noexcept;
};
}  // namespace detail

// Memory owned by kolo, returned by operations whose output size is only known
// after negotiation (allgather, alltoall, reducescatter). Large buffers (2 MiB and
// up) are their own mappings, backed by transparent huge pages where the kernel
// allows: a fresh 64 MiB output then costs 32 page faults instead of 16384, which
// on a virtual machine is most of the time of the collective itself. Released,
// such a mapping is kept for the next Buffer of the same size (up to
// KOLO_BUFFER_CACHE_BYTES per process), which then costs no fault at all.
//
// A shareable Buffer is memory the other ranks of this host can map, as
// MPI_Alloc_mem's or NCCL's registered buffers: an allreduce of 1 MiB or more
// whose input and output are views of shareable Buffers on every rank (views
// that carry the Buffer's memory: view(), or a Tensor given memory()), and an
// allgather into shareable outputs, work in place of them on the shared-memory
// transport instead of copying through kolo's segment (about 2x faster at 16
// MiB). Large Buffers are shareable by default where the kernel gives shared
// memory huge pages (KOLO_SHAREABLE_BUFFERS says more; a forked child gets
// private copies, which its views then treat as plain memory).
class Buffer {
 public:
  // No memory: uint8 of shape [0]. A moved-from Buffer is left so.
  Buffer() = default;
  // Zero-filled. Throws InvalidArgumentError for a negative dimension or a size
  // past what an int64 counts, std::bad_alloc when the memory is not there.
  Buffer(DataType dtype, Shape shape);
  // Contents unspecified: for outputs that are overwritten entirely.
  static Buffer uninitialized(DataType dtype, Shape shape);
  // Zero-filled and shareable (unless KOLO_SHAREABLE_BUFFERS=0 or the system
  // refuses a memfd, when it is an ordinary Buffer). Copies are ordinary Buffers.
  static Buffer shareable(DataType dtype, Shape shape);

  Buffer(const Buffer& other);
  Buffer& operator=(const Buffer& other);
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;

  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  void* data() { return bytes_.get(); }
  const void* data() const { return bytes_.get(); }
  std::size_t nbytes() const { return bytes_.get_deleter().bytes; }
  // The whole Buffer, carrying its shareable memory when it has some.
  Tensor view() { return Tensor{bytes_.get(), dtype_, shape_, memory()}; }
  // The shareable memory the Buffer lies in; null for an ordinary Buffer. The
  // same while the Buffer lives, also after a move; views of a part of the
  // Buffer may carry it.
  const ShareableMemory* memory() const { return bytes_.get_deleter().memory; }

  template <typename T>
  T* as() { return reinterpret_cast<T*>(bytes_.get()); }
  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(bytes_.get()); }

 private:
  Buffer(DataType dtype, Shape shape, bool zeroed, bool shareable = false);
  void clear() noexcept;

  DataType dtype_ = DataType::UInt8;
  Shape shape_{0};
  std::unique_ptr<std::byte[], detail::BufferRelease> bytes_;
};

namespace detail {
template <typename T> struct DataTypeOf;
template <> struct DataTypeOf<std::uint8_t> { static constexpr DataType value = DataType::UInt8; };
template <> struct DataTypeOf<std::int8_t> { static constexpr DataType value = DataType::Int8; };
template <> struct DataTypeOf<std::int16_t> { static constexpr DataType value = DataType::Int16; };
template <> struct DataTypeOf<std::int32_t> { static constexpr DataType value = DataType::Int32; };
template <> struct DataTypeOf<std::int64_t> { static constexpr DataType value = DataType::Int64; };
template <> struct DataTypeOf<float> { static constexpr DataType value = DataType::Float32; };
template <> struct DataTypeOf<double> { static constexpr DataType value = DataType::Float64; };
template <> struct DataTypeOf<bool> { static constexpr DataType value = DataType::Bool; };
}  // namespace detail

template <typename T>
Tensor make_tensor(T* data, std::int64_t count) {
  return Tensor{static_cast<void*>(data), detail::DataTypeOf<T>::value, Shape{count}};
}

}  // namespace kolo
