// The rendezvous key-value store: a TCP server that kolorun runs for the job, and
// the client every rank uses to find its peers.
//
// Only processes holding the job's secret may use it: on connect the server sends
// a random nonce and the client must answer HMAC-SHA256(secret, nonce) before any
// command is accepted. The secret travels in the environment (KOLO_SECRET), never
// on a command line. The wire format is in store_protocol.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/settings.h"
#include "net/accept.h"

namespace kolo::store {

using Bytes = std::vector<std::uint8_t>;
using std::chrono::milliseconds;

// While one lives, this thread's store calls wait at most `grace` beyond their
// own timeout for their reply (and for another thread's call on the connection
// to end), instead of the minute a busy store may need: for a report that is due
// within KOLO_PEER_TIMEOUT plus a second whatever the store does. A call that
// runs out of it throws as any lost reply does (PeerFailureError, rank -1).
class ShortReplies {
 public:
  explicit ShortReplies(milliseconds grace);
  ~ShortReplies();
  ShortReplies(const ShortReplies&) = delete;
  ShortReplies& operator=(const ShortReplies&) = delete;

 private:
  milliseconds previous_;
};

// Thread-safe: calls from several threads are serialized on one connection.
// Errors: kolo::TimeoutError when a get/wait runs out of time, kolo::PeerFailureError
// (rank -1) when the server is unreachable or closes the connection,
// kolo::InvalidArgumentError for a key or value over the protocol's limits.
class StoreClient {
 public:
  // Connects (retrying until `timeout`, since ranks may start before the server
  // listens) and authenticates with `secret`.
  static std::unique_ptr<StoreClient> connect(const std::string& host, int port, const std::string& secret,
                                              milliseconds timeout);
  // Connects to the job's store as kolorun describes it: KOLO_STORE_ADDR
  // ("host:port") and KOLO_SECRET. Throws InvalidArgumentError when either is
  // missing or malformed.
  static std::unique_ptr<StoreClient> connect_from_env(milliseconds timeout);
  virtual ~StoreClient() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Blocks until `key` exists, up to `timeout`.
  virtual Bytes get(const std::string& key, milliseconds timeout) = 0;
  // Atomically adds `delta` to the integer stored at `key` (absent counts as 0) and
  // returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // Blocks until every key exists, up to `timeout`.
  virtual void wait(const std::vector<std::string>& keys, milliseconds timeout) = 0;
  // True when every key exists, without blocking.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual void erase(const std::string& key) = 0;
};

// Limits a StoreServer enforces; the defaults suit a job, tests shorten them.
struct StoreServerOptions {
  // A connection that has not proved the secret by then is closed: an honest
  // handshake is one round trip, and a rank whose connection is closed retries.
  milliseconds handshake_timeout{3000};
  // Connections beyond this are accepted and closed at once.
  std::size_t max_connections = 4096;
  // At most this many of them unauthenticated: a new connection beyond it closes
  // the oldest unauthenticated one, so that idle connections from anyone on the
  // host (who has no secret) cannot keep the job's ranks out: a rank's fresh
  // connection displaces them, and a rank displaced retries (StoreClient::connect).
  std::size_t max_unauthenticated = net::kMaxUnauthenticated;
};

// Runs on its own thread until destroyed. One malformed or unauthenticated client
// only ever costs its own connection, which is closed and logged.
class StoreServer {
 public:
  // Listens on `bind_host`:`port` (port 0 picks a free one).
  StoreServer(std::string secret, const std::string& bind_host = "127.0.0.1", int port = 0,
              StoreServerOptions options = {});
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  // Connections refused so far for a bad secret or malformed messages (for tests
  // and for kolorun's diagnostics).
  std::uint64_t rejected_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A store's address as written in KOLO_STORE_ADDR: "host:port", or "[v6addr]:port".
struct StoreAddress {
  std::string host;
  int port = 0;
};
// Throws InvalidArgumentError naming `text` when it is not such an address.
StoreAddress parse_store_address(const std::string& text);

// A random secret suitable for a job: 32 bytes from the kernel, hex-encoded.
std::string make_secret();

// KOLO_STORE_ADDR and KOLO_SECRET, which kolorun gives every rank.
extern const settings::Setting kStoreAddr, kSecret;

}  // namespace kolo::store
