// The engine's pieces in isolation: message codec (with hostile input), the
// coordinator's readiness and validation, the response cache, fusion planning.
#include <gtest/gtest.h>

#include <random>

#include "common/wire.h"
#include "engine/coordinator.h"
#include "engine/fusion.h"
#include "engine/messages.h"
#include "engine/response_cache.h"

namespace kolo::engine {
namespace {

Request allreduce(const std::string& name, Shape shape, DataType dtype = DataType::Float32) {
  Request r;
  r.name = name;
  r.op = OpType::Allreduce;
  r.dtype = dtype;
  r.shape = std::move(shape);
  return r;
}

TEST(Messages, RequestsRoundTrip) {
  Request a = allreduce("layer1.weight", {64, 3, 3, 3});
  a.prescale = 0.5;
  Request b;
  b.name = "x";
  b.op = OpType::Alltoall;
  b.dtype = DataType::BFloat16;
  b.shape = {10, 2};
  b.splits = {3, 7};
  b.group = "g";
  b.group_size = 2;
  auto decoded = decode_requests(encode_requests({a, b}));
  ASSERT_EQ(decoded.size(), 2u);
  EXPECT_EQ(decoded[0], a);
  EXPECT_EQ(decoded[1], b);
}

TEST(Messages, ResponsesRoundTrip) {
  Response r;
  r.op = OpType::Allgather;
  r.names = {"a", "b"};
  r.error_kind = ErrorKind::Mismatch;
  r.error = "boom";
  r.sizes = {1, 2};
  r.shape = {3, 4};
  r.rank_rows = {5, 6};
  r.last_joined = 1;
  auto decoded = decode_responses(encode_responses({r, Response{}}));
  ASSERT_EQ(decoded.size(), 2u);
  EXPECT_EQ(decoded[0], r);
}

TEST(Messages, MalformedInputIsRejectedWithoutCrashing) {
  auto good = encode_requests({allreduce("a", {1, 2}), allreduce("b", {3})});
  // Every truncation fails cleanly.
  for (std::size_t len = 0; len < good.size(); ++len)
    EXPECT_THROW(decode_requests(std::span(good.data(), len)), wire::WireError) << "length " << len;
  // Trailing garbage, wrong tag, huge counts, invalid enums.
  auto trailing = good;
  trailing.push_back(0);
  EXPECT_THROW(decode_requests(trailing), wire::WireError);
  auto tagged = good;
  tagged[0] = 0x52;
  EXPECT_THROW(decode_requests(tagged), wire::WireError);
  std::vector<std::uint8_t> huge = {0x51, 0xff, 0xff, 0xff, 0xff};
  EXPECT_THROW(decode_requests(huge), wire::WireError);
  auto bad_enum = encode_requests({allreduce("a", {1})});
  bad_enum[1 + 4 + 4 + 1] = 99;  // tag, count, name length, name, then the op byte
  EXPECT_THROW(decode_requests(bad_enum), wire::WireError);
  // Random bytes never crash the decoders.
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::vector<std::uint8_t> junk(rng() % 64);
    for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
    if (!junk.empty()) junk[0] = (i % 2) ? 0x51 : 0x52;
    try {
      decode_requests(junk);
    } catch (const wire::WireError&) {
    }
    try {
      decode_responses(junk);
    } catch (const wire::WireError&) {
    }
  }
}

TEST(Coordinator, ReadyOnlyWhenEveryRankSubmitted) {
  Coordinator c(3);
  c.add(0, {allreduce("a", {4}), allreduce("b", {4})});
  c.add(1, {allreduce("b", {4})});
  EXPECT_TRUE(c.take_ready().empty());
  c.add(2, {allreduce("b", {4}), allreduce("a", {4})});
  auto ready = c.take_ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].names, std::vector<std::string>{"b"});
  auto waiting = c.waiting();
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting[0].first, "a");
  EXPECT_EQ(waiting[0].second, std::vector<int>{1});
  c.add(1, {allreduce("a", {4})});
  ready = c.take_ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error_kind, ErrorKind::None);
  EXPECT_EQ(ready[0].sizes, std::vector<std::int64_t>{4});
}

TEST(Coordinator, MismatchNamesBothRanks) {
  Coordinator c(2);
  c.add(0, {allreduce("w", {2, 3})});
  c.add(1, {allreduce("w", {3, 2})});
  auto ready = c.take_ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error_kind, ErrorKind::Mismatch);
  EXPECT_EQ(ready[0].error, "Mismatched shapes for 'w': rank 0 submitted [2, 3], rank 1 submitted [3, 2].");
}

TEST(Coordinator, JoinCountsAsSubmittedAndCompletesWhenAllJoined) {
  Coordinator c(2);
  Request join;
  join.name = "kolo.join";
  join.op = OpType::Join;
  c.add(0, {join});
  c.add(1, {allreduce("g", {8})});
  auto ready = c.take_ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].names[0], "g");
  EXPECT_EQ(ready[0].error_kind, ErrorKind::None);
  c.add(1, {join});
  ready = c.take_ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].op, OpType::Join);
  EXPECT_EQ(ready[0].last_joined, 1);
}

TEST(Coordinator, GroupWaitsForEveryMember) {
  Coordinator c(1);
  Request a = allreduce("g.0", {1}), b = allreduce("g.1", {1});
  a.group = b.group = "g";
  a.group_size = b.group_size = 2;
  c.add(0, {a});
  EXPECT_TRUE(c.take_ready().empty());
  c.add(0, {b});
  EXPECT_EQ(c.take_ready().size(), 2u);
}

TEST(ResponseCache, HitConflictAndDeterministicEviction) {
  ResponseCache cache(2);
  auto respond = [](const Request& r) {
    Response resp;
    resp.names = {r.name};
    resp.sizes = {num_elements(r.shape)};
    return resp;
  };
  Request a = allreduce("a", {4}), b = allreduce("b", {4}), c = allreduce("c", {4});
  EXPECT_EQ(cache.lookup(a).outcome, ResponseCache::Outcome::Miss);
  cache.put(a, respond(a));
  cache.put(b, respond(b));
  EXPECT_EQ(cache.lookup(a).outcome, ResponseCache::Outcome::Hit);
  EXPECT_EQ(cache.lookup(allreduce("a", {5})).outcome, ResponseCache::Outcome::Conflict);
  cache.touch(cache.lookup(a).bit);  // b is now the least recently used
  cache.put(c, respond(c));
  EXPECT_EQ(cache.lookup(b).outcome, ResponseCache::Outcome::Miss);
  EXPECT_EQ(cache.lookup(c).bit, 1u) << "c reuses b's bit";
  EXPECT_EQ(cache.slots(), 2u);
  cache.erase(cache.lookup(a).bit);
  EXPECT_EQ(cache.lookup(a).outcome, ResponseCache::Outcome::Miss);
}

TEST(Fusion, FusesSameKindWithinThreshold) {
  auto resp = [](DataType dtype, std::int64_t n) {
    Response r;
    r.names = {"x"};
    r.dtype = dtype;
    r.sizes = {n};
    return r;
  };
  std::vector<Response> list = {resp(DataType::Float32, 10), resp(DataType::Float64, 10),
                                resp(DataType::Float32, 10), resp(DataType::Float32, 1000)};
  Response bcast;
  bcast.op = OpType::Broadcast;
  list.insert(list.begin() + 2, bcast);
  auto batches = plan_batches(list, 100);
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[0], (std::vector<std::size_t>{0, 3}));  // both small float32 fused
  EXPECT_EQ(batches[1], (std::vector<std::size_t>{1}));
  EXPECT_EQ(batches[2], (std::vector<std::size_t>{2}));
  EXPECT_EQ(batches[3], (std::vector<std::size_t>{4}));  // larger than the threshold: alone
}

}  // namespace
}  // namespace kolo::engine
