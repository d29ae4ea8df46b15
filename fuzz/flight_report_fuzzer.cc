// kolo-flight-report's reading of flight records (JSON, one file per rank), which
// kolorun also runs on a failed job's records. The input is the files' contents
// separated by lines "---". report_for_records promises never to throw: an
// exception escaping here is a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flight_report.h"
#include "fuzz_check.h"

namespace {

std::vector<std::string> split_files(std::string_view input) {
  constexpr std::string_view kSeparator = "\n---\n";
  std::vector<std::string> files;
  for (;;) {
    const auto at = input.find(kSeparator);
    files.emplace_back(input.substr(0, at));
    if (at == std::string_view::npos) return files;
    input.remove_prefix(at + kSeparator.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto files = split_files({reinterpret_cast<const char*>(data), size});
  // Inferring the job's size from the records, and being told it.
  FUZZ_CHECK(!kolo::flight::report_for_records(files, 0).empty());
  FUZZ_CHECK(!kolo::flight::report_for_records(files, static_cast<int>(files.size())).empty());
  return 0;
}
