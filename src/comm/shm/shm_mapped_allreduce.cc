#include "comm/shm/shm_mapped_allreduce.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "comm/shm/shm_collectives.h"
#include "comm/shm/stream_copy.h"
#include "common/reduce.h"
#include "common/shareable_memory.h"

namespace kolo::comm::shm {
namespace {

constexpr std::size_t kBlockBytes = std::size_t{16} << 10;

MappedAllreduce::File file_of(const std::optional<detail::ShareableLocation>& where) {
  return MappedAllreduce::File{where->fd, 0, where->inode, where->file_bytes, where->offset};
}

// A buffer of `bytes` fits in the file it is said to lie in (a malformed
// table must not make a rank read or write past a mapping).
bool fits(const MappedAllreduce::File& file, std::size_t bytes) {
  return file.offset <= file.file_bytes && bytes <= file.file_bytes - file.offset;
}

// The peer's buffer at `file` (checked with fits()), or nullptr.
std::byte* locate(PeerMappings& mappings, int peer, int pid, const MappedAllreduce::File& file) {
  std::byte* base = mappings.map(peer, pid, file.fd, file.inode, file.file_bytes);
  return base == nullptr ? nullptr : base + file.offset;
}

}  // namespace

MappedAllreduce::MappedAllreduce(int size)
    : pid_(static_cast<std::int32_t>(::getpid())),
      table_(static_cast<std::size_t>(size)),
      published_sizes_(static_cast<std::size_t>(size), sizeof(Published)),
      sends_(static_cast<std::size_t>(size)),
      recvs_(static_cast<std::size_t>(size)),
      block_srcs_(static_cast<std::size_t>(size)) {}

bool MappedAllreduce::map_peers(ShmChannel& channel) {
  const int n = channel.size(), me = channel.rank();
  std::uint8_t mapped = 1;
  for (int j = 0; j < n; ++j) {
    if (j == me) continue;
    const Published& p = table_[static_cast<std::size_t>(j)];
    sends_[j] = locate(mappings_, j, p.pid, p.send);
    recvs_[j] = locate(mappings_, j, p.pid, p.recv);
    if (sends_[j] == nullptr || recvs_[j] == nullptr) mapped = 0;
  }
  std::vector<std::uint8_t> all(static_cast<std::size_t>(n));
  const std::vector<std::size_t> ones(static_cast<std::size_t>(n), 1);
  gather(channel, reinterpret_cast<const std::byte*>(&mapped), reinterpret_cast<std::byte*>(all.data()), ones, -1);
  return std::all_of(all.begin(), all.end(), [](std::uint8_t v) { return v == 1; });
}

bool MappedAllreduce::run(ShmChannel& channel, const void* send, void* recv, std::size_t count, DataType dtype,
                          ReduceOp op) {
  const int n = channel.size(), me = channel.rank();
  const std::size_t es = element_size(dtype), bytes = count * es;
  // 1. Publish where this rank's buffers are.
  Published mine{};
  mine.pid = pid_;
  const auto send_at = detail::find_shareable(send, bytes);
  const auto recv_at = detail::find_shareable(recv, bytes);
  if (send_at && recv_at && (send == recv || !overlaps(send, bytes, recv, bytes))) {
    mine.usable = 1;
    mine.send = file_of(send_at);
    mine.recv = file_of(recv_at);
  }
  gather(channel, reinterpret_cast<const std::byte*>(&mine), reinterpret_cast<std::byte*>(table_.data()),
         published_sizes_, -1);
  for (const Published& p : table_) {
    if (p.usable != 1 || !fits(p.send, bytes) || !fits(p.recv, bytes)) {
      return false;  // every rank read the same table, so every rank returns here
    }
  }
  // 2. Map the peers' files, unless every rank already has (the same table as
  // the last call, whose mapping all ranks confirmed).
  if (!(last_mapped_ && table_ == last_table_)) {
    last_mapped_ = map_peers(channel);
    last_table_ = table_;
    if (!last_mapped_) return false;
  }
  sends_[me] = static_cast<std::byte*>(const_cast<void*>(send));
  recvs_[me] = static_cast<std::byte*>(recv);
  // 3. This rank's piece, block by block: reduce from every input, then copy to
  // every output. Only this rank touches these elements of any buffer, so a
  // block of an in-place buffer is read before it is overwritten.
  const Piece piece = piece_of(count, n, me, std::max<std::size_t>(1, kCacheLine / es));
  const std::size_t per_block = kBlockBytes / es;
  const bool streaming = bytes >= kStreamingOutputBytes;
  alignas(kCacheLine) std::byte block[kBlockBytes];
  for (std::size_t at = piece.begin; at < piece.end; at += per_block) {
    const std::size_t len = std::min(per_block, piece.end - at);
    for (int j = 0; j < n; ++j) block_srcs_[j] = sends_[j] + at * es;
    reduce_many(block, block_srcs_.data(), n, len, dtype, op);
    for (int d = 0; d < n; ++d) {
      const int j = (me + d) % n;
      if (streaming) {
        copy_streaming(recvs_[j] + at * es, block, len * es);
      } else {
        std::memcpy(recvs_[j] + at * es, block, len * es);
      }
    }
  }
  // 4. Nobody returns while its buffers are still in use.
  barrier(channel);
  return true;
}

}  // namespace kolo::comm::shm
