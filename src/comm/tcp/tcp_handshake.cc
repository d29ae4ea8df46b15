#include "comm/tcp/tcp_handshake.h"

#include <cstring>
#include <vector>

#include "common/hmac.h"
#include "kolo/error.h"
#include "store/random_bytes.h"

namespace kolo::comm::tcp {
namespace {

constexpr char kMagic[8] = {'K', 'O', 'L', 'O', 'T', 'C', 'P', '1'};

void put_u32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint32_t get_u32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

// HMAC(secret, label | group | initiator | acceptor | first | second); the
// group's length goes first so that no two (label, group) pairs read alike.
Mac mac_of(const HandshakeKeys& keys, const char* label, int initiator, int acceptor, const Nonce& first,
           const Nonce& second) {
  std::vector<std::uint8_t> message(label, label + std::strlen(label) + 1);
  std::uint8_t word[4];
  put_u32(word, static_cast<std::uint32_t>(keys.group.size()));
  message.insert(message.end(), word, word + 4);
  message.insert(message.end(), keys.group.begin(), keys.group.end());
  put_u32(word, static_cast<std::uint32_t>(initiator));
  message.insert(message.end(), word, word + 4);
  put_u32(word, static_cast<std::uint32_t>(acceptor));
  message.insert(message.end(), word, word + 4);
  message.insert(message.end(), first.begin(), first.end());
  message.insert(message.end(), second.begin(), second.end());
  auto key = std::span(reinterpret_cast<const std::uint8_t*>(keys.secret.data()), keys.secret.size());
  auto digest = crypto::hmac_sha256(key, message);
  Mac mac;
  std::memcpy(mac.data(), digest.data(), mac.size());
  return mac;
}

bool has_magic(std::span<const std::uint8_t> bytes) {
  return bytes.size() >= sizeof kMagic && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0;
}

}  // namespace

Nonce random_nonce() {
  Nonce n;
  store::fill_random(n);
  return n;
}

std::array<std::uint8_t, kChallengeBytes> challenge_message(const Nonce& challenge) {
  std::array<std::uint8_t, kChallengeBytes> m{};
  std::memcpy(m.data(), kMagic, sizeof kMagic);
  std::memcpy(m.data() + 8, challenge.data(), challenge.size());
  return m;
}

std::array<std::uint8_t, kHelloBytes> hello_message(const HandshakeKeys& keys, std::span<const std::uint8_t> challenge_bytes,
                                                    int initiator, int acceptor, Nonce* initiator_nonce) {
  if (challenge_bytes.size() != kChallengeBytes || !has_magic(challenge_bytes))
    throw InvalidArgumentError("the other end does not speak kolo's TCP handshake");
  Nonce challenge;
  std::memcpy(challenge.data(), challenge_bytes.data() + 8, challenge.size());
  *initiator_nonce = random_nonce();
  std::array<std::uint8_t, kHelloBytes> m{};
  std::memcpy(m.data(), kMagic, sizeof kMagic);
  put_u32(m.data() + 8, static_cast<std::uint32_t>(initiator));
  put_u32(m.data() + 12, static_cast<std::uint32_t>(acceptor));
  std::memcpy(m.data() + 16, initiator_nonce->data(), 32);
  const Mac mac = mac_of(keys, "hello", initiator, acceptor, challenge, *initiator_nonce);
  std::memcpy(m.data() + 48, mac.data(), mac.size());
  return m;
}

HelloVerdict check_hello(const HandshakeKeys& keys, std::span<const std::uint8_t> hello, const Nonce& challenge,
                         int acceptor) {
  HelloVerdict v;
  if (hello.size() != kHelloBytes || !has_magic(hello)) {
    v.refusal = "not kolo's TCP handshake";
    return v;
  }
  const auto initiator = static_cast<int>(get_u32(hello.data() + 8));
  const auto addressed = static_cast<int>(get_u32(hello.data() + 12));
  std::memcpy(v.initiator_nonce.data(), hello.data() + 16, 32);
  const Mac want = mac_of(keys, "hello", initiator, addressed, challenge, v.initiator_nonce);
  if (!crypto::constant_time_equal(want, hello.subspan(48, 32))) {
    v.refusal = "it did not prove the job's secret for this group (a wrong secret, another job or group, or a "
                "replayed handshake)";
    return v;
  }
  if (addressed != acceptor) {
    v.refusal = "it is addressed to rank " + std::to_string(addressed) + ", not this rank";
    return v;
  }
  v.initiator = initiator;
  return v;
}

Mac welcome_message(const HandshakeKeys& keys, const Nonce& challenge, const Nonce& initiator_nonce, int initiator,
                    int acceptor) {
  return mac_of(keys, "welcome", initiator, acceptor, initiator_nonce, challenge);
}

bool check_welcome(const HandshakeKeys& keys, std::span<const std::uint8_t> welcome, const Nonce& challenge,
                   const Nonce& initiator_nonce, int initiator, int acceptor) {
  const Mac want = welcome_message(keys, challenge, initiator_nonce, initiator, acceptor);
  return welcome.size() == kWelcomeBytes && crypto::constant_time_equal(want, welcome);
}

}  // namespace kolo::comm::tcp
