// The stall inspector's parser of the pending-operation reports every rank shares,
// and what the inspector does with them: find_stalls and describe.
// Property: decode(encode(report)) == report for every report it accepts.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/wire.h"
#include "engine/stall_inspector.h"
#include "fuzz_check.h"

namespace {

bool same(const kolo::engine::PendingReport& a, const kolo::engine::PendingReport& b) {
  return a.joined == b.joined && a.pending == b.pending;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kolo::engine::PendingReport report;
  try {
    report = kolo::engine::decode_report(std::span<const std::uint8_t>(data, size));
  } catch (const kolo::wire::WireError&) {
    return 0;
  }
  FUZZ_CHECK(same(kolo::engine::decode_report(kolo::engine::encode_report(report)), report));

  // Three ranks: this one, one that submitted nothing, one that joined.
  kolo::engine::PendingReport joined;
  joined.joined = true;
  for (const auto threshold : {std::chrono::milliseconds(0), std::chrono::milliseconds(60000)}) {
    for (const auto& stall : kolo::engine::find_stalls({report, {}, joined}, threshold)) {
      FUZZ_CHECK(!stall.missing.empty());
      FUZZ_CHECK(!kolo::engine::describe(stall).empty());
    }
  }
  return 0;
}
