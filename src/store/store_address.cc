// Finding the job's store from the environment kolorun sets.
#include "kolo/error.h"
#include "store/store.h"

namespace kolo::store {

KOLO_SETTING(kStoreAddr, {.name = "KOLO_STORE_ADDR", .kind = settings::Kind::Text, .fallback = "set by kolorun",
                          .doc = "host:port of the job's rendezvous store"});
KOLO_SETTING(kSecret, {.name = "KOLO_SECRET", .kind = settings::Kind::Text, .fallback = "set by kolorun",
                       .doc = "the job's secret, which the store and the ranks' connections require"});

StoreAddress parse_store_address(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    throw InvalidArgumentError("store address '" + text + "' is not of the form host:port");
  }
  std::string host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') {
      throw InvalidArgumentError("store address '" + text + "' has an unterminated [IPv6] host");
    }
    host = host.substr(1, host.size() - 2);
  }
  const std::string port_text = text.substr(colon + 1);
  int port = 0;
  for (char ch : port_text) {
    if (ch < '0' || ch > '9' || port > 65535) {
      throw InvalidArgumentError("store address '" + text + "' needs a port number in 1..65535 after the ':'");
    }
    port = port * 10 + (ch - '0');
  }
  if (port == 0 || port > 65535) {
    throw InvalidArgumentError("store address '" + text + "' needs a port number in 1..65535 after the ':'");
  }
  return StoreAddress{std::move(host), port};
}

std::unique_ptr<StoreClient> StoreClient::connect_from_env(milliseconds timeout) {
  const auto address = kStoreAddr.value();
  const auto secret = kSecret.value();
  if (!address || address->empty()) {
    throw InvalidArgumentError("KOLO_STORE_ADDR is not set: start the job with kolorun, which runs the store");
  }
  if (!secret || secret->empty()) {
    throw InvalidArgumentError("KOLO_SECRET is not set: kolorun passes the job secret to every rank");
  }
  const StoreAddress where = parse_store_address(*address);
  return connect(where.host, where.port, *secret, timeout);
}

}  // namespace kolo::store
