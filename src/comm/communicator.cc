#include "comm/communicator.h"

#include <cstring>
#include <vector>

namespace kolo::comm {

// For transports without a scatter-gather path: through one staging buffer.
void Communicator::allreduce_regions(std::span<const Region> regions, DataType dtype, ReduceOp op) {
  const std::size_t es = element_size(dtype);
  RegionList list(regions, es);
  std::vector<std::byte> staging(list.count() * es);
  list.for_each(0, list.count(), [&](const std::byte* send, std::byte*, std::size_t n, std::size_t pos) {
    std::memcpy(staging.data() + pos * es, send, n * es);
  });
  allreduce(staging.data(), staging.data(), list.count(), dtype, op);
  list.for_each(0, list.count(), [&](const std::byte*, std::byte* recv, std::size_t n, std::size_t pos) {
    std::memcpy(recv, staging.data() + pos * es, n * es);
  });
}

}  // namespace kolo::comm
