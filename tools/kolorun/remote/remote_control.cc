#include "remote/remote_control.h"

#include <fcntl.h>
#include <signal.h>

#include <cerrno>

#include "remote/remote_protocol.h"

namespace kolorun {

RemoteControl::RemoteControl(UniqueFd pipe, std::string spec_bytes) : pipe_(std::move(pipe)), outbox_(std::move(spec_bytes)) {
  if (pipe_.valid()) ::fcntl(pipe_.get(), F_SETFL, ::fcntl(pipe_.get(), F_GETFL) | O_NONBLOCK);
  std::lock_guard lock(mutex_);
  flush_locked();
}

void RemoteControl::heartbeat() {
  std::lock_guard lock(mutex_);
  if (outbox_.empty()) outbox_.push_back(kHeartbeatByte);
  flush_locked();
}

void RemoteControl::send_signal(int sig) {
  std::lock_guard lock(mutex_);
  if (sig == SIGKILL) {
    close_locked();
    return;
  }
  outbox_.push_back(static_cast<char>(sig));
  flush_locked();
}

void RemoteControl::close() {
  std::lock_guard lock(mutex_);
  close_locked();
}

bool RemoteControl::closed() const {
  std::lock_guard lock(mutex_);
  return !pipe_.valid();
}

void RemoteControl::close_locked() {
  pipe_.reset();
  outbox_.clear();
}

void RemoteControl::flush_locked() {
  while (pipe_.valid() && !outbox_.empty()) {
    ssize_t n = ::write(pipe_.get(), outbox_.data(), outbox_.size());
    if (n > 0) {
      outbox_.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    close_locked();  // the remote process is gone (EPIPE): nothing left to tell it
  }
}

}  // namespace kolorun
