// Allreduce over a list of buffers (comm::RegionList, Communicator::allreduce_regions):
// what the engine uses for a fused batch instead of copying through its fusion
// buffer. Checked against a contiguous allreduce of the same elements, bit for
// bit, on real processes and shared memory, with regions that straddle the
// communicator's chunks and the owners' segments, in place and out of place.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "comm/regions.h"
#include "comm/shm/shm_communicator.h"
#include "harness/forwarding_communicator.h"
#include "harness/multiprocess.h"

namespace kolo::comm {
namespace {

using Runs = std::vector<std::tuple<std::size_t, std::size_t, std::size_t>>;  // region, elements, position

Runs runs_of(const std::vector<Region>& regions, std::size_t begin, std::size_t end) {
  RegionList list(regions, 4);
  Runs runs;
  list.for_each(begin, end, [&](const std::byte* send, std::byte* recv, std::size_t n, std::size_t pos) {
    for (std::size_t i = 0; i < regions.size(); ++i) {
      auto* base = static_cast<const std::byte*>(regions[i].send);
      if (send >= base && send < base + regions[i].count * 4) {
        EXPECT_EQ(recv, static_cast<std::byte*>(regions[i].recv) + (send - base));
        runs.emplace_back(i, n, pos);
      }
    }
  });
  return runs;
}

TEST(RegionList, SplitsARangeIntoRunsPerRegionSkippingEmptyOnes) {
  std::vector<float> a(3), b(0), c(5), d(2);
  std::vector<float> out(10);
  std::vector<Region> regions{{a.data(), out.data(), 3}, {b.data(), out.data(), 0},
                              {c.data(), out.data() + 3, 5}, {d.data(), out.data() + 8, 2}};
  EXPECT_EQ(RegionList(regions, 4).count(), 10u);
  EXPECT_EQ(runs_of(regions, 0, 10), (Runs{{0, 3, 0}, {2, 5, 3}, {3, 2, 8}}));
  EXPECT_EQ(runs_of(regions, 2, 9), (Runs{{0, 1, 2}, {2, 5, 3}, {3, 1, 8}}));
  EXPECT_EQ(runs_of(regions, 4, 6), (Runs{{2, 2, 4}}));
  EXPECT_EQ(runs_of(regions, 3, 3), Runs{});
}

TEST(RegionList, OneRegionIsOneRun) {
  std::vector<float> a(7);
  std::vector<Region> regions{{a.data(), a.data(), 7}};
  EXPECT_EQ(runs_of(regions, 1, 6), (Runs{{0, 5, 1}}));
}

float input_value(int rank, std::size_t i) { return static_cast<float>((rank * 7919 + i * 31) % 1001) * 0.37f - 50.0f; }

// In a rank: regions of `sizes` floats, reduced with allreduce_regions, must equal a
// contiguous allreduce of their concatenation, bit for bit.
void check_regions_against_contiguous(Communicator& comm, const std::vector<std::size_t>& sizes, bool in_place) {
  std::size_t total = 0;
  for (auto s : sizes) total += s;
  std::vector<float> joint(total);
  for (std::size_t i = 0; i < total; ++i) joint[i] = input_value(comm.rank(), i);
  std::vector<float> expected(total);
  comm.allreduce(joint.data(), expected.data(), total, DataType::Float32, ReduceOp::Sum);

  std::vector<std::vector<float>> inputs, outputs;
  std::vector<Region> regions;
  std::size_t offset = 0;
  for (auto s : sizes) {
    inputs.emplace_back(joint.begin() + static_cast<std::ptrdiff_t>(offset),
                        joint.begin() + static_cast<std::ptrdiff_t>(offset + s));
    outputs.emplace_back(s, -1.0f);
    offset += s;
  }
  for (std::size_t k = 0; k < sizes.size(); ++k)
    regions.push_back({inputs[k].data(), in_place ? inputs[k].data() : outputs[k].data(), sizes[k]});
  comm.allreduce_regions(regions, DataType::Float32, ReduceOp::Sum);

  offset = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const auto& got = in_place ? inputs[k] : outputs[k];
    if (sizes[k] == 0) continue;  // an empty vector's data() may be null: no memcmp on it
    ASSERT_EQ(std::memcmp(got.data(), expected.data() + offset, sizes[k] * sizeof(float)), 0)
        << "region " << k << " of " << sizes.size() << " (" << sizes[k] << " floats) differs, in_place=" << in_place;
    offset += sizes[k];
  }
}

const std::vector<std::vector<std::size_t>> kLayouts = {
    {1, 2, 3},                                  // one small step
    {0, 1, 1000, 17000, 3, 0, 40000, 5, 9999},  // many 64 KiB chunks, runs cut at every boundary
    {70000},                                    // one region, several chunks
};

void run_shm_case(int ranks) {
  testing::SpawnOptions options;
  options.use_store = false;
  options.env = {{"KOLO_SHM_SLOT_BYTES", "65536"}, {"KOLO_SHM_SMALL_BYTES", "4096"}};
  testing::run_ranks(
      ranks,
      [](int rank) {
        auto comm = make_shm_communicator(rank, std::atoi(std::getenv("KOLO_SIZE")), std::getenv("KOLO_JOB_ID"), {});
        ASSERT_TRUE(comm->reduces_regions());
        for (const auto& sizes : kLayouts) {
          check_regions_against_contiguous(*comm, sizes, false);
          check_regions_against_contiguous(*comm, sizes, true);
        }
      },
      options);
}

TEST(ShmRegions, TwoRanksMatchTheContiguousAllreduce) { run_shm_case(2); }
TEST(ShmRegions, ThreeRanksMatchTheContiguousAllreduce) { run_shm_case(3); }

// A transport without a list path of its own: the default, through one buffer.
class ContiguousOnly final : public testing::ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  std::string name() const override { return "contiguous-only"; }
  bool reduces_regions() const override { return false; }
  void allreduce_regions(std::span<const Region> regions, DataType dtype, ReduceOp op) override {
    Communicator::allreduce_regions(regions, dtype, op);
  }
};

TEST(ShmRegions, TransportsWithoutTheirOwnPathStageThroughOneBuffer) {
  ContiguousOnly comm(make_self_communicator());
  EXPECT_FALSE(comm.reduces_regions());
  for (const auto& sizes : kLayouts) {
    check_regions_against_contiguous(comm, sizes, false);
    check_regions_against_contiguous(comm, sizes, true);
  }
}

TEST(ShmRegions, AJobOfOneCopiesEachRegion) {
  auto comm = make_self_communicator();
  EXPECT_TRUE(comm->reduces_regions());
  for (const auto& sizes : kLayouts) {
    check_regions_against_contiguous(*comm, sizes, false);
    check_regions_against_contiguous(*comm, sizes, true);
  }
}

}  // namespace
}  // namespace kolo::comm
