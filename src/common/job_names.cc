#include "common/job_names.h"

#include <unistd.h>

#include <span>

#include "common/hmac.h"

namespace kolo {
namespace {

std::span<const std::uint8_t> bytes_of(std::string_view text) {
  return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};
}

}  // namespace

std::string keyed_hex(const std::string& secret, std::string_view label, std::string_view text) {
  const std::string message = std::string(label) + "\n" + std::string(text);
  const crypto::Sha256Digest digest = crypto::hmac_sha256(bytes_of(secret), bytes_of(message));
  return crypto::to_hex(std::span(digest).first(8));
}

std::string job_tag(const std::string& secret) { return keyed_hex(secret, "kolo job tag", ""); }

std::string job_flight_dir(const std::string& secret, const std::string& job_id) {
  if (!secret.empty()) return "/tmp/kolo-flight-" + job_tag(secret);
  return "/tmp/kolo-flight-" + (job_id.empty() ? std::to_string(::getpid()) : job_id);
}

}  // namespace kolo
