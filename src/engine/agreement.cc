#include "engine/agreement.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/reduce.h"
#include "kolo/error.h"

namespace kolo::engine {
namespace {

constexpr std::size_t kHeaderBytes = 16;
constexpr const char* config_hint = ": KOLO_EAGER_BYTES or KOLO_CACHE_CAPACITY differ across ranks";
constexpr std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

}  // namespace

Agreement::Agreement(comm::Communicator& comm, std::size_t eager_bytes)
    : comm_(comm), eager_bytes_(round_up(eager_bytes, 8)) {
  static_assert(sizeof(Header) == kHeaderBytes);
}

std::size_t Agreement::payload_offset() const {
  // Multiples of 8 bytes, so that every payload is aligned for any element type.
  return round_up(kHeaderBytes + length_, 8);
}

std::uint8_t* Agreement::begin(std::size_t length) {
  length_ = length;
  if (eager_bytes_ == 0) {
    agreed_.assign(length, 0);
    return agreed_.data();
  }
  // Room for the largest payload; only the header and the vector are reset, since
  // only they and an offered payload are sent.
  mine_.resize(payload_offset() + eager_bytes_);
  std::memset(mine_.data(), 0, payload_offset());
  header_ = Header{static_cast<std::uint32_t>(payload_offset()), 0, static_cast<std::uint32_t>(eager_bytes_),
                    static_cast<std::uint32_t>(length)};
  return reinterpret_cast<std::uint8_t*>(mine_.data() + kHeaderBytes);
}

void Agreement::offer(std::uint32_t bit, const void* data, std::size_t bytes) {
  if (bytes > eager_bytes_) throw InvalidArgumentError("internal: an eager payload larger than KOLO_EAGER_BYTES");
  header_.bit_plus_one = bit + 1;
  header_.block_bytes = static_cast<std::uint32_t>(payload_offset() + round_up(bytes, 8));
  if (bytes > 0) std::memcpy(offered_payload(), data, bytes);
}

std::byte* Agreement::offered_payload() { return mine_.data() + payload_offset(); }

void Agreement::exchange() {
  if (eager_bytes_ == 0) {
    comm_.allreduce(agreed_.data(), agreed_.data(), length_, DataType::UInt8, ReduceOp::Min);
    return;
  }
  const int n = comm_.size();
  const std::size_t block = mine_.size();
  std::memcpy(mine_.data(), &header_, sizeof header_);
  all_.resize(block * static_cast<std::size_t>(n));
  try {
    comm_.allgather_self_sized(mine_.data(), all_.data(), block);
  } catch (const InvalidArgumentError& e) {  // a block longer than this rank's largest, or a padded size that differs
    throw InvalidArgumentError(std::string("the ranks' negotiation blocks differ (") + e.what() + ")" + config_hint);
  }
  payloads_.resize(static_cast<std::size_t>(n));
  vectors_.resize(static_cast<std::size_t>(n));
  common_offer_.reset();
  bool same_offer = true;
  std::uint32_t first_offer = 0;
  for (int r = 0; r < n; ++r) {
    const std::byte* theirs = all_.data() + static_cast<std::size_t>(r) * block;
    Header h;
    std::memcpy(&h, theirs, sizeof h);
    if (h.eager_bytes != eager_bytes_ || h.vector_bytes != length_ || h.block_bytes < payload_offset()) {
      throw InvalidArgumentError("rank " + std::to_string(r) + "'s negotiation block (eager " +
                                 std::to_string(h.eager_bytes) + " bytes, vector " + std::to_string(h.vector_bytes) +
                                 ") differs from rank " + std::to_string(comm_.rank()) + "'s (eager " +
                                 std::to_string(eager_bytes_) + ", vector " + std::to_string(length_) + ")" +
                                 config_hint);
    }
    if (r == 0) first_offer = h.bit_plus_one;
    same_offer = same_offer && h.bit_plus_one != 0 && h.bit_plus_one == first_offer;
    payloads_[r] = theirs + payload_offset();
    vectors_[r] = theirs + kHeaderBytes;
  }
  if (same_offer) common_offer_ = first_offer - 1;
  agreed_.resize(length_);
  if (length_ > 0) reduce_many(agreed_.data(), vectors_.data(), n, length_, DataType::UInt8, ReduceOp::Min);
}

}  // namespace kolo::engine
