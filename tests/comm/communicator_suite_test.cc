// Every communicator (tests/harness/communicator_factories.h: self, shm, tcp,
// gloo, hierarchical on fake hosts, mpi under mpirun) through the same checks on
// real processes: every collective x every dtype x sizes from 0 bytes past each
// of the transport's thresholds (lowered, and the defaults), in place and out of
// place, each result checked against a reference computed on the rank, bit for
// bit in the transport's reduction order, and across ranks; barriers; and bad
// arguments, which fail alike and leave the ranks in step. The failure contract
// is communicator_failures_test.cc; what only one transport does stays in its
// own file.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "harness/collective_suite.h"
#include "harness/communicator_agreement.h"
#include "harness/communicator_data.h"
#include "harness/communicator_factories.h"
#include "harness/regions_check.h"
#include "harness/values.h"
#include "kolo/error.h"

namespace kolo::testing {
namespace {

using comm::Communicator;

constexpr ReduceOp kReduceOps[] = {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product};

// 0, 1, small odd counts, and counts just past the lowered thresholds (1 KiB and
// 4 KiB of a 4-byte type, several 4 KiB rounds, the shm one-step path).
const std::size_t kCounts[] = {0, 1, 3, 257, 1000, 4099, 7919, 40961};
// Byte-level collectives past the whole shared area of the lowered shm slots.
constexpr std::size_t kLargeBytes = 1 << 20;

std::string describe(const char* what, DataType dtype, std::size_t count, ReduceOp op) {
  return std::string(what) + " " + to_string(dtype) + " " + to_string(op) + " count=" + std::to_string(count);
}

using Order = CommunicatorFactory::Order;

// The reference for `op` over the job, in `order`.
Bytes reference_in(Order order, const Job& job, DataType dtype, ReduceOp op, std::size_t count, std::uint64_t seed) {
  const HostShape shape = order == Order::RankOrder ? HostShape{.per_host = job.ranks(), .hosts = 1} : job.shape;
  return reference_reduction(dtype, op, count, shape, seed);
}

// `got` is `want`, the reference's reduction: bit for bit where the transport
// reduced in the reference's order or the op is exact in any order; else within
// the rounding of `ranks` - 1 steps, whose partial results may be larger than
// the final one (inputs are below 2 in magnitude).
::testing::AssertionResult reduced_as(const Bytes& got, const Bytes& want, DataType dtype, ReduceOp op, Order order,
                                      int ranks) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size();
  const bool order_matters = is_floating_point(dtype) && (op == ReduceOp::Sum || op == ReduceOp::Product);
  if (order != Order::Transports || !order_matters) {
    if (got == want) return ::testing::AssertionSuccess();
    const auto at = std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin();
    return ::testing::AssertionFailure() << "other bits from byte " << at;
  }
  const double partials = op == ReduceOp::Sum ? 2.0 * ranks : std::pow(2.0, ranks);
  const auto count = static_cast<std::int64_t>(got.size() / element_size(dtype));
  for (std::int64_t i = 0; i < count; ++i) {
    const double g = read_element(got.data(), dtype, i), w = read_element(want.data(), dtype, i);
    if (std::fabs(g - w) > tolerance(dtype, partials))
      return ::testing::AssertionFailure() << "element " << i << ": " << g << ", want " << w;
  }
  return ::testing::AssertionSuccess();
}

std::uint64_t combine(std::uint64_t hash, const Bytes& b) { return hash * 1099511628211ull ^ fnv1a(b.data(), b.size()); }

class CommunicatorSuite : public ::testing::TestWithParam<Job> {
 protected:
  const Job& job() const { return GetParam(); }
  const CommunicatorFactory& factory() const { return *GetParam().factory; }
  Order allreduce_order(std::size_t bytes) const {
    return bytes <= factory().allreduce_in_order_bytes ? Order::HostByHost : factory().large_allreduce_order;
  }
};

TEST_P(CommunicatorSuite, AllreduceMatchesTheReferenceInPlaceAndOut) {
  run_job(job(), [this](Member& m) {
    Communicator& comm = *m.comm;
    const int n = comm.size();
    EXPECT_EQ(comm.name(), factory().reports);
    ASSERT_EQ(n, job().ranks());
    std::uint64_t seed = 1;
    for (DataType dtype : kAllDataTypes) {
      const std::size_t es = element_size(dtype);
      std::uint64_t hash = 0;
      for (ReduceOp op : kReduceOps) {
        std::vector<std::size_t> counts(std::begin(kCounts), std::end(kCounts));
        if ((op == ReduceOp::Sum || op == ReduceOp::Min) && factory().large_bytes > 0)
          counts.push_back(factory().large_bytes / es);
        for (std::size_t count : counts) {
          ++seed;
          const Order order = allreduce_order(count * es);
          const Bytes in = random_input(dtype, count, comm.rank(), seed);
          const Bytes want = reference_in(order, job(), dtype, op, count, seed);
          Bytes out(in.size(), 0xcd);
          comm.allreduce(in.data(), out.data(), count, dtype, op);
          ASSERT_TRUE(reduced_as(out, want, dtype, op, order, n)) << describe("allreduce", dtype, count, op);
          ASSERT_EQ(in, random_input(dtype, count, comm.rank(), seed)) << "allreduce modified its input";
          Bytes data = in;
          comm.allreduce(data.data(), data.data(), count, dtype, op);
          ASSERT_TRUE(reduced_as(data, want, dtype, op, order, n)) << describe("in-place allreduce", dtype, count, op);
          hash = combine(combine(hash, out), data);
        }
      }
      expect_same_on_every_rank(comm, hash, std::string("allreduce ") + to_string(dtype));
    }
  });
}

TEST_P(CommunicatorSuite, AllreduceLargeBuffersWithDefaultThresholds) {
  run_job(job(), [this](Member& m) {
    Communicator& comm = *m.comm;
    const int n = comm.size();
    // Around 64 KiB, past the default shared area (4 MiB), and an odd large size.
    for (std::size_t count : {std::size_t{1}, std::size_t{16384}, std::size_t{16385}, std::size_t{(3 << 20) / 4 + 7},
                              std::size_t{1'500'007}}) {
      const Order order = allreduce_order(count * 4);
      const Bytes in = random_input(DataType::Float32, count, comm.rank(), count);
      const Bytes want = reference_in(order, job(), DataType::Float32, ReduceOp::Sum, count, count);
      Bytes out(in.size());
      comm.allreduce(in.data(), out.data(), count, DataType::Float32, ReduceOp::Sum);
      ASSERT_TRUE(reduced_as(out, want, DataType::Float32, ReduceOp::Sum, order, n)) << count;
      Bytes data = in;
      comm.allreduce(data.data(), data.data(), count, DataType::Float32, ReduceOp::Sum);
      ASSERT_TRUE(reduced_as(data, want, DataType::Float32, ReduceOp::Sum, order, n)) << count << " in place";
      expect_bitwise_equal_on_every_rank(comm, data.data(), data.size(), "allreduce " + std::to_string(count));
    }
  }, {.small_thresholds = false});
}

// Which communicators reduce a list of buffers themselves rather than through
// one staging buffer (Communicator::reduces_regions).
bool has_own_regions_path(const Job& job) {
  const std::string& name = job.factory->name;
  return name == "self" || job.factory->reports == "shm" || name == "tcp" || name == "hierarchical" ||
         (name == "hierarchical_over_gloo" && job.shape.per_host > 1);
}

// A fused batch reduced as a list of buffers gives the bits of the contiguous
// allreduce of its concatenation, with regions cut across rounds and blocks,
// and scaled (an Average) the bits of that allreduce scaled after it.
TEST_P(CommunicatorSuite, AllreduceRegionsMatchTheContiguousAllreduce) {
  run_job(job(), [this](Member& m) {
    EXPECT_EQ(m.comm->capabilities().reduces_regions, has_own_regions_path(job()));
    const auto average = comm::ResultScale::multiply(1.0 / m.comm->size());
    for (const auto& sizes : kRegionLayouts) {
      check_regions_against_contiguous(*m.comm, sizes, false);
      check_regions_against_contiguous(*m.comm, sizes, true);
      check_regions_against_contiguous(*m.comm, sizes, false, average);
      check_regions_against_contiguous(*m.comm, sizes, true, average);
    }
  });
}

// A staged batch (comm::allreduce_staged, the one place a fused batch is
// copied through one buffer) takes zeros for a region without a send (a
// joined rank's) and keeps nothing for one without a recv; its steps run in
// order around the reduction, `prepare` on the staged elements, and the buffer
// it is given keeps its memory for the next batch.
TEST_P(CommunicatorSuite, AStagedBatchTakesZerosForAMissingSendAndKeepsItsBuffer) {
  run_job(job(), [](Member& m) {
    const int n = m.comm->size(), me = m.comm->rank();
    const std::vector<std::size_t> sizes = {3, 0, 5000, 7};
    std::vector<std::vector<float>> in(sizes.size()), out(sizes.size());
    std::vector<comm::Region> regions;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      in[k].assign(sizes[k], static_cast<float>(me + 1 + k));
      out[k].assign(sizes[k], -1.0f);
      // The last rank has joined: its regions have neither side.
      if (me == n - 1) regions.push_back({nullptr, nullptr, sizes[k]});
      else regions.push_back({in[k].data(), out[k].data(), sizes[k]});
    }
    std::vector<std::byte> staging;
    std::string order;
    comm::StagingSteps steps;
    steps.staged = [&] { order += "s"; };
    steps.prepare = [&](std::byte* data, std::size_t count) {
      order += "p";
      EXPECT_EQ(count, std::size_t{5010});
      for (std::size_t i = 0; i < count; ++i) reinterpret_cast<float*>(data)[i] *= 2.0f;
    };
    steps.reduced = [&] { order += "r"; };
    comm::allreduce_staged(*m.comm, regions, DataType::Float32, ReduceOp::Sum, {}, staging, steps);
    EXPECT_EQ(order, "spr");
    ASSERT_GE(staging.size(), 5010 * sizeof(float));
    const std::byte* kept = staging.data();
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      // Ranks 0 .. n-2 gave 2 (r + 1 + k) each, the joined rank zeros.
      float want = 0;
      for (int r = 0; r < n - 1; ++r) want += 2.0f * static_cast<float>(r + 1 + k);
      for (float v : out[k]) ASSERT_EQ(v, me == n - 1 ? -1.0f : want) << "region " << k << " on rank " << me;
    }
    comm::allreduce_staged(*m.comm, regions, DataType::Float32, ReduceOp::Sum, {}, staging);
    EXPECT_EQ(staging.data(), kept) << "the staging buffer was allocated again";
  });
}

// A reduce-scatter whose input is a list of buffers, and an allgather whose
// output is one, give the bits of their contiguous counterparts over the
// buffers' concatenation (the host's steps of the hierarchical allreduce over a
// fused batch), for region layouts cut across every block and slot boundary.
TEST_P(CommunicatorSuite, ReduceScatterAndAllgatherOverRegionsMatchTheContiguousOnes) {
  run_job(job(), [](Member& m) {
    Communicator& comm = *m.comm;
    const int n = comm.size(), me = comm.rank();
    for (const auto& sizes : kRegionLayouts) {
      std::size_t total = 0;
      for (auto s : sizes) total += s;
      std::vector<std::size_t> counts(n, total / n);
      for (std::size_t j = 0; j < total % n; ++j) ++counts[j];
      std::vector<float> joint(total);
      for (std::size_t i = 0; i < total; ++i) joint[i] = regions_input(me, i);
      std::vector<std::vector<float>> pieces;
      std::vector<comm::Region> regions;
      for (std::size_t k = 0, at = 0; k < sizes.size(); at += sizes[k], ++k) {
        pieces.emplace_back(joint.begin() + static_cast<std::ptrdiff_t>(at),
                            joint.begin() + static_cast<std::ptrdiff_t>(at + sizes[k]));
        regions.push_back({pieces[k].data(), pieces[k].data(), sizes[k]});
      }
      std::vector<float> want(counts[me] + 1, -1.0f), got(counts[me] + 1, -1.0f);
      comm.reduce_scatter(joint.data(), want.data(), counts, DataType::Float32, ReduceOp::Sum);
      comm.reduce_scatter_regions(regions, got.data(), counts, DataType::Float32, ReduceOp::Sum);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << total << " elements";

      // Each rank's block: its own values; gathered into the regions in place of the inputs.
      std::vector<float> block(counts[me]);
      for (std::size_t i = 0; i < block.size(); ++i) block[i] = regions_input(me + 7, i);
      std::vector<std::size_t> bytes(n);
      for (int j = 0; j < n; ++j) bytes[j] = counts[j] * sizeof(float);
      std::vector<float> gathered(total);
      comm.allgatherv(block.data(), bytes[me], gathered.data(), bytes);
      comm.allgather_regions(block.data(), regions, counts, DataType::Float32);
      for (std::size_t k = 0, at = 0; k < sizes.size(); at += sizes[k], ++k) {
        if (sizes[k] == 0) continue;
        ASSERT_EQ(std::memcmp(pieces[k].data(), gathered.data() + at, sizes[k] * sizeof(float)), 0)
            << "region " << k << " of " << sizes.size();
      }
    }
    // Blocks that do not fill the regions are refused alike everywhere.
    std::vector<float> a(8, 1.0f), out(8);
    const comm::Region one{a.data(), a.data(), a.size()};
    std::vector<std::size_t> wrong(n, 1);
    EXPECT_THROW(comm.reduce_scatter_regions({&one, 1}, out.data(), wrong, DataType::Float32, ReduceOp::Sum),
                 InvalidArgumentError);
    EXPECT_THROW(comm.allgather_regions(out.data(), {&one, 1}, wrong, DataType::Float32), InvalidArgumentError);
  });
}

// What allreduce applies to each block where the block is reduced is
// what a pass of its own over allreduce's result gives, bit for bit, for every
// type (integers: the truncating division of an integer Average), every path
// (sizes past each lowered threshold and the large rounds) and in place.
TEST_P(CommunicatorSuite, AllreduceScaledIsTheAllreduceScaledAfter) {
  run_job(job(), [this](Member& m) {
    Communicator& comm = *m.comm;
    std::uint64_t seed = 7;
    for (DataType dtype : kAllDataTypes) {
      if (dtype == DataType::Bool) continue;  // no Average, no postscale
      const std::size_t es = element_size(dtype);
      const auto scale = is_floating_point(dtype) ? comm::ResultScale::multiply(0.75 / comm.size())
                                                  : comm::ResultScale::divide(comm.size());
      std::vector<std::size_t> counts(std::begin(kCounts), std::end(kCounts));
      if (factory().large_bytes > 0) counts.push_back(factory().large_bytes / es);
      for (std::size_t count : counts) {
        ++seed;
        const Bytes in = random_input(dtype, count, comm.rank(), seed);
        Bytes want(in.size());
        comm.allreduce(in.data(), want.data(), count, dtype, ReduceOp::Sum);
        scale.apply(want.data(), count, dtype);
        Bytes out(in.size(), 0xcd);
        comm.allreduce(in.data(), out.data(), count, dtype, ReduceOp::Sum, scale, {});
        ASSERT_EQ(out, want) << describe("scaled allreduce", dtype, count, ReduceOp::Sum);
        Bytes data = in;
        comm.allreduce(data.data(), data.data(), count, dtype, ReduceOp::Sum, scale, {});
        ASSERT_EQ(data, want) << describe("in-place scaled allreduce", dtype, count, ReduceOp::Sum);
      }
    }
  });
}

// Rank j's block: c * (j + 1) / n elements (uneven, and empty where c < n), or
// base + 3j with rank 1's empty.
std::vector<std::vector<std::size_t>> block_layouts(DataType dtype, ReduceOp op, int n, std::size_t large_bytes) {
  std::vector<std::size_t> cs = {0, 1, 1000, 7919};
  if (op == ReduceOp::Sum && large_bytes > 0) cs.push_back(large_bytes / element_size(dtype));
  std::vector<std::vector<std::size_t>> layouts;
  for (std::size_t c : cs) {
    std::vector<std::size_t> counts(n);
    for (int j = 0; j < n; ++j) counts[j] = c * static_cast<std::size_t>(j + 1) / static_cast<std::size_t>(n);
    layouts.push_back(counts);
  }
  for (std::size_t base : {std::size_t{0}, std::size_t{1}, std::size_t{2000}}) {
    std::vector<std::size_t> counts(n);
    for (int j = 0; j < n; ++j) counts[j] = j == 1 ? 0 : base + static_cast<std::size_t>(j) * 3;
    layouts.push_back(counts);
  }
  return layouts;
}

TEST_P(CommunicatorSuite, ReduceScatterGivesEachRankItsBlock) {
  run_job(job(), [this](Member& m) {
    Communicator& comm = *m.comm;
    const int n = comm.size(), me = comm.rank();
    const Order order = factory().reduce_scatter_order;
    std::uint64_t seed = 100000;
    for (DataType dtype : kAllDataTypes) {
      const std::size_t es = element_size(dtype);
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
        for (const auto& counts : block_layouts(dtype, op, n, factory().large_bytes)) {
          ++seed;
          std::size_t total = 0, offset = 0;
          for (int j = 0; j < n; ++j) total += counts[j];
          for (int j = 0; j < me; ++j) offset += counts[j];
          Bytes in = random_input(dtype, total, me, seed);
          const Bytes full = reference_in(order, job(), dtype, op, total, seed);
          const Bytes want(full.begin() + offset * es, full.begin() + (offset + counts[me]) * es);
          Bytes out(counts[me] * es, 0xcd);
          comm.reduce_scatter(in.data(), out.data(), counts, dtype, op);
          ASSERT_TRUE(reduced_as(out, want, dtype, op, order, n)) << describe("reduce_scatter", dtype, total, op);
          // In place: the output is this rank's block of the input.
          comm.reduce_scatter(in.data(), in.data() + offset * es, counts, dtype, op);
          ASSERT_TRUE(reduced_as(Bytes(in.begin() + offset * es, in.begin() + (offset + counts[me]) * es), want,
                                 dtype, op, order, n))
              << describe("in-place reduce_scatter", dtype, total, op);
        }
      }
    }
    // The output at the start of the input: an overlap that is not this rank's block.
    const std::vector<std::size_t> counts(n, 5000);
    Bytes in = random_input(DataType::Float32, 5000 * n, me, 77);
    const Bytes full = reference_in(order, job(), DataType::Float32, ReduceOp::Sum, 5000 * n, 77);
    comm.reduce_scatter(in.data(), in.data(), counts, DataType::Float32, ReduceOp::Sum);
    EXPECT_TRUE(reduced_as(Bytes(in.begin(), in.begin() + 5000 * 4),
                           Bytes(full.begin() + me * 5000 * 4, full.begin() + (me + 1) * 5000 * 4), DataType::Float32,
                           ReduceOp::Sum, order, n))
        << "overlapping reduce_scatter";
  });
}

TEST_P(CommunicatorSuite, AllgathervGathervAndBroadcastFromEveryRoot) {
  run_job(job(), [](Member& m) {
    Communicator& comm = *m.comm;
    const int n = comm.size(), me = comm.rank();
    for (std::size_t base : {std::size_t{0}, std::size_t{1}, std::size_t{5000}, std::size_t{7919},
                             std::size_t{300001}, kLargeBytes + 333}) {
      // Uneven blocks, rank 1's empty.
      std::vector<std::size_t> sizes(n);
      for (int r = 0; r < n; ++r) sizes[r] = r == 1 ? 0 : base * static_cast<std::size_t>(r + 1) / n + r;
      std::size_t total = 0, offset = 0;
      for (int r = 0; r < n; ++r) total += sizes[r];
      for (int r = 0; r < me; ++r) offset += sizes[r];
      Bytes want;
      for (int r = 0; r < n; ++r) {
        const Bytes part = pattern_bytes(r, 0, sizes[r]);
        want.insert(want.end(), part.begin(), part.end());
      }
      const Bytes mine = pattern_bytes(me, 0, sizes[me]);

      Bytes all(total, 0xcd);
      comm.allgatherv(mine.data(), mine.size(), all.data(), sizes);
      ASSERT_TRUE(all == want) << "allgatherv base=" << base;
      // In place: this rank's block of the output already holds its data.
      Bytes in_place(total, 0xcd);
      std::copy(mine.begin(), mine.end(), in_place.begin() + static_cast<std::ptrdiff_t>(offset));
      comm.allgatherv(in_place.data() + offset, mine.size(), in_place.data(), sizes);
      ASSERT_TRUE(in_place == want) << "in-place allgatherv base=" << base;

      for (int root = 0; root < n; ++root) {
        Bytes gathered(me == root ? total : 0, 0xcd);
        comm.gatherv(mine.data(), mine.size(), me == root ? gathered.data() : nullptr, sizes, root);
        if (me == root) ASSERT_TRUE(gathered == want) << "gatherv root=" << root << " base=" << base;

        Bytes buffer = me == root ? pattern_bytes(root, 9, base) : Bytes(base, 0xcd);
        comm.broadcast(buffer.data(), buffer.size(), root);
        ASSERT_TRUE(buffer == pattern_bytes(root, 9, base)) << "broadcast root=" << root << " base=" << base;
      }
      comm.barrier();
    }
  });
}

// The engine's negotiation step: blocks whose lengths only their senders know,
// each beginning with its own length, from 4 bytes (rank 1 in round 0) to the
// largest allowed (rank 0 in round 0), lengths changing from call to call.
TEST_P(CommunicatorSuite, AllgatherSelfSizedGivesEveryRankEveryBlock) {
  run_job(job(), [](Member& m) {
    Communicator& comm = *m.comm;
    const int n = comm.size(), me = comm.rank();
    for (std::size_t max_block : {std::size_t{8}, std::size_t{300}, std::size_t{5000}, std::size_t{70001}}) {
      for (int round = 0; round < 4; ++round) {
        auto length_of = [&](int r) -> std::uint32_t {
          if (round == 0 && r < 2) return r == 0 ? static_cast<std::uint32_t>(max_block) : 4;
          return static_cast<std::uint32_t>(4 + (static_cast<std::size_t>(r) * 7919 + round * 104729) % (max_block - 3));
        };
        auto block_of = [&](int r) {
          const std::uint32_t length = length_of(r);
          Bytes block(sizeof length);
          std::memcpy(block.data(), &length, sizeof length);
          const Bytes body = pattern_bytes(r, round, length - sizeof length);
          block.insert(block.end(), body.begin(), body.end());
          return block;
        };
        Bytes send = block_of(me);
        send.resize(max_block, 0xee);
        Bytes recv(static_cast<std::size_t>(n) * max_block, 0xcd);
        comm.allgather_self_sized(send.data(), recv.data(), max_block);
        for (int r = 0; r < n; ++r) {
          const Bytes want = block_of(r);
          const auto got = recv.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * max_block);
          ASSERT_TRUE(std::equal(want.begin(), want.end(), got))
              << "block of rank " << r << ", max_block " << max_block << ", round " << round;
        }
      }
    }
  });
}

// Bytes from rank `from` to rank `to`: up to half of `scale`, different for every pair.
std::size_t scaled_bytes(std::size_t scale, int from, int to, int n) {
  return scale * static_cast<std::size_t>((from + 2 * to) % n + 1) / static_cast<std::size_t>(2 * n);
}

TEST_P(CommunicatorSuite, AlltoallvInPlaceAndOut) {
  run_job(job(), [](Member& m) {
    Communicator& comm = *m.comm;
    const int n = comm.size(), me = comm.rank();
    std::vector<std::function<std::size_t(int, int)>> layouts;
    for (std::size_t scale : {std::size_t{0}, std::size_t{1}, std::size_t{7919}, kLargeBytes})
      layouts.push_back([=](int from, int to) { return scaled_bytes(scale, from, to, n); });
    for (std::size_t base : {std::size_t{0}, std::size_t{5000}, std::size_t{300001}})
      layouts.push_back([=](int from, int to) { return (base + from + 2 * to) % 7000; });
    for (std::size_t l = 0; l < layouts.size(); ++l) {
      std::vector<std::size_t> send_sizes(n), recv_sizes(n);
      Bytes send, want;
      for (int j = 0; j < n; ++j) {
        send_sizes[j] = layouts[l](me, j);
        recv_sizes[j] = layouts[l](j, me);
        const Bytes out = pattern_bytes(me, j, send_sizes[j]), in = pattern_bytes(j, me, recv_sizes[j]);
        send.insert(send.end(), out.begin(), out.end());
        want.insert(want.end(), in.begin(), in.end());
      }
      Bytes recv(want.size(), 0xcd);
      comm.alltoallv(send.data(), send_sizes, recv.data(), recv_sizes);
      ASSERT_TRUE(recv == want) << "alltoallv layout " << l;
      // In place: send and receive layouts share one buffer.
      Bytes shared = send;
      shared.resize(std::max(send.size(), want.size()));
      comm.alltoallv(shared.data(), send_sizes, shared.data(), recv_sizes);
      ASSERT_TRUE(std::equal(want.begin(), want.end(), shared.begin())) << "in-place alltoallv layout " << l;
    }
  });
}

std::int64_t now_ns() {
  // steady_clock is CLOCK_MONOTONIC: one clock for every process of this host.
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TEST_P(CommunicatorSuite, BarrierWaitsForEveryRank) {
  run_job(job(), [](Member& m) {
    Communicator& comm = *m.comm;
    const int n = comm.size();
    for (int round = 0; round < 3; ++round) {
      // Ranks arrive late by rank x 30 ms; none may leave before the last arrived.
      std::this_thread::sleep_for(std::chrono::milliseconds(30 * comm.rank()));
      const std::int64_t arrived = now_ns();
      comm.barrier();
      const std::int64_t left = now_ns();
      std::vector<std::int64_t> arrivals(n);
      comm.allgatherv(&arrived, sizeof arrived, arrivals.data(), std::vector<std::size_t>(n, sizeof arrived));
      for (int r = 0; r < n; ++r) EXPECT_GE(left, arrivals[r]) << "left the barrier before rank " << r << " arrived";
    }
  });
}

TEST_P(CommunicatorSuite, BadArgumentsFailAlikeAndKeepTheRanksInStep) {
  if (!factory().refuses_bad_arguments) GTEST_SKIP() << factory().name << " trusts its caller";
  run_job(job(), [](Member& m) {
    Communicator& comm = *m.comm;
    const int n = comm.size();
    std::vector<float> data(4, 1.0f);
    const std::vector<std::size_t> wrong(n + 1, 1);
    EXPECT_THROW(comm.reduce_scatter(data.data(), data.data(), wrong, DataType::Float32, ReduceOp::Sum),
                 InvalidArgumentError);
    EXPECT_THROW(comm.allreduce(data.data(), data.data(), 4, DataType::Float32, ReduceOp::Average),
                 InvalidArgumentError);
    EXPECT_THROW(comm.broadcast(data.data(), 4, n), InvalidArgumentError);
    EXPECT_THROW(comm.broadcast(nullptr, 0, 7), InvalidArgumentError);
    // Rejected arguments leave the ranks in step.
    comm.allreduce(data.data(), data.data(), 4, DataType::Float32, ReduceOp::Sum);
    EXPECT_EQ(data[3], static_cast<float>(n));
    std::vector<float> big(100000, 1.0f), sum(100000);
    comm.allreduce(big.data(), sum.data(), big.size(), DataType::Float32, ReduceOp::Sum);
    EXPECT_EQ(sum[99999], static_cast<float>(n));
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, CommunicatorSuite, ::testing::ValuesIn(collective_jobs()),
                         [](const auto& info) { return job_name(info.param); });

}  // namespace
}  // namespace kolo::testing
