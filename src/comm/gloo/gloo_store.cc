#include "comm/gloo/gloo_store.h"

#include "kolo/error.h"

namespace kolo::comm::gloo_impl {

GlooStore::GlooStore(store::StoreClient& client, std::string prefix, std::chrono::milliseconds timeout)
    : client_(client), prefix_(std::move(prefix)), timeout_(timeout) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  client_.set(prefix_ + key, store::Bytes(data.begin(), data.end()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  store::Bytes value = client_.get(prefix_ + key, timeout_);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& key : keys) full.push_back(prefix_ + key);
  try {
    client_.wait(full, timeout.count() > 0 ? timeout : timeout_);
  } catch (const TimeoutError&) {
    std::string missing;
    for (const auto& key : full) {
      if (!client_.check({key})) missing += (missing.empty() ? "" : ", ") + key;
    }
    throw TimeoutError("gloo rendezvous: no address published under " + missing + " within " +
                       std::to_string(timeout_.count() / 1000) + " s (a rank did not start or failed early)");
  }
}

}  // namespace kolo::comm::gloo_impl
