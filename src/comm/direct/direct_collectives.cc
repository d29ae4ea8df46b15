// kolo's collectives on point-to-point transfers.
//
// Every collective is one or a few Batches (point_to_point.h): point-to-point
// transfers, posted to all peers at once and then waited for.
// Direct exchanges move as many bytes per rank as a ring does ((size-1)/size of
// the data per phase) in one round trip instead of size-1, which suits the small
// host counts kolo's TCP path serves.
//
// ALLREDUCE, small (<= Tuning::small_bytes): every rank sends its whole input to
// every peer and reduces all inputs in rank order with reduce_many: one round
// trip, the fastest path for the engine's negotiation messages.
// ALLREDUCE, large: the buffer is cut into `size` blocks, block j owned by rank
// j. Reduce-scatter: in rounds of at most round_bytes per peer (double-buffered,
// so the next round is on the wire while this one is reduced), every rank sends
// each owner its piece of the owner's block, and each owner reduces the pieces of
// all ranks in rank order with reduce_many, then scales it (allreduce with a ResultScale)
// while it is in cache. Allgather: as soon as an owner has reduced a round's
// piece it sends it to every peer, so the allgather is on the wire while later
// rounds are reduced.
// Either way every element is reduced once, by one rank, over all ranks in rank
// order with the same kernel as the shared-memory communicator: every rank gets
// the same bits, and the same bits as shm would give (float16 and bfloat16
// accumulate in float32 and round once). gloo's own ring allreduce would also
// give every rank the same bits, but in ring order from each segment's owner and
// rounding at every step, so its results would depend on the transport. (A ring
// also needs size-1 round trips per phase where a direct exchange needs one.)
// ALLREDUCE over regions (a fused batch of tensors): the same, over the regions'
// joint index space; a piece that spans several regions moves as one message per
// region, read from and written into the tensors themselves.
// REDUCE_SCATTER: the reduce-scatter phase alone, with the caller's blocks.
// ALLGATHERV / GATHERV / BROADCAST / ALLTOALLV / BARRIER: one exchange each.
// In place: send == recv works everywhere (and for allgatherv / reduce_scatter the
// rank's own block of the other); other overlaps take a private copy first.
#include "comm/direct/direct_collectives.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "common/env.h"
#include "common/reduce.h"
#include "common/settings.h"
#include "kolo/error.h"

namespace kolo::comm::direct {
namespace {

using settings::Kind;
using settings::Scope;

// Both cut a collective into messages: ranks that disagree would post different ones.
KOLO_SETTING(kTcpSmallBytes, {.name = "KOLO_TCP_SMALL_BYTES", .kind = Kind::Integer, .fallback = "64K", .min = 0,
                              .max = env::kMaxSettingBytes, .scope = Scope::AllRanks,
                              .doc = "tcp: an allreduce up to this size is one exchange of whole inputs"});
KOLO_SETTING(kTcpRoundBytes, {.name = "KOLO_TCP_ROUND_BYTES", .kind = Kind::Integer,
                              .fallback = "128K / (ranks - 1)", .min = 1024, .max = Tuning::kMaxRoundBytes,
                              .scope = Scope::AllRanks, .doc = "tcp: the reduce-scatter's round per peer"});
KOLO_SETTING(kGlooSmallBytes, {.name = "KOLO_GLOO_SMALL_BYTES", .kind = Kind::Integer, .fallback = "64K", .min = 0,
                               .max = env::kMaxSettingBytes, .scope = Scope::AllRanks,
                               .doc = "gloo: an allreduce up to this size is one exchange of whole inputs"});
KOLO_SETTING(kGlooRoundBytes, {.name = "KOLO_GLOO_ROUND_BYTES", .kind = Kind::Integer, .fallback = "1M", .min = 1024,
                               .max = Tuning::kMaxRoundBytes, .scope = Scope::AllRanks,
                               .doc = "gloo: the reduce-scatter's round per peer"});
// Tuning::from_env reads any prefix's with tcp's bounds.
static_assert(kGlooSmallBytes.min == kTcpSmallBytes.min && kGlooSmallBytes.max == kTcpSmallBytes.max);
static_assert(kGlooRoundBytes.min == kTcpRoundBytes.min && kGlooRoundBytes.max == kTcpRoundBytes.max);

std::vector<std::size_t> even_blocks(std::size_t count, int n) {
  std::vector<std::size_t> counts(n, count / n);
  for (std::size_t j = 0; j < count % n; ++j) ++counts[j];
  return counts;
}

std::vector<std::size_t> offsets_of(std::span<const std::size_t> sizes) {
  std::vector<std::size_t> offsets(sizes.size() + 1, 0);
  for (std::size_t j = 0; j < sizes.size(); ++j) offsets[j + 1] = offsets[j] + sizes[j];
  return offsets;
}

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

void check_spans(std::size_t got, int n, const char* what) {
  if (got != static_cast<std::size_t>(n))
    throw InvalidArgumentError(std::string(what) + ": expected one size per rank (" + std::to_string(n) + "), got " +
                               std::to_string(got));
}

void check_root(int root, int n, const char* what) {
  if (root < 0 || root >= n)
    throw InvalidArgumentError(std::string(what) + ": root rank " + std::to_string(root) + " is not below " +
                               std::to_string(n));
}

void check_reduction(DataType dtype, ReduceOp op, const char* what) {
  if (!is_valid(dtype)) throw InvalidArgumentError(std::string(what) + ": invalid data type");
  if (!is_valid(op) || op == ReduceOp::Average)
    throw InvalidArgumentError(std::string(what) + ": the communicator takes Sum, Min, Max or Product");
}

// A reduction runs in pieces of this size, the transport's progress() between them.
constexpr std::size_t kReduceChunkBytes = 64 << 10;

// Elements [first, first + length) of a block of `count` travel in `round`.
std::pair<std::size_t, std::size_t> round_piece(std::size_t count, std::size_t round, std::size_t per_round) {
  const std::size_t first = round * per_round;
  if (first >= count) return {first, 0};
  return {first, std::min(per_round, count - first)};
}

// Index of peer k among this rank's peers (self excluded), for scratch layouts.
int peer_index(int k, int me) { return k < me ? k : k - 1; }

}  // namespace

Tuning Tuning::from_env(const std::string& prefix, Tuning defaults) {
  const std::string small_name = prefix + "_SMALL_BYTES", round_name = prefix + "_ROUND_BYTES";
  settings::Setting small = kTcpSmallBytes, round = kTcpRoundBytes;
  small.name = small_name.c_str();
  round.name = round_name.c_str();
  Tuning t = defaults;
  t.small_bytes = static_cast<std::size_t>(small.integer(static_cast<std::int64_t>(t.small_bytes)));
  // Unset keeps the default, 0 (automatic) included: only a setting must be at least 1 KiB.
  t.round_bytes = static_cast<std::size_t>(round.integer(static_cast<std::int64_t>(t.round_bytes)));
  return t;
}

std::size_t Tuning::round_bytes_for(int size) const {
  if (round_bytes != 0) return round_bytes;
  return std::max(kMinAutoRoundBytes, kAutoRoundBytes / static_cast<std::size_t>(std::max(1, size - 1)));
}

std::byte* Collectives::scratch(std::size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

void Collectives::allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                            const ResultScale& scale) {
  check_reduction(dtype, op, "allreduce");
  mesh_.check_usable();
  const std::size_t es = element_size(dtype);
  auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  if (mesh_.size() == 1 || count == 0) {
    if (in != out && count > 0) std::memmove(out, in, count * es);
    scale.apply(out, count, dtype);
    return;
  }
  if (count * es <= tuning_.small_bytes) return allreduce_small(in, out, count, dtype, op, scale);
  const Region whole{send, recv, count};
  allreduce_large(RegionList({&whole, 1}, es), dtype, op, scale);
}

void Collectives::allreduce_regions(std::span<const Region> regions, DataType dtype, ReduceOp op,
                                    const ResultScale& scale) {
  check_reduction(dtype, op, "allreduce");
  mesh_.check_usable();
  const std::size_t es = element_size(dtype);
  const RegionList list(regions, es);
  if (mesh_.size() == 1) {
    list.for_each(0, list.count(), [&](const std::byte* in, std::byte* out, std::size_t n, std::size_t) {
      if (in != out) std::memmove(out, in, n * es);
      scale.apply(out, n, dtype);
    });
    return;
  }
  if (list.count() * es > tuning_.small_bytes) return allreduce_large(list, dtype, op, scale);
  // One small exchange of the joint elements: staged, as the whole costs less
  // than a message per region.
  std::vector<std::byte> joint(list.count() * es);
  list.gather_sends(joint.data());
  allreduce_small(joint.data(), joint.data(), list.count(), dtype, op, scale);
  list.scatter_recvs(joint.data());
}

void Collectives::allreduce_large(const RegionList& space, DataType dtype, ReduceOp op,
                                  const ResultScale& scale) {
  const int n = mesh_.size(), me = mesh_.rank();
  const std::size_t es = element_size(dtype);
  auto counts = even_blocks(space.count(), n);
  auto offsets = offsets_of(counts);
  const std::size_t per_round = elements_per_round(es);
  std::vector<std::unique_ptr<Batch>> gathers;
  reduce_blocks(space, counts, offsets, dtype, op, scale, "allreduce", [&](std::size_t round) {
    auto gather = mesh_.batch("allreduce");
    const auto mine = round_piece(counts[me], round, per_round);
    const std::size_t mine_from = offsets[me] + mine.first;
    for (int k = 0; k < n; ++k) {
      if (k == me) continue;
      const auto theirs = round_piece(counts[k], round, per_round);
      const std::size_t theirs_from = offsets[k] + theirs.first;
      space.for_each(theirs_from, theirs_from + theirs.second,
                     [&](const std::byte*, std::byte* out, std::size_t run, std::size_t) {
                       gather->recv(k, out, run * es);
                     });
      space.for_each(mine_from, mine_from + mine.second,
                     [&](const std::byte*, std::byte* out, std::size_t run, std::size_t) {
                       gather->send(k, out, run * es);
                     });
    }
    gathers.push_back(std::move(gather));
  });
  for (auto& gather : gathers) gather->wait();
}

void Collectives::allreduce_small(const std::byte* in, std::byte* out, std::size_t count, DataType dtype,
                                  ReduceOp op, const ResultScale& scale) {
  const int n = mesh_.size(), me = mesh_.rank();
  const std::size_t bytes = count * element_size(dtype);
  std::byte* inputs = scratch((n - 1) * bytes);
  auto exchange = mesh_.batch("allreduce");
  for (int k = 0; k < n; ++k) {
    if (k == me) continue;
    exchange->recv(k, inputs + peer_index(k, me) * bytes, bytes);
    exchange->send(k, in, bytes);
  }
  exchange->wait();
  std::vector<const void*> srcs(n);
  for (int k = 0; k < n; ++k) srcs[k] = k == me ? in : inputs + peer_index(k, me) * bytes;
  reduce_many(out, srcs.data(), n, count, dtype, op);
  scale.apply(out, count, dtype);
}

std::size_t Collectives::elements_per_round(std::size_t es) const {
  return std::max<std::size_t>(1, tuning_.round_bytes_for(mesh_.size()) / es);
}

void Collectives::reduce_progressing(std::byte* out, std::vector<const void*>& srcs, std::size_t count,
                                     DataType dtype, ReduceOp op, const ResultScale& scale) {
  const std::size_t es = element_size(dtype);
  const std::size_t chunk = std::max<std::size_t>(1, kReduceChunkBytes / es);
  for (std::size_t done = 0; done < count; done += chunk) {
    if (done > 0) {
      mesh_.progress();
      for (auto& src : srcs) src = static_cast<const std::byte*>(src) + chunk * es;
    }
    const std::size_t len = std::min(chunk, count - done);
    reduce_many(out + done * es, srcs.data(), static_cast<int>(srcs.size()), len, dtype, op);
    scale.apply(out + done * es, len, dtype);
  }
}

void Collectives::reduce_blocks(const RegionList& space, std::span<const std::size_t> counts,
                                std::span<const std::size_t> offsets, DataType dtype, ReduceOp op,
                                const ResultScale& scale, const char* what,
                                const std::function<void(std::size_t round)>& after_round) {
  const int n = mesh_.size(), me = mesh_.rank();
  const std::size_t es = element_size(dtype);
  const std::size_t per_round = elements_per_round(es);
  const std::size_t longest = *std::max_element(counts.begin(), counts.end());
  const std::size_t rounds = (longest + per_round - 1) / per_round;
  if (rounds == 0) return;
  const std::size_t lane = per_round * es;  // scratch bytes per peer and round
  std::byte* pieces = scratch(2 * (n - 1) * lane);
  auto lanes_of = [&](std::size_t round) { return pieces + (round % 2) * (n - 1) * lane; };
  auto piece = [&](int j, std::size_t round) { return round_piece(counts[j], round, per_round); };
  // A piece moves as one message per region it spans, on both sides alike.
  auto post = [&](std::size_t round) {
    auto exchange = mesh_.batch(what);
    const auto mine = piece(me, round);
    const std::size_t mine_from = offsets[me] + mine.first;
    for (int k = 0; k < n; ++k) {
      if (k == me) continue;
      std::byte* their_lane = lanes_of(round) + peer_index(k, me) * lane;
      space.for_each(mine_from, mine_from + mine.second, [&](const std::byte*, std::byte*, std::size_t run,
                                                             std::size_t pos) {
        exchange->recv(k, their_lane + (pos - mine_from) * es, run * es);
      });
      const auto theirs = piece(k, round);
      const std::size_t theirs_from = offsets[k] + theirs.first;
      space.for_each(theirs_from, theirs_from + theirs.second,
                     [&](const std::byte* in, std::byte*, std::size_t run, std::size_t) {
                       exchange->send(k, in, run * es);
                     });
    }
    return exchange;
  };

  std::vector<const void*> srcs(n);
  auto current = post(0);
  for (std::size_t round = 0; round < rounds; ++round) {
    auto next = round + 1 < rounds ? post(round + 1) : nullptr;
    current->wait();
    const auto [first, length] = piece(me, round);
    const std::size_t from = offsets[me] + first;
    space.for_each(from, from + length, [&](const std::byte* in, std::byte* out, std::size_t run, std::size_t pos) {
      for (int k = 0; k < n; ++k)
        srcs[k] = k == me ? in : lanes_of(round) + peer_index(k, me) * lane + (pos - from) * es;
      reduce_progressing(out, srcs, run, dtype, op, scale);
    });
    if (after_round) after_round(round);
    current = std::move(next);
  }
}

void Collectives::reduce_scatter(const void* send, void* recv, std::span<const std::size_t> recv_counts,
                                 DataType dtype, ReduceOp op) {
  check_reduction(dtype, op, "reduce_scatter");
  check_spans(recv_counts.size(), mesh_.size(), "reduce_scatter");
  mesh_.check_usable();
  const int me = mesh_.rank();
  const std::size_t es = element_size(dtype);
  auto offsets = offsets_of(recv_counts);
  auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const std::size_t total = offsets.back() * es;
  std::vector<std::byte> input_copy;  // only for unusual overlaps; not kept between calls
  if (out != in + offsets[me] * es && overlaps(in, total, out, recv_counts[me] * es)) {
    input_copy.assign(in, in + total);
    in = input_copy.data();
  }
  if (mesh_.size() == 1) {
    if (in != out && total > 0) std::memmove(out, in, total);
    return;
  }
  // The input as three regions, only this rank's block with an output: every
  // piece another rank sends lies in one region on both sides.
  const Region parts[] = {{in, nullptr, offsets[me]},
                          {in + offsets[me] * es, out, recv_counts[me]},
                          {in + offsets[me + 1] * es, nullptr, offsets.back() - offsets[me + 1]}};
  reduce_blocks(RegionList(parts, es), recv_counts, offsets, dtype, op, {}, "reduce_scatter");
}

void Collectives::allgatherv(const void* send, std::size_t send_bytes, void* recv,
                             std::span<const std::size_t> recv_bytes) {
  const int n = mesh_.size(), me = mesh_.rank();
  check_spans(recv_bytes.size(), n, "allgatherv");
  if (send_bytes != recv_bytes[me])
    throw InvalidArgumentError("allgatherv: this rank sends " + std::to_string(send_bytes) + " bytes but its block is " +
                               std::to_string(recv_bytes[me]));
  mesh_.check_usable();
  auto offsets = offsets_of(recv_bytes);
  auto* out = static_cast<std::byte*>(recv);
  std::byte* mine = out + offsets[me];
  if (send != mine && send_bytes > 0) std::memmove(mine, send, send_bytes);
  auto exchange = mesh_.batch("allgatherv");
  for (int k = 0; k < n; ++k) {
    if (k == me) continue;
    exchange->recv(k, out + offsets[k], recv_bytes[k]);
    exchange->send(k, mine, send_bytes);
  }
  exchange->wait();
}

void Collectives::gatherv(const void* send, std::size_t send_bytes, void* recv,
                          std::span<const std::size_t> recv_bytes, int root) {
  const int n = mesh_.size(), me = mesh_.rank();
  check_spans(recv_bytes.size(), n, "gatherv");
  check_root(root, n, "gatherv");
  if (send_bytes != recv_bytes[me])
    throw InvalidArgumentError("gatherv: this rank sends " + std::to_string(send_bytes) + " bytes but its block is " +
                               std::to_string(recv_bytes[me]));
  mesh_.check_usable();
  auto exchange = mesh_.batch("gatherv");
  if (me != root) {
    exchange->send(root, send, send_bytes);
  } else {
    auto offsets = offsets_of(recv_bytes);
    auto* out = static_cast<std::byte*>(recv);
    if (send != out + offsets[me] && send_bytes > 0) std::memmove(out + offsets[me], send, send_bytes);
    for (int k = 0; k < n; ++k) {
      if (k != me) exchange->recv(k, out + offsets[k], recv_bytes[k]);
    }
  }
  exchange->wait();
}

void Collectives::broadcast(void* buffer, std::size_t bytes, int root) {
  const int n = mesh_.size(), me = mesh_.rank();
  check_root(root, n, "broadcast");
  mesh_.check_usable();
  auto exchange = mesh_.batch("broadcast");
  if (me == root) {
    for (int k = 0; k < n; ++k) {
      if (k != me) exchange->send(k, buffer, bytes);
    }
  } else {
    exchange->recv(root, buffer, bytes);
  }
  exchange->wait();
}

void Collectives::alltoallv(const void* send, std::span<const std::size_t> send_bytes, void* recv,
                            std::span<const std::size_t> recv_bytes) {
  const int n = mesh_.size(), me = mesh_.rank();
  check_spans(send_bytes.size(), n, "alltoallv");
  check_spans(recv_bytes.size(), n, "alltoallv");
  if (send_bytes[me] != recv_bytes[me])
    throw InvalidArgumentError("alltoallv: this rank sends itself " + std::to_string(send_bytes[me]) +
                               " bytes but expects " + std::to_string(recv_bytes[me]));
  mesh_.check_usable();
  auto send_offsets = offsets_of(send_bytes);
  auto recv_offsets = offsets_of(recv_bytes);
  auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  std::vector<std::byte> input_copy;  // only for overlapping buffers; not kept between calls
  if (overlaps(in, send_offsets.back(), out, recv_offsets.back())) {
    input_copy.assign(in, in + send_offsets.back());
    in = input_copy.data();
  }
  if (send_bytes[me] > 0) std::memmove(out + recv_offsets[me], in + send_offsets[me], send_bytes[me]);
  auto exchange = mesh_.batch("alltoallv");
  for (int k = 0; k < n; ++k) {
    if (k == me) continue;
    exchange->recv(k, out + recv_offsets[k], recv_bytes[k]);
    exchange->send(k, in + send_offsets[k], send_bytes[k]);
  }
  exchange->wait();
}

void Collectives::barrier() {
  const int n = mesh_.size(), me = mesh_.rank();
  mesh_.check_usable();
  std::vector<std::uint8_t> tokens(n, 1);
  auto exchange = mesh_.batch("barrier");
  for (int k = 0; k < n; ++k) {
    if (k == me) continue;
    exchange->recv(k, &tokens[k], 1);
    exchange->send(k, &tokens[me], 1);
  }
  exchange->wait();
}

}  // namespace kolo::comm::direct
