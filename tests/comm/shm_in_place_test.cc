// The shared-memory communicator's collectives in place of the ranks' buffers
// (comm/shm/shm_in_place.h): large kolo::Buffers are shareable memfds whose
// descriptors the calls carry, peers map them through /proc, and the reduction
// reads and writes every rank's buffers where they lie. On real processes: the
// same bits as the slot path, the path taken exactly when every rank's call
// carries its buffers' placement, and every way it cannot run (plain memory on
// one rank, a malformed table, a rank not allowed to open its peers' files, a
// peer dying mid-call) ends on every rank alike, in the slot path or an error,
// never in a hang or a crash.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "comm/regions.h"
#include "comm/shm/peer_mappings.h"
#include "comm/shm/shm_channel.h"
#include "comm/shm/shm_collectives.h"
#include "comm/shm/shm_communicator.h"
#include "comm/shm/shm_buffer_exchange.h"
#include "comm/shm/shm_in_place.h"
#include "comm/shm/shm_segment.h"
#include "harness/multiprocess.h"
#include "harness/shareable_files.h"
#include "kolo/error.h"
#include "kolo/types.h"
#include "memory/mapping_cache.h"
#include "memory/shareable_memory.h"

namespace kolo::comm::shm {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kMiB = std::size_t{1} << 20;

bool is_shareable(const Buffer& b) { return detail::locate(b.memory(), b.data(), b.nbytes()).has_value(); }

TEST(ShareableMemory, ShareableBuffersSayWhereTheyLie) {
  Buffer large = Buffer::shareable(DataType::Float32, Shape{std::int64_t{1} << 20});  // 4 MiB
  const auto at = detail::locate(large.memory(), large.as<std::byte>() + 128, 4096);
  ASSERT_TRUE(at.has_value());
  EXPECT_GE(at->fd, 0);
  EXPECT_EQ(at->offset, 128u);
  EXPECT_GE(at->file_bytes, large.nbytes());
  EXPECT_NE(at->inode, 0u);
  EXPECT_EQ(large.as<float>()[12345], 0.0f);  // zero-filled
  // Past the end of the file: not one shareable range.
  EXPECT_FALSE(detail::locate(large.memory(), large.as<std::byte>() + 128, at->file_bytes).has_value());
  EXPECT_TRUE(is_shareable(Buffer::shareable(DataType::Float32, Shape{1000})));  // small ones too, when asked
  EXPECT_FALSE(is_shareable(Buffer(DataType::Float32, Shape{1000})));
  const Buffer original = Buffer::shareable(DataType::Float32, Shape{1000});
  const Buffer copy(original);  // a copy is an ordinary Buffer
  EXPECT_FALSE(is_shareable(copy));
  int on_stack = 0;
  EXPECT_FALSE(detail::locate(large.memory(), &on_stack, sizeof on_stack).has_value());
  EXPECT_FALSE(detail::locate(nullptr, &on_stack, sizeof on_stack).has_value());
}

// The memory travels with the Buffer and its views, never with a bare pointer.
TEST(ShareableMemory, ABuffersViewsCarryItsMemoryAndBarePointersDoNot) {
  Buffer shared = Buffer::shareable(DataType::Float32, Shape{1000});
  const ShareableMemory* memory = shared.memory();
  ASSERT_NE(memory, nullptr);
  EXPECT_EQ(shared.view().memory, memory);
  EXPECT_EQ(make_tensor(shared.as<float>(), 1000).memory, nullptr);
  EXPECT_EQ((Tensor{shared.data(), DataType::Float32, Shape{1000}}.memory), nullptr);
  Buffer moved = std::move(shared);  // the same memory, the same descriptor
  EXPECT_EQ(moved.memory(), memory);
  EXPECT_EQ(moved.view().memory, memory);
  EXPECT_EQ(shared.memory(), nullptr);
  EXPECT_EQ(shared.view().memory, nullptr);
  EXPECT_EQ(Buffer(moved).memory(), nullptr);  // a copy is an ordinary Buffer
  EXPECT_EQ(Buffer(DataType::Float32, Shape{1000}).view().memory, nullptr);
  EXPECT_EQ(Buffer().view().memory, nullptr);
  // A released Buffer's mapping, reused by the next of its size, brings its descriptor.
  const void* data = moved.data();
  moved = Buffer();
  Buffer reused = Buffer::shareable(DataType::Float32, Shape{1000});
  ASSERT_EQ(reused.data(), data);
  EXPECT_EQ(reused.memory(), memory);
  EXPECT_EQ(reused.as<float>()[999], 0.0f);
}

// KOLO_SHAREABLE_BUFFERS: 0 none, 1 every large Buffer, auto (default) the
// asked-for ones, and every large one where shared memory gets huge pages.
TEST(ShareableMemory, WhichBuffersAreShareableFollowsThePolicy) {
  const Shape large{std::int64_t{3} << 20};
  ::setenv("KOLO_SHAREABLE_BUFFERS", "0", 1);
  EXPECT_FALSE(is_shareable(Buffer::shareable(DataType::UInt8, large)));
  EXPECT_EQ(Buffer::shareable(DataType::UInt8, Shape{100}).as<std::uint8_t>()[99], 0);  // an ordinary Buffer
  ::setenv("KOLO_SHAREABLE_BUFFERS", "1", 1);
  EXPECT_TRUE(is_shareable(Buffer(DataType::UInt8, large)));
  EXPECT_FALSE(is_shareable(Buffer(DataType::UInt8, Shape{100})));
  ::setenv("KOLO_SHAREABLE_BUFFERS", "sometimes", 1);
  EXPECT_THROW(Buffer(DataType::UInt8, large), InvalidArgumentError);
  ::unsetenv("KOLO_SHAREABLE_BUFFERS");
  std::ifstream sysfs("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string line;
  std::getline(sysfs, line);
  const bool huge = line.find("[always]") != std::string::npos || line.find("[within_size]") != std::string::npos ||
                    line.find("[advise]") != std::string::npos || line.find("[force]") != std::string::npos;
  EXPECT_EQ(is_shareable(Buffer(DataType::UInt8, large)), huge) << line;
  EXPECT_TRUE(is_shareable(Buffer::shareable(DataType::UInt8, large)));
}

TEST(ShareableMemory, UnmappingClosesTheFileAndUnmapsTheRange) {
  ShareableMemory* memory = detail::map_shareable(4 * kMiB, 2 * kMiB);
  ASSERT_NE(memory, nullptr);
  std::byte* p = memory->base;
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % (2 * kMiB), 0u);
  const auto at = detail::locate(memory, p, 4 * kMiB);
  ASSERT_TRUE(at.has_value());
  std::memset(p, 7, 4 * kMiB);  // writable, whole
  detail::unmap_shareable(memory);
  EXPECT_EQ(::fcntl(at->fd, F_GETFD), -1);
  EXPECT_NE(::msync(p, 4 * kMiB, MS_ASYNC), 0);  // ENOMEM: nothing mapped there
}

// fork() keeps its meaning for Buffers: the child gets a copy, as of private
// memory, not the parent's memory (nor, through the mapping cache, a sibling's).
TEST(ShareableMemory, AForkedChildGetsItsOwnCopyOfEachBuffer) {
  Buffer live = Buffer::shareable(DataType::UInt8, Shape{std::int64_t{3} << 20});
  std::memset(live.data(), 1, live.nbytes());
  { Buffer released = Buffer::shareable(DataType::UInt8, Shape{std::int64_t{4} << 20}); }  // kept by the mapping cache
  const pid_t child = ::fork();
  if (child == 0) {
    const bool saw_parents = live.as<std::uint8_t>()[live.nbytes() - 1] == 1;
    std::memset(live.data(), 2, live.nbytes());
    Buffer reused = Buffer::shareable(DataType::UInt8, Shape{std::int64_t{4} << 20});
    std::memset(reused.data(), 3, reused.nbytes());
    // Here its views take it for plain memory.
    const bool private_now = live.memory() != nullptr && !detail::locate(live.memory(), live.data(), 1).has_value();
    // Released, that private memory is not handed out again as shareable.
    live = Buffer();
    const Buffer fresh = Buffer::shareable(DataType::UInt8, Shape{std::int64_t{3} << 20});
    const bool fresh_shareable = detail::locate(fresh.memory(), fresh.data(), fresh.nbytes()).has_value();
    ::_exit(saw_parents && private_now && fresh_shareable ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(live.as<std::uint8_t>()[0], 1);
  EXPECT_EQ(live.as<std::uint8_t>()[live.nbytes() - 1], 1);
  // The released Buffer's mapping, still kept by the parent's cache: the child's
  // writes went to memory of its own.
  ShareableMemory* kept = detail::MappingCache::process().take_shareable(std::size_t{4} << 20);
  ASSERT_NE(kept, nullptr);
  EXPECT_NE(static_cast<std::uint8_t>(kept->base[0]), 3);
  detail::MappingCache::process().give(kept);
  EXPECT_TRUE(detail::locate(live.memory(), live.data(), live.nbytes()).has_value());
}

// Where a shareable Buffer lies (it must be shareable).
detail::ShareableLocation location_of(const Buffer& b) {
  const auto at = detail::locate(b.memory(), b.data(), b.nbytes());
  EXPECT_TRUE(at.has_value());
  return at.value_or(detail::ShareableLocation{});
}

TEST(PeerMappings, MapsAFileOnceAndSeesItsWrites) {
  Buffer file = Buffer::shareable(DataType::UInt8, Shape{std::int64_t{2} << 20});
  char* p = file.as<char>();
  const auto at = location_of(file);
  {
    PeerMappings mappings;
    std::byte* mapped = mappings.map(1, ::getpid(), at.fd, at.inode, at.file_bytes);
    ASSERT_NE(mapped, nullptr);
    EXPECT_NE(static_cast<void*>(mapped), static_cast<void*>(p));  // another mapping of the same memory
    p[12345] = 42;
    EXPECT_EQ(static_cast<char>(mapped[12345]), 42);
    mapped[777] = std::byte{9};
    EXPECT_EQ(p[777], 9);
    EXPECT_EQ(mappings.map(1, ::getpid(), at.fd, at.inode, at.file_bytes), mapped);
    EXPECT_EQ(mappings.mapped_files(), 1u);
  }
}

TEST(PeerMappings, RefusesAnotherFileALongerOneOrAGoneProcess) {
  const Buffer file = Buffer::shareable(DataType::UInt8, Shape{std::int64_t{2} << 20});
  const auto at = location_of(file);
  PeerMappings mappings;
  EXPECT_EQ(mappings.map(1, ::getpid(), at.fd, at.inode + 1, at.file_bytes), nullptr);  // not that file
  EXPECT_EQ(mappings.map(1, ::getpid(), at.fd, at.inode, at.file_bytes * 2), nullptr);  // shorter than said
  EXPECT_EQ(mappings.map(1, ::getpid(), 1 << 20, at.inode, at.file_bytes), nullptr);     // no such descriptor
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  EXPECT_EQ(mappings.map(1, gone, at.fd, at.inode, at.file_bytes), nullptr);
  EXPECT_EQ(mappings.map(1, -1, at.fd, at.inode, at.file_bytes), nullptr);
  EXPECT_EQ(mappings.mapped_files(), 0u);
}

// Maps `buffer`'s file as peer 1's through `mappings`.
std::byte* map_as_peer(PeerMappings& mappings, const Buffer& buffer) {
  const auto at = location_of(buffer);
  return mappings.map(1, ::getpid(), at.fd, at.inode, at.file_bytes);
}

// Mapped files keep the peer's memory alive, so those older calls used go past
// a limit (or past twice what the current call uses); never those the current
// call uses.
TEST(PeerMappings, OlderCallsFilesAreUnmappedPastTheLimit) {
  const Buffer a = Buffer::shareable(DataType::UInt8, Shape{std::int64_t{2} << 20});
  const Buffer b = Buffer::shareable(DataType::UInt8, Shape{std::int64_t{2} << 20});
  const Buffer c = Buffer::shareable(DataType::UInt8, Shape{std::int64_t{2} << 20});
  PeerMappings mappings;
  auto map = [&](const Buffer& buffer) { return map_as_peer(mappings, buffer); };
  mappings.begin_call();
  ASSERT_NE(map(a), nullptr);
  mappings.trim(0);
  EXPECT_EQ(mappings.mapped_files(), 1u);  // in use by this call
  mappings.begin_call();
  ASSERT_NE(map(b), nullptr);
  mappings.trim(0);
  EXPECT_EQ(mappings.mapped_files(), 2u);  // a's stays: two calls' worth
  mappings.begin_call();
  ASSERT_NE(map(c), nullptr);
  mappings.trim(0);
  EXPECT_EQ(mappings.mapped_files(), 2u);  // a's went, the oldest
  mappings.begin_call();
  ASSERT_NE(map(b), nullptr);
  ASSERT_NE(map(c), nullptr);
  mappings.trim(std::uint64_t{1} << 30);
  EXPECT_EQ(mappings.mapped_files(), 2u);
  EXPECT_EQ(mappings.mapped_bytes(), std::uint64_t{4} << 20);
  mappings.begin_call();
  ASSERT_NE(map(a), nullptr);
  mappings.trim(0);
  EXPECT_EQ(mappings.mapped_files(), 2u);  // one of b's and c's went
  EXPECT_EQ(mappings.mapped_bytes(), std::uint64_t{4} << 20);
}

// Calls that alternate two sets of files (an output held while the next call
// makes another) keep both mapped whatever the limit: each call would
// otherwise map and fault its files afresh.
TEST(PeerMappings, FilesOfAlternatingCallsStayMapped) {
  const Buffer a = Buffer::shareable(DataType::UInt8, Shape{std::int64_t{2} << 20});
  const Buffer b = Buffer::shareable(DataType::UInt8, Shape{std::int64_t{2} << 20});
  PeerMappings mappings;
  auto map = [&](const Buffer& buffer) { return map_as_peer(mappings, buffer); };
  for (int call = 0; call < 6; ++call) {
    mappings.begin_call();
    ASSERT_NE(map(call % 2 == 0 ? a : b), nullptr);
    mappings.trim(std::uint64_t{1} << 20);  // below one file
    EXPECT_EQ(mappings.mapped_files(), call == 0 ? 1u : 2u) << "call " << call;
  }
}

// ---- the collective, on real processes ----------------------------------------------------

ShmChannel join_channel(int rank, int size) {
  return ShmChannel(join_segment(segment_name(std::getenv("KOLO_JOB_ID")), rank, size,
                                 SegmentConfig{.slot_bytes = 64 << 10, .small_bytes = 4096, .mapped_bytes = kMiB},
                                 10s),
                    rank, CommunicatorOptions{});
}

void run_job(int size, const std::function<void(int)>& body) {
  testing::SpawnOptions options;
  options.use_store = false;
  options.timeout = 60s;
  testing::run_ranks(size, body, options);
}

// Deterministic inputs with a spread of magnitudes, so that a different order
// of summation would show in the bits.
void fill(Buffer& b, int rank) {
  const std::size_t n = b.nbytes() / element_size(b.dtype());
  for (std::size_t i = 0; i < n; ++i) {
    const double v = static_cast<double>((rank * 7919 + i * 31) % 1001) * 0.37 - 50.0 + (i % 3 == 0 ? 1e5 : 0.0);
    switch (b.dtype()) {
      case DataType::Float32: b.as<float>()[i] = static_cast<float>(v); break;
      case DataType::Int32: b.as<std::int32_t>()[i] = static_cast<std::int32_t>(v); break;
      case DataType::Float16: b.as<std::uint16_t>()[i] = static_cast<std::uint16_t>(0x3c00 + (i + rank * 5) % 500); break;
      default: FAIL() << "no filler for " << to_string(b.dtype());
    }
  }
}

// One rank's side of the in-place allreduce, with its own exchange and scratch.
struct InPlace {
  explicit InPlace(int size) : exchange(size), srcs(static_cast<std::size_t>(size)) {}
  bool allreduce(ShmChannel& channel, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                 Placement placement) {
    return allreduce_in_place(channel, exchange, send, recv, count, dtype, op, {}, placement, srcs);
  }
  BufferExchange exchange;
  std::vector<const void*> srcs;
};

// What a rank entering the call publishes for `data` (in place), sent by hand:
// the tests below play a rank that publishes and then misbehaves.
void publish_by_hand(ShmChannel& channel, const Buffer& data, std::uint64_t offset) {
  BufferExchange::Published mine{};
  mine.pid = static_cast<std::int32_t>(::getpid());
  mine.usable = 1;
  const auto at = detail::locate(data.memory(), data.data(), data.nbytes());
  ASSERT_TRUE(at.has_value());
  mine.send = {at->fd, 0, at->inode, at->file_bytes, offset};
  mine.recv = mine.send;
  std::vector<BufferExchange::Published> table(static_cast<std::size_t>(channel.size()));
  const std::vector<std::size_t> sizes(table.size(), sizeof mine);
  gather(channel, reinterpret_cast<const std::byte*>(&mine), reinterpret_cast<std::byte*>(table.data()), sizes, -1);
}

// The slot path's result for `input`: the reference, bit for bit.
Buffer slot_allreduce(ShmChannel& channel, const Buffer& input, ReduceOp op) {
  Buffer out = Buffer::uninitialized(input.dtype(), input.shape());
  std::vector<const void*> srcs(static_cast<std::size_t>(channel.size())), run_srcs(srcs.size());
  const Region whole{input.data(), out.data(), out.nbytes() / element_size(out.dtype())};
  allreduce(channel, RegionList({&whole, 1}, element_size(out.dtype())), out.dtype(), op, {}, srcs, run_srcs);
  return out;
}

::testing::AssertionResult same_bytes(const Buffer& a, const Buffer& b) {
  if (a.nbytes() != b.nbytes()) return ::testing::AssertionFailure() << a.nbytes() << " bytes against " << b.nbytes();
  const auto* x = a.as<std::uint8_t>();
  const auto* y = b.as<std::uint8_t>();
  for (std::size_t i = 0; i < a.nbytes(); ++i) {
    if (x[i] != y[i]) return ::testing::AssertionFailure() << "first difference at byte " << i << " of " << a.nbytes();
  }
  return ::testing::AssertionSuccess();
}

TEST(ShmInPlace, AllreduceGivesTheSlotPathsBitsInAndOutOfPlace) {
  run_job(3, [](int rank) {
    ShmChannel channel = join_channel(rank, 3);
    InPlace mapped(3);
    struct Case {
      DataType dtype;
      ReduceOp op;
      std::int64_t count;  // no multiple of the pieces' 64-byte alignment
    };
    for (const Case c : {Case{DataType::Float32, ReduceOp::Sum, 700001}, Case{DataType::Int32, ReduceOp::Min, 600003},
                         Case{DataType::Float16, ReduceOp::Max, 1100007}}) {
      Buffer input = Buffer::shareable(c.dtype, Shape{c.count});
      fill(input, rank);
      const Buffer expected = slot_allreduce(channel, input, c.op);
      Buffer out = Buffer::shareable(c.dtype, Shape{c.count});
      const auto count = static_cast<std::size_t>(c.count);
      ASSERT_TRUE(mapped.allreduce(channel, input.data(), out.data(), count, c.dtype, c.op,
                                   {input.memory(), out.memory()}));
      EXPECT_TRUE(same_bytes(out, expected)) << to_string(c.dtype) << " out of place, rank " << rank;
      Buffer again = out;  // the input unchanged: a second call gives the same (cached mappings)
      ASSERT_TRUE(mapped.allreduce(channel, input.data(), out.data(), count, c.dtype, c.op,
                                   {input.memory(), out.memory()}));
      EXPECT_TRUE(same_bytes(out, again));
      ASSERT_TRUE(mapped.allreduce(channel, input.data(), input.data(), count, c.dtype, c.op,
                                   {input.memory(), input.memory()}));
      EXPECT_TRUE(same_bytes(input, expected)) << to_string(c.dtype) << " in place, rank " << rank;
    }
  });
}

TEST(ShmInPlace, AllreduceOfAPieceOfABufferAtAnOffsetStaysThere) {
  run_job(2, [](int rank) {
    ShmChannel channel = join_channel(rank, 2);
    InPlace mapped(2);
    Buffer big = Buffer::shareable(DataType::Float32, Shape{1 << 21});  // 8 MiB, the ranks use different parts of it
    const std::size_t offset = rank == 0 ? 1000 : 300017, count = 500000;
    float* data = big.as<float>() + offset;
    for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<float>(i % 97) + static_cast<float>(rank);
    ASSERT_TRUE(mapped.allreduce(channel, data, data, count, DataType::Float32, ReduceOp::Sum,
                                 {big.memory(), big.memory()}));
    for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(data[i], 2.0f * static_cast<float>(i % 97) + 1.0f) << i;
    EXPECT_EQ(big.as<float>()[offset - 1], 0.0f);  // nothing outside the range is touched
    EXPECT_EQ(big.as<float>()[offset + count], 0.0f);
  });
}

TEST(ShmInPlace, PlainMemoryOnOneRankTurnsEveryRankToTheSlotPath) {
  run_job(2, [](int rank) {
    ShmChannel channel = join_channel(rank, 2);
    InPlace mapped(2);
    const std::size_t count = 1 << 20;
    Buffer shareable = Buffer::shareable(DataType::Float32, Shape{static_cast<std::int64_t>(count)});
    std::vector<float> plain(count, 1.0f);
    float* data = rank == 1 ? plain.data() : shareable.as<float>();
    const ShareableMemory* memory = rank == 1 ? nullptr : shareable.memory();
    std::fill(data, data + count, 1.0f);
    EXPECT_FALSE(mapped.allreduce(channel, data, data, count, DataType::Float32, ReduceOp::Sum, {memory, memory}));
    EXPECT_EQ(data[count / 2], 1.0f);  // untouched
    // Overlapping other than exactly: refused too.
    EXPECT_FALSE(mapped.allreduce(channel, shareable.as<float>(), shareable.as<float>() + 16, count - 16,
                                  DataType::Float32, ReduceOp::Sum, {shareable.memory(), shareable.memory()}));
    barrier(channel);  // still in step
  });
}

// The path follows what the call carries, not where the memory is: the same
// shareable Buffers without their placement, with only one buffer's, or with
// memory that does not hold the buffer, take the slot path on every rank.
TEST(ShmInPlace, OnlyACallThatCarriesItsBuffersPlacementWorksInPlace) {
  run_job(2, [](int rank) {
    ShmChannel channel = join_channel(rank, 2);
    InPlace mapped(2);
    const std::int64_t count = 1 << 20;
    Buffer input = Buffer::shareable(DataType::Float32, Shape{count});
    Buffer out = Buffer::shareable(DataType::Float32, Shape{count});
    const Buffer other = Buffer::shareable(DataType::Float32, Shape{count});
    std::fill(input.as<float>(), input.as<float>() + count, 1.0f + static_cast<float>(rank));
    auto call = [&](Placement placement) {
      return mapped.allreduce(channel, input.data(), out.data(), count, DataType::Float32, ReduceOp::Sum, placement);
    };
    EXPECT_FALSE(call({}));
    EXPECT_FALSE(call({input.memory(), nullptr}));
    EXPECT_FALSE(call({nullptr, out.memory()}));
    EXPECT_FALSE(call({input.memory(), other.memory()}));
    EXPECT_FALSE(call(rank == 0 ? Placement{input.memory(), out.memory()} : Placement{}));  // one rank's is not enough
    EXPECT_EQ(out.as<float>()[count - 1], 0.0f);  // nothing written
    EXPECT_TRUE(call({input.memory(), out.memory()}));
    EXPECT_EQ(out.as<float>()[0], 3.0f);
    EXPECT_EQ(out.as<float>()[count - 1], 3.0f);
    barrier(channel);
  });
}

TEST(ShmInPlace, AMalformedTableIsRefusedByEveryRank) {
  run_job(2, [](int rank) {
    ShmChannel channel = join_channel(rank, 2);
    const std::size_t count = 1 << 20;
    Buffer data = Buffer::shareable(DataType::Float32, Shape{static_cast<std::int64_t>(count)});
    if (rank == 0) {
      InPlace mapped(2);
      EXPECT_FALSE(mapped.allreduce(channel, data.data(), data.data(), count, DataType::Float32, ReduceOp::Sum,
                                    {data.memory(), data.memory()}));
    } else {
      // What a broken peer might publish: a buffer said to lie past its file's end.
      publish_by_hand(channel, data, detail::locate(data.memory(), data.data(), 1)->file_bytes - 64);
    }
    barrier(channel);
  });
}

TEST(ShmInPlace, ARankNotAllowedToOpenItsPeersFilesTurnsEveryRankToTheSlotPath) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to run one rank as another user";
  run_job(2, [](int rank) {
    // Rank 0 drops to nobody once both have joined (a rank maps only a segment
    // of its own user, shm/segment_checks.h): it may not open root's
    // /proc/<pid>/fd, while root may open its.
    ShmChannel channel = join_channel(rank, 2);
    if (rank == 0) ASSERT_EQ(::setuid(65534), 0);
    InPlace mapped(2);
    const std::size_t count = 1 << 20;
    Buffer data = Buffer::shareable(DataType::Float32, Shape{static_cast<std::int64_t>(count)});
    std::fill(data.as<float>(), data.as<float>() + count, 2.0f);
    const Placement placement{data.memory(), data.memory()};
    const auto call = [&] {
      return mapped.allreduce(channel, data.data(), data.data(), count, DataType::Float32, ReduceOp::Sum, placement);
    };
    EXPECT_FALSE(call());
    EXPECT_FALSE(call());
    EXPECT_EQ(data.as<float>()[count - 1], 2.0f);
    const Buffer summed = slot_allreduce(channel, data, ReduceOp::Sum);
    EXPECT_EQ(summed.as<float>()[count - 1], 4.0f);
  });
}

TEST(ShmInPlace, APeerThatDiesMidCallFailsTheCallInsteadOfHanging) {
  run_job(2, [](int rank) {
    ShmChannel channel = join_channel(rank, 2);
    const std::size_t count = 1 << 20;
    Buffer data = Buffer::shareable(DataType::Float32, Shape{static_cast<std::int64_t>(count)});
    if (rank == 1) {
      // Publish real buffers, as a rank entering the call does, then die.
      publish_by_hand(channel, data, 0);
      ::_exit(0);
    }
    InPlace mapped(2);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(mapped.allreduce(channel, data.data(), data.data(), count, DataType::Float32, ReduceOp::Sum,
                                  {data.memory(), data.memory()}),
                 PeerFailureError);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  });
}

// Rank r's block of an allgather: bytes that say whose and where.
std::vector<std::byte> block_of(int rank, std::size_t bytes) {
  std::vector<std::byte> block(bytes);
  for (std::size_t i = 0; i < bytes; ++i) block[i] = static_cast<std::byte>((rank * 131 + i * 7) % 251);
  return block;
}

TEST(ShmInPlace, AllgatherWritesEveryBlockIntoEveryOutputInAndOutOfPlace) {
  run_job(3, [](int rank) {
    ShmChannel channel = join_channel(rank, 3);
    BufferExchange exchange(3);
    const std::vector<std::size_t> sizes = {(1 << 21) + 3, 700001, 0};  // uneven, odd, one empty
    std::size_t total = 0;
    for (std::size_t b : sizes) total += b;
    std::vector<std::size_t> offsets = prefix_offsets(sizes);
    std::vector<std::byte> expected;
    for (int j = 0; j < 3; ++j) {
      const auto b = block_of(j, sizes[j]);
      expected.insert(expected.end(), b.begin(), b.end());
    }
    const auto mine = block_of(rank, sizes[rank]);  // plain memory: only outputs need be shareable
    Buffer out = Buffer::shareable(DataType::UInt8, Shape{static_cast<std::int64_t>(total)});
    ASSERT_TRUE(allgather_in_place(channel, exchange, mine.data(), out.as<std::byte>(), sizes, out.memory()));
    EXPECT_EQ(std::memcmp(out.data(), expected.data(), total), 0) << "rank " << rank;
    Buffer in_place = Buffer::shareable(DataType::UInt8, Shape{static_cast<std::int64_t>(total)});
    if (!mine.empty()) std::memcpy(in_place.as<std::byte>() + offsets[rank], mine.data(), mine.size());
    ASSERT_TRUE(allgather_in_place(channel, exchange, in_place.as<std::byte>() + offsets[rank],
                                   in_place.as<std::byte>(), sizes, in_place.memory()));
    EXPECT_EQ(std::memcmp(in_place.data(), expected.data(), total), 0) << "rank " << rank << ", in place";
  });
}

TEST(ShmInPlace, AllgatherIntoPlainMemoryOnOneRankTakesTheSlotPath) {
  run_job(2, [](int rank) {
    ShmChannel channel = join_channel(rank, 2);
    BufferExchange exchange(2);
    const std::vector<std::size_t> sizes(2, std::size_t{1} << 20);
    const auto mine = block_of(rank, sizes[0]);
    Buffer shareable = Buffer::shareable(DataType::UInt8, Shape{std::int64_t{2} << 20});
    std::vector<std::byte> plain(std::size_t{2} << 20);
    std::byte* out = rank == 0 ? plain.data() : shareable.as<std::byte>();
    EXPECT_FALSE(allgather_in_place(channel, exchange, mine.data(), out, sizes,
                                    rank == 0 ? nullptr : shareable.memory()));
    EXPECT_EQ(out[(std::size_t{3} << 19)], std::byte{0});  // nothing written
    // A send block inside the output, but not at this rank's place: refused.
    EXPECT_FALSE(allgather_in_place(channel, exchange, shareable.as<std::byte>() + 64, shareable.as<std::byte>(),
                                    sizes, shareable.memory()));
    barrier(channel);
  });
}

// Through the communicator: a large allreduce (and a one-region list, the
// engine's direct path) and allgatherv over Buffers give what the slot path gives.
TEST(ShmInPlace, TheCommunicatorTakesItForLargeBuffersAndAgreesWithSlots) {
  testing::SpawnOptions options;
  options.use_store = false;
  options.timeout = 60s;
  testing::run_ranks(
      2,
      [](int rank) {
        const std::string job = std::getenv("KOLO_JOB_ID");
        ::setenv("KOLO_SHM_MAPPED_BYTES", "0", 1);
        auto slots = make_shm_communicator(rank, 2, job + "-slots", {});
        ::setenv("KOLO_SHM_MAPPED_BYTES", "1048576", 1);
        auto comm = make_shm_communicator(rank, 2, job, {});
        const std::int64_t count = 3 << 18;
        Buffer input = Buffer::shareable(DataType::Float32, Shape{count});
        fill(input, rank);
        Buffer expected(DataType::Float32, Shape{count});
        Buffer out = Buffer::shareable(DataType::Float32, Shape{count});
        slots->allreduce(input.data(), expected.data(), count, DataType::Float32, ReduceOp::Sum);
        comm->allreduce(input.data(), out.data(), count, DataType::Float32, ReduceOp::Sum, {},
                        {input.memory(), out.memory()});
        EXPECT_TRUE(same_bytes(out, expected));
        const Region one{input.data(), input.data(), static_cast<std::size_t>(count),
                         {input.memory(), input.memory()}};
        comm->allreduce_regions({&one, 1}, DataType::Float32, ReduceOp::Sum, {});
        EXPECT_TRUE(same_bytes(input, expected));
        // Scaled (an Average) in place of the Buffers: the slot path's sum, scaled after it.
        const auto average = comm::ResultScale::multiply(0.5);
        average.apply(expected.data(), count, DataType::Float32);
        fill(input, rank);
        comm->allreduce(input.data(), out.data(), count, DataType::Float32, ReduceOp::Sum, average,
                               {input.memory(), out.memory()});
        EXPECT_TRUE(same_bytes(out, expected));
        comm->allreduce_regions({&one, 1}, DataType::Float32, ReduceOp::Sum, average);
        EXPECT_TRUE(same_bytes(input, expected));
        // allgatherv into a Buffer, against the slot path's.
        const std::vector<std::size_t> sizes = {3 << 19, (3 << 19) + 4};
        const auto mine = block_of(rank, sizes[rank]);
        Buffer gathered = Buffer::shareable(DataType::UInt8, Shape{static_cast<std::int64_t>(sizes[0] + sizes[1])});
        Buffer reference(DataType::UInt8, gathered.shape());
        slots->allgatherv(mine.data(), mine.size(), reference.data(), sizes);
        comm->allgatherv(mine.data(), mine.size(), gathered.data(), sizes, {nullptr, gathered.memory()});
        EXPECT_TRUE(same_bytes(gathered, reference));
      },
      options);
}

// Which path the communicator took, seen from outside: working in place, a
// rank maps its peer's files (and keeps them mapped); through the slots it maps
// nothing. Bare pointers into shareable Buffers are plain memory to it.
TEST(ShmInPlace, TheCommunicatorWorksInPlaceExactlyWhenTheCallCarriesThePlacement) {
  run_job(2, [](int rank) {
    ::setenv("KOLO_SHM_MAPPED_BYTES", "1048576", 1);
    auto comm = make_shm_communicator(rank, 2, std::getenv("KOLO_JOB_ID"), {});
    const std::int64_t count = 3 << 18;
    Buffer input = Buffer::shareable(DataType::Float32, Shape{count});
    Buffer out = Buffer::shareable(DataType::Float32, Shape{count});
    const std::vector<std::size_t> sizes = {3 << 19, 3 << 19};
    const auto mine = block_of(rank, sizes[rank]);
    Buffer gathered = Buffer::shareable(DataType::UInt8, Shape{static_cast<std::int64_t>(sizes[0] + sizes[1])});
    std::fill(input.as<float>(), input.as<float>() + count, 1.0f + static_cast<float>(rank));
    const std::size_t own = testing::mapped_shareable_files();
    ASSERT_GE(own, 3u);

    comm->allreduce(input.data(), out.data(), count, DataType::Float32, ReduceOp::Sum);
    EXPECT_EQ(out.as<float>()[count - 1], 3.0f);
    comm->allgatherv(mine.data(), mine.size(), gathered.data(), sizes);
    EXPECT_EQ(std::memcmp(gathered.as<std::byte>() + sizes[0], block_of(1, sizes[1]).data(), sizes[1]), 0);
    EXPECT_EQ(testing::mapped_shareable_files(), own) << "bare pointers took the in-place path";

    std::fill(out.as<float>(), out.as<float>() + count, 0.0f);
    comm->allreduce(input.data(), out.data(), count, DataType::Float32, ReduceOp::Sum, {}, {input.memory(), out.memory()});
    EXPECT_EQ(out.as<float>()[count - 1], 3.0f);
    EXPECT_EQ(testing::mapped_shareable_files(), own + 2) << "the peer's input and output";
    std::memset(gathered.data(), 0, gathered.nbytes());
    comm->allgatherv(mine.data(), mine.size(), gathered.data(), sizes, {nullptr, gathered.memory()});
    EXPECT_EQ(std::memcmp(gathered.as<std::byte>() + sizes[0], block_of(1, sizes[1]).data(), sizes[1]), 0);
    EXPECT_EQ(testing::mapped_shareable_files(), own + 3) << "and the peer's gathered output";
  });
}

TEST(ShmInPlace, ANegativeThresholdIsRefused) {
  ::setenv("KOLO_SHM_MAPPED_BYTES", "-1", 1);
  EXPECT_THROW(make_shm_communicator(0, 1, testing::make_job_id(), {}), InvalidArgumentError);
  ::unsetenv("KOLO_SHM_MAPPED_BYTES");
}

}  // namespace
}  // namespace kolo::comm::shm
