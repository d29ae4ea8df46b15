// One tensor operation submitted on this rank and not yet completed.
#pragma once

#include <chrono>
#include <memory>

#include "comm/placement.h"
#include "engine/messages.h"
#include "engine/op_state.h"
#include "kolo/types.h"

namespace kolo::engine {

// The bytes of this rank's input of a tensor.
inline std::size_t input_bytes(DataType dtype, const Shape& shape) {
  return static_cast<std::size_t>(num_elements(shape)) * element_size(dtype);
}

// A blocking allreduce as the public API received it, for Engine::express: views
// of the caller's objects, nothing copied (building a Request costs allocations).
struct AllreduceCall {
  const std::string& name;
  const void* input;
  void* output;  // may equal input
  DataType dtype;
  const Shape& shape;
  ReduceOp op;
  double prescale;
  double postscale;
  comm::Placement placement;  // the shareable memory input and output lie in, if any

  // The Request an ordinary submission of this call carries.
  Request request() const {
    Request r;
    r.name = name;
    r.op = OpType::Allreduce;
    r.dtype = dtype;
    r.shape = shape;
    r.reduce_op = op;
    r.prescale = prescale;
    r.postscale = postscale;
    return r;
  }
};

struct Entry {
  Request request;  // carries the tensor's dtype and shape
  // The user's memory (kolo::Tensor::data): null for barrier and join. Only the
  // pointers: the shapes are the request's, and copying them would cost an
  // allocation per operation.
  const void* input = nullptr;
  void* output = nullptr;  // allreduce and broadcast write here (equal to input when in place)
  std::shared_ptr<detail::OpState> state;
  std::chrono::steady_clock::time_point submitted_at{};
  std::chrono::steady_clock::time_point accepted_at{};  // taken into a cycle
  std::uint64_t seq = 0;  // in the flight recorder
  // The shareable memory input (send) and output (recv) lie in, from the
  // caller's tensors (Tensor::memory): what lets a transport work in place of them.
  comm::Placement placement{};
};

}  // namespace kolo::engine
