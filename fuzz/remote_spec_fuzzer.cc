// `kolorun --remote-exec`'s reading of its job spec from stdin (ssh's channel):
// RemoteSpecDecoder, fed in two pieces cut where the first byte says. Anything
// malformed must be a kolo::Error (any other exception is a crash). Properties:
// the decoder never claims more bytes than it was given, and a decoded spec
// survives encode and decode unchanged.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "kolo/error.h"
#include "remote/remote_protocol.h"

namespace {

bool same(const kolorun::RemoteSpec& a, const kolorun::RemoteSpec& b) {
  return a.rank == b.rank && a.label == b.label && a.working_directory == b.working_directory &&
         a.host_timeout == b.host_timeout && a.argv == b.argv && a.env == b.env;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t cut = data[0] % (input.size() + 1);
  kolorun::RemoteSpecDecoder decoder;
  try {
    const std::size_t first = decoder.feed(input.substr(0, cut));
    FUZZ_CHECK(first <= cut);
    if (!decoder.done()) FUZZ_CHECK(decoder.feed(input.substr(cut)) <= input.size() - cut);
  } catch (const kolo::Error&) {
    return 0;
  }
  if (!decoder.done()) return 0;
  const std::string encoded = kolorun::encode_remote_spec(decoder.spec());
  kolorun::RemoteSpecDecoder again;
  FUZZ_CHECK(again.feed(encoded) == encoded.size());
  FUZZ_CHECK(again.done() && same(again.spec(), decoder.spec()));
  return 0;
}
