// Several (send, recv) buffers of one element type seen as one index space, so
// that a communicator can allreduce a whole fused batch of tensors without first
// copying them into one contiguous buffer and back out (the engine's fusion
// buffer: two extra passes over every gradient of a training step).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "comm/placement.h"
#include "kolo/error.h"

namespace kolo::comm {

// A communicator's regions paths take regions with both buffers. Staging
// (allreduce_staged, communicator.h) also takes a region without a send, which
// contributes zeros (a joined rank's share of a batch), or without a recv,
// whose result is dropped.
struct Region {
  const void* send = nullptr;
  void* recv = nullptr;  // may equal send (in place)
  std::size_t count = 0;  // elements
  Placement placement{};  // the shareable memory send and recv lie in, if any
};

class RegionList {
 public:
  RegionList(std::span<const Region> regions, std::size_t element_size)
      : regions_(regions), element_size_(element_size) {
    if (regions.size() == 1) {  // a plain contiguous call: no allocation
      total_ = regions[0].count;
      return;
    }
    starts_.assign(regions.size() + 1, 0);
    for (std::size_t i = 0; i < regions.size(); ++i) starts_[i + 1] = starts_[i] + regions[i].count;
    total_ = starts_.back();
  }

  // Elements of all regions together.
  std::size_t count() const { return total_; }

  // Calls fn(send, recv, elements, position) for each maximal run of the elements
  // [begin, end) that lies in one region, in order; `position` is the run's first
  // element in the joint index space, send/recv point at it in its region.
  template <typename Fn>
  void for_each(std::size_t begin, std::size_t end, Fn&& fn) const {
    if (begin >= end) return;
    if (starts_.empty()) {
      fn(send_at(regions_[0], begin * element_size_), recv_at(regions_[0], begin * element_size_), end - begin, begin);
      return;
    }
    // The region holding `begin`: the last start at or before it (skipping empty ones).
    std::size_t i = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end() - 1, begin) -
                                             starts_.begin()) - 1;
    for (std::size_t pos = begin; pos < end; ++i) {
      const std::size_t region_end = starts_[i + 1];
      if (region_end <= pos) continue;
      const std::size_t run = std::min(end, region_end) - pos;
      const std::size_t offset = (pos - starts_[i]) * element_size_;
      fn(send_at(regions_[i], offset), recv_at(regions_[i], offset), run, pos);
      pos += run;
    }
  }

  // The send sides, concatenated into `joint` (count() elements; zeros for a
  // region without a send); and `joint` split back into the recv sides (none
  // into a region without a recv): staging through one buffer.
  void gather_sends(std::byte* joint) const {
    for_each(0, total_, [&](const std::byte* send, std::byte*, std::size_t n, std::size_t pos) {
      if (send != nullptr) std::memcpy(joint + pos * element_size_, send, n * element_size_);
      else std::memset(joint + pos * element_size_, 0, n * element_size_);
    });
  }
  void scatter_recvs(const std::byte* joint) const {
    for_each(0, total_, [&](const std::byte*, std::byte* recv, std::size_t n, std::size_t pos) {
      if (recv != nullptr) std::memcpy(recv, joint + pos * element_size_, n * element_size_);
    });
  }

 private:
  static const std::byte* send_at(const Region& r, std::size_t offset) {
    return r.send == nullptr ? nullptr : static_cast<const std::byte*>(r.send) + offset;
  }
  static std::byte* recv_at(const Region& r, std::size_t offset) {
    return r.recv == nullptr ? nullptr : static_cast<std::byte*>(r.recv) + offset;
  }

  std::span<const Region> regions_;
  std::size_t element_size_;
  std::size_t total_ = 0;
  std::vector<std::size_t> starts_;  // starts_[i]: first element of region i; last: the total (empty for one region)
};

// Throws InvalidArgumentError unless blocks of `counts` elements fill `list`
// exactly (a reduce-scatter's input, an allgather's output).
inline void check_blocks_fill(const RegionList& list, std::span<const std::size_t> counts, const char* what) {
  std::size_t total = 0;
  for (std::size_t c : counts) total += c;
  if (total != list.count())
    throw InvalidArgumentError(std::string(what) + ": the regions hold " + std::to_string(list.count()) +
                               " elements, the blocks " + std::to_string(total));
}

}  // namespace kolo::comm
