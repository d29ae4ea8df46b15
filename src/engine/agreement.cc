#include "engine/agreement.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/reduce.h"
#include "kolo/error.h"

namespace kolo::engine {
namespace {

constexpr std::size_t kHeaderBytes = 8;
constexpr const char* config_hint = ": KOLO_EAGER_BYTES or KOLO_CACHE_CAPACITY differ across ranks";
constexpr std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

}  // namespace

Agreement::Agreement(comm::Communicator& comm, std::size_t eager_bytes)
    : comm_(comm), eager_bytes_(round_up(eager_bytes, 8)) {
  static_assert(sizeof(Header) == kHeaderBytes);
}

std::size_t Agreement::block_bytes() const {
  // Multiples of 8 bytes, so that every payload is aligned for any element type;
  // no more, since every byte crosses to every peer in every cycle.
  return round_up(kHeaderBytes + eager_bytes_ + length_, 8);
}

std::uint8_t* Agreement::begin(std::size_t length) {
  length_ = length;
  if (eager_bytes_ == 0) {
    agreed_.assign(length, 0);
    return agreed_.data();
  }
  mine_.assign(block_bytes(), std::byte{0});
  const Header header{0, static_cast<std::uint32_t>(mine_.size())};
  std::memcpy(mine_.data(), &header, sizeof header);
  return reinterpret_cast<std::uint8_t*>(mine_.data() + kHeaderBytes + eager_bytes_);
}

void Agreement::offer(std::uint32_t bit, const void* data, std::size_t bytes) {
  if (bytes > eager_bytes_) throw InvalidArgumentError("internal: an eager payload larger than KOLO_EAGER_BYTES");
  const Header header{bit + 1, static_cast<std::uint32_t>(mine_.size())};
  std::memcpy(mine_.data(), &header, sizeof header);
  if (bytes > 0) std::memcpy(offered_payload(), data, bytes);
}

std::byte* Agreement::offered_payload() { return mine_.data() + kHeaderBytes; }

void Agreement::exchange() {
  if (eager_bytes_ == 0) {
    comm_.allreduce(agreed_.data(), agreed_.data(), length_, DataType::UInt8, ReduceOp::Min);
    return;
  }
  const int n = comm_.size();
  const std::size_t block = mine_.size();
  all_.resize(block * static_cast<std::size_t>(n));
  block_sizes_.assign(static_cast<std::size_t>(n), block);
  try {
    comm_.allgatherv(mine_.data(), block, all_.data(), block_sizes_);
  } catch (const InvalidArgumentError& e) {  // a transport that notices the sizes differ
    throw InvalidArgumentError(std::string("the ranks' negotiation blocks differ (") + e.what() + ")" + config_hint);
  }
  payloads_.resize(static_cast<std::size_t>(n));
  vectors_.resize(static_cast<std::size_t>(n));
  common_offer_.reset();
  bool same_offer = true;
  std::uint32_t first_offer = 0;
  for (int r = 0; r < n; ++r) {
    const std::byte* theirs = all_.data() + static_cast<std::size_t>(r) * block;
    Header header;
    std::memcpy(&header, theirs, sizeof header);
    if (header.block_bytes != block) {
      throw InvalidArgumentError("rank " + std::to_string(r) + "'s negotiation block has " +
                                 std::to_string(header.block_bytes) + " bytes where rank " +
                                 std::to_string(comm_.rank()) + "'s has " + std::to_string(block) + config_hint);
    }
    if (r == 0) first_offer = header.bit_plus_one;
    same_offer = same_offer && header.bit_plus_one != 0 && header.bit_plus_one == first_offer;
    payloads_[r] = theirs + kHeaderBytes;
    vectors_[r] = theirs + kHeaderBytes + eager_bytes_;
  }
  if (same_offer) common_offer_ = first_offer - 1;
  agreed_.resize(length_);
  if (length_ > 0) reduce_many(agreed_.data(), vectors_.data(), n, length_, DataType::UInt8, ReduceOp::Min);
}

}  // namespace kolo::engine
