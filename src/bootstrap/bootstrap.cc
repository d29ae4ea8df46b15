#include "bootstrap/bootstrap.h"

#include <unistd.h>

#include <string>

#include "bootstrap/communicator_choice.h"
#include "common/env.h"
#include "common/logging.h"
#include "kolo/error.h"
#include "net/host_name.h"

namespace kolo::bootstrap {
namespace {

// Every rank announces itself in the store and waits for all the others.
std::unique_ptr<store::StoreClient> rendezvous(const Topology& t, int generation, std::chrono::milliseconds timeout) {
  auto address = store::parse_store_address(t.store_addr);
  auto client = store::StoreClient::connect(address.host, address.port, t.secret, timeout);
  const std::string prefix = "init/" + std::to_string(generation) + "/rank/";
  std::string me = net::host_name() + ":" + std::to_string(getpid());
  client->set(prefix + std::to_string(t.rank), store::Bytes(me.begin(), me.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < t.size; ++r) keys.push_back(prefix + std::to_string(r));
  try {
    client->wait(keys, timeout);
  } catch (const TimeoutError&) {
    std::string missing;
    for (int r = 0; r < t.size; ++r) {
      if (!client->check({keys[r]})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    throw TimeoutError("kolo::init: rank(s) " + missing + " did not start within " +
                       std::to_string(timeout.count() / 1000) + " s (KOLO_START_TIMEOUT)");
  }
  return client;
}

}  // namespace

Job::Job(Topology topology, int generation, std::unique_ptr<store::StoreClient> store)
    : topology_(std::move(topology)), generation_(generation), store_(std::move(store)) {}

Job Job::join(int generation) {
  Topology t = topology_from_env();
  log::set_rank(t.size > 1 ? t.rank : -1);
  const auto start_timeout = env::get_timeout("KOLO_START_TIMEOUT", std::chrono::seconds(30));
  std::unique_ptr<store::StoreClient> store;
  if (!t.store_addr.empty()) store = rendezvous(t, generation, start_timeout);
  return Job(std::move(t), generation, std::move(store));
}

std::unique_ptr<comm::Communicator> Job::communicator() const {
  return make_communicator(topology_, generation_, store_.get());
}

std::unique_ptr<comm::Communicator> Job::set_communicator(int set_id, const std::vector<int>& ranks) const {
  return make_set_communicator(topology_, generation_, store_.get(), set_id, ranks);
}

}  // namespace kolo::bootstrap
