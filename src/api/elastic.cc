// kolo::elastic (kolo/elastic.h): reset, the host-update check, State and run().
#include "kolo/elastic.h"

#include "api/runtime.h"
#include "bootstrap/elastic_join.h"
#include "kolo/runtime.h"

namespace kolo::elastic {
namespace {

// The rank of the last generation that the stopped engine's error blames, or -1.
int blamed_rank(engine::Engine& engine) {
  const std::exception_ptr why = engine.stopped_reason();
  if (!why) return -1;
  try {
    std::rethrow_exception(why);
  } catch (const PeerFailureError& e) {
    return e.peer_rank();
  } catch (...) {
    return -1;
  }
}

}  // namespace

bool enabled() { return bootstrap::elastic_worker().has_value(); }

void reset() {
  int blamed = -1;
  if (kolo::is_initialized() && !runtime::is_planned()) {
    auto engine = runtime::engine();
    blamed = blamed_rank(*engine);
    // Still running (this rank resets on its own): the others' pending operations
    // fail now, naming this rank, instead of waiting for it.
    if (!engine->stopped_reason() && !engine->membership_changed())
      engine->abort("rank " + std::to_string(engine->rank()) + " left to re-form the job (kolo::elastic::reset)");
  }
  kolo::shutdown();
  // A member lost while the new generation builds its communicator fails the
  // build: ask for the next generation, blaming it.
  for (;;) {
    try {
      runtime::init_after_failure(blamed);
      return;
    } catch (const PeerFailureError& e) {
      if (!enabled()) throw;
      blamed = e.peer_rank();
    }
  }
}

bool hosts_updated() { return enabled() && !runtime::is_planned() && runtime::engine()->membership_changed(); }

bool admit() { return enabled() && kolo::is_initialized() && runtime::admit(); }

bool awaits_admission() { return enabled() && kolo::is_initialized() && runtime::is_planned(); }

void State::check_host_updates() {
  if (hosts_updated()) throw HostsUpdatedInterrupt(false);
}

void State::register_reset_callbacks(std::vector<std::function<void()>> callbacks) {
  for (auto& c : callbacks) reset_callbacks_.push_back(std::move(c));
}

void State::on_reset() {
  reset();
  for (auto& c : reset_callbacks_) c();
}

void run(State& state, const std::function<void()>& train) {
  if (awaits_admission()) state.prepare_to_join();  // while the others still train
  if (admit()) state.on_reset();
  bool skip_sync = false;
  for (;;) {
    try {
      if (!skip_sync) state.sync();
      train();
      return;
    } catch (const HostsUpdatedInterrupt& e) {
      skip_sync = e.skip_sync();
    } catch (const InvalidArgumentError&) {
      throw;  // the program's error: a retry would meet it again
    } catch (const MismatchError&) {
      throw;
    } catch (const Error&) {
      // The job's: a rank failed, stalled or left.
      state.restore();
      skip_sync = false;
    }
    reset();
    state.on_reset();
  }
}

}  // namespace kolo::elastic
