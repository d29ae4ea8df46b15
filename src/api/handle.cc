#include "kolo/handle.h"

#include "api/runtime.h"
#include "common/spin_policy.h"
#include "engine/engine.h"
#include "engine/op_state.h"
#include "kolo/error.h"

namespace kolo {
namespace {

// In a process forked after init() (runtime.cc), an unfinished operation would
// wait for the parent's engine, which the child does not have; a finished one's
// result is the child's own copy, and stays readable.
const detail::OpState& checked(const std::shared_ptr<detail::OpState>& state) {
  if (!state) throw InvalidArgumentError("this Handle refers to no operation");
  if (!state->done()) runtime::check_not_forked();
  return *state;
}

// Lets the waiting thread run the engine's cycles itself (see Engine::drive).
void drive(const detail::OpState& state, std::chrono::steady_clock::time_point deadline) {
  if (auto engine = state.engine.lock()) engine->drive(state, deadline);
}

}  // namespace

Handle::Handle(std::shared_ptr<detail::OpState> state) : state_(std::move(state)) {}

bool Handle::poll() const { return state_ && state_->done(); }

void Handle::wait() const {
  const auto& state = checked(state_);
  const CallerWaits waiting;
  drive(state, std::chrono::steady_clock::time_point::max());
  state.wait();
}

void Handle::wait(std::chrono::milliseconds timeout) const {
  const CallerWaits waiting;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  drive(checked(state_), deadline);
  if (!state_->wait_until(deadline))
    throw TimeoutError("operation '" + state_->name() + "' did not finish within " + std::to_string(timeout.count()) +
                       " ms");
}

const std::string& Handle::name() const { return checked(state_).name(); }

Buffer& Handle::output() const {
  wait();
  return state_->output;
}

Buffer Handle::take_output() const { return std::move(output()); }

const std::vector<std::int64_t>& Handle::received_splits() const {
  wait();
  return state_->received_splits;
}

int Handle::last_joined_rank() const {
  wait();
  return state_->last_joined;
}

}  // namespace kolo
