// Completion of an asynchronous collective.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "kolo/types.h"

namespace kolo {

namespace detail {
class OpState;
}

// Returned by every *_async call. Cheap to copy; all copies refer to one operation.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<detail::OpState> state);

  // True once the operation has finished, successfully or not. Never throws.
  bool poll() const;
  // Blocks until the operation finishes; rethrows its error as a kolo::Error subclass.
  void wait() const;
  // As wait(), but throws TimeoutError if the operation is still running after
  // `timeout`; the operation itself goes on and may be waited for again.
  void wait(std::chrono::milliseconds timeout) const;

  // The negotiated name of the operation.
  const std::string& name() const;

  // For allgather, alltoall and reducescatter: the output kolo allocated. Valid
  // after a successful wait(); the Buffer is moved out by take_output().
  Buffer& output() const;
  Buffer take_output() const;
  // For alltoall: how many first-dimension rows came from each rank.
  const std::vector<std::int64_t>& received_splits() const;
  // For join: the last rank that joined.
  int last_joined_rank() const;

  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::OpState> state_;
};

}  // namespace kolo
