#include "net/accept.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace kolo::net {

AcceptResult accept_connection(int listener, Fd& accepted) {
  for (;;) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      accepted = Fd(fd);
      return AcceptResult::Accepted;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) return AcceptResult::OutOfDescriptors;
    return AcceptResult::NoneWaiting;  // EAGAIN: every waiting connection taken
  }
}

void AcceptPause::start() {
  const std::string why = std::strerror(errno);
  until_ = Clock::now() + kRest;
  warnings_.warn(who_ + " cannot accept connections (" + why + "); not accepting for " +
                 std::to_string(kRest.count()) + " ms at a time");
}

bool AcceptPause::end_if_over(Deadline now) {
  if (!until_ || now < *until_) return false;
  until_.reset();
  return true;
}

}  // namespace kolo::net
