// The TCP communicator's handshake messages from a stranger: check_hello on the
// bytes an acceptor reads, hello_message on the bytes an initiator reads as a
// challenge. Input: a 32-byte challenge nonce, then the message. Neither may
// throw anything but hello_message's InvalidArgumentError. Properties: only a
// well-formed challenge is answered; a genuine Hello for the challenge is
// accepted and names its sender, and the same Hello with the byte the input
// picks changed, or answered for another challenge, is refused.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "comm/tcp/tcp_handshake.h"
#include "fuzz_check.h"
#include "kolo/error.h"

using namespace kolo::comm::tcp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 32) return 0;
  Nonce challenge;
  std::memcpy(challenge.data(), data, challenge.size());
  const std::span<const std::uint8_t> message(data + 32, size - 32);
  const HandshakeKeys keys{"the job's secret", "comm/0/tcp/world/"};

  const HelloVerdict stranger = check_hello(keys, message, challenge, 0);
  FUZZ_CHECK(stranger.refusal.empty() == (stranger.initiator >= 0));

  Nonce nonce;
  try {
    hello_message(keys, message, 1, 0, &nonce);
    FUZZ_CHECK(message.size() == kChallengeBytes);
  } catch (const kolo::InvalidArgumentError&) {
  }

  auto hello = hello_message(keys, challenge_message(challenge), 3, 0, &nonce);
  const HelloVerdict genuine = check_hello(keys, hello, challenge, 0);
  FUZZ_CHECK(genuine.refusal.empty() && genuine.initiator == 3 && genuine.initiator_nonce == nonce);
  if (!message.empty()) {
    auto changed = hello;
    changed[message[0] % changed.size()] ^= static_cast<std::uint8_t>(message.size() > 1 ? message[1] | 1 : 1);
    FUZZ_CHECK(!check_hello(keys, changed, challenge, 0).refusal.empty());
    Nonce other = challenge;
    other[message[0] % other.size()] ^= 0x80;
    FUZZ_CHECK(!check_hello(keys, hello, other, 0).refusal.empty());
  }
  return 0;
}
