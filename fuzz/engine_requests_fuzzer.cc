// The coordinator's parser of request lists, which arrive from every rank.
// Properties: whatever it accepts is the canonical encoding of what it returns, so
// decode then encode gives back the input, byte for byte; and every request it
// accepts is one a rank may send (check_sendable), so that the call's limits and
// the parser's cannot drift apart (tests/common/hostile_input_test.cc checks that what
// may be sent, up to the limits, is accepted).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/wire.h"
#include "engine/messages.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> input(data, size);
  std::vector<kolo::engine::Request> requests;
  try {
    requests = kolo::engine::decode_requests(input);
  } catch (const kolo::wire::WireError&) {
    return 0;
  }
  for (const auto& r : requests) kolo::engine::check_sendable(r);  // throws: a crash here
  const auto encoded = kolo::engine::encode_requests(requests);
  FUZZ_CHECK(std::equal(encoded.begin(), encoded.end(), input.begin(), input.end()));
  FUZZ_CHECK(kolo::engine::decode_requests(encoded).size() == requests.size());
  return 0;
}
