#include "comm/shm/shm_in_place.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/shm/shm_collectives.h"
#include "comm/shm/stream_copy.h"
#include "common/fnv.h"
#include "common/reduce.h"
#include "memory/shareable_memory.h"

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
                        std::size_t count, DataType dtype, ReduceOp op, const ResultScale& scale,
                        Placement placement, std::span<const void*> srcs) {
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
    scale.apply(block, len, dtype);
    for (int d = 0; d < n; ++d) copy_out(exchange.recv_of((me + d) % n) + at * es, block, len * es, streaming);
  }
  barrier(channel);
  return true;
}

namespace {

// Where a batch's regions lie in their memory, on this rank.
struct RegionsPlacement {
  bool usable = false;
  const ShareableMemory* send = nullptr;
  const ShareableMemory* recv = nullptr;
  std::size_t send_extent = 0, recv_extent = 0;  // bytes of each memory the regions reach into
  std::uint64_t layout = 0;                      // FNV-1a of (send offset, recv offset, bytes) per region
};

RegionsPlacement place_regions(std::span<const Region> regions, std::size_t es) {
  RegionsPlacement where;
  Fnv1a hash;
  for (const Region& r : regions) {
    if (r.count == 0) continue;
    const std::size_t bytes = r.count * es;
    if (where.send == nullptr) {
      where.send = r.placement.send;
      where.recv = r.placement.recv;
    }
    if (r.placement.send != where.send || r.placement.recv != where.recv ||
        !kolo::detail::locate(where.send, r.send, bytes) || !kolo::detail::locate(where.recv, r.recv, bytes)) {
      return RegionsPlacement{};
    }
    const auto send_at = static_cast<std::size_t>(static_cast<const std::byte*>(r.send) - where.send->base);
    const auto recv_at = static_cast<std::size_t>(static_cast<const std::byte*>(r.recv) - where.recv->base);
    hash.add(send_at);
    hash.add(recv_at);
    hash.add(bytes);
    where.send_extent = std::max(where.send_extent, send_at + bytes);
    where.recv_extent = std::max(where.recv_extent, recv_at + bytes);
  }
  where.usable = where.send != nullptr;
  where.layout = hash.value();
  return where;
}

}  // namespace

bool allreduce_regions_in_place(ShmChannel& channel, BufferExchange& exchange, std::span<const Region> regions,
                                const RegionList& list, DataType dtype, ReduceOp op, const ResultScale& scale,
                                std::span<const void*> srcs) {
  const int n = channel.size(), me = channel.rank();
  const std::size_t es = element_size(dtype);
  const RegionsPlacement where = place_regions(regions, es);
  // Unplaced, this rank still takes part in the exchange, which then fails alike everywhere.
  const BufferExchange::Local send{where.usable ? where.send->base : nullptr, where.send_extent,
                                   where.usable ? where.send : nullptr};
  const BufferExchange::Local recv{where.usable ? where.recv->base : nullptr, where.recv_extent,
                                   where.usable ? where.recv : nullptr};
  if (!exchange.exchange(channel, send, recv, where.usable, where.layout)) return false;
  const std::byte* my_send = exchange.send_of(me);
  const std::byte* my_recv = exchange.recv_of(me);
  const Piece piece = piece_of(list.count(), n, me, std::max<std::size_t>(1, kCacheLine / es));
  const std::size_t per_block = kBlockBytes / es;
  const bool streaming = list.count() * es >= kStreamingOutputBytes;
  alignas(kCacheLine) std::byte block[kBlockBytes];
  list.for_each(piece.begin, piece.end, [&](const std::byte* send_run, std::byte* recv_run, std::size_t count,
                                            std::size_t) {
    const std::size_t send_at = static_cast<std::size_t>(send_run - my_send);
    const std::size_t recv_at = static_cast<std::size_t>(recv_run - my_recv);
    for (std::size_t at = 0; at < count; at += per_block) {
      const std::size_t len = std::min(per_block, count - at);
      for (int j = 0; j < n; ++j) srcs[j] = exchange.send_of(j) + send_at + at * es;
      reduce_many(block, srcs.data(), n, len, dtype, op);
      scale.apply(block, len, dtype);
      for (int d = 0; d < n; ++d) {
        copy_out(exchange.recv_of((me + d) % n) + recv_at + at * es, block, len * es, streaming);
      }
    }
  });
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
