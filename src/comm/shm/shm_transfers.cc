// The byte-moving collectives over the slot machinery, and the helpers every
// algorithm shares.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "comm/shm/shm_collectives.h"
#include "comm/shm/stream_copy.h"
#include "kolo/error.h"

namespace kolo::comm::shm {
namespace {

void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

// Every receiver expects exactly what is sent to it (`sent` and `expected`: n x n,
// row = sender and receiver respectively); otherwise throws, on every rank alike.
void check_alltoall_sizes(int n, const std::vector<std::size_t>& sent, const std::vector<std::size_t>& expected) {
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (sent[i * n + j] != expected[j * n + i]) {
        throw InvalidArgumentError("alltoallv: rank " + std::to_string(i) + " sends " +
                                   std::to_string(sent[i * n + j]) + " bytes to rank " + std::to_string(j) +
                                   ", which expects " + std::to_string(expected[j * n + i]));
      }
    }
  }
}

// A rank's sizes as it publishes them: n send sizes, then n receive sizes.
constexpr std::size_t kSizeWord = sizeof(std::uint64_t);
std::size_t size_table_bytes(int n) { return 2 * static_cast<std::size_t>(n) * kSizeWord; }

void write_size_table(std::byte* out, std::span<const std::size_t> send_bytes, std::span<const std::size_t> recv_bytes) {
  const std::size_t n = send_bytes.size();
  for (std::size_t j = 0; j < n; ++j) {
    const std::uint64_t sent = send_bytes[j], expected = recv_bytes[j];
    std::memcpy(out + j * kSizeWord, &sent, kSizeWord);
    std::memcpy(out + (n + j) * kSizeWord, &expected, kSizeWord);
  }
}

void read_size_table(const std::byte* in, int n, int from, std::vector<std::size_t>& sent,
                     std::vector<std::size_t>& expected) {
  for (int j = 0; j < n; ++j) {
    std::uint64_t a, b;
    std::memcpy(&a, in + j * kSizeWord, kSizeWord);
    std::memcpy(&b, in + (n + j) * kSizeWord, kSizeWord);
    sent[from * n + j] = a;
    expected[from * n + j] = b;
  }
}

// Step one, for jobs whose size table does not fit a flagged message: every rank
// learns every rank's send and receive sizes through the slots. Returns the
// n x n matrix of bytes sent (row = sender), checked.
std::vector<std::size_t> exchange_alltoall_sizes(ShmChannel& channel, std::span<const std::size_t> send_bytes,
                                                 std::span<const std::size_t> recv_bytes) {
  const int n = channel.size(), me = channel.rank();
  channel.acquire_slot();
  write_size_table(channel.slot(me), send_bytes, recv_bytes);
  channel.post();
  std::vector<std::size_t> sent(static_cast<std::size_t>(n) * n), expected(sent.size());
  for (int i = 0; i < n; ++i) {
    if (i != me) channel.wait_posted(i);
    read_size_table(channel.slot(i), n, i, sent, expected);
  }
  channel.finish_step();
  check_alltoall_sizes(n, sent, expected);
  return sent;
}

// Step one through flagged lines: each rank's message is its size table and,
// when the whole fits (kFlaggedBytes), its data for every peer in rank order,
// so that a small alltoall takes this one step. Every rank reads every table,
// so all know which senders' data came along. Copies that data into `recv` and
// returns the matrix of bytes still to send through the slots (row = sender).
std::vector<std::size_t> exchange_alltoall_flagged(ShmChannel& channel, const std::byte* send,
                                                   std::span<const std::size_t> send_bytes,
                                                   std::span<const std::size_t> send_offsets, std::byte* recv,
                                                   std::span<const std::size_t> recv_bytes,
                                                   std::span<const std::size_t> recv_offsets) {
  const int n = channel.size(), me = channel.rank();
  const std::size_t table = size_table_bytes(n);
  // The length of rank `from`'s message given its row of sent sizes: the data
  // rides along only if all of it fits.
  auto message_bytes = [&](const std::size_t* row, int from) {
    std::size_t data = 0;
    for (int j = 0; j < n; ++j) data += j == from ? 0 : row[j];
    return table + data <= kFlaggedBytes ? table + data : table;
  };
  std::byte* mine = channel.scratch(me);
  write_size_table(mine, send_bytes, recv_bytes);
  const std::size_t my_bytes = message_bytes(send_bytes.data(), me);
  for (int j = 0, at = 0; my_bytes > table && j < n; ++j) {
    if (j == me) continue;
    std::memcpy(mine + table + at, send + send_offsets[j], send_bytes[j]);
    at += static_cast<int>(send_bytes[j]);
  }
  channel.acquire_slot();
  channel.write_flagged(mine, my_bytes);

  std::vector<std::size_t> sent(static_cast<std::size_t>(n) * n), expected(sent.size());
  for (int i = 0; i < n; ++i) {
    if (i != me) channel.read_flagged(i, channel.scratch(i), table);
    read_size_table(channel.scratch(i), n, i, sent, expected);
  }
  try {
    check_alltoall_sizes(n, sent, expected);
  } catch (...) {
    channel.finish_step();
    throw;
  }
  for (int i = 0; i < n; ++i) {
    const std::size_t length = message_bytes(&sent[i * n], i);
    if (length == table) continue;  // its data follows through the slots
    if (i != me) {
      channel.read_flagged(i, channel.scratch(i), length);
      std::size_t at = table;
      for (int j = 0; j < me; ++j) at += j == i ? 0 : sent[i * n + j];
      std::memcpy(recv + recv_offsets[i], channel.scratch(i) + at, sent[i * n + me]);
    }
    for (int j = 0; j < n; ++j) sent[i * n + j] = 0;  // delivered
  }
  channel.finish_step();
  return sent;
}

}  // namespace

Piece piece_of(std::size_t len, int parts, int index, std::size_t align) {
  std::size_t per = ceil_div(ceil_div(len, static_cast<std::size_t>(parts)), align) * align;
  Piece p;
  p.begin = std::min(len, per * static_cast<std::size_t>(index));
  p.end = std::min(len, p.begin + per);
  return p;
}

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

void prefix_offsets(std::span<const std::size_t> sizes, std::vector<std::size_t>& offsets) {
  offsets.resize(sizes.size() + 1);
  offsets[0] = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) offsets[i + 1] = offsets[i] + sizes[i];
}

std::vector<std::size_t> prefix_offsets(std::span<const std::size_t> sizes) {
  std::vector<std::size_t> offsets;
  prefix_offsets(sizes, offsets);
  return offsets;
}

std::size_t max_of(std::span<const std::size_t> sizes) {
  std::size_t m = 0;
  for (auto s : sizes) m = std::max(m, s);
  return m;
}

namespace {

// gather's steps once this rank's own block is in place: the other ranks'
// blocks into `recv` (null where this rank does not receive), bytes as one
// index space, `offsets` their places in it.
void gather_peers(ShmChannel& channel, const std::byte* send, const RegionList* recv,
                  std::span<const std::size_t> sizes, std::span<const std::size_t> offsets, int root) {
  const int n = channel.size(), me = channel.rank();
  const std::size_t largest = max_of(sizes);
  if (largest > 0 && largest <= kFlaggedBytes) {  // one step, through flagged lines
    if (me != root && sizes[me] > 0) {
      channel.acquire_slot();
      channel.write_flagged(send, sizes[me]);
    }
    if (recv != nullptr) {
      for (int d = 1; d < n; ++d) {
        const int j = (me + d) % n;
        if (sizes[j] == 0) continue;
        // A block that lies in one region is read into it; one split across
        // regions through a line buffer.
        std::byte* whole = nullptr;
        int runs = 0;
        recv->for_each(offsets[j], offsets[j] + sizes[j], [&](const std::byte*, std::byte* out, std::size_t, std::size_t) {
          if (runs++ == 0) whole = out;
        });
        if (runs == 1) {
          channel.read_flagged(j, whole, sizes[j]);
          continue;
        }
        alignas(kCacheLine) std::byte block[kFlaggedBytes];
        channel.read_flagged(j, block, sizes[j]);
        recv->for_each(offsets[j], offsets[j] + sizes[j], [&](const std::byte*, std::byte* out, std::size_t run,
                                                              std::size_t pos) {
          std::memcpy(out, block + (pos - offsets[j]), run);
        });
      }
    }
    channel.finish_step();
    return;
  }
  const std::size_t slot = channel.slot_bytes();
  const std::size_t steps = ceil_div(largest, slot);
  for (std::size_t s = 0; s < steps; ++s) {
    const std::size_t begin = s * slot;
    auto piece_len = [&](int j) { return begin < sizes[j] ? std::min(slot, sizes[j] - begin) : 0; };
    if (me != root && piece_len(me) > 0) {
      channel.acquire_slot();
      copy_to_shared(channel.slot(me), send + begin, piece_len(me));
      channel.post();
    }
    if (recv != nullptr) {
      for (int d = 1; d < n; ++d) {
        const int j = (me + d) % n;
        if (piece_len(j) == 0) continue;
        channel.wait_posted(j);
        const std::size_t from = offsets[j] + begin;
        recv->for_each(from, from + piece_len(j), [&](const std::byte*, std::byte* out, std::size_t run,
                                                      std::size_t pos) {
          std::memcpy(out, channel.slot(j) + (pos - from), run);
        });
      }
    }
    channel.finish_step();
  }
}

}  // namespace

void gather(ShmChannel& channel, const std::byte* send, std::byte* recv, std::span<const std::size_t> sizes, int root) {
  const int n = channel.size(), me = channel.rank();
  // Reused: the engine's negotiation gathers every cycle, and an allocation is a
  // noticeable part of a microsecond.
  thread_local std::vector<std::size_t> offsets;
  prefix_offsets(sizes, offsets);
  const bool receives = root < 0 || root == me;
  std::vector<std::byte> private_send;
  if (receives) {
    // In place means this rank's block of the output already holds its data.
    if (overlaps(send, sizes[me], recv, offsets[n]) && send != recv + offsets[me]) {
      private_send.assign(send, send + sizes[me]);
      send = private_send.data();
    }
    copy_bytes(recv + offsets[me], send, sizes[me]);
  }
  const Region whole{nullptr, recv, offsets[n]};
  const RegionList list({&whole, 1}, 1);
  gather_peers(channel, send, receives ? &list : nullptr, sizes, offsets, root);
}

void allgather_into(ShmChannel& channel, const std::byte* send, const RegionList& recv,
                    std::span<const std::size_t> sizes) {
  const int me = channel.rank();
  std::vector<std::size_t> offsets;
  prefix_offsets(sizes, offsets);
  recv.for_each(offsets[me], offsets[me] + sizes[me], [&](const std::byte*, std::byte* out, std::size_t run,
                                                          std::size_t pos) {
    std::memcpy(out, send + (pos - offsets[me]), run);
  });
  gather_peers(channel, send, &recv, sizes, offsets, -1);
}

void allgather_self_sized(ShmChannel& channel, const std::byte* send, std::byte* recv, std::size_t max_block) {
  const int n = channel.size(), me = channel.rank();
  const std::uint32_t length = self_sized_length(send, max_block, me);
  std::byte* own = recv + static_cast<std::size_t>(me) * max_block;
  if (own != send) std::memcpy(own, send, length);
  channel.acquire_slot();
  if (length <= kSelfSizedFlaggedBytes) {
    channel.write_flagged(send, length);
  } else {  // the block through the slot; its flagged first line says how long it is
    copy_to_shared(channel.slot(me), send, length);
    channel.write_flagged(send, sizeof length);
  }
  for (int d = 1; d < n; ++d) {
    const int j = (me + d) % n;
    std::byte* theirs = recv + static_cast<std::size_t>(j) * max_block;
    const std::uint32_t got = channel.read_flagged_self_sized(j, theirs, max_block, kSelfSizedFlaggedBytes);
    if (got > kSelfSizedFlaggedBytes) std::memcpy(theirs, channel.slot(j), got);
  }
  channel.finish_step();
}

void broadcast(ShmChannel& channel, std::byte* buffer, std::size_t bytes, int root) {
  const std::size_t slot = channel.slot_bytes();
  const std::size_t steps = ceil_div(bytes, slot);
  for (std::size_t s = 0; s < steps; ++s) {
    const std::size_t begin = s * slot, len = std::min(slot, bytes - begin);
    if (channel.rank() == root) {
      channel.acquire_slot();
      copy_to_shared(channel.slot(root), buffer + begin, len);
      channel.post();
    } else {
      channel.wait_posted(root);
      std::memcpy(buffer + begin, channel.slot(root), len);
    }
    channel.finish_step();
  }
}

void alltoallv(ShmChannel& channel, const std::byte* send, std::span<const std::size_t> send_bytes, std::byte* recv,
               std::span<const std::size_t> recv_bytes) {
  const int n = channel.size(), me = channel.rank();
  const std::vector<std::size_t> send_offsets = prefix_offsets(send_bytes);
  const std::vector<std::size_t> recv_offsets = prefix_offsets(recv_bytes);
  std::vector<std::byte> private_send;
  if (overlaps(send, send_offsets[n], recv, recv_offsets[n])) {
    private_send.assign(send, send + send_offsets[n]);
    send = private_send.data();
  }
  // Sizes first: a rank whose sizes disagree must not write into `recv`.
  const std::vector<std::size_t> sent =
      size_table_bytes(n) <= kFlaggedBytes
          ? exchange_alltoall_flagged(channel, send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets)
          : exchange_alltoall_sizes(channel, send_bytes, recv_bytes);
  copy_bytes(recv + recv_offsets[me], send + send_offsets[me], send_bytes[me]);

  const std::size_t per_peer = channel.slot_bytes() / static_cast<std::size_t>(n) / kCacheLine * kCacheLine;
  std::size_t largest = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i != j) largest = std::max(largest, sent[i * n + j]);
    }
  }
  const std::size_t steps = ceil_div(largest, per_peer);
  for (std::size_t s = 0; s < steps; ++s) {
    const std::size_t begin = s * per_peer;
    auto piece_len = [&](int from, int to) {
      std::size_t total = sent[from * n + to];
      return begin < total ? std::min(per_peer, total - begin) : 0;
    };
    bool writes = false;
    for (int j = 0; j < n; ++j) writes |= j != me && piece_len(me, j) > 0;
    if (writes) {
      channel.acquire_slot();
      std::byte* mine = channel.slot(me);
      for (int d = 1; d < n; ++d) {
        const int j = (me + d) % n;
        copy_to_shared(mine + j * per_peer, send + send_offsets[j] + begin, piece_len(me, j));
      }
      channel.post();
    }
    for (int d = 1; d < n; ++d) {
      const int i = (me + n - d) % n;
      const std::size_t len = piece_len(i, me);
      if (len == 0) continue;
      channel.wait_posted(i);
      std::memcpy(recv + recv_offsets[i] + begin, channel.slot(i) + me * per_peer, len);
    }
    channel.finish_step();
  }
}

void barrier(ShmChannel& channel) {
  channel.post();
  for (int d = 1; d < channel.size(); ++d) channel.wait_posted((channel.rank() + d) % channel.size());
  channel.finish_step();
}

}  // namespace kolo::comm::shm
