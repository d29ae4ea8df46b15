// The parameter servers' push header (comm/ps/ps_protocol.h): what a worker
// encodes a server decodes to the same push, the result's scale included, and
// every header a server must not act on is refused with what is wrong with it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "comm/ps/ps_protocol.h"
#include "kolo/error.h"

namespace kolo::comm::ps {
namespace {

PushHeader push_of(ResultScale scale) {
  return PushHeader{Kind::Push, DataType::Float32, ReduceOp::Sum, 7, 3, 1000, scale};
}

// `message` in what decode() throws for `bytes`.
void expect_refused(const EncodedHeader& bytes, const std::string& message) {
  try {
    decode(bytes);
    ADD_FAILURE() << "decoded a header that says '" << message << "'";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

template <typename T>
EncodedHeader with(EncodedHeader bytes, std::size_t at, T value) {
  std::memcpy(bytes.data() + at, &value, sizeof value);
  return bytes;
}

TEST(PsProtocol, APushDecodesToItselfWithItsScale) {
  for (const ResultScale& scale : {ResultScale(), ResultScale::multiply(0.25), ResultScale::multiply(-3.5),
                                   ResultScale::divide(3)}) {
    const PushHeader push = push_of(scale);
    EXPECT_EQ(decode(encode(push)), push);
  }
  const PushHeader bye{.kind = Kind::Bye};
  EXPECT_EQ(decode(encode(bye)).kind, Kind::Bye);
}

TEST(PsProtocol, TheScaleIsPartOfWhatMustMatch) {
  EXPECT_FALSE(push_of(ResultScale::multiply(0.5)) == push_of(ResultScale()));
  EXPECT_FALSE(push_of(ResultScale::divide(2)) == push_of(ResultScale::multiply(0.5)));
  EXPECT_EQ(push_of(ResultScale::divide(2)).describe(), "push of allreduce 7, partition 3: 1000 float32 (sum, divided by 2)");
  EXPECT_EQ(push_of(ResultScale()).describe(), "push of allreduce 7, partition 3: 1000 float32 (sum)");
}

TEST(PsProtocol, HeadersAServerMustNotActOnAreRefused) {
  const EncodedHeader good = encode(push_of(ResultScale()));
  expect_refused(with<std::uint8_t>(good, 0, 0x00), "wrong magic word");
  expect_refused(with<std::uint8_t>(good, 4, 9), "unknown message kind 9");
  expect_refused(with<std::uint8_t>(good, 5, 200), "unknown dtype 200");
  expect_refused(with<std::uint8_t>(good, 6, static_cast<std::uint8_t>(ReduceOp::Average)), "is none a server applies");
  expect_refused(with<std::uint64_t>(good, 24, kMaxPushBytes), "exceed the");
  expect_refused(with<double>(good, 32, std::numeric_limits<double>::quiet_NaN()), "is none a server applies");
  expect_refused(with<double>(good, 32, std::numeric_limits<double>::infinity()), "is none a server applies");
  expect_refused(with<std::int64_t>(good, 40, 0), "divisor 0");
  expect_refused(with<std::int64_t>(good, 40, -2), "divisor -2");
  // A division and a factor at once is no scale the engine makes.
  expect_refused(with<std::int64_t>(with<double>(good, 32, 0.5), 40, 2), "is none a server applies");
}

}  // namespace
}  // namespace kolo::comm::ps
