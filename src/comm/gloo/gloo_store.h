// gloo's rendezvous store interface, backed by kolo's authenticated store.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "store/store.h"

namespace kolo::comm::gloo_impl {

// Every key gets `prefix` in front, so that jobs, init() generations and groups
// never see each other's addresses. Waits without a timeout of their own take
// `timeout`; a wait that runs out names the keys still missing.
class GlooStore final : public ::gloo::rendezvous::Store {
 public:
  GlooStore(store::StoreClient& client, std::string prefix, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  store::StoreClient& client_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace kolo::comm::gloo_impl
