#include "comm/shm/shm_buffer_exchange.h"

#include <unistd.h>

#include <algorithm>
#include <optional>

#include "comm/shm/shm_collectives.h"
#include "memory/shareable_memory.h"

namespace kolo::comm::shm {
namespace {

using File = BufferExchange::File;

// Peers' files kept mapped beyond those of the current call (each keeps the
// peer's memory alive after the peer frees it).
constexpr std::uint64_t kKeptPeerBytes = std::uint64_t{1} << 30;

// Where `buffer` lies, if its memory is shareable and holds it.
std::optional<File> file_of(const BufferExchange::Local& buffer) {
  const auto where = detail::locate(buffer.memory, buffer.data, buffer.bytes);
  if (!where) return std::nullopt;
  return File{where->fd, 0, where->inode, where->file_bytes, where->offset};
}

// A buffer of `bytes` fits in the file it is said to lie in (a malformed
// table must not make a rank read or write past a mapping).
bool fits(const File& file, std::size_t bytes) {
  return file.offset <= file.file_bytes && bytes <= file.file_bytes - file.offset;
}

// Where the peer's `file` is mapped here, nullptr when it cannot be mapped;
// nullptr and fine when nothing was published.
std::byte* map_file(PeerMappings& mappings, int peer, int pid, const File& file, bool& failed) {
  if (file.file_bytes == 0) return nullptr;
  std::byte* base = mappings.map(peer, pid, file.fd, file.inode, file.file_bytes);
  if (base == nullptr) failed = true;
  return base;
}

// The same files as `b`, wherever in them the buffers lie: the parts of one
// Buffer (the gradients of a bucket, say) need no new mapping from call to call.
bool same_files(const BufferExchange::Published& a, const BufferExchange::Published& b) {
  auto same = [](const File& x, const File& y) {
    return x.fd == y.fd && x.inode == y.inode && x.file_bytes == y.file_bytes;
  };
  return a.pid == b.pid && a.usable == b.usable && same(a.send, b.send) && same(a.recv, b.recv);
}

bool same_files(const std::vector<BufferExchange::Published>& a, const std::vector<BufferExchange::Published>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](const auto& x, const auto& y) { return same_files(x, y); });
}

}  // namespace

BufferExchange::BufferExchange(int size)
    : pid_(static_cast<std::int32_t>(::getpid())),
      table_(static_cast<std::size_t>(size)),
      published_sizes_(static_cast<std::size_t>(size), sizeof(Published)),
      sends_(static_cast<std::size_t>(size)),
      recvs_(static_cast<std::size_t>(size)),
      send_bases_(static_cast<std::size_t>(size)),
      recv_bases_(static_cast<std::size_t>(size)) {}

bool BufferExchange::map_peers(ShmChannel& channel) {
  const int n = channel.size(), me = channel.rank();
  bool failed = false;
  mappings_.begin_call();
  for (int j = 0; j < n; ++j) {
    if (j == me) continue;
    const Published& p = table_[static_cast<std::size_t>(j)];
    send_bases_[j] = map_file(mappings_, j, p.pid, p.send, failed);
    recv_bases_[j] = map_file(mappings_, j, p.pid, p.recv, failed);
  }
  mappings_.trim(kKeptPeerBytes);
  const std::uint8_t mapped = failed ? 0 : 1;
  std::vector<std::uint8_t> all(static_cast<std::size_t>(n));
  const std::vector<std::size_t> ones(static_cast<std::size_t>(n), 1);
  gather(channel, reinterpret_cast<const std::byte*>(&mapped), reinterpret_cast<std::byte*>(all.data()), ones, -1);
  return std::all_of(all.begin(), all.end(), [](std::uint8_t v) { return v == 1; });
}

bool BufferExchange::exchange(ShmChannel& channel, Local send, Local recv, bool usable, std::uint64_t layout) {
  const int me = channel.rank();
  const std::size_t send_bytes = send.bytes, recv_bytes = recv.bytes;
  // 1. Publish where this rank's buffers are.
  Published mine{};
  mine.pid = pid_;
  mine.layout = layout;
  const auto send_file = send_bytes > 0 ? file_of(send) : std::optional<File>(File{});
  const auto recv_file = file_of(recv);
  if (usable && send_file && recv_file) {
    mine.usable = 1;
    mine.send = *send_file;
    mine.recv = *recv_file;
  }
  gather(channel, reinterpret_cast<const std::byte*>(&mine), reinterpret_cast<std::byte*>(table_.data()),
         published_sizes_, -1);
  for (const Published& p : table_) {
    if (p.layout != table_[0].layout) return false;  // the same on every rank: every rank reads the same table
    const bool send_ok = send_bytes == 0 ? p.send.file_bytes == 0 : p.send.file_bytes > 0 && fits(p.send, send_bytes);
    if (p.usable != 1 || !send_ok || p.recv.file_bytes == 0 || !fits(p.recv, recv_bytes)) {
      return false;  // every rank read the same table, so every rank returns here
    }
  }
  // 2. Map the peers' files, unless every rank already has (the same files as
  // the last call, whose mapping all ranks confirmed).
  if (!(last_mapped_ && same_files(table_, last_table_))) {
    last_mapped_ = map_peers(channel);
    last_table_ = table_;
    if (!last_mapped_) return false;
  }
  for (int j = 0; j < static_cast<int>(table_.size()); ++j) {
    const Published& p = table_[static_cast<std::size_t>(j)];
    sends_[j] = send_bases_[j] ? send_bases_[j] + p.send.offset : nullptr;
    recvs_[j] = recv_bases_[j] ? recv_bases_[j] + p.recv.offset : nullptr;
  }
  sends_[me] = static_cast<std::byte*>(const_cast<void*>(send.data));
  recvs_[me] = static_cast<std::byte*>(const_cast<void*>(recv.data));
  return true;
}

}  // namespace kolo::comm::shm
