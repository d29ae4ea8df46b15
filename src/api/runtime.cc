// init() and shutdown(): the session around the job (bootstrap/bootstrap.h) and its engine.
#include "api/runtime.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>

#include "api/allocator_tuning.h"
#include "api/known_settings.h"
#include "api/membership_watch.h"
#include "kolo/internal/naming.h"
#include "api/process_set_table.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/communicator_choice.h"
#include "bootstrap/elastic_join.h"
#include "bootstrap/world.h"
#include "common/job_names.h"
#include "common/settings.h"
#include "kolo/error.h"
#include "kolo/runtime.h"
namespace kolo {
namespace {

struct Session {
  explicit Session(bootstrap::Job j) : job(std::move(j)) {}

  bootstrap::Job job;
  // A new worker of an elastic job before the job takes it in: `job` holds its
  // planned place (bootstrap::plan_elastic_join), and there is no engine yet.
  bool planned = false;
  engine::EngineConfig config;
  std::shared_ptr<engine::Engine> engine;
  ProcessSetTable sets;
  std::unique_ptr<runtime::MembershipWatch> membership_watch;  // elastic jobs' rank 0
};

// g_mutex guards the session pointer and the flags below, and is only ever held
// for a moment: init() builds the session outside it (the rendezvous may take
// KOLO_START_TIMEOUT), so that fork() (which takes it, see below) never waits long.
// No other lock is taken while it is held, nor it while another is, so its place
// among the other fork handlers' locks (memory/shareable_memory.cc) is free.
std::mutex g_mutex;
std::condition_variable g_init_done;
std::unique_ptr<Session> g_session;
bool g_initializing = false;  // an init() is building a session outside the lock

// A child made by fork() after init() holds a copy of the session (the engine, the
// communicator's connections and mappings, pending operations) but not the
// engine's thread. Destroying that copy would wait for the thread forever, and
// running cycles on it would talk to the parent's peers as if it were the parent.
// So the child forgets the session without destroying it, and every call that
// needs one fails (forked_message() says why); the parent's job never hears of
// the child.
std::atomic<bool> g_forked{false};  // in such a child only, never cleared; read without the lock
int g_forked_rank = -1;          // the parent's rank, -1 when init() had not finished
// The parent's session, kept reachable and never destroyed. Never read: `used`
// keeps the compiler from dropping the store, which would leave the session
// unreachable (a leak to LeakSanitizer in every forked child).
[[gnu::used]] Session* g_inherited = nullptr;

void prepare_fork() { g_mutex.lock(); }
void parent_after_fork() { g_mutex.unlock(); }
void child_after_fork() {
  if (g_session || g_initializing) {
    g_forked = true;
    g_forked_rank = g_session ? g_session->job.topology().rank : -1;
    g_inherited = g_session.release();
    g_initializing = false;
  }
  g_mutex.unlock();  // the forking thread took it in prepare_fork()
}

std::string forked_message() {
  return "this process was forked (pid " + std::to_string(getpid()) + ") from " +
         (g_forked_rank >= 0 ? "rank " + std::to_string(g_forked_rank) : std::string("a process")) +
         " after kolo::init(); a forked child inherits no kolo session and cannot take part in the parent's "
         "collectives (run them in the parent)";
}

// Waits out an init() running on another thread. Requires g_mutex (in `lock`).
void await_init(std::unique_lock<std::mutex>& lock) {
  g_init_done.wait(lock, [] { return !g_initializing; });
}
// Counts init() calls, so that a re-initialized job gets fresh rendezvous keys and
// shared-memory names (every rank initializes the same number of times). Read and
// written by the one init() running (g_initializing).
int g_generation = 0;
// Sessions started in this process (session_number()).
std::atomic<std::uint64_t> g_sessions_started{0};

// Everything init() does, outside g_mutex (only one init() runs at a time).
// `may_plan`: a new elastic worker gets a planned session (Session::planned).
std::unique_ptr<Session> start_session(const std::optional<std::vector<int>>& world_ranks, int blamed_rank,
                                       bool may_plan) {
  // Every setting, also those read only later or by transports this job does not
  // use: a bad value fails here, not in the middle of training.
  settings::check_declared();
  detail::tune_allocator_for_training();
  reset_auto_names();
  if (const auto worker = bootstrap::elastic_worker(); worker && may_plan && !world_ranks) {
    if (auto plan = bootstrap::plan_elastic_join(*worker)) {
      auto session = std::make_unique<Session>(bootstrap::Job::of(std::move(*plan), -1, nullptr));
      session->planned = true;
      return session;
    }
  }
  auto session = std::make_unique<Session>(bootstrap::Job::join(g_generation, world_ranks, blamed_rank));
  const Topology& t = session->job.topology();
  detail::warn_about_unknown_settings();  // after join(), whose log lines name the rank
  auto config = engine::EngineConfig::from_env();
  // A world's ranks are not the job's: its records (rank<r>.json by world rank)
  // go to a directory of its own inside the job's, where kolorun looks too.
  std::string job_id = t.job_id;
  if (!t.whole_job()) {
    config.flight_recorder_world = bootstrap::world_name(t.job_ranks);
    job_id = bootstrap::job_id_of(t);
  }
  // Named by the secret's tag where there is one: /tmp lists it to every user.
  if (config.flight_recorder_dir.empty()) config.flight_recorder_dir = job_flight_dir(t.secret, job_id);
  session->config = config;
  // An elastic job's generations number their sets apart (process_set_table.h).
  if (bootstrap::elastic_worker()) session->sets.start_ids_at(((session->job.generation() % 32768) << 16) + 1);
  session->engine = std::make_shared<engine::Engine>(session->job.communicator(), config);
  session->membership_watch = std::make_unique<runtime::MembershipWatch>(session->job, session->engine);
  return session;
}

void shutdown_at_exit() { kolo::shutdown(); }

// The session, planned or running. Requires g_mutex (in `lock`).
Session& existing(std::unique_lock<std::mutex>& lock) {
  if (g_forked) throw ShutdownError("kolo: " + forked_message());
  await_init(lock);
  if (!g_session) throw ShutdownError("kolo is not initialized: call kolo::init() first");
  return *g_session;
}

// Builds a session (start_session) outside g_mutex and installs it; when that
// throws, none is installed. Requires g_mutex (in `lock`) and g_initializing
// set by the caller; returns with the lock held again and g_initializing clear.
Session& build_session(std::unique_lock<std::mutex>& lock, const std::optional<std::vector<int>>& world_ranks,
                       int blamed_rank, bool may_plan) {
  lock.unlock();
  std::unique_ptr<Session> session;
  try {
    session = start_session(world_ranks, blamed_rank, may_plan);
  } catch (...) {
    lock.lock();
    g_initializing = false;
    g_init_done.notify_all();
    throw;
  }
  lock.lock();
  g_session = std::move(session);
  g_sessions_started.fetch_add(1, std::memory_order_relaxed);
  g_initializing = false;
  g_init_done.notify_all();
  return *g_session;
}

// Replaces a planned session with a running one: the worker says it is ready
// and waits for the job to take it in, outside g_mutex (as init() does). When
// that fails, kolo is not initialized any more. Requires g_mutex (in `lock`).
Session& admit_planned(std::unique_lock<std::mutex>& lock) {
  g_initializing = true;
  g_session.reset();
  return build_session(lock, std::nullopt, -1, false);
}

// The running session, a planned one admitted first. Requires g_mutex (in `lock`).
Session& current(std::unique_lock<std::mutex>& lock) {
  Session& session = existing(lock);
  return session.planned ? admit_planned(lock) : session;
}

}  // namespace

namespace runtime {
std::shared_ptr<engine::Engine> engine() {
  std::unique_lock lock(g_mutex);
  return current(lock).engine;
}

std::shared_ptr<engine::Engine> engine(const ProcessSet& set) {
  std::unique_lock lock(g_mutex);
  Session& session = current(lock);
  return set.id == 0 ? session.engine : session.sets.engine(set.id, session.job.topology().rank);
}

SessionView session() {
  std::unique_lock lock(g_mutex);
  Session& s = current(lock);
  return SessionView{&s.job, &s.config, &s.sets};
}

bool is_planned() {
  std::unique_lock lock(g_mutex);
  return existing(lock).planned;
}

bool admit() {
  std::unique_lock lock(g_mutex);
  Session& session = existing(lock);
  if (!session.planned) return false;
  const Topology plan = session.job.topology();
  const Topology& t = admit_planned(lock).job.topology();
  return t.rank != plan.rank || t.size != plan.size || t.local_rank != plan.local_rank ||
         t.local_size != plan.local_size || t.cross_rank != plan.cross_rank || t.cross_size != plan.cross_size;
}

void check_not_forked() {
  if (g_forked.load(std::memory_order_relaxed)) throw ShutdownError("kolo: " + forked_message());
}
}  // namespace runtime

namespace {

void init_session(const std::optional<std::vector<int>>& world_ranks, int blamed_rank = -1) {
  {
    std::unique_lock lock(g_mutex);
    if (g_forked) throw InvalidArgumentError("kolo::init(): " + forked_message());
    await_init(lock);
    if (g_session) throw InvalidArgumentError("kolo::init() was called twice without kolo::shutdown() in between");
    g_initializing = true;
    static std::once_flag fork_handlers;
    std::call_once(fork_handlers, [] { ::pthread_atfork(prepare_fork, parent_after_fork, child_after_fork); });
    build_session(lock, world_ranks, blamed_rank, true);
  }
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(shutdown_at_exit); });
}

}  // namespace

void init() { init_session(std::nullopt); }

std::uint64_t session_number() { return g_sessions_started.load(std::memory_order_relaxed); }

namespace runtime {
void init_after_failure(int blamed_rank) { init_session(std::nullopt, blamed_rank); }
}  // namespace runtime

void init(const std::vector<int>& ranks) { init_session(ranks); }

void shutdown() {
  std::unique_ptr<Session> session;
  {
    std::unique_lock lock(g_mutex);
    if (g_forked) return;  // the parent's session is not this process's to stop
    await_init(lock);
    session = std::move(g_session);
  }
  // Outside the lock: the engine's thread may still complete handles whose waiters
  // call into the API.
  if (!session || session->planned) return;
  session->membership_watch.reset();
  for (auto& set : session->sets.take_all())
    if (set.engine) set.engine->shutdown();
  session->engine->shutdown();
}

bool is_initialized() {
  std::unique_lock lock(g_mutex);
  if (g_forked) return false;
  await_init(lock);
  return g_session != nullptr;
}

namespace {
// Requires g_mutex (in `lock`).
// A planned session's is its plan.
const Topology& topology(std::unique_lock<std::mutex>& lock) { return existing(lock).job.topology(); }

template <class Field>
int topology_field(Field field) {
  std::unique_lock lock(g_mutex);
  return field(topology(lock));
}
}  // namespace

int rank() { return topology_field([](const Topology& t) { return t.rank; }); }
int size() { return topology_field([](const Topology& t) { return t.size; }); }
int local_rank() { return topology_field([](const Topology& t) { return t.local_rank; }); }
int local_size() { return topology_field([](const Topology& t) { return t.local_size; }); }
int cross_rank() { return topology_field([](const Topology& t) { return t.cross_rank; }); }
int cross_size() { return topology_field([](const Topology& t) { return t.cross_size; }); }
std::optional<bool> hosts_alike() {
  std::unique_lock lock(g_mutex);
  return topology(lock).hosts_alike;
}

std::string backend() { return runtime::engine()->backend(); }

bool works_in_shared_buffers() {
  {
    std::unique_lock lock(g_mutex);
    const Session& session = existing(lock);
    // Asked while a model is built: a new elastic worker answers for its plan.
    if (session.planned) return shares_buffers(session.job.topology());
  }
  return runtime::engine()->works_in_shared_buffers();
}

void start_timeline(const std::string& path) {
  if (path.empty()) throw InvalidArgumentError("start_timeline needs a file path");
  runtime::engine()->set_timeline(path);
}

void stop_timeline() { runtime::engine()->set_timeline(""); }

}  // namespace kolo
