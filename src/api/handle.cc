#include "kolo/handle.h"

#include "engine/op_state.h"
#include "kolo/error.h"

namespace kolo {
namespace {

const detail::OpState& checked(const std::shared_ptr<detail::OpState>& state) {
  if (!state) throw InvalidArgumentError("this Handle refers to no operation");
  return *state;
}

}  // namespace

Handle::Handle(std::shared_ptr<detail::OpState> state) : state_(std::move(state)) {}

bool Handle::poll() const { return state_ && state_->done(); }

void Handle::wait() const { checked(state_).wait(); }

void Handle::wait(std::chrono::milliseconds timeout) const {
  if (!checked(state_).wait_until(std::chrono::steady_clock::now() + timeout))
    throw TimeoutError("operation '" + state_->name() + "' did not finish within " + std::to_string(timeout.count()) +
                       " ms");
}

const std::string& Handle::name() const { return checked(state_).name(); }

Buffer& Handle::output() const {
  checked(state_).wait();
  return state_->output;
}

Buffer Handle::take_output() const { return std::move(output()); }

const std::vector<std::int64_t>& Handle::received_splits() const {
  checked(state_).wait();
  return state_->received_splits;
}

int Handle::last_joined_rank() const {
  checked(state_).wait();
  return state_->last_joined;
}

}  // namespace kolo
