#include "remote_control.h"

#include <fcntl.h>
#include <signal.h>

#include <cerrno>

#include "remote_protocol.h"

namespace kolorun {

RemoteControl::RemoteControl(UniqueFd pipe, std::string spec_bytes) : pipe_(std::move(pipe)), outbox_(std::move(spec_bytes)) {
  if (pipe_.valid()) ::fcntl(pipe_.get(), F_SETFL, ::fcntl(pipe_.get(), F_GETFL) | O_NONBLOCK);
  flush();
}

void RemoteControl::heartbeat() {
  if (outbox_.empty()) outbox_.push_back(kHeartbeatByte);
  flush();
}

void RemoteControl::send_signal(int sig) {
  if (sig == SIGKILL) {
    close();
    return;
  }
  outbox_.push_back(static_cast<char>(sig));
  flush();
}

void RemoteControl::close() {
  pipe_.reset();
  outbox_.clear();
}

void RemoteControl::flush() {
  while (pipe_.valid() && !outbox_.empty()) {
    ssize_t n = ::write(pipe_.get(), outbox_.data(), outbox_.size());
    if (n > 0) {
      outbox_.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    close();  // the remote process is gone (EPIPE): nothing left to tell it
  }
}

}  // namespace kolorun
