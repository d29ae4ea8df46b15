// init() and shutdown(): bootstrap, rendezvous, communicator choice, engine.
#include "api/runtime.h"

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <mutex>

#include "api/allocator_tuning.h"
#include "api/topology.h"
#include "api/communicator_choice.h"
#include "api/process_set_table.h"
#include "common/env.h"
#include "common/logging.h"
#include "kolo/error.h"
#include "kolo/runtime.h"
#include "store/store.h"

namespace kolo {
namespace {

struct Session {
  Topology topology;
  int generation = 0;
  std::unique_ptr<store::StoreClient> store;
  engine::EngineConfig config;
  std::shared_ptr<engine::Engine> engine;
  ProcessSetTable sets;
};

std::mutex g_mutex;
std::unique_ptr<Session> g_session;
// Counts init() calls, so that a re-initialized job gets fresh rendezvous keys and
// shared-memory names (every rank initializes the same number of times).
int g_generation = 0;

std::string hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// Every rank announces itself in the store and waits for all the others, so that a
// rank that never started is named here instead of hanging the first collective.
std::unique_ptr<store::StoreClient> rendezvous(const Topology& t, int generation, std::chrono::milliseconds timeout) {
  auto address = store::parse_store_address(t.store_addr);
  auto client = store::StoreClient::connect(address.host, address.port, t.secret, timeout);
  const std::string prefix = "init/" + std::to_string(generation) + "/rank/";
  std::string me = hostname() + ":" + std::to_string(getpid());
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

void shutdown_at_exit() { kolo::shutdown(); }

}  // namespace

namespace runtime {
std::shared_ptr<engine::Engine> engine() {
  std::lock_guard lock(g_mutex);
  if (!g_session) throw ShutdownError("kolo is not initialized: call kolo::init() first");
  return g_session->engine;
}

std::shared_ptr<engine::Engine> engine(const ProcessSet& set) {
  if (set.id == 0) return engine();
  std::lock_guard lock(g_mutex);
  if (!g_session) throw ShutdownError("kolo is not initialized: call kolo::init() first");
  return g_session->sets.engine(set.id, g_session->topology.rank);
}

SessionView session() {
  std::lock_guard lock(g_mutex);
  if (!g_session) throw ShutdownError("kolo is not initialized: call kolo::init() first");
  return SessionView{&g_session->topology, g_session->generation, g_session->store.get(), &g_session->config,
                     &g_session->sets};
}
}  // namespace runtime

void init() {
  std::lock_guard lock(g_mutex);
  if (g_session) throw InvalidArgumentError("kolo::init() was called twice without kolo::shutdown() in between");
  detail::tune_allocator_for_training();
  auto session = std::make_unique<Session>();
  session->topology = topology_from_env();
  const Topology& t = session->topology;
  log::set_rank(t.size > 1 ? t.rank : -1);
  const int generation = g_generation++;
  session->generation = generation;
  auto start_timeout = env::get_seconds("KOLO_START_TIMEOUT", std::chrono::seconds(30));
  if (!t.store_addr.empty()) session->store = rendezvous(t, generation, start_timeout);
  auto config = engine::EngineConfig::from_env();
  if (config.flight_recorder_dir.empty())
    config.flight_recorder_dir = "/tmp/kolo-flight-" + (t.job_id.empty() ? std::to_string(getpid()) : t.job_id);
  session->config = config;
  session->engine = std::make_shared<engine::Engine>(make_communicator(t, generation, session->store.get()), config);
  g_session = std::move(session);
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(shutdown_at_exit); });
}

void shutdown() {
  std::unique_ptr<Session> session;
  {
    std::lock_guard lock(g_mutex);
    session = std::move(g_session);
  }
  // Outside the lock: the engine's thread may still complete handles whose waiters
  // call into the API.
  if (!session) return;
  for (auto& set : session->sets.take_all())
    if (set.engine) set.engine->shutdown();
  session->engine->shutdown();
}

bool is_initialized() {
  std::lock_guard lock(g_mutex);
  return g_session != nullptr;
}

namespace {
const Topology& topology() {
  if (!g_session) throw ShutdownError("kolo is not initialized: call kolo::init() first");
  return g_session->topology;
}
}  // namespace

int rank() { std::lock_guard lock(g_mutex); return topology().rank; }
int size() { std::lock_guard lock(g_mutex); return topology().size; }
int local_rank() { std::lock_guard lock(g_mutex); return topology().local_rank; }
int local_size() { std::lock_guard lock(g_mutex); return topology().local_size; }
int cross_rank() { std::lock_guard lock(g_mutex); return topology().cross_rank; }
int cross_size() { std::lock_guard lock(g_mutex); return topology().cross_size; }

std::string backend() { return runtime::engine()->backend(); }

void start_timeline(const std::string& path) {
  if (path.empty()) throw InvalidArgumentError("start_timeline needs a file path");
  runtime::engine()->set_timeline(path);
}

void stop_timeline() { runtime::engine()->set_timeline(""); }

}  // namespace kolo
