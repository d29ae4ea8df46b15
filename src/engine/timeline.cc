#include "engine/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kolo/error.h"

namespace kolo::engine {
namespace {

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

void write_all_at(int fd, const std::string& data, std::int64_t offset) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, offset + static_cast<std::int64_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a full disk must not take the job down; the trace just ends
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

Timeline::Timeline(const std::string& path, int rank) : rank_(rank), origin_(std::chrono::steady_clock::now()) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw InvalidArgumentError("cannot write the timeline to '" + path + "': " + std::strerror(errno));
  const std::string head = "[\n]";
  write_all_at(fd_, head, 0);
  end_offset_ = 2;
  // Name the process track after the rank.
  pending_ = "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(rank_) +
             ",\"args\":{\"name\":\"rank " + std::to_string(rank_) + "\"}}";
  writer_ = std::thread([this] { write_loop(); });
}

Timeline::~Timeline() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  writer_.join();
  ::close(fd_);
}

std::int64_t Timeline::micros(TimePoint t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
}

void Timeline::span(const std::string& tensor, const char* phase, TimePoint start, TimePoint end,
                    const std::string& detail) {
  std::lock_guard lock(mutex_);
  auto [it, fresh] = tracks_.try_emplace(tensor, static_cast<int>(tracks_.size()) + 1);
  const std::string pid = std::to_string(rank_), tid = std::to_string(it->second);
  auto add = [&](const std::string& event) {
    if (!pending_.empty()) pending_ += ",\n";
    pending_ += event;
  };
  if (fresh)
    add("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + tid + ",\"args\":{\"name\":\"" +
        json_escape(tensor) + "\"}}");
  std::string event = "{\"name\":\"" + std::string(phase) + "\",\"ph\":\"X\",\"pid\":" + pid + ",\"tid\":" + tid +
                      ",\"ts\":" + std::to_string(micros(start)) + ",\"dur\":" + std::to_string(micros(end) - micros(start));
  if (!detail.empty()) event += ",\"args\":{\"detail\":\"" + json_escape(detail) + "\"}";
  add(event + "}");
  wake_.notify_one();
}

void Timeline::write_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_ || !pending_.empty(); });
    if (!pending_.empty()) {
      std::string chunk = (first_event_ ? "" : ",\n") + pending_ + "\n]";
      first_event_ = false;
      pending_.clear();
      lock.unlock();
      // Overwrite the old closing bracket, so the file is valid JSON after each write.
      write_all_at(fd_, chunk, end_offset_);
      end_offset_ += static_cast<std::int64_t>(chunk.size()) - 1;
      lock.lock();
    }
    if (stop_ && pending_.empty()) return;
  }
}

}  // namespace kolo::engine
