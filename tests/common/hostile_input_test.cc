// Regressions for what the fuzzers (fuzz/) found, and the contracts they check,
// in plain tests that run in every build: the env parsers, the flight-record
// reader and the store's frame and request parsing.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/wire.h"
#include "engine/messages.h"
#include "flight_report.h"
#include "kolo/error.h"
#include "store/store_messages.h"

namespace kolo {
namespace {

namespace proto = store::protocol;
using Bytes = std::vector<std::uint8_t>;

// Found by env_parsers_fuzzer: a K/M/G suffix on a large number overflowed an
// int64 (undefined behaviour, in practice a negative size).
TEST(HostileInput, EnvIntegerWithSuffixThatOverflowsIsAnError) {
  EXPECT_THROW(env::parse_int("640564056405405M", "KOLO_X"), InvalidArgumentError);
  EXPECT_THROW(env::parse_int("9223372036854775807K", "KOLO_X"), InvalidArgumentError);
  EXPECT_THROW(env::parse_int("-9223372036854775807G", "KOLO_X"), InvalidArgumentError);
  EXPECT_EQ(env::parse_int("8589934591G", "KOLO_X"), std::int64_t{8589934591} << 30);
  EXPECT_EQ(env::parse_int("-3k", "KOLO_X"), -3072);
}

// Seconds past what int64 milliseconds hold made an undefined conversion.
TEST(HostileInput, EnvSecondsTooLargeIsAnError) {
  setenv("KOLO_HOSTILE_SECONDS", "1e300", 1);
  EXPECT_THROW(env::get_seconds("KOLO_HOSTILE_SECONDS", std::chrono::milliseconds(1)), InvalidArgumentError);
  setenv("KOLO_HOSTILE_SECONDS", "1e9", 1);
  EXPECT_EQ(env::get_seconds("KOLO_HOSTILE_SECONDS", std::chrono::milliseconds(1)).count(), std::int64_t{1000000000000});
  unsetenv("KOLO_HOSTILE_SECONDS");
}

// A name past 4096 bytes was sent and broke the coordinator's message for every
// rank. Property: a request at every limit of check_sendable is one the
// coordinator's parser takes back unchanged, and one past any limit is refused
// at the call (engine_requests_fuzzer checks that what the parser takes passes).
TEST(HostileInput, RequestsUpToTheWireLimitsArriveAndPastThemAreRefused) {
  engine::Request at_limits;
  at_limits.name = std::string(engine::kMaxNameBytes, 'n');
  at_limits.group = std::string(engine::kMaxNameBytes, 'g');
  at_limits.shape = Shape(engine::kMaxDims, 1);
  at_limits.splits = std::vector<std::int64_t>(engine::kMaxSplits, 0);
  EXPECT_NO_THROW(engine::check_sendable(at_limits));
  const auto decoded = engine::decode_requests(engine::encode_requests({at_limits}));
  ASSERT_EQ(decoded.size(), 1u);
  EXPECT_EQ(decoded[0], at_limits);
  auto past = [&](auto change) {
    engine::Request r = at_limits;
    change(r);
    EXPECT_THROW(engine::check_sendable(r), InvalidArgumentError);
    EXPECT_THROW(engine::decode_requests(engine::encode_requests({r})), wire::WireError);
  };
  past([](engine::Request& r) { r.name += 'n'; });
  past([](engine::Request& r) { r.group += 'g'; });
  past([](engine::Request& r) { r.shape.push_back(1); });
  past([](engine::Request& r) { r.splits.push_back(0); });
}

// Found by engine_requests_fuzzer: the call-site flag was read as "not 0", so a
// byte of 2 was taken and sent on as 1. A flag has one encoding per value.
TEST(HostileInput, RequestFlagsOtherThanZeroOrOneAreRefused) {
  engine::Request racing;
  racing.name = "r";
  racing.racing_site = true;
  auto bytes = engine::encode_requests({racing});
  ASSERT_EQ(bytes.back(), 1);
  EXPECT_TRUE(engine::decode_requests(bytes)[0].racing_site);
  bytes.back() = 2;
  EXPECT_THROW(engine::decode_requests(bytes), wire::WireError);
  EXPECT_THROW(proto::reply_flag(proto::parse_reply(Bytes{0, 2})), wire::WireError);
  EXPECT_TRUE(proto::reply_flag(proto::parse_reply(Bytes{0, 1})));
}

std::string record(const std::string& rank, const std::string& now_us = "5000000",
                   const std::string& submitted_us = "1000000") {
  return "{\"rank\":" + rank + ",\"reason\":\"stall\",\"now_us\":" + now_us +
         ",\"records\":[{\"seq\":1,\"name\":\"x\",\"op\":\"allreduce\",\"state\":\"executing\",\"submitted_us\":" +
         submitted_us + "}]}";
}

// Found by flight_report_fuzzer: numbers that do not fit the fields (1e300 as a
// rank or a timestamp) were converted with undefined behaviour, and a rank of
// 2^31-1 made the report loop over two billion ranks.
TEST(HostileInput, FlightRecordsWithOutOfRangeNumbersAreUnreadableNotFatal) {
  for (const auto& bad : {record("1e300"), record("-1"), record("2147483647"), record("1.5"), record("\"0\""),
                          record("0", "1e300"), record("0", "5", "-9223372036854775808"),
                          record("0", "9223372036854775807", "-1")}) {
    const std::string report = flight::report_for_records({bad}, 0);
    EXPECT_NE(report.find("could not be read"), std::string::npos) << bad << "\n" << report;
  }
  const std::string report = flight::report_for_records({record("1")}, 0);
  EXPECT_NE(report.find("no flight record from rank(s) 0"), std::string::npos) << report;
  EXPECT_NE(report.find("'x' (executing, 4.0 s)"), std::string::npos) << report;
}

TEST(HostileInput, StoreFramesAreCutOnlyWhenComplete) {
  EXPECT_FALSE(proto::front_frame(Bytes{}));
  EXPECT_FALSE(proto::front_frame(Bytes{3, 0, 0}));
  EXPECT_FALSE(proto::front_frame(Bytes{3, 0, 0, 0, 1, 2}));
  const Bytes two = {2, 0, 0, 0, 7, 8, 9};
  const auto payload = proto::front_frame(two);
  ASSERT_TRUE(payload);
  EXPECT_EQ(Bytes(payload->begin(), payload->end()), (Bytes{7, 8}));
  // The length is refused before any byte of the payload arrives.
  EXPECT_THROW(proto::front_frame(Bytes{0xff, 0xff, 0xff, 0xff}), wire::WireError);
}

TEST(HostileInput, StoreRequestsRoundTripAndRejectEverythingElse) {
  const std::vector<proto::Request> requests = {
      {.op = proto::Opcode::Set, .keys = {"k"}, .value = {1, 2}},
      {.op = proto::Opcode::Get, .keys = {"k"}, .timeout_ms = 7},
      {.op = proto::Opcode::Add, .keys = {"n"}, .delta = -5},
      {.op = proto::Opcode::Wait, .keys = {}, .timeout_ms = 1},
      {.op = proto::Opcode::Check, .keys = {"a", "b"}},
      {.op = proto::Opcode::Delete, .keys = {"a"}},
  };
  for (const auto& request : requests) {
    const Bytes frame = proto::encode_request_frame(request);
    const auto payload = proto::front_frame(frame);
    ASSERT_TRUE(payload);
    EXPECT_EQ(proto::parse_request(*payload), request);
    // Every truncation and any trailing byte are malformed.
    for (std::size_t n = 0; n < payload->size(); ++n) EXPECT_THROW(proto::parse_request(payload->first(n)), wire::WireError);
    Bytes longer(payload->begin(), payload->end());
    longer.push_back(0);
    EXPECT_THROW(proto::parse_request(longer), wire::WireError);
  }
  EXPECT_THROW(proto::parse_request(Bytes{0x7f}), wire::WireError);
  EXPECT_THROW(proto::parse_request(Bytes{}), wire::WireError);
}

TEST(HostileInput, StoreRepliesHoldExactlyTheirFields) {
  EXPECT_THROW(proto::parse_reply(Bytes{}), wire::WireError);
  EXPECT_THROW(proto::parse_reply(Bytes{3}), wire::WireError);
  const auto integer = proto::parse_reply(Bytes{0, 42, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(proto::reply_integer(integer), 42);
  EXPECT_THROW(proto::reply_flag(integer), wire::WireError);
  EXPECT_THROW(proto::reply_value(integer), wire::WireError);
  const auto value = proto::parse_reply(Bytes{0, 2, 0, 0, 0, 5, 6});
  EXPECT_EQ(proto::reply_value(value), (Bytes{5, 6}));
  const auto error = proto::parse_reply(Bytes{2, 1, 0, 0, 0, 'x'});
  EXPECT_EQ(error.status, proto::Status::Error);
  EXPECT_EQ(proto::reply_error_message(error), "x");
  // A value announcing more bytes than the reply holds.
  EXPECT_THROW(proto::reply_value(proto::parse_reply(Bytes{0, 0xff, 0xff, 0xff, 0x01})), wire::WireError);
}

}  // namespace
}  // namespace kolo
