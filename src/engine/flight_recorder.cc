#include "engine/flight_recorder.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/coarse_clock.h"
#include "common/logging.h"

namespace kolo::engine {
namespace {

// The write end of the pipe the SIGUSR1 handler pokes; -1 when nobody listens.
std::atomic<int> g_sigusr1_fd{-1};
struct sigaction g_previous_sigusr1;

void on_sigusr1(int) {
  int fd = g_sigusr1_fd.load();
  if (fd >= 0) {
    char byte = 'd';
    [[maybe_unused]] auto n = ::write(fd, &byte, 1);
  }
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

// The records name the job's tensors: a directory made for them is the user's
// alone (0700; one that exists is left as it is), and so is each file (0600),
// never written through a symbolic link.
void make_private_directory(const std::filesystem::path& dir) {
  if (dir.empty() || std::filesystem::exists(dir)) return;
  make_private_directory(dir.parent_path());  // every level it makes is private
  if (std::filesystem::create_directory(dir)) std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
}

void write_private_file(const std::string& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw std::runtime_error(std::string("cannot open ") + path + ": " + std::strerror(errno));
  std::size_t done = 0;
  int error = 0;
  while (done < content.size() && error == 0) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) error = n < 0 ? errno : EIO;
    else done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (error != 0) throw std::runtime_error(std::string("cannot write ") + path + ": " + std::strerror(error));
}

}  // namespace

const char* to_string(OpPhase phase) {
  switch (phase) {
    case OpPhase::Negotiating: return "negotiating";
    case OpPhase::Executing: return "executing";
    case OpPhase::Done: return "done";
    case OpPhase::Failed: return "failed";
  }
  return "?";
}

FlightRecorder::FlightRecorder(std::size_t capacity, int rank, int size, std::string path, int own_levels)
    : rank_(rank),
      size_(size),
      path_(std::move(path)),
      own_levels_(own_levels),
      origin_(coarse_now()),
      wall_origin_(std::chrono::system_clock::now()),
      ring_(std::max<std::size_t>(capacity, 1)) {}

namespace {
std::string pid_file_for(const std::string& record_path) {
  return record_path.substr(0, record_path.size() - std::string(".json").size()) + ".pid";
}
}  // namespace

FlightRecorder::~FlightRecorder() {
  if (watcher_.joinable()) {
    std::error_code ec;
    std::filesystem::remove(pid_file_for(path_), ec);
    auto dir = std::filesystem::path(path_).parent_path();
    for (int level = 0; level < own_levels_ && !dir.empty(); ++level, dir = dir.parent_path())
      std::filesystem::remove(dir, ec);  // only if empty
    int fd = g_sigusr1_fd.exchange(-1);
    ::sigaction(SIGUSR1, &g_previous_sigusr1, nullptr);
    char stop = 's';
    [[maybe_unused]] auto n = ::write(fd, &stop, 1);
    watcher_.join();
    ::close(wake_pipe_[0]);
    ::close(wake_pipe_[1]);
  }
}

std::int64_t FlightRecorder::now_us() const {
  // Coarse (a few ms): a record says which operation waits and for how long;
  // exact times are the timeline's job, and this runs twice per operation.
  return std::chrono::duration_cast<std::chrono::microseconds>(coarse_now() - origin_).count();
}

std::uint64_t FlightRecorder::begin(const Request& request, std::chrono::steady_clock::time_point submitted) {
  return begin(request.name, request.op,
               static_cast<std::uint64_t>(num_elements(request.shape)) * element_size(request.dtype), submitted);
}

std::uint64_t FlightRecorder::begin(const std::string& name, OpType op, std::uint64_t bytes,
                                    std::chrono::steady_clock::time_point submitted) {
  std::lock_guard lock(mutex_);
  std::uint64_t seq = next_seq_++;
  FlightRecord& r = ring_[seq % ring_.size()];
  r.seq = seq;
  r.name = name;
  r.op = op;
  r.bytes = bytes;
  r.phase = OpPhase::Negotiating;
  r.submitted_us = std::chrono::duration_cast<std::chrono::microseconds>(submitted - origin_).count();
  r.started_us = r.finished_us = 0;
  return seq;
}

void FlightRecorder::update(std::uint64_t seq, OpPhase phase) {
  std::lock_guard lock(mutex_);
  FlightRecord& r = ring_[seq % ring_.size()];
  if (r.seq != seq) return;  // already overwritten by a newer operation
  r.phase = phase;
  if (phase == OpPhase::Executing) {
    r.started_us = now_us();
  } else {
    r.finished_us = now_us();
    // Finished without a separate start (in the negotiation step itself).
    if (phase == OpPhase::Done && r.started_us == 0) r.started_us = r.finished_us;
  }
}

std::string FlightRecorder::to_json(const std::string& reason, int blamed_rank) const {
  std::lock_guard lock(mutex_);
  auto wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(wall_origin_.time_since_epoch()).count();
  std::string out = "{\"rank\":" + std::to_string(rank_) + ",\"size\":" + std::to_string(size_) +
                    ",\"pid\":" + std::to_string(::getpid()) + ",\"reason\":\"" + escape(reason) + "\"" +
                    (blamed_rank >= 0 ? ",\"blames\":" + std::to_string(blamed_rank) : std::string()) +
                    ",\"origin_unix_ms\":" + std::to_string(wall_ms) + ",\"now_us\":" + std::to_string(now_us()) +
                    ",\"records\":[";
  bool first = true;
  const std::uint64_t oldest = next_seq_ > ring_.size() ? next_seq_ - ring_.size() : 1;
  for (std::uint64_t seq = oldest; seq < next_seq_; ++seq) {
    const FlightRecord& r = ring_[seq % ring_.size()];
    if (r.seq != seq) continue;
    out += first ? "\n" : ",\n";
    first = false;
    out += "{\"seq\":" + std::to_string(r.seq) + ",\"name\":\"" + escape(r.name) + "\",\"op\":\"" + to_string(r.op) +
           "\",\"bytes\":" + std::to_string(r.bytes) + ",\"state\":\"" + to_string(r.phase) +
           "\",\"submitted_us\":" + std::to_string(r.submitted_us) + ",\"started_us\":" + std::to_string(r.started_us) +
           ",\"finished_us\":" + std::to_string(r.finished_us) + "}";
  }
  return out + "\n]}\n";
}

std::string FlightRecorder::dump(const std::string& reason, int blamed_rank) const {
  try {
    make_private_directory(std::filesystem::path(path_).parent_path());
    const std::string tmp = path_ + ".tmp";
    write_private_file(tmp, to_json(reason, blamed_rank));
    std::filesystem::rename(tmp, path_);  // readers never see half a file
    KOLO_LOG(Info, "flight recorder written to " << path_ << " (" << reason << ")");
  } catch (const std::exception& e) {
    KOLO_LOG(Warning, "could not write the flight recorder to " << path_ << ": " << e.what());
  }
  return path_;
}

void FlightRecorder::watch_sigusr1() {
  if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) return;
  int expected = -1;
  if (!g_sigusr1_fd.compare_exchange_strong(expected, wake_pipe_[1])) {
    ::close(wake_pipe_[0]);
    ::close(wake_pipe_[1]);
    return;  // another recorder in this process holds the signal
  }
  struct sigaction action = {};
  action.sa_handler = on_sigusr1;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &action, &g_previous_sigusr1);
  try {
    make_private_directory(std::filesystem::path(path_).parent_path());
    write_private_file(pid_file_for(path_), std::to_string(::getpid()) + "\n");
  } catch (const std::exception&) {
    // Without the pid file only kolorun's SIGUSR1 forwarding is lost.
  }
  watcher_ = std::thread([this] {
    while (true) {
      pollfd p{wake_pipe_[0], POLLIN, 0};
      if (::poll(&p, 1, -1) < 0) continue;
      char buf[64];
      auto n = ::read(wake_pipe_[0], buf, sizeof buf);
      if (n <= 0) continue;
      bool stop = false, dump_now = false;
      for (ssize_t i = 0; i < n; ++i) (buf[i] == 's' ? stop : dump_now) = true;
      if (dump_now) dump("SIGUSR1");
      if (stop) return;
    }
  });
}

}  // namespace kolo::engine
