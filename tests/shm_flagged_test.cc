// Small messages through flagged lines (shm_layout.h, ShmChannel::write_flagged):
// every size around the line and area boundaries, interleaved with steps that use
// the slots, so that areas are reused at both parities; in-place and list
// allreduces; and a peer that sends less than expected is an error, not a hang.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/shm/shm_communicator.h"
#include "comm/shm/shm_layout.h"
#include "harness/multiprocess.h"
#include "kolo/error.h"

namespace kolo::comm {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Communicator> join() {
  return make_shm_communicator(std::atoi(std::getenv("KOLO_RANK")), std::atoi(std::getenv("KOLO_SIZE")),
                               std::getenv("KOLO_JOB_ID"), {});
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
        comm->allreduce_regions(regions, DataType::Int32, ReduceOp::Sum);
        for (auto v : a) ASSERT_EQ(v, 6);
        for (auto v : c) ASSERT_EQ(v, 60);
      }
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
