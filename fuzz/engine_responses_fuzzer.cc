// Every rank's parser of the coordinator's response lists.
// Property: decode then encode gives back the input, byte for byte.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/wire.h"
#include "engine/messages.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> input(data, size);
  std::vector<kolo::engine::Response> responses;
  try {
    responses = kolo::engine::decode_responses(input);
  } catch (const kolo::wire::WireError&) {
    return 0;
  }
  const auto encoded = kolo::engine::encode_responses(responses);
  FUZZ_CHECK(std::equal(encoded.begin(), encoded.end(), input.begin(), input.end()));
  FUZZ_CHECK(kolo::engine::decode_responses(encoded).size() == responses.size());
  return 0;
}
