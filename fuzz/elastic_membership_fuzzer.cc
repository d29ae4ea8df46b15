// The membership record of an elastic job as a worker reads it from the store
// (decode_membership, src/bootstrap/elastic_membership.h), and a worker's reset
// request as kolorun reads it. Malformed records must be an InvalidArgumentError
// (any other exception is a crash). Properties: what decodes is the canonical
// encoding of what it returns (encode gives back the input, byte for byte); a
// request that decodes encodes back to its input.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "bootstrap/elastic_membership.h"
#include "fuzz_check.h"
#include "kolo/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (const auto request = kolo::elastic::decode_reset_request(text)) {
    FUZZ_CHECK(kolo::elastic::encode_reset_request(*request) == text);
  }
  kolo::elastic::Membership m;
  try {
    m = kolo::elastic::decode_membership(text, 7);
  } catch (const kolo::InvalidArgumentError&) {
    return 0;
  }
  FUZZ_CHECK(!m.members.empty() && m.generation == 7);
  FUZZ_CHECK(kolo::elastic::encode_membership(m) == text);
  for (std::size_t r = 0; r < m.members.size(); ++r)
    FUZZ_CHECK(m.rank_of(m.members[r].worker) == static_cast<int>(r));
  FUZZ_CHECK(m.host_indices().size() == m.members.size());
  return 0;
}
