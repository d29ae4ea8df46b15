// The flight recorder: each rank remembers its last N operations (name, op,
// bytes, sequence number, state, timestamps) in a ring, at the cost of a few
// stores per operation. On an engine error, a stall, or SIGUSR1, it writes them as
// JSON to $KOLO_FLIGHT_RECORDER_DIR/rank<r>.json (default /tmp/kolo-flight-<job
// tag>, common/job_names.h), which kolorun and `kolo-flight-report` read to say
// which rank is behind and on which tensor.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/messages.h"

namespace kolo::engine {

enum class OpPhase : std::uint8_t { Negotiating = 0, Executing = 1, Done = 2, Failed = 3 };
const char* to_string(OpPhase phase);

struct FlightRecord {
  std::uint64_t seq = 0;  // 1, 2, ... in the order this rank submitted
  std::string name;
  OpType op = OpType::Allreduce;
  std::uint64_t bytes = 0;
  OpPhase phase = OpPhase::Negotiating;
  std::int64_t submitted_us = 0, started_us = 0, finished_us = 0;  // since the recorder started
};

class FlightRecorder {
 public:
  // `path` is the record file; the recorder makes its directory and, when done,
  // removes the pid file and, if they are empty, the `own_levels` directories
  // above them that the record lives in (2 for a world's directory inside the job's).
  FlightRecorder(std::size_t capacity, int rank, int size, std::string path, int own_levels = 1);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Records a new operation; returns its sequence number.
  std::uint64_t begin(const Request& request, std::chrono::steady_clock::time_point submitted);
  std::uint64_t begin(const std::string& name, OpType op, std::uint64_t bytes,
                      std::chrono::steady_clock::time_point submitted);
  void update(std::uint64_t seq, OpPhase phase);

  // The ring, oldest first, as JSON with `reason` (what triggered the dump) and,
  // when this rank failed because of another (blamed_rank >= 0), that rank as
  // "blames": kolorun then names the rank that failed first, not the messenger.
  std::string to_json(const std::string& reason, int blamed_rank = -1) const;
  // Writes to_json(reason, blamed_rank) to the recorder's file; returns its path.
  // Never throws.
  std::string dump(const std::string& reason, int blamed_rank = -1) const;
  const std::string& path() const { return path_; }

  // Dumps whenever the process receives SIGUSR1 (a watcher thread, since a signal
  // handler may not allocate). One recorder per process holds the signal. Writes
  // rank<r>.pid beside the record so that kolorun signals exactly this process
  // (a wrapper script in the rank's process group would die of SIGUSR1).
  void watch_sigusr1();

 private:
  std::int64_t now_us() const;

  const int rank_, size_;
  const std::string path_;
  const int own_levels_;
  const std::chrono::steady_clock::time_point origin_;
  const std::chrono::system_clock::time_point wall_origin_;
  mutable std::mutex mutex_;
  std::vector<FlightRecord> ring_;
  std::uint64_t next_seq_ = 1;
  int wake_pipe_[2] = {-1, -1};
  std::thread watcher_;
};

}  // namespace kolo::engine
