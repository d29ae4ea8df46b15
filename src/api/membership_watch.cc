#include "api/membership_watch.h"

#include <chrono>

#include "bootstrap/elastic_join.h"
#include "bootstrap/elastic_membership.h"
#include "common/logging.h"
#include "kolo/error.h"

namespace kolo::runtime {
namespace {

// Each wait is short so that shutdown() (and so a reset) never waits long for
// the thread; one store round trip per period costs nothing beside training.
constexpr std::chrono::milliseconds kPeriod{100};

}  // namespace

MembershipWatch::MembershipWatch(const bootstrap::Job& job, std::shared_ptr<engine::Engine> engine) {
  const Topology& t = job.topology();
  if (!bootstrap::elastic_worker() || t.rank != 0 || t.store_addr.empty()) return;
  const auto address = store::parse_store_address(t.store_addr);
  std::shared_ptr<store::StoreClient> store =
      store::StoreClient::connect(address.host, address.port, t.secret, std::chrono::seconds(10));
  const std::string newer = elastic::membership_key(job.generation() + 1);
  thread_ = std::thread([this, store, newer, engine = std::move(engine)] {
    try {
      while (!stop_.load()) {
        try {
          store->wait({newer}, kPeriod);
          engine->note_new_membership();
          return;
        } catch (const TimeoutError&) {
        }
      }
    } catch (const std::exception& e) {
      // The store is gone: kolorun ended, and the job with it.
      log::write(log::Level::Warning, std::string("kolo elastic: stopped watching for new workers: ") + e.what());
    }
  });
}

MembershipWatch::~MembershipWatch() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace kolo::runtime
