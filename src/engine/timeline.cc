#include "engine/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/logging.h"
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

// 0, or the errno of the write that failed.
int write_all_at(int fd, const std::string& data, std::int64_t offset) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, offset + static_cast<std::int64_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

}  // namespace

Timeline::Timeline(const std::string& path, int rank)
    : rank_(rank), path_(path), origin_(std::chrono::steady_clock::now()) {
  // Not through a symbolic link: one planted at the path would have the job
  // truncate and write whatever file it points to.
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0)
    throw InvalidArgumentError("cannot write the timeline to '" + path + "': " + std::strerror(errno) +
                               (errno == ELOOP ? " (it is a symbolic link, which the timeline does not follow)" : ""));
  const std::string head = "[\n]";
  if (int error = write_all_at(fd_, head, 0)) {
    ::close(fd_);
    throw InvalidArgumentError("cannot write the timeline to '" + path + "': " + std::strerror(error));
  }
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
      if (!failed_) {
        if (int error = write_all_at(fd_, chunk, end_offset_)) {
          give_up(error);
        } else {
          end_offset_ += static_cast<std::int64_t>(chunk.size()) - 1;
        }
      }
      lock.lock();
    }
    if (stop_ && pending_.empty()) return;
  }
}

void Timeline::give_up(int error) {
  // A full disk must not take the job down: the trace ends where it was last
  // whole, its closing bracket written back over what the failed write left
  // (in space the file already has).
  failed_ = true;
  if (::ftruncate(fd_, end_offset_ + 1) == 0) write_all_at(fd_, "]", end_offset_);
  KOLO_LOG(Warning, "the timeline '" << path_ << "' cannot be written (" << std::strerror(error)
                                     << "); it ends here, the job goes on");
}

}  // namespace kolo::engine
