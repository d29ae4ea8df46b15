#include "comm/gloo/connection_watch.h"

#include <exception>

#include <gloo/transport/tcp/pair.h>
#include <gloo/transport/tcp/unbound_buffer.h>

#include "comm/mesh/failure_verdict.h"
#include "common/logging.h"

namespace kolo::comm::gloo_impl {
namespace {

using namespace std::chrono_literals;

// How often a wait in progress has its connection looked at: short against the
// seconds a dead peer may take to be named, long against the lock it takes.
constexpr auto kLookEvery = 10ms;

// gloo keeps a connection's error (and the lock over it) in protected members of
// tcp::Pair and offers no way to read them. A class derived from it may name
// them, and the member pointers so named read them on any pair.
struct PairError : ::gloo::transport::tcp::Pair {
  // Whether the members read as they must on a pair just connected to group rank
  // `peer`: a check that the tcp::Pair compiled here is libgloo's.
  static bool reads_right(::gloo::transport::tcp::Pair& pair, int peer) {
    std::lock_guard lock(pair.*(&PairError::m_));
    return pair.*(&PairError::rank_) == peer && pair.*(&PairError::ex_) == nullptr;
  }
  // gloo's message for the connection's failure; empty while it works.
  static std::string of(::gloo::transport::tcp::Pair& pair) {
    std::exception_ptr error;
    {
      std::lock_guard lock(pair.*(&PairError::m_));
      error = pair.*(&PairError::ex_);
    }
    return error ? error_text(error) : std::string();
  }
};

// Whether a transfer completed, read the same way from tcp::UnboundBuffer's
// protected completion counts: a wait the watch woke may have completed as the
// connection closed (a peer that sent its last bytes and exited), and gloo's
// wait then reports the wake-up, not the completion.
struct BufferCompletions : ::gloo::transport::tcp::UnboundBuffer {
  static bool any(::gloo::transport::UnboundBuffer& buffer, bool is_send) {
    auto* tcp = dynamic_cast<::gloo::transport::tcp::UnboundBuffer*>(&buffer);
    if (tcp == nullptr) return false;
    std::lock_guard lock(tcp->*(&BufferCompletions::m_));
    return (is_send ? tcp->*(&BufferCompletions::sendCompletions_) : tcp->*(&BufferCompletions::recvCompletions_)) >
           0;
  }
};

::gloo::transport::tcp::Pair* tcp_pair(::gloo::Context& context, int peer) {
  return dynamic_cast<::gloo::transport::tcp::Pair*>(context.getPair(peer).get());
}

bool pairs_read_right(::gloo::Context& context) {
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank) continue;
    auto* pair = tcp_pair(context, peer);
    if (pair == nullptr || !PairError::reads_right(*pair, peer)) return false;
  }
  return true;
}

}  // namespace

ConnectionWatch::ConnectionWatch(::gloo::Context& context) : context_(context) {
  if (!pairs_read_right(context)) {
    KOLO_LOG(Warning, "gloo's connections do not look as kolo expects (another libgloo build?): a peer that dies "
                      "inside a large transfer is named only after the peer timeout");
    return;
  }
  thread_ = std::thread([this] { run(); });
}

ConnectionWatch::~ConnectionWatch() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

bool ConnectionWatch::wait(::gloo::transport::UnboundBuffer& buffer, bool is_send, int peer,
                           std::chrono::milliseconds timeout, std::string& lost) {
  {
    std::lock_guard lock(mutex_);
    buffer_ = &buffer;
    is_send_ = is_send;
    peer_ = peer;
    lost_.clear();
  }
  changed_.notify_all();
  // The buffer must be out of the watch's hands before the caller may free it,
  // whichever way the wait ends.
  struct Unwatch {
    ConnectionWatch& watch;
    std::string& lost;
    ~Unwatch() {
      std::lock_guard lock(watch.mutex_);
      watch.buffer_ = nullptr;
      lost = std::move(watch.lost_);
    }
  } unwatch{*this, lost};
  if (is_send ? buffer.waitSend(timeout) : buffer.waitRecv(timeout)) return true;
  std::lock_guard lock(mutex_);
  if (lost_.empty() || !BufferCompletions::any(buffer, is_send)) return false;
  lost_.clear();  // woken by the watch, but the transfer is whole
  return true;
}

void ConnectionWatch::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (buffer_ == nullptr || !lost_.empty()) {
      changed_.wait(lock);
      continue;
    }
    changed_.wait_for(lock, kLookEvery);
    if (stopping_ || buffer_ == nullptr || !lost_.empty()) continue;
    auto* pair = tcp_pair(context_, peer_);
    if (pair == nullptr) continue;
    std::string error = PairError::of(*pair);
    if (error.empty()) continue;
    lost_ = std::move(error);
    if (is_send_) {
      buffer_->abortWaitSend();
    } else {
      buffer_->abortWaitRecv();
    }
  }
}

}  // namespace kolo::comm::gloo_impl
