// Allreduce over a list of buffers (comm::RegionList, Communicator::allreduce_regions):
// what the engine uses for a fused batch instead of copying through its fusion
// buffer. The list's runs; the default path through one buffer; a job of one.
// Every communicator's list path on real processes is in the communicator suite
// (communicator_suite_test.cc), against its contiguous allreduce.
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
#include "harness/regions_check.h"

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

// A transport without a list path of its own: the default, through one buffer.
class ContiguousOnly final : public testing::ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  std::string name() const override { return "contiguous-only"; }
  comm::Capabilities capabilities() const override {
    comm::Capabilities c = ForwardingCommunicator::capabilities();
    c.reduces_regions = false;
    return c;
  }
  void allreduce_regions(std::span<const Region> regions, DataType dtype, ReduceOp op,
                         const comm::ResultScale& scale) override {
    Communicator::allreduce_regions(regions, dtype, op, scale);
  }
};

TEST(Regions, TransportsWithoutTheirOwnPathStageThroughOneBuffer) {
  ContiguousOnly comm(make_self_communicator());
  EXPECT_FALSE(comm.capabilities().reduces_regions);
  for (const auto& sizes : testing::kRegionLayouts) {
    testing::check_regions_against_contiguous(comm, sizes, false);
    testing::check_regions_against_contiguous(comm, sizes, true);
  }
}

TEST(Regions, AJobOfOneCopiesEachRegion) {
  auto comm = make_self_communicator();
  EXPECT_TRUE(comm->capabilities().reduces_regions);
  for (const auto& sizes : testing::kRegionLayouts) {
    testing::check_regions_against_contiguous(*comm, sizes, false);
    testing::check_regions_against_contiguous(*comm, sizes, true);
  }
}

}  // namespace
}  // namespace kolo::comm
