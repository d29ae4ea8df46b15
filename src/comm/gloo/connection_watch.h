// Wakes a gloo wait whose connection failed under it.
//
// gloo's TCP pair, when its connection fails, wakes the unbound buffers whose
// transfers are still queued, but not the one it is in the middle of writing nor
// the one it is in the middle of reading (Debian's gloo 0.0~git20220518:
// tcp::Pair::signalException skips them). A peer killed inside a transfer larger
// than the socket buffers then leaves this rank waiting out the whole peer timeout
// and blaming the peer as stalled, instead of naming it dead at once.
//
// While a wait lasts, a thread of the watch looks every few milliseconds at the
// error gloo recorded for the connection waited on; once there is one, it wakes
// the wait with abortWaitSend/abortWaitRecv and hands the wait gloo's message.
// When gloo's pairs do not read as this build of kolo expects (a libgloo other
// than the one it was compiled against), the watch stays off and says so.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

namespace kolo::comm::gloo_impl {

class ConnectionWatch {
 public:
  // `context`: a connected mesh of gloo's TCP transport; it must outlive the watch.
  explicit ConnectionWatch(::gloo::Context& context);
  ~ConnectionWatch();
  ConnectionWatch(const ConnectionWatch&) = delete;
  ConnectionWatch& operator=(const ConnectionWatch&) = delete;

  // gloo's waitSend (or waitRecv) on `buffer`, a transfer with member `peer`, for
  // up to `timeout`; false when the wait was woken early, by abortWait* from
  // elsewhere or by the watch, which then puts the connection's error into
  // `lost` (a transfer that completed as the watch woke it is true). Throws what
  // gloo throws. One waiting thread at a time.
  bool wait(::gloo::transport::UnboundBuffer& buffer, bool is_send, int peer, std::chrono::milliseconds timeout,
            std::string& lost);

 private:
  void run();

  ::gloo::Context& context_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  // The wait in progress; null between waits.
  ::gloo::transport::UnboundBuffer* buffer_ = nullptr;
  bool is_send_ = false;
  int peer_ = -1;
  std::string lost_;
  std::thread thread_;
};

}  // namespace kolo::comm::gloo_impl
