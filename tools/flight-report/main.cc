// kolo-flight-report DIR [SIZE]: prints which rank is behind, from the flight
// records a failed or stalled job left in DIR (KOLO_FLIGHT_RECORDER_DIR). The
// report goes to stdout and the exit is 0; no report (DIR unreadable, no record
// in it) is one line on stderr and exit 1; a malformed command line exit 2.
#include <charconv>
#include <cstdio>
#include <string>
#include <system_error>

#include "flight_report.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: kolo-flight-report DIR [SIZE]\n");
    return 2;
  }
  int size = 0;
  if (argc == 3) {
    const std::string text = argv[2];
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), size);
    if (error != std::errc() || end != text.data() + text.size() || size <= 0 || size > (1 << 20)) {
      std::fprintf(stderr, "kolo-flight-report: SIZE must be a number of ranks from 1 to 1048576, not '%s'\n", argv[2]);
      return 2;
    }
  }
  const std::string dir = argv[1];
  std::error_code error;
  const auto files = kolo::flight::record_files(dir, error);
  if (error) {
    std::fprintf(stderr, "kolo-flight-report: cannot read %s: %s\n", dir.c_str(), error.message().c_str());
    return 1;
  }
  if (files.empty()) {
    std::fprintf(stderr, "kolo-flight-report: no flight record (rank<r>.json) in %s\n", dir.c_str());
    return 1;
  }
  std::fputs(kolo::flight::report_for_directory(dir, size).c_str(), stdout);
  return 0;
}
