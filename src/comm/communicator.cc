#include "comm/communicator.h"

#include <cstring>
#include <string>
#include <vector>

#include "kolo/error.h"

namespace kolo::comm {

KOLO_SETTING(kPeerTimeout, {.name = "KOLO_PEER_TIMEOUT", .kind = settings::Kind::Timeout, .fallback = "30",
                            .doc = "seconds a peer may make no progress before it is declared failed"});
KOLO_SETTING(kStartTimeout, {.name = "KOLO_START_TIMEOUT", .kind = settings::Kind::Timeout, .fallback = "30",
                             .doc = "seconds init() waits for every rank to arrive"});

void allreduce_staged(Communicator& comm, std::span<const Region> regions, DataType dtype, ReduceOp op,
                      const ResultScale& scale, std::vector<std::byte>& staging, const StagingSteps& steps) {
  const std::size_t es = element_size(dtype);
  const RegionList list(regions, es);
  if (staging.size() < list.count() * es) staging.resize(list.count() * es);
  list.gather_sends(staging.data());
  if (steps.staged) steps.staged();
  if (steps.prepare) steps.prepare(staging.data(), list.count());
  comm.allreduce(staging.data(), staging.data(), list.count(), dtype, op, scale);
  if (steps.reduced) steps.reduced();
  list.scatter_recvs(staging.data());
}

// For transports without a scatter-gather path.
void Communicator::allreduce_regions(std::span<const Region> regions, DataType dtype, ReduceOp op,
                                     const ResultScale& scale) {
  std::vector<std::byte> staging;
  allreduce_staged(*this, regions, dtype, op, scale, staging);
}

void Communicator::reduce_scatter_regions(std::span<const Region> regions, void* recv,
                                          std::span<const std::size_t> recv_counts, DataType dtype, ReduceOp op) {
  const RegionList list(regions, element_size(dtype));
  check_blocks_fill(list, recv_counts, "reduce_scatter");
  std::vector<std::byte> staging(list.count() * element_size(dtype));
  list.gather_sends(staging.data());
  reduce_scatter(staging.data(), recv, recv_counts, dtype, op);
}

void Communicator::allgather_regions(const void* send, std::span<const Region> regions,
                                     std::span<const std::size_t> counts, DataType dtype) {
  const std::size_t es = element_size(dtype);
  const RegionList list(regions, es);
  check_blocks_fill(list, counts, "allgatherv");
  std::vector<std::size_t> bytes(counts.begin(), counts.end());
  for (auto& b : bytes) b *= es;
  std::vector<std::byte> staging(list.count() * es);
  const auto me = static_cast<std::size_t>(rank());
  allgatherv(send, me < bytes.size() ? bytes[me] : 0, staging.data(), bytes);  // allgatherv checks the sizes
  list.scatter_recvs(staging.data());
}

std::uint32_t self_sized_length(const void* block, std::size_t max_block, int sender) {
  std::uint32_t length;
  std::memcpy(&length, block, sizeof length);
  if (length < sizeof length || length > max_block) {
    throw InvalidArgumentError("rank " + std::to_string(sender) + " declares a block of " + std::to_string(length) +
                               " bytes where 4 to " + std::to_string(max_block) + " are allowed");
  }
  return length;
}

void Communicator::allgather_self_sized(const void* send, void* recv, std::size_t max_block) {
  self_sized_length(send, max_block, rank());
  self_sized_blocks_.assign(static_cast<std::size_t>(size()), max_block);
  allgatherv(send, max_block, recv, self_sized_blocks_);
  for (int r = 0; r < size(); ++r)
    self_sized_length(static_cast<const std::byte*>(recv) + static_cast<std::size_t>(r) * max_block, max_block, r);
}

}  // namespace kolo::comm
