#include "comm/shm/shm_in_place.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/shm/shm_collectives.h"
#include "comm/shm/stream_copy.h"
#include "common/reduce.h"

namespace kolo::comm::shm {
namespace {

constexpr std::size_t kBlockBytes = std::size_t{16} << 10;

// Outputs as large as the slot path streams (they do not fit the caches).
void copy_out(void* dst, const void* src, std::size_t bytes, bool streaming) {
  if (streaming) {
    copy_streaming(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

}  // namespace

bool allreduce_in_place(ShmChannel& channel, BufferExchange& exchange, const void* send, void* recv,
                        std::size_t count, DataType dtype, ReduceOp op, Placement placement,
                        std::span<const void*> srcs) {
  const int n = channel.size(), me = channel.rank();
  const std::size_t es = element_size(dtype), bytes = count * es;
  const bool usable = send == recv || !overlaps(send, bytes, recv, bytes);
  if (!exchange.exchange(channel, {send, bytes, placement.send}, {recv, bytes, placement.recv}, usable)) return false;
  const Piece piece = piece_of(count, n, me, std::max<std::size_t>(1, kCacheLine / es));
  const std::size_t per_block = kBlockBytes / es;
  const bool streaming = bytes >= kStreamingOutputBytes;
  alignas(kCacheLine) std::byte block[kBlockBytes];
  for (std::size_t at = piece.begin; at < piece.end; at += per_block) {
    const std::size_t len = std::min(per_block, piece.end - at);
    for (int j = 0; j < n; ++j) srcs[j] = exchange.send_of(j) + at * es;
    reduce_many(block, srcs.data(), n, len, dtype, op);
    for (int d = 0; d < n; ++d) copy_out(exchange.recv_of((me + d) % n) + at * es, block, len * es, streaming);
  }
  barrier(channel);
  return true;
}

bool allgather_in_place(ShmChannel& channel, BufferExchange& exchange, const std::byte* send, std::byte* recv,
                        std::span<const std::size_t> sizes, const ShareableMemory* recv_memory) {
  const int n = channel.size(), me = channel.rank();
  thread_local std::vector<std::size_t> offsets;
  prefix_offsets(sizes, offsets);
  const std::size_t total = offsets[n], mine = sizes[me];
  const bool in_place = send == recv + offsets[me];
  const bool usable = in_place || !overlaps(send, mine, recv, total);
  if (!exchange.exchange(channel, {nullptr, 0, nullptr}, {recv, total, recv_memory}, usable)) return false;
  const bool streaming = total >= kStreamingOutputBytes;
  for (int d = 0; d < n; ++d) {
    std::byte* dst = exchange.recv_of((me + d) % n) + offsets[me];
    if (dst != send && mine > 0) copy_out(dst, send, mine, streaming);
  }
  barrier(channel);
  return true;
}

}  // namespace kolo::comm::shm
