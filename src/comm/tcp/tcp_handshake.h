// The handshake that opens every rank-to-rank connection of the TCP communicator:
// both ends prove they hold the job's secret, bound to this group and these two
// ranks, before a byte of data moves (gloo's pairs carry no authentication).
//
//   acceptor  -> initiator  Challenge: magic, a fresh 32-byte nonce
//   initiator -> acceptor   Hello: magic, both ranks, its own nonce,
//                           HMAC(secret, "hello" group ranks challenge nonce)
//   acceptor  -> initiator  Welcome: HMAC(secret, "welcome" group ranks nonce challenge)
//
// Every message has a fixed size, so a stranger's bytes are read up to that size
// and no further. A recorded Hello replayed on a new connection fails: it answers
// an old challenge. A Hello from another group or generation of the same job
// fails: the group (its rendezvous prefix) is under the MAC.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace kolo::comm::tcp {

using Nonce = std::array<std::uint8_t, 32>;
using Mac = std::array<std::uint8_t, 32>;

constexpr std::size_t kChallengeBytes = 8 + 32;
constexpr std::size_t kHelloBytes = 8 + 4 + 4 + 32 + 32;
constexpr std::size_t kWelcomeBytes = 32;

// The secret and the group a connection must belong to.
struct HandshakeKeys {
  std::string secret;
  std::string group;
};

Nonce random_nonce();
std::array<std::uint8_t, kChallengeBytes> challenge_message(const Nonce& challenge);
// The initiator's answer to `challenge_bytes` (throws InvalidArgumentError when
// it is no challenge: the other end is not a kolo rank).
std::array<std::uint8_t, kHelloBytes> hello_message(const HandshakeKeys& keys, std::span<const std::uint8_t> challenge_bytes,
                                                    int initiator, int acceptor, Nonce* initiator_nonce);

// What the acceptor learns from a Hello: the initiator's rank, or why it is refused.
struct HelloVerdict {
  int initiator = -1;
  std::string refusal;  // empty when accepted
  Nonce initiator_nonce{};
};
HelloVerdict check_hello(const HandshakeKeys& keys, std::span<const std::uint8_t> hello, const Nonce& challenge,
                         int acceptor);

Mac welcome_message(const HandshakeKeys& keys, const Nonce& challenge, const Nonce& initiator_nonce, int initiator,
                    int acceptor);
bool check_welcome(const HandshakeKeys& keys, std::span<const std::uint8_t> welcome, const Nonce& challenge,
                   const Nonce& initiator_nonce, int initiator, int acceptor);

}  // namespace kolo::comm::tcp
