#include "bootstrap/elastic_join.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>

#include "bootstrap/elastic_membership.h"
#include "bootstrap/launch_settings.h"
#include "bootstrap/world.h"
#include "comm/communicator.h"
#include "common/logging.h"
#include "kolo/error.h"
#include "net/host_name.h"

namespace kolo::bootstrap {

KOLO_SETTING(kElasticWorker, {.name = "KOLO_ELASTIC_WORKER", .kind = settings::Kind::Integer,
                              .fallback = "set by kolorun", .min = 0, .max = kMaxRanks,
                              .doc = "elastic jobs: this process's worker id, never reused in the job"});
KOLO_SETTING(kElasticTimeout, {.name = "KOLO_ELASTIC_TIMEOUT", .kind = settings::Kind::Timeout, .fallback = "600",
                               .doc = "elastic jobs: seconds a worker waits for the job to re-form"});

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How often a worker that waits for its generation's members looks for a newer
// generation that replaces it (a member died while the others met).
constexpr milliseconds kSupersededPoll{50};

// The generation this process last joined; -1 before its first. Every rank of a
// generation joins it once, so its store keys and shared-memory names are fresh.
int g_last_joined = -1;

std::string text_of(const store::Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

int read_generation(store::StoreClient& store, const std::string& key, milliseconds timeout) {
  const std::string text = text_of(store.get(key, timeout));
  try {
    return std::stoi(text);
  } catch (const std::exception&) {
    throw InvalidArgumentError("kolo elastic: the job's store holds '" + text + "' under " + key +
                               ", not a generation number");
  }
}

Topology elastic_base() {
  Topology t;
  t.launcher = Launcher::Kolorun;
  t.job_id = kJobId.text();
  t.store_addr = store::kStoreAddr.text();
  t.secret = store::kSecret.text();
  if (t.store_addr.empty() || t.secret.empty() || t.job_id.empty())
    throw InvalidArgumentError(std::string(kElasticWorker.name) + " is set but " + store::kStoreAddr.name + ", " +
                               store::kSecret.name + " or " + kJobId.name + " is not: elastic jobs start with kolorun");
  return t;
}

enum class Waited { kPresent, kGaveUp, kTimedOut };

// Waits for `keys` until `deadline`, a poll at a time; between polls
// `give_up` (when set) may end the wait. Throws ShutdownError saying
// `finished` once the job has finished training: nobody is left to wait for.
Waited wait_in_job(store::StoreClient& store, const std::vector<std::string>& keys, Clock::time_point deadline,
                   const std::function<bool()>& give_up, const std::string& finished) {
  for (;;) {
    try {
      store.wait(keys, kSupersededPoll);
      return Waited::kPresent;
    } catch (const TimeoutError&) {
    }
    if (give_up && give_up()) return Waited::kGaveUp;
    if (store.check({elastic::kFinishedKey})) throw ShutdownError("kolo elastic: the job finished training " + finished);
    if (Clock::now() >= deadline) return Waited::kTimedOut;
  }
}

// The members announce themselves and wait for each other. False when a newer
// generation appears meanwhile: a member is gone, and this one will never form.
bool meet(store::StoreClient& store, const Topology& t, int generation, milliseconds timeout) {
  const std::string prefix = "init/" + std::to_string(generation) + "/rank/";
  const std::string me = net::host_name() + ":" + std::to_string(getpid());
  store.set(prefix + std::to_string(t.rank), store::Bytes(me.begin(), me.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < t.size; ++r) keys.push_back(prefix + std::to_string(r));
  const std::string newer = elastic::membership_key(generation + 1);
  const Waited waited = wait_in_job(
      store, keys, Clock::now() + timeout, [&] { return store.check({newer}); },
      "before generation " + std::to_string(generation) + " formed; this worker has nothing left to do");
  if (waited != Waited::kTimedOut) return waited == Waited::kPresent;
  std::string missing;
  for (int r = 0; r < t.size; ++r)
    if (!store.check({keys[r]})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  throw TimeoutError("kolo elastic: rank(s) " + missing + " of generation " + std::to_string(generation) +
                     " did not join within " + std::to_string(timeout.count() / 1000) + " s (KOLO_ELASTIC_TIMEOUT)");
}

// A new worker, started before its generation: it says it is ready and waits
// to be taken in, so that the others go on training meanwhile.
void wait_to_be_taken_in(store::StoreClient& store, int worker, int generation, milliseconds timeout) {
  store.set(elastic::ready_key(worker), store::Bytes{1});
  const std::string who = "worker " + std::to_string(worker);
  if (wait_in_job(store, {elastic::membership_key(generation + 1)}, Clock::now() + timeout, nullptr,
                  "before " + who + " was taken in; it has nothing left to do") == Waited::kTimedOut)
    throw TimeoutError("kolo elastic: " + who + " was not taken into the job within " +
                       std::to_string(timeout.count() / 1000) + " s (KOLO_ELASTIC_TIMEOUT)");
}

}  // namespace

std::optional<int> elastic_worker() {
  if (!kElasticWorker.value()) return std::nullopt;
  return static_cast<int>(kElasticWorker.integer(0));
}

namespace {
std::unique_ptr<store::StoreClient> connect_to(const Topology& base) {
  auto address = store::parse_store_address(base.store_addr);
  return store::StoreClient::connect(address.host, address.port, base.secret, comm::kStartTimeout.seconds());
}
}  // namespace

std::optional<Topology> plan_elastic_join(int worker) {
  if (g_last_joined >= 0) return std::nullopt;
  Topology t = elastic_base();
  const milliseconds timeout = kElasticTimeout.seconds();
  auto store = connect_to(t);
  const int generation = read_generation(*store, elastic::kLatestKey, timeout);
  elastic::Membership plan =
      elastic::decode_membership(text_of(store->get(elastic::membership_key(generation), timeout)), generation);
  if (plan.rank_of(worker) >= 0) return std::nullopt;
  plan.members.push_back(elastic::Member{worker, kHostname.text()});
  plan.members = elastic::in_rank_order(std::move(plan.members));
  t.rank = plan.rank_of(worker);
  t.size = static_cast<int>(plan.members.size());
  place_on_hosts(t, plan.host_indices());
  return t;
}

ElasticJoin join_elastic(int worker, int blamed_rank) {
  Topology base = elastic_base();
  const milliseconds timeout = kElasticTimeout.seconds();
  auto store = connect_to(base);
  for (;;) {
    int generation = read_generation(*store, elastic::kLatestKey, timeout);
    if (generation <= g_last_joined) {
      // Nothing newer yet: ask kolorun for a generation after ours, and wait for it.
      const std::string request = elastic::encode_reset_request({g_last_joined, blamed_rank});
      store->set(elastic::reset_key(worker), store::Bytes(request.begin(), request.end()));
      store->add(elastic::kRequestsKey, 1);
      try {
        store->wait({elastic::membership_key(g_last_joined + 1)}, timeout);
      } catch (const TimeoutError&) {
        throw TimeoutError("kolo elastic: worker " + std::to_string(worker) + " waited " +
                           std::to_string(timeout.count() / 1000) +
                           " s (KOLO_ELASTIC_TIMEOUT) for the job to re-form after generation " +
                           std::to_string(g_last_joined));
      }
      continue;
    }
    const elastic::Membership membership =
        elastic::decode_membership(text_of(store->get(elastic::membership_key(generation), timeout)), generation);
    Topology t = base;
    t.rank = membership.rank_of(worker);
    if (t.rank < 0 && g_last_joined < 0) {
      wait_to_be_taken_in(*store, worker, generation, timeout);
      continue;
    }
    if (t.rank < 0)
      throw ShutdownError("kolo elastic: worker " + std::to_string(worker) + " is not in generation " +
                          std::to_string(generation) + " of the job: kolorun removed it");
    t.size = static_cast<int>(membership.members.size());
    place_on_hosts(t, membership.host_indices());
    log::set_rank(t.size > 1 ? t.rank : -1);
    if (!meet(*store, t, generation, timeout)) continue;
    g_last_joined = generation;
    return ElasticJoin{std::move(t), generation, std::move(store)};
  }
}

}  // namespace kolo::bootstrap
