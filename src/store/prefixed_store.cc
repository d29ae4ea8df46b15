#include "store/prefixed_store.h"

namespace kolo::store {
namespace {

class PrefixedStoreClient final : public StoreClient {
 public:
  PrefixedStoreClient(std::unique_ptr<StoreClient> inner, std::string prefix)
      : inner_(std::move(inner)), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const Bytes& value) override { inner_->set(prefix_ + key, value); }
  Bytes get(const std::string& key, milliseconds timeout) override { return inner_->get(prefix_ + key, timeout); }
  std::int64_t add(const std::string& key, std::int64_t delta) override { return inner_->add(prefix_ + key, delta); }
  void wait(const std::vector<std::string>& keys, milliseconds timeout) override { inner_->wait(prefixed(keys), timeout); }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(prefixed(keys)); }
  void erase(const std::string& key) override { inner_->erase(prefix_ + key); }

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(prefix_ + k);
    return out;
  }

  std::unique_ptr<StoreClient> inner_;
  std::string prefix_;
};

}  // namespace

std::unique_ptr<StoreClient> with_key_prefix(std::unique_ptr<StoreClient> inner, std::string prefix) {
  return std::make_unique<PrefixedStoreClient>(std::move(inner), std::move(prefix));
}

}  // namespace kolo::store
