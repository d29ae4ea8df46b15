// StoreClient over TCP: one authenticated connection, one request in flight at a
// time (a mutex serializes callers). Any transport failure leaves the connection
// out of step with the server, so the client marks itself broken and every later
// call fails the same way.
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>

#include "common/hmac.h"
#include "common/wire.h"
#include "kolo/error.h"
#include "net/socket.h"
#include "store/store.h"
#include "store/store_messages.h"
#include "store/store_protocol.h"

namespace kolo::store {
namespace {

namespace proto = protocol;
using net::Deadline;

// How long a healthy store may take to answer, on top of a request's own timeout.
constexpr milliseconds kReplyGrace{60000};
// This thread's grace while a ShortReplies lives (zero: none lives).
thread_local milliseconds short_grace{0};

milliseconds reply_grace() { return short_grace.count() > 0 ? short_grace : kReplyGrace; }
// The handshake gets its own time (the connect timeout, up to this much) even when
// retrying the connect used up the timeout.
constexpr milliseconds kMaxExtraHandshakeTime{5000};

std::uint32_t to_wire_timeout(milliseconds timeout) {
  if (timeout.count() <= 0) return 0;
  return static_cast<std::uint32_t>(std::min<std::int64_t>(timeout.count(), UINT32_MAX - 1));
}

void check_key(const std::string& key) {
  if (key.size() > proto::kMaxKey) {
    throw InvalidArgumentError("store key of " + std::to_string(key.size()) + " bytes exceeds the limit of " +
                               std::to_string(proto::kMaxKey) + " bytes");
  }
}

void check_keys(const std::vector<std::string>& keys) {
  if (keys.size() > proto::kMaxKeysPerRequest) {
    throw InvalidArgumentError("store request for " + std::to_string(keys.size()) +
                               " keys exceeds the limit of " + std::to_string(proto::kMaxKeysPerRequest));
  }
  for (const auto& key : keys) check_key(key);
}

class TcpStoreClient final : public StoreClient {
 public:
  TcpStoreClient(net::Fd fd, std::string where) : fd_(std::move(fd)), where_(std::move(where)) {}

  void set(const std::string& key, const Bytes& value) override {
    check_key(key);
    if (value.size() > proto::kMaxValue) {
      throw InvalidArgumentError("store value of " + std::to_string(value.size()) + " bytes for key '" + key +
                                 "' exceeds the limit of " + std::to_string(proto::kMaxValue) + " bytes");
    }
    expect_ok(call({.op = proto::Opcode::Set, .keys = {key}, .value = value}, 0), "set");
  }

  Bytes get(const std::string& key, milliseconds timeout) override {
    check_key(key);
    const std::uint32_t timeout_ms = to_wire_timeout(timeout);
    Reply reply = call({.op = proto::Opcode::Get, .keys = {key}, .timeout_ms = timeout_ms}, timeout_ms);
    if (reply.status == proto::Status::Timeout) {
      throw TimeoutError("store get: key '" + key + "' did not appear within " + std::to_string(timeout.count()) +
                         " ms");
    }
    expect_ok(reply, "get");
    return parse(reply, proto::reply_value);
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    check_key(key);
    Reply reply = call({.op = proto::Opcode::Add, .keys = {key}, .delta = delta}, 0);
    expect_ok(reply, "add");
    return parse(reply, proto::reply_integer);
  }

  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    check_keys(keys);
    const std::uint32_t timeout_ms = to_wire_timeout(timeout);
    Reply reply = call({.op = proto::Opcode::Wait, .keys = keys, .timeout_ms = timeout_ms}, timeout_ms);
    if (reply.status == proto::Status::Timeout) {
      throw TimeoutError("store wait: " + std::to_string(keys.size()) + " key(s)" +
                         (keys.empty() ? std::string() : " starting with '" + keys.front() + "'") +
                         " did not all appear within " + std::to_string(timeout.count()) + " ms");
    }
    expect_ok(reply, "wait");
  }

  bool check(const std::vector<std::string>& keys) override {
    check_keys(keys);
    Reply reply = call({.op = proto::Opcode::Check, .keys = keys}, 0);
    expect_ok(reply, "check");
    return parse(reply, proto::reply_flag);
  }

  void erase(const std::string& key) override {
    check_key(key);
    Reply reply = call({.op = proto::Opcode::Delete, .keys = {key}}, 0);
    expect_ok(reply, "erase");
    parse(reply, proto::reply_flag);
  }

 private:
  using Reply = proto::Reply;

  // Sends one request and reads its reply. `server_wait_ms` is how long the server
  // may legitimately hold the request before answering.
  Reply call(const proto::Request& request, std::uint32_t server_wait_ms) {
    const milliseconds reply_within = milliseconds(server_wait_ms) + reply_grace();
    const std::vector<std::uint8_t> bytes = proto::encode_request_frame(request);

    std::unique_lock lock(mutex_, std::defer_lock);
    lock_within(lock, reply_grace());
    if (broken_) throw PeerFailureError(-1, "the kolo store connection to " + where_ + " failed earlier: " + broken_why_);
    try {
      const Deadline deadline = net::deadline_after(reply_within);
      net::write_all(fd_.get(), bytes.data(), bytes.size(), deadline);
      std::uint32_t reply_length = 0;
      net::read_exact(fd_.get(), &reply_length, sizeof(reply_length), deadline);
      if (reply_length < 1 || reply_length > proto::kMaxFrame) {
        fail("the store sent a reply of " + std::to_string(reply_length) + " bytes");
      }
      std::vector<std::uint8_t> payload(reply_length);
      net::read_exact(fd_.get(), payload.data(), payload.size(), deadline);
      return proto::parse_reply(payload);
    } catch (const wire::WireError& e) {
      fail("the kolo store at " + where_ + " sent a malformed reply: " + e.what());
    } catch (const net::SocketError& e) {
      if (e.kind() == net::SocketError::Kind::Closed) {
        fail("the kolo store at " + where_ + " closed the connection (did kolorun or the store exit?)");
      }
      if (e.kind() == net::SocketError::Kind::TimedOut) {
        fail("the kolo store at " + where_ + " did not answer within " +
             std::to_string(reply_within.count()) + " ms");
      }
      fail("lost the connection to the kolo store at " + where_ + ": " + e.what());
    }
  }

  // Takes the connection within `grace` (another thread's call may hold it), by
  // tries: a timed lock would need pthread_mutex_clocklock, which
  // ThreadSanitizer does not see, so it would report every unlock.
  void lock_within(std::unique_lock<std::mutex>& lock, milliseconds grace) {
    if (grace >= kReplyGrace) return lock.lock();
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (!lock.try_lock()) {
      if (std::chrono::steady_clock::now() >= deadline)
        throw PeerFailureError(-1, "the kolo store connection to " + where_ + " was busy with another call for " +
                                       std::to_string(grace.count()) + " ms");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // Marks the connection unusable and throws. Called with mutex_ held.
  [[noreturn]] void fail(const std::string& why) {
    broken_ = true;
    broken_why_ = why;
    throw PeerFailureError(-1, why);
  }

  void expect_ok(const Reply& reply, const char* what) {
    if (reply.status == proto::Status::Ok) return;
    if (reply.status == proto::Status::Error) {
      std::string message = parse(reply, proto::reply_error_message);
      throw InvalidArgumentError(message);
    }
    std::lock_guard lock(mutex_);
    fail(std::string("the kolo store answered a ") + what + " request with an unexpected status");
  }

  template <typename Result>
  Result parse(const Reply& reply, Result (*parse_fields)(const Reply&)) {
    try {
      return parse_fields(reply);
    } catch (const wire::WireError& e) {
      std::lock_guard lock(mutex_);
      fail("the kolo store at " + where_ + " sent a malformed reply: " + e.what());
    }
  }

  std::mutex mutex_;
  net::Fd fd_;
  const std::string where_;
  bool broken_ = false;
  std::string broken_why_;
};

// Reads the server's challenge and proves the secret. Throws on refusal.
// The store closed the connection or went silent during the handshake: it
// closes connections beyond its limits and slow handshakes (and displaces idle
// unauthenticated ones), all of which a new attempt may get past.
struct HandshakeCut {
  std::string what;
};

void authenticate(int fd, const std::string& secret, const std::string& where, Deadline deadline) {
  std::array<std::uint8_t, proto::kMagic.size() + proto::kNonceSize> challenge;
  std::uint8_t verdict = proto::kHandshakeRefused;
  try {
    net::read_exact(fd, challenge.data(), challenge.size(), deadline);
    if (!std::equal(proto::kMagic.begin(), proto::kMagic.end(), challenge.begin())) {
      throw PeerFailureError(-1, where + " is not a kolo store (wrong greeting); check KOLO_STORE_ADDR");
    }
    const auto key = std::span(reinterpret_cast<const std::uint8_t*>(secret.data()), secret.size());
    const auto mac = crypto::hmac_sha256(key, std::span(challenge).subspan(proto::kMagic.size()));
    net::write_all(fd, mac.data(), mac.size(), deadline);
    net::read_exact(fd, &verdict, 1, deadline);
  } catch (const net::SocketError& e) {
    throw HandshakeCut{e.what()};
  }
  if (verdict != proto::kHandshakeAccepted) {
    throw InvalidArgumentError("the store at " + where +
                               " refused the job secret: KOLO_SECRET does not match the secret of the job "
                               "whose kolorun started this store");
  }
}

}  // namespace

std::unique_ptr<StoreClient> StoreClient::connect(const std::string& host, int port, const std::string& secret,
                                                  milliseconds timeout) {
  const std::string where = host + ":" + std::to_string(port);
  if (secret.empty()) throw InvalidArgumentError("connecting to the kolo store at " + where + " needs the job secret (KOLO_SECRET)");
  const Deadline deadline = net::deadline_after(timeout);
  // Until the deadline, a cut handshake is tried again, a little later each time.
  milliseconds pause{20};
  for (int attempt = 1;; ++attempt) {
    net::Fd fd;
    try {
      fd = net::connect_tcp_retrying(host, port, deadline);
    } catch (const net::SocketError& e) {
      throw PeerFailureError(-1, "cannot reach the kolo store at " + where + " within " +
                                     std::to_string(timeout.count()) + " ms: " + e.what());
    }
    const Deadline handshake_deadline =
        std::max(deadline, net::deadline_after(std::min(timeout, kMaxExtraHandshakeTime)));
    try {
      authenticate(fd.get(), secret, where, handshake_deadline);
      return std::make_unique<TcpStoreClient>(std::move(fd), where);
    } catch (const HandshakeCut& cut) {
      if (net::Clock::now() + pause >= deadline)
        throw PeerFailureError(-1, "handshake with the kolo store at " + where + " failed " +
                                       std::to_string(attempt) + " time(s) within " + std::to_string(timeout.count()) +
                                       " ms, the last: " + cut.what +
                                       " (the store closes connections beyond its limits, and slow handshakes)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(500));
  }
}

ShortReplies::ShortReplies(milliseconds grace) : previous_(short_grace) { short_grace = grace; }

ShortReplies::~ShortReplies() { short_grace = previous_; }

}  // namespace kolo::store
