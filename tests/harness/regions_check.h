// The check of Communicator::allreduce_regions shared by the communicator suite
// and the region list's own tests: regions of given sizes, reduced as a list
// and scaled, must equal a contiguous allreduce of their concatenation, then
// scaled in a pass of its own, bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "comm/communicator.h"
#include "comm/regions.h"

namespace kolo::testing {

inline float regions_input(int rank, std::size_t i) {
  return static_cast<float>((rank * 7919 + i * 31) % 1001) * 0.37f - 50.0f;
}

// Region sizes (floats) that exercise the paths: one small step; many rounds with
// runs cut at every boundary, empty regions included; one region of several rounds.
inline const std::vector<std::vector<std::size_t>> kRegionLayouts = {
    {1, 2, 3},
    {0, 1, 1000, 17000, 3, 0, 40000, 5, 9999},
    {70000},
};

inline void check_regions_against_contiguous(comm::Communicator& comm, const std::vector<std::size_t>& sizes,
                                             bool in_place, const comm::ResultScale& scale = {}) {
  std::size_t total = 0;
  for (auto s : sizes) total += s;
  std::vector<float> joint(total);
  for (std::size_t i = 0; i < total; ++i) joint[i] = regions_input(comm.rank(), i);
  std::vector<float> expected(total);
  comm.allreduce(joint.data(), expected.data(), total, DataType::Float32, ReduceOp::Sum);
  scale.apply(expected.data(), total, DataType::Float32);

  std::vector<std::vector<float>> inputs, outputs;
  std::vector<comm::Region> regions;
  std::size_t offset = 0;
  for (auto s : sizes) {
    inputs.emplace_back(joint.begin() + static_cast<std::ptrdiff_t>(offset),
                        joint.begin() + static_cast<std::ptrdiff_t>(offset + s));
    outputs.emplace_back(s, -1.0f);
    offset += s;
  }
  for (std::size_t k = 0; k < sizes.size(); ++k)
    regions.push_back({inputs[k].data(), in_place ? inputs[k].data() : outputs[k].data(), sizes[k]});
  comm.allreduce_regions(regions, DataType::Float32, ReduceOp::Sum, scale);

  offset = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const auto& got = in_place ? inputs[k] : outputs[k];
    if (sizes[k] == 0) continue;  // an empty vector's data() may be null: no memcmp on it
    ASSERT_EQ(std::memcmp(got.data(), expected.data() + offset, sizes[k] * sizeof(float)), 0)
        << "region " << k << " of " << sizes.size() << " (" << sizes[k] << " floats) differs, in_place=" << in_place;
    offset += sizes[k];
  }
}

}  // namespace kolo::testing
