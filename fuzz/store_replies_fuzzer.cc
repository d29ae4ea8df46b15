// The store client's side of the protocol: a reply frame's payload as the client
// reads it (parse_reply), then the fields of every kind of reply it may expect.
// Property: whatever is accepted holds exactly the fields of that reply.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/wire.h"
#include "fuzz_check.h"
#include "store/store_messages.h"

namespace proto = kolo::store::protocol;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  proto::Reply reply;
  try {
    reply = proto::parse_reply(std::span<const std::uint8_t>(data, size));
  } catch (const kolo::wire::WireError&) {
    FUZZ_CHECK(size == 0 || data[0] > static_cast<std::uint8_t>(proto::Status::Error));
    return 0;
  }
  FUZZ_CHECK(reply.fields.size() + 1 == size);
  try {
    FUZZ_CHECK(proto::reply_value(reply).size() + 4 == reply.fields.size());
  } catch (const kolo::wire::WireError&) {
  }
  try {
    (void)proto::reply_integer(reply);
    FUZZ_CHECK(reply.fields.size() == 8);
  } catch (const kolo::wire::WireError&) {
  }
  try {
    (void)proto::reply_flag(reply);
    FUZZ_CHECK(reply.fields.size() == 1);
  } catch (const kolo::wire::WireError&) {
  }
  try {
    FUZZ_CHECK(proto::reply_error_message(reply).size() + 4 == reply.fields.size());
  } catch (const kolo::wire::WireError&) {
  }
  return 0;
}
