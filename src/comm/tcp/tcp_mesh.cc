#include "comm/tcp/tcp_mesh.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "comm/tcp/tcp_connect.h"
#include "common/cpu_relax.h"
#include "common/spin_policy.h"
#include "common/logging.h"
#include "common/settings.h"
#include "common/wake_slice.h"
#include "kolo/error.h"

namespace kolo::comm::tcp {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kFrameMagic = 0x4b4f4c4f;  // "KOLO"
// Several queued messages per system call, each a header and a payload.
constexpr int kMaxIov = 32;
// A receive of unknown length takes at most this much past its capacity.
constexpr std::uint64_t kMaxOverflow = 1ull << 30;

std::string errno_text(int err) { return std::strerror(err); }

// Where a receive's next bytes go, in order: while its header is due, the rest of
// the header and then its whole capacity; after, the rest of its payload and of
// its overflow. Fills at most 2 spans; returns how many.
int next_spans(Transfer& t, iovec* iov) {
  int n = 0;
  if (t.header_done < sizeof t.header) {
    iov[n++] = {reinterpret_cast<char*>(&t.header) + t.header_done, sizeof t.header - t.header_done};
    if (t.bytes > 0) iov[n++] = {t.data, t.bytes};
    return n;
  }
  const std::size_t length = t.any_length ? t.header.bytes : t.bytes;
  const std::size_t in_data = std::min(length, t.bytes);
  if (t.done < in_data) iov[n++] = {t.data + t.done, in_data - t.done};
  if (length > t.bytes) {
    const std::size_t over = std::max(t.done, t.bytes) - t.bytes;
    iov[n++] = {t.overflow.data() + over, t.overflow.size() - over};
  }
  return n;
}

}  // namespace

KOLO_SETTING(kSpin, {.name = "KOLO_TCP_SPIN_US", .kind = settings::Kind::Integer, .fallback = "50", .min = 0,
                     .max = 1000000, .doc = "tcp: microseconds a wait polls its sockets before it sleeps"});

std::chrono::nanoseconds spin_from_env() { return std::chrono::microseconds(kSpin.integer()); }

Mesh::Mesh(const MeshGroup& group, store::StoreClient& store, const MeshNetwork& network,
           const CommunicatorOptions& options, const std::string& secret)
    : group_(group),
      rank_(group.rank),
      size_(group.size),
      peer_timeout_(options.peer_timeout),
      wake_slice_(options.wake_slice),
      spin_time_(spin_from_env()),
      state_("tcp",
             FailureVerdict(&store, group.verdict_prefix.empty() ? group.key_prefix + "failure/" : group.verdict_prefix,
                            group.member_name(group.rank)),
             [this] { close_all_hard(); }) {
  if (size_ < 1 || rank_ < 0 || rank_ >= size_)
    throw InvalidArgumentError("tcp communicator: rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                               " is out of range");
  wake_ = net::Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_.valid()) throw Error("tcp communicator: eventfd failed: " + errno_text(errno));
  peers_.resize(static_cast<std::size_t>(size_));
  if (size_ == 1) return;  // nothing to connect: every collective is a local copy
  if (secret.empty()) throw InvalidArgumentError("kolo's TCP communicator needs the job's secret (KOLO_SECRET)");
  MeshSetup setup;
  setup.group = &group_;
  setup.keys = HandshakeKeys{secret, group.key_prefix};
  setup.connect_timeout = options.connect_timeout;
  setup.handshake_timeout = std::min(options.connect_timeout, std::chrono::milliseconds(5000));
  setup.congestion_control = congestion_from_env();
  auto fds = connect_mesh(setup, store, network);
  share_cores_ = host_ranks_outnumber_cores(fds, setup.cores);
  for (int p = 0; p < size_; ++p) peers_[p].fd = std::move(fds[p]);
  KOLO_LOG(Debug, "tcp: " << group_.member_name(rank_) << " connected (member " << rank_ << " of " << size_ << ")");
}

Mesh::~Mesh() = default;

std::unique_ptr<direct::Batch> Mesh::batch(const char* what) { return std::make_unique<Exchange>(*this, what); }

void Mesh::touch(Peer& p) { p.last_progress = Clock::now(); }

Mesh::Peer& Mesh::queue_on(int peer) {
  check_usable();
  Peer& p = peers_[peer];
  if (p.sends.empty() && p.recvs.empty()) {  // the peer's timeout counts from now
    touch(p);
    busy_.push_back(peer);
  }
  return p;
}

void Mesh::post_send(int peer, Transfer& t) {
  Peer& p = queue_on(peer);
  t.header = FrameHeader{kFrameMagic, p.send_sequence++, t.bytes};
  p.sends.push(&t);
}

void Mesh::post_recv(int peer, Transfer& t) {
  Peer& p = queue_on(peer);
  t.expected_sequence = p.recv_sequence++;
  p.recvs.push(&t);
}

bool Mesh::progress_sends(int peer, const char* what) {
  Peer& p = peers_[peer];
  bool moved = false;
  while (!p.sends.empty()) {
    iovec iov[kMaxIov];
    int n = 0;
    for (std::size_t i = 0; i < p.sends.size() && n + 2 <= kMaxIov; ++i) {
      Transfer& t = p.sends[i];
      if (t.header_done < sizeof t.header)
        iov[n++] = {reinterpret_cast<char*>(&t.header) + t.header_done, sizeof t.header - t.header_done};
      if (t.done < t.bytes) iov[n++] = {t.data + t.done, t.bytes - t.done};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(n);
    ssize_t sent = ::sendmsg(p.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
      fail(peer, lost_peer_message(group_.member_name(peer), what, "send failed: " + errno_text(errno)));
    }
    moved = true;
    auto left = static_cast<std::size_t>(sent);
    while (!p.sends.empty()) {
      Transfer& t = p.sends[0];
      const std::size_t h = std::min(left, sizeof t.header - t.header_done);
      t.header_done += h;
      left -= h;
      const std::size_t d = std::min(left, t.bytes - t.done);
      t.done += d;
      left -= d;
      if (t.header_done < sizeof t.header || t.done < t.bytes) break;
      --*t.unfinished;
      p.sends.pop();
    }
  }
  return moved;
}

bool Mesh::progress_recvs(int peer, const char* what) {
  Peer& p = peers_[peer];
  bool moved = false;
  while (!p.recvs.empty()) {
    if (p.ahead_head < p.ahead.size()) {  // these bytes came before any still in the socket
      if (!deliver_ahead(peer, what)) return moved;
      moved = true;
      continue;
    }
    iovec iov[kMaxIov];
    int n = 0;
    for (std::size_t i = 0; i < p.recvs.size() && n + 2 <= kMaxIov; ++i) {
      Transfer& t = p.recvs[i];
      const bool header_due = t.header_done < sizeof t.header;
      n += next_spans(t, iov + n);
      // A message of unknown length ends somewhere in its capacity: what is read
      // past its end belongs to the next ones (consume_received keeps it aside).
      if (header_due && t.any_length) break;
    }
    ssize_t got = ::readv(p.fd.get(), iov, n);
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
      fail(peer, lost_peer_message(group_.member_name(peer), what, "receive failed: " + errno_text(errno)));
    }
    if (got == 0) fail(peer, lost_peer_message(group_.member_name(peer), what, "the connection was closed"));
    moved = true;
    received_ += static_cast<std::uint64_t>(got);
    consume_received(peer, static_cast<std::size_t>(got), what);
  }
  return moved;
}

bool Mesh::deliver_ahead(int peer, const char* what) {
  Peer& p = peers_[peer];
  bool moved = false;
  while (!p.recvs.empty() && p.ahead_head < p.ahead.size()) {
    // Only the first span: it ends where the message does (a due header's rest,
    // or its payload's), where a capacity read from the socket would not.
    iovec spans[2]{};
    if (next_spans(p.recvs[0], spans) == 0) break;
    const std::size_t k = std::min(spans[0].iov_len, p.ahead.size() - p.ahead_head);
    std::memcpy(spans[0].iov_base, p.ahead.data() + p.ahead_head, k);
    p.ahead_head += k;
    moved = true;
    consume_received(peer, k, what);
  }
  if (p.ahead_head == p.ahead.size()) p.ahead.clear(), p.ahead_head = 0;
  return moved;
}

void Mesh::consume_received(int peer, std::size_t left, const char* what) {
  Peer& p = peers_[peer];
  while (!p.recvs.empty()) {
    Transfer& t = p.recvs[0];
    if (t.header_done < sizeof t.header) {
      const std::size_t h = std::min(left, sizeof t.header - t.header_done);
      t.header_done += h;
      left -= h;
      if (t.header_done < sizeof t.header) return;
      const std::uint32_t want_sequence = t.expected_sequence;
      const bool length_ok = t.any_length ? t.header.bytes <= t.bytes + kMaxOverflow : t.header.bytes == t.bytes;
      if (t.header.magic != kFrameMagic || t.header.sequence != want_sequence || !length_ok)
        fail(peer, group_.member_name(peer) + " sent a malformed frame during " + what +
                       " (magic " + std::to_string(t.header.magic) + ", message " + std::to_string(t.header.sequence) +
                       " where " + std::to_string(want_sequence) + " was due, " + std::to_string(t.header.bytes) +
                       " bytes where " + std::to_string(t.bytes) + (t.any_length ? " at most" : "") +
                       " were expected): the connection is out of step");
      if (t.any_length && t.header.bytes > t.bytes) t.overflow.resize(t.header.bytes - t.bytes);
    }
    const std::size_t length = t.any_length ? t.header.bytes : t.bytes;
    const std::size_t d = std::min(left, length - t.done);
    t.done += d;
    left -= d;
    if (t.done < length) return;
    if (t.got != nullptr) *t.got = length;
    if (t.any_length && left > 0) {
      // Read into this message's capacity past its end (only a read that began
      // with its header goes on into the capacity): the next messages' bytes.
      p.ahead.insert(p.ahead.end(), t.data + length, t.data + length + left);
      left = 0;
    }
    --*t.unfinished;
    p.recvs.pop();
  }
}

void Mesh::wait(const std::size_t& unfinished, const char* what, bool patient) {
  bool idle = false;
  Clock::time_point idle_since;
  const std::uint64_t received_before = received_;
  while (unfinished > 0) {
    if (aborted_.load(std::memory_order_relaxed)) state_.throw_interrupted();
    const bool moved = progress_all(what);
    if (unfinished == 0) return;
    if (patient && received_ != received_before) {
      // Patience ends: every peer we still wait on is due from now.
      patient = false;
      for (int peer : busy_) touch(peers_[peer]);
    }
    if (moved) {
      idle = false;
      continue;
    }
    const auto now = Clock::now();
    if (!idle) {
      idle = true;
      idle_since = now;
    }
    if (now - idle_since < spin_time_) {
      // Where this host's ranks outnumber its cores, the peer we wait for may
      // need this very core: hand it over. Otherwise keep it, unless the
      // application computes beside this wait (common/spin_policy.h).
      if (share_cores_ || yield_to_computation()) {
        sched_yield();
      } else {
        cpu_relax();
      }
      continue;
    }
    block(what, patient);
    idle = false;
  }
}

bool Mesh::progress_all(const char* what) {
  bool moved = false;
  for (std::size_t i = 0; i < busy_.size();) {
    const int peer = busy_[i];
    Peer& p = peers_[peer];
    bool moved_here = false;
    if (!p.sends.empty()) moved_here |= progress_sends(peer, what);
    if (!p.recvs.empty()) moved_here |= progress_recvs(peer, what);
    if (moved_here) touch(p);
    moved |= moved_here;
    if (p.sends.empty() && p.recvs.empty()) {
      busy_[i] = busy_.back();
      busy_.pop_back();
    } else {
      ++i;
    }
  }
  return moved;
}

void Mesh::progress() {
  if (!busy_.empty()) progress_all("a collective");
}

void Mesh::block(const char* what, bool patient) {
  std::vector<pollfd> fds{{wake_.get(), POLLIN, 0}};
  auto expiry = Clock::time_point::max();
  int first_due = -1;
  for (int peer : busy_) {
    const Peer& p = peers_[peer];
    short events = 0;
    if (!p.recvs.empty()) events |= POLLIN;
    if (!p.sends.empty()) events |= POLLOUT;
    fds.push_back({p.fd.get(), events, 0});
    if (patient && p.sends.empty()) continue;
    if (p.last_progress + peer_timeout_ < expiry) {
      expiry = p.last_progress + peer_timeout_;
      first_due = peer;
    }
  }
  const auto now = Clock::now();
  if (first_due >= 0 && now >= expiry)
    fail(first_due, stalled_peer_message(group_.member_name(first_due), peer_timeout_, what));
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(expiry - now).count();
  const int timeout = static_cast<int>(std::clamp<std::int64_t>(left, 0, 1000));
  const ShortSliceWhileAsleep short_slice(wake_slice_);
  if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR)
    throw Error("tcp: poll failed: " + errno_text(errno));
}

void Mesh::abort(const std::string& reason) {
  if (!state_.abort(reason)) return;
  aborted_.store(true);
  const std::uint64_t one = 1;
  [[maybe_unused]] auto rc = ::write(wake_.get(), &one, sizeof one);
}

void Mesh::send_final(const void* data, std::size_t bytes, std::chrono::milliseconds limit) {
  try {
    state_.check_usable();
  } catch (const PeerFailureError&) {
    return;  // the connections are closed
  } catch (const ShutdownError&) {
    // aborted, or stopped after a local error: the connections that are left may take it
  }
  if (!busy_.empty()) return;  // a frame would land in the middle of another
  const net::Deadline deadline = net::deadline_after(limit);
  for (auto& p : peers_) {
    if (!p.fd.valid()) continue;
    const FrameHeader header{kFrameMagic, p.send_sequence++, bytes};
    try {
      net::write_all(p.fd.get(), &header, sizeof header, deadline);
      net::write_all(p.fd.get(), data, bytes, deadline);
    } catch (const net::SocketError&) {
    }
  }
}

void Mesh::drop_queued() {
  for (auto& p : peers_) {
    p.sends.items.clear(), p.sends.head = 0;
    p.recvs.items.clear(), p.recvs.head = 0;
    p.ahead.clear(), p.ahead_head = 0;
  }
  busy_.clear();
}

void Mesh::close_all_hard() {
  drop_queued();
  for (auto& p : peers_) {
    if (!p.fd.valid()) continue;
    linger reset{1, 0};  // a reset, so that a peer blocked on this rank wakes at once
    ::setsockopt(p.fd.get(), SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    p.fd.reset();
  }
}

void Mesh::fail(int peer, const std::string& message) { state_.fail(group_.job_rank(peer), message); }

void Mesh::break_off() {
  if (!aborted_.load()) return state_.stop();
  // After abort() every call throws ShutdownError anyway: the connections stay
  // for the soft close at destruction, so that peers see a shutdown, not a reset.
  drop_queued();
}

Exchange::~Exchange() {
  if (unfinished_ > 0) mesh_.break_off();
}

Transfer& Exchange::add(void* data, std::size_t bytes) {
  Transfer& t = transfers_.emplace_back();
  t.data = static_cast<std::byte*>(data);
  t.bytes = bytes;
  t.unfinished = &unfinished_;
  ++unfinished_;
  return t;
}

void Exchange::send(int peer, const void* data, std::size_t bytes) {
  if (bytes > 0) send_always(peer, data, bytes);
}

void Exchange::send_always(int peer, const void* data, std::size_t bytes) {
  // Sends only read `data`.
  Transfer& t = add(const_cast<void*>(data), bytes);
  mesh_.post_send(peer, t);
}

void Exchange::recv(int peer, void* data, std::size_t bytes) {
  if (bytes == 0) return;
  mesh_.post_recv(peer, add(data, bytes));
}

void Exchange::recv_any(int peer, void* data, std::size_t capacity, std::size_t* got) {
  Transfer& t = add(data, capacity);
  t.any_length = true;
  t.got = got;
  mesh_.post_recv(peer, t);
}

void Exchange::wait() { mesh_.wait(unfinished_, what_); }

void Exchange::wait_patiently() { mesh_.wait(unfinished_, what_, true); }

}  // namespace kolo::comm::tcp
