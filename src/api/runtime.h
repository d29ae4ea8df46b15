// The process-wide kolo session behind the free functions of the public API.
#pragma once

#include <memory>

#include "api/process_set_table.h"
#include "bootstrap/bootstrap.h"
#include "engine/engine.h"
#include "kolo/process_set.h"

namespace kolo::runtime {

// The running engine; throws ShutdownError when kolo is not initialized. Shared,
// so that a concurrent shutdown() cannot free it under a submitting thread.
std::shared_ptr<engine::Engine> engine();
// The engine of a process set on this rank; InvalidArgumentError when the set
// does not exist or this rank is not in it.
std::shared_ptr<engine::Engine> engine(const ProcessSet& set);

// What making a process set needs of the session. Valid until shutdown(), which
// must not race add_process_set() or remove_process_set().
struct SessionView {
  const bootstrap::Job* job = nullptr;
  const engine::EngineConfig* config = nullptr;
  ProcessSetTable* sets = nullptr;
};
// Throws ShutdownError when kolo is not initialized.
SessionView session();

// init() for a rank whose last session failed because of `blamed_rank` (-1:
// none known); an elastic job's kolorun hears it (bootstrap::Job::join).
void init_after_failure(int blamed_rank);

// True while this process is a new elastic worker that the job has not taken in
// (its init() returned with a planned place, bootstrap::plan_elastic_join).
bool is_planned();
// Takes a planned worker into the job (it says it is ready and waits): true
// when its place differs from the plan. False, at once, for any other session.
bool admit();

// Throws ShutdownError in a process forked from one where kolo was initialized:
// such a child inherits no session (runtime.cc), and what it inherited (pending
// operations' handles) must not wait on the parent's engine.
void check_not_forked();

}  // namespace kolo::runtime
