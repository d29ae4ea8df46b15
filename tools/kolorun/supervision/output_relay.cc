#include "supervision/output_relay.h"

#include <unistd.h>

#include <cerrno>

namespace kolorun {
namespace {

constexpr std::size_t kFlushBytes = 256 * 1024;
// A "line" this long without a newline (a binary dump, a progress bar drawn with
// \r) is passed on in pieces rather than held in memory without bound.
constexpr std::size_t kMaxLineBytes = 1 << 20;

}  // namespace

void OutputSink::append_line(std::string_view prefix, std::string_view line) {
  buffer_.append(prefix);
  buffer_.append(line);
  buffer_.push_back('\n');
  if (buffer_.size() >= kFlushBytes) flush();
}

void OutputSink::append_raw(std::string_view bytes) {
  buffer_.append(bytes);
  if (buffer_.size() >= kFlushBytes) flush();
}

void OutputSink::flush() {
  std::size_t written = 0;
  while (error_ == 0 && written < buffer_.size()) {
    ssize_t n = ::write(fd_, buffer_.data() + written, buffer_.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = n < 0 ? errno : EIO;
      break;
    }
    written += static_cast<std::size_t>(n);
  }
  buffer_.clear();
}

void LineRelay::consume(std::string_view bytes) {
  while (!bytes.empty()) {
    auto newline = bytes.find('\n');
    if (newline == std::string_view::npos) {
      partial_.append(bytes);
      if (partial_.size() >= kMaxLineBytes) emit_partial();
      return;
    }
    if (partial_.empty()) {
      sink_->append_line(prefix_, bytes.substr(0, newline));
    } else {
      partial_.append(bytes.substr(0, newline));
      sink_->append_line(prefix_, partial_);
      partial_.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
}

void LineRelay::finish() {
  if (!partial_.empty()) emit_partial();
}

void LineRelay::emit_partial() {
  if (prefix_.empty()) sink_->append_raw(partial_);
  else sink_->append_line(prefix_, partial_);
  partial_.clear();
}

std::string line_prefix(const std::string& tag, const char* stream_name, bool tag_output) {
  if (!tag_output) return "";
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "[" + std::string.
  std::string prefix("[");
  prefix.append(tag).append("]<").append(stream_name).append(">:");
  return prefix;
}

}  // namespace kolorun
