// The timeline: a Chrome trace (JSON array format, opens in Perfetto and
// chrome://tracing) of every tensor's life: queued, negotiating, then the phases
// of its execution (fusion copy in, communicator, fusion copy out).
//
// A writer thread appends events so that the engine never waits on the disk.
// After every write the file ends with "]": it stays valid JSON even when the job
// is killed (at worst the last moments are missing).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace kolo::engine {

class Timeline {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // Opens (truncates) `path`, never through a symbolic link. Throws
  // InvalidArgumentError when it cannot; a later failed write is a warning, and
  // the trace ends there.
  Timeline(const std::string& path, int rank);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // A span of `phase` on the track of `tensor`; `detail` is shown in its args.
  void span(const std::string& tensor, const char* phase, TimePoint start, TimePoint end,
            const std::string& detail = {});

 private:
  void write_loop();
  // After a failed write (errno `error`): says so, keeps the file whole and
  // writes no more. On the writer thread.
  void give_up(int error);
  std::int64_t micros(TimePoint t) const;

  const int rank_;
  const std::string path_;
  const TimePoint origin_;
  int fd_ = -1;
  std::int64_t end_offset_ = 0;  // where the closing "]" stands
  bool first_event_ = true;
  bool failed_ = false;  // a write failed: the trace ends (writer thread only)

  std::mutex mutex_;
  std::condition_variable wake_;
  std::string pending_;  // serialized events not yet written
  bool stop_ = false;
  std::unordered_map<std::string, int> tracks_;  // tensor -> tid
  std::thread writer_;
};

}  // namespace kolo::engine
