// Small messages through flagged lines (shm_layout.h, ShmChannel::write_flagged):
// every size around the line and area boundaries, interleaved with steps that use
// the slots, so that areas are reused at both parities; in-place and list
// allreduces; alltoallv's size tables, with and without the data; self-sized
// blocks (Communicator::allgather_self_sized), each moving only its own length;
// and a peer that sends less than expected is an error, not a hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/shm/shm_collectives.h"
#include "comm/shm/shm_communicator.h"
#include "comm/shm/shm_layout.h"
#include "harness/multiprocess.h"
#include "kolo/error.h"

namespace kolo::comm {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Communicator> join(comm::CommunicatorOptions options = {}) {
  return make_shm_communicator(std::atoi(std::getenv("KOLO_RANK")), std::atoi(std::getenv("KOLO_SIZE")),
                               std::getenv("KOLO_JOB_ID"), options);
}

testing::SpawnOptions no_store() {
  testing::SpawnOptions options;
  options.use_store = false;
  options.timeout = 120s;
  return options;
}

std::uint8_t byte_of(int rank, std::size_t i, int round) { return static_cast<std::uint8_t>(rank * 31 + i * 7 + round); }

// Sizes around one line (56 bytes of data), the whole area and just past it (the
// slot path), so consecutive steps alternate between the two mechanisms.
const std::vector<std::size_t> kSizes = {1, 8, 55, 56, 57, 112, 113, 1000, shm::kFlaggedBytes - 1,
                                         shm::kFlaggedBytes, shm::kFlaggedBytes + 1, 5000};

TEST(ShmFlagged, AllgathervOfEverySizeAcrossBothParities) {
  testing::run_ranks(3, [](int rank) {
    auto comm = join();
    const int n = comm->size();
    for (int round = 0; round < 3; ++round) {
      for (std::size_t base : kSizes) {
        // Ranks send different sizes; the largest decides the path for all.
        std::vector<std::size_t> sizes(n);
        for (int r = 0; r < n; ++r) sizes[r] = r == 1 ? base : base / (r + 1);
        std::vector<std::uint8_t> send(sizes[rank]);
        for (std::size_t i = 0; i < send.size(); ++i) send[i] = byte_of(rank, i, round);
        std::vector<std::uint8_t> recv(std::accumulate(sizes.begin(), sizes.end(), std::size_t{0}));
        comm->allgatherv(send.data(), send.size(), recv.data(), sizes);
        std::size_t at = 0;
        for (int r = 0; r < n; ++r) {
          for (std::size_t i = 0; i < sizes[r]; ++i, ++at) {
            ASSERT_EQ(recv[at], byte_of(r, i, round)) << "size " << base << " from rank " << r << " byte " << i;
          }
        }
      }
    }
  }, no_store());
}

TEST(ShmFlagged, AllreduceInPlaceOutOfPlaceAndAsAListOfBuffers) {
  testing::run_ranks(3, [](int rank) {
    auto comm = join();
    for (int round = 0; round < 2; ++round) {
      for (std::size_t bytes : kSizes) {
        const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(std::int32_t));
        std::vector<std::int32_t> in(count), out(count), expected(count);
        for (std::size_t i = 0; i < count; ++i) {
          in[i] = static_cast<std::int32_t>(rank * 1000 + i + round);
          expected[i] = static_cast<std::int32_t>(3 * i + 3000 + 3 * round);  // ranks 0, 1, 2
        }
        comm->allreduce(in.data(), out.data(), count, DataType::Int32, ReduceOp::Sum);
        ASSERT_EQ(out, expected) << count << " elements, out of place";
        comm->allreduce(in.data(), in.data(), count, DataType::Int32, ReduceOp::Sum);
        ASSERT_EQ(in, expected) << count << " elements, in place";
        // Three buffers (the middle one empty) reduced as one.
        std::vector<std::int32_t> a(count / 2, rank + 1), b, c(count - count / 2, 10 * (rank + 1));
        const Region regions[] = {{a.data(), a.data(), a.size()}, {b.data(), b.data(), 0}, {c.data(), c.data(), c.size()}};
        comm->allreduce_regions(regions, DataType::Int32, ReduceOp::Sum, {});
        for (auto v : a) ASSERT_EQ(v, 6);
        for (auto v : c) ASSERT_EQ(v, 60);
      }
    }
  }, no_store());
}

// Unequal blocks (rank r gets a share growing with r), in and out of place (the
// output then is this rank's own block of the input), summed in rank order.
TEST(ShmFlagged, ReduceScatterOfEverySizeInAndOutOfPlace) {
  testing::run_ranks(3, [](int rank) {
    auto comm = join();
    const int n = comm->size();
    for (int round = 0; round < 2; ++round) {
      for (std::size_t bytes : kSizes) {
        const std::size_t total = std::max<std::size_t>(n, bytes / sizeof(std::int32_t));
        std::vector<std::size_t> counts(n);
        std::size_t given = 0;
        for (int r = 0; r < n - 1; ++r) given += counts[r] = total * (r + 1) / (2 * n);
        counts[n - 1] = total - given;
        std::size_t offset = 0;
        for (int r = 0; r < rank; ++r) offset += counts[r];
        auto value = [&](int r, std::size_t i) { return static_cast<std::int32_t>(r * 100003 + i * 7 + round); };
        std::vector<std::int32_t> in(total), out(counts[rank]), expected(counts[rank]);
        for (std::size_t i = 0; i < total; ++i) in[i] = value(rank, i);
        for (std::size_t i = 0; i < counts[rank]; ++i)
          for (int r = 0; r < n; ++r) expected[i] += value(r, offset + i);
        comm->reduce_scatter(in.data(), out.data(), counts, DataType::Int32, ReduceOp::Sum);
        ASSERT_EQ(out, expected) << total << " elements, out of place";
        comm->reduce_scatter(in.data(), in.data() + offset, counts, DataType::Int32, ReduceOp::Sum);
        ASSERT_TRUE(std::equal(expected.begin(), expected.end(), in.begin() + static_cast<std::ptrdiff_t>(offset)))
            << total << " elements, in place";
      }
    }
  }, no_store());
}

// What rank `from` sends rank `to` in the alltoallv tests below: rank 0 a quarter
// of `base`, rank 1 all of it, rank 2 nothing, so that around kFlaggedBytes one
// rank's data rides in its flagged message and another's follows through the slots.
std::size_t alltoall_piece(std::size_t base, int from, int to) {
  if (from == to) return base / 3;
  return from == 0 ? base / 4 : from == 1 ? base : 0;
}

std::uint8_t alltoall_byte(int from, int to, std::size_t i, int round) {
  return static_cast<std::uint8_t>(from * 53 + to * 11 + i * 5 + round);
}

TEST(ShmFlagged, AlltoallvWithSomeRanksDataInlineAndSomeThroughTheSlots) {
  testing::run_ranks(3, [](int rank) {
    auto comm = join();
    const int n = comm->size();
    for (int round = 0; round < 2; ++round) {
      for (std::size_t base : kSizes) {
        std::vector<std::size_t> send_sizes(n), recv_sizes(n);
        std::vector<std::uint8_t> send, expected;
        for (int j = 0; j < n; ++j) {
          send_sizes[j] = alltoall_piece(base, rank, j);
          recv_sizes[j] = alltoall_piece(base, j, rank);
          for (std::size_t i = 0; i < send_sizes[j]; ++i) send.push_back(alltoall_byte(rank, j, i, round));
          for (std::size_t i = 0; i < recv_sizes[j]; ++i) expected.push_back(alltoall_byte(j, rank, i, round));
        }
        std::vector<std::uint8_t> recv(expected.size(), 0xcd);
        comm->alltoallv(send.data(), send_sizes, recv.data(), recv_sizes);
        ASSERT_EQ(recv, expected) << "base " << base << ", out of place";
        std::vector<std::uint8_t> shared = send;
        shared.resize(std::max(send.size(), expected.size()));
        comm->alltoallv(shared.data(), send_sizes, shared.data(), recv_sizes);
        shared.resize(expected.size());
        ASSERT_EQ(shared, expected) << "base " << base << ", in place";
      }
    }
  }, no_store());
}

// Rank 1 sends rank 0 fewer bytes than rank 0 expects: every rank says so, at
// every size, rank 0's output is left alone, and the next alltoallv works.
TEST(ShmFlagged, AlltoallvSizesThatDisagreeAreAnErrorOnEveryRank) {
  testing::run_ranks(2, [](int rank) {
    auto comm = join();
    for (std::size_t expected_by_0 : {std::size_t{100}, std::size_t{5000}}) {
      const std::size_t sent_by_1 = expected_by_0 - 40;
      const std::vector<std::size_t> send_sizes = rank == 0 ? std::vector<std::size_t>{0, 8}
                                                            : std::vector<std::size_t>{sent_by_1, 0};
      const std::vector<std::size_t> recv_sizes = rank == 0 ? std::vector<std::size_t>{0, expected_by_0}
                                                            : std::vector<std::size_t>{8, 0};
      std::vector<std::uint8_t> send(10000, 7), recv(10000, 0xcd);
      try {
        comm->alltoallv(send.data(), send_sizes, recv.data(), recv_sizes);
        ADD_FAILURE() << "sizes that disagree went unnoticed";
      } catch (const InvalidArgumentError& e) {
        const std::string want = "rank 1 sends " + std::to_string(sent_by_1) + " bytes to rank 0, which expects " +
                                 std::to_string(expected_by_0);
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      }
      for (auto b : recv) ASSERT_EQ(b, 0xcd) << "the output was written although the sizes disagree";
      const std::vector<std::size_t> ok = {3, 3};
      std::vector<std::uint8_t> out(6, 0);
      comm->alltoallv(send.data(), ok, out.data(), ok);
      EXPECT_EQ(out, std::vector<std::uint8_t>(6, 7));
    }
  }, no_store());
}

// With more ranks than a flagged message has room for their size table
// (kFlaggedBytes / 16 = 112), the sizes go through the slots first.
TEST(ShmFlagged, AlltoallvOfMoreRanksThanAFlaggedTableHolds) {
  constexpr int kRanks = static_cast<int>(shm::kFlaggedBytes / 16) + 1;
  testing::SpawnOptions options = no_store();
  options.env = {{"KOLO_SHM_SLOT_BYTES", std::to_string(kRanks * 256 + 4096)}};
  // Starting 113 processes on two busy cores (under a sanitizer, beside another
  // test) can take longer than the default 30 s for all of them to attach.
  options.timeout = 300s;
  testing::run_ranks(kRanks, [](int rank) {
    auto comm = join({.connect_timeout = 120s});
    const int n = comm->size();
    std::vector<std::size_t> sizes(n);
    for (int j = 0; j < n; ++j) sizes[j] = static_cast<std::size_t>((rank + j) % 3);  // symmetric: i->j = j->i
    std::vector<std::uint8_t> send, expected;
    for (int j = 0; j < n; ++j) {
      for (std::size_t i = 0; i < sizes[j]; ++i) {
        send.push_back(alltoall_byte(rank, j, i, 0));
        expected.push_back(alltoall_byte(j, rank, i, 0));
      }
    }
    std::vector<std::uint8_t> recv(expected.size(), 0xcd);
    comm->alltoallv(send.data(), sizes, recv.data(), sizes);
    ASSERT_EQ(recv, expected);
  }, options);
}

// Self-sized blocks: each rank's block declares its own length in its first 4
// bytes; lengths differ across ranks and rounds, from 4 bytes in flagged lines
// to past kSelfSizedFlaggedBytes (through the slot) and up to max_block.
constexpr std::size_t kMaxBlock = 6000;

std::size_t self_sized_length_of(int rank, int round, std::size_t base) {
  return std::clamp<std::size_t>(base + static_cast<std::size_t>(rank * 13 + round), 4, kMaxBlock);
}

std::vector<std::uint8_t> self_sized_block(int rank, int round, std::size_t length) {
  std::vector<std::uint8_t> block(kMaxBlock, 0xEE);  // padding past the length
  const auto declared = static_cast<std::uint32_t>(length);
  std::memcpy(block.data(), &declared, sizeof declared);
  for (std::size_t i = sizeof declared; i < length; ++i) block[i] = byte_of(rank, i, round);
  return block;
}

void expect_self_sized_blocks(const std::vector<std::uint8_t>& recv, int n, int round, std::size_t base) {
  for (int r = 0; r < n; ++r) {
    const std::uint8_t* block = recv.data() + static_cast<std::size_t>(r) * kMaxBlock;
    const std::size_t length = self_sized_length_of(r, round, base);
    std::uint32_t declared;
    std::memcpy(&declared, block, sizeof declared);
    ASSERT_EQ(declared, length) << "rank " << r << "'s block, base " << base;
    for (std::size_t i = sizeof declared; i < length; ++i)
      ASSERT_EQ(block[i], byte_of(r, i, round)) << "base " << base << " from rank " << r << " byte " << i;
  }
}

TEST(ShmFlagged, SelfSizedBlocksOfEveryLengthAcrossBothParities) {
  testing::run_ranks(3, [](int rank) {
    auto comm = join();
    ASSERT_GE(comm->capabilities().unpadded_block_bytes, kMaxBlock);
    const int n = comm->size();
    std::vector<std::size_t> bases = kSizes;
    bases.push_back(shm::kSelfSizedFlaggedBytes - 8);  // the ranks' lengths fall on both sides of it
    bases.push_back(kMaxBlock);
    for (int round = 0; round < 3; ++round) {
      for (std::size_t base : bases) {
        const auto send = self_sized_block(rank, round, self_sized_length_of(rank, round, base));
        std::vector<std::uint8_t> recv(kMaxBlock * n, 0);
        comm->allgather_self_sized(send.data(), recv.data(), kMaxBlock);
        expect_self_sized_blocks(recv, n, round, base);
        // The padded default, on the same transport: the same blocks.
        std::vector<std::uint8_t> padded(kMaxBlock * n, 0);
        comm->Communicator::allgather_self_sized(send.data(), padded.data(), kMaxBlock);
        expect_self_sized_blocks(padded, n, round, base);
      }
    }
  }, no_store());
}

// Rank 1 allows longer blocks than rank 0 and sends one: rank 0 refuses it with
// the length it got; rank 1 received rank 0's short block and is done.
TEST(ShmFlagged, ASelfSizedBlockLongerThanTheReaderAllowsIsAnError) {
  testing::run_ranks(2, [](int rank) {
    auto comm = join();
    const std::size_t max_block = rank == 0 ? 128 : kMaxBlock;
    const auto send = self_sized_block(rank, 0, rank == 0 ? 100 : 1000);
    std::vector<std::uint8_t> recv(kMaxBlock * 2);
    if (rank == 0) {
      try {
        comm->allgather_self_sized(send.data(), recv.data(), max_block);
        ADD_FAILURE() << "an over-long block went unnoticed";
      } catch (const InvalidArgumentError& e) {
        EXPECT_NE(std::string(e.what()).find("rank 1 declares a block of 1000 bytes where 4 to 128 are allowed"),
                  std::string::npos)
            << e.what();
      }
    } else {
      comm->allgather_self_sized(send.data(), recv.data(), max_block);
    }
  }, no_store());
}

// A block whose own length is bad never leaves its rank; its peer, waiting for
// it, learns that the rank closed its communicator instead of waiting forever.
TEST(ShmFlagged, ASelfSizedBlockOfABadLengthIsRefusedBeforeItIsSent) {
  testing::run_ranks(2, [](int rank) {
    auto comm = join();
    std::vector<std::uint8_t> recv(kMaxBlock * 2);
    if (rank == 0) {
      for (std::uint32_t bad : {0u, 3u, static_cast<std::uint32_t>(kMaxBlock + 1)}) {
        auto send = self_sized_block(rank, 0, 4);
        std::memcpy(send.data(), &bad, sizeof bad);
        EXPECT_THROW(comm->allgather_self_sized(send.data(), recv.data(), kMaxBlock), InvalidArgumentError) << bad;
      }
      comm.reset();
    } else {
      const auto send = self_sized_block(rank, 0, 40);
      EXPECT_THROW(comm->allgather_self_sized(send.data(), recv.data(), kMaxBlock), PeerFailureError);
    }
  }, no_store());
}

// Rank 1 sends 100 bytes where rank 0 expects 200: rank 0 finds the missing
// lines once rank 1 has posted, and says so, instead of waiting for them forever.
TEST(ShmFlagged, APeerSendingLessThanExpectedIsAnErrorNotAHang) {
  testing::run_ranks(2, [](int rank) {
    auto comm = join();
    std::vector<std::uint8_t> send(rank == 0 ? 200 : 100, 1), recv(400);
    const std::vector<std::size_t> sizes = rank == 0 ? std::vector<std::size_t>{200, 200}
                                                     : std::vector<std::size_t>{200, 100};
    if (rank == 0) {
      try {
        comm->allgatherv(send.data(), send.size(), recv.data(), sizes);
        ADD_FAILURE() << "a short message went unnoticed";
      } catch (const InvalidArgumentError& e) {
        EXPECT_NE(std::string(e.what()).find("rank 1 sent fewer than the 200 bytes rank 0 expects"), std::string::npos)
            << e.what();
      }
    } else {
      comm->allgatherv(send.data(), send.size(), recv.data(), sizes);  // rank 0 sent all it expects
    }
  }, no_store());
}

}  // namespace
}  // namespace kolo::comm
