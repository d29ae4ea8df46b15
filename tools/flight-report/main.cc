// kolo-flight-report DIR [SIZE]: prints which rank is behind, from the flight
// records a failed or stalled job left in DIR (KOLO_FLIGHT_RECORDER_DIR).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "flight_report.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: kolo-flight-report DIR [SIZE]\n");
    return 2;
  }
  int size = argc == 3 ? std::atoi(argv[2]) : 0;
  std::fputs(kolo::flight::report_for_directory(argv[1], size).c_str(), stdout);
  return 0;
}
