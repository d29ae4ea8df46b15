// What an elastic state's sync sends: kolo::elastic::digest (and the digest it
// is built on) tells every change apart, and differ_from_rank_0 gives every rank
// the same list of items to send.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "common/digest.h"
#include "harness/multiprocess.h"
#include "kolo/elastic.h"
#include "kolo/error.h"
#include "kolo/runtime.h"

namespace kolo {
namespace {

using testing::run_ranks;

std::vector<unsigned char> pattern(std::size_t size) {
  std::vector<unsigned char> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
  return bytes;
}

TEST(Digest, EqualBytesGiveEqualDigestsWhereverTheyLie) {
  const auto bytes = pattern(301);
  std::vector<unsigned char> shifted(bytes.size() + 3);
  std::copy(bytes.begin(), bytes.end(), shifted.begin() + 3);  // unaligned
  EXPECT_EQ(digest_bytes(bytes.data(), bytes.size()), digest_bytes(shifted.data() + 3, bytes.size()));
  EXPECT_EQ(elastic::digest(bytes.data(), bytes.size()), digest_bytes(bytes.data(), bytes.size()));
}

TEST(Digest, EveryBitFlippedChangesIt) {
  // Sizes around the 8-byte words and 32-byte blocks, every bit of each.
  for (std::size_t size : {1u, 7u, 8u, 9u, 31u, 32u, 33u, 64u, 100u}) {
    auto bytes = pattern(size);
    const std::uint64_t original = digest_bytes(bytes.data(), size);
    std::set<std::uint64_t> seen{original};
    for (std::size_t bit = 0; bit < size * 8; ++bit) {
      bytes[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
      seen.insert(digest_bytes(bytes.data(), size));
      bytes[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    }
    EXPECT_EQ(seen.size(), size * 8 + 1) << "size " << size << ": every flip gives its own digest";
  }
}

TEST(Digest, LengthCountsAndSwappedWordsDiffer) {
  const std::vector<unsigned char> zeros(64, 0);
  std::set<std::uint64_t> seen;
  for (std::size_t size = 0; size <= zeros.size(); ++size) seen.insert(digest_bytes(zeros.data(), size));
  EXPECT_EQ(seen.size(), zeros.size() + 1) << "zeros of each length differ";

  std::vector<std::uint64_t> words(16);
  std::iota(words.begin(), words.end(), 1);
  const std::uint64_t in_order = digest_bytes(words.data(), words.size() * 8);
  std::swap(words[0], words[4]);  // the same lane of two blocks
  EXPECT_NE(digest_bytes(words.data(), words.size() * 8), in_order);
  std::swap(words[0], words[4]);
  std::swap(words[0], words[1]);  // two lanes of one block
  EXPECT_NE(digest_bytes(words.data(), words.size() * 8), in_order);
}

TEST(ElasticSync, DifferFromRankZeroIsOneAnswerOnEveryRank) {
  run_ranks(3, [](int rank) {
    kolo::init();
    // Item 0 alike everywhere; item 1 differs on rank 2 only; item 2 on rank 1;
    // item 3 on both.
    std::vector<std::uint64_t> digests{10, 20, 30, 40};
    if (rank == 2) digests[1] = 21, digests[3] = 41;
    if (rank == 1) digests[2] = 31, digests[3] = 42;
    EXPECT_EQ(elastic::differ_from_rank_0(digests, "test.sync"), (std::vector<bool>{false, true, true, true}));
    EXPECT_EQ(elastic::differ_from_rank_0({5, 6}, "test.same"), (std::vector<bool>{false, false}));
    EXPECT_TRUE(elastic::differ_from_rank_0({}, "test.none").empty());

    // Different counts: every rank is told, none hangs, and the job goes on.
    std::vector<std::uint64_t> uneven(rank == 1 ? 3 : 2, 7);
    EXPECT_THROW(elastic::differ_from_rank_0(uneven, "test.uneven"), MismatchError);
    EXPECT_EQ(elastic::differ_from_rank_0({rank == 0 ? 1u : 2u}, "test.after"), std::vector<bool>{true});
    kolo::shutdown();
  });
}

}  // namespace
}  // namespace kolo
