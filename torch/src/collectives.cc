// Tensor collectives: stage libtorch tensors as contiguous kolo views, start the
// kolo operation, and turn its completion into a tensor.
#include "kolo/torch/collectives.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>

#include <functional>
#include <mutex>
#include <optional>
#include <utility>

#include "kolo/error.h"
#include "kolo/torch/internal/tensor_view.h"

namespace kolo::torch {

struct TensorHandle::State {
  Handle handle;
  // Tensors whose memory kolo reads or writes; held until the operation is done.
  std::vector<at::Tensor> keep_alive;
  // Builds the result once the operation succeeded; runs once.
  std::function<at::Tensor(const Handle&)> finish;

  std::mutex mutex;
  std::optional<at::Tensor> result;

  ~State() {
    // kolo may still be writing into keep_alive: never free it under a running operation.
    if (handle.valid() && !handle.poll()) {
      try {
        handle.wait();
      } catch (...) {
        // The error belonged to whoever waited; a dropped handle has no one to tell.
      }
    }
  }

  at::Tensor finished() {
    std::lock_guard lock(mutex);
    if (!result) result = finish(handle);
    return *result;
  }
};

TensorHandle::TensorHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}

namespace {

const TensorHandle::State& checked(const std::shared_ptr<TensorHandle::State>& state) {
  if (!state) throw InvalidArgumentError("kolo::torch::TensorHandle is empty (default-constructed)");
  return *state;
}

// A contiguous tensor with `tensor`'s contents, detached from autograd; `tensor`
// itself when it already is contiguous.
at::Tensor staged(const at::Tensor& tensor) {
  detail::check_supported(tensor);
  return tensor.detach().contiguous();
}

std::shared_ptr<TensorHandle::State> make_state(Handle handle, std::vector<at::Tensor> keep_alive,
                                                std::function<at::Tensor(const Handle&)> finish) {
  auto state = std::make_shared<TensorHandle::State>();
  state->handle = std::move(handle);
  state->keep_alive = std::move(keep_alive);
  state->finish = std::move(finish);
  return state;
}

// The result of an in-place operation that ran on `staging`: copied back into
// `target` when they are not the same memory.
std::function<at::Tensor(const Handle&)> write_back(at::Tensor target, at::Tensor staging) {
  return [target = std::move(target), staging = std::move(staging)](const Handle&) {
    if (!target.is_same(staging)) target.detach().copy_(staging);
    return target;
  };
}

std::function<at::Tensor(const Handle&)> returns(at::Tensor result) {
  return [result = std::move(result)](const Handle&) { return result; };
}

at::Tensor kolo_output(const Handle& handle) { return detail::from_buffer(handle.take_output()); }

}  // namespace

bool TensorHandle::poll() const { return state_ && state_->handle.poll(); }

at::Tensor TensorHandle::wait() const {
  checked(state_).handle.wait();
  return state_->finished();
}

at::Tensor TensorHandle::wait(std::chrono::milliseconds timeout) const {
  checked(state_).handle.wait(timeout);
  return state_->finished();
}

const std::string& TensorHandle::name() const { return checked(state_).handle.name(); }

const std::vector<std::int64_t>& TensorHandle::received_splits() const {
  return checked(state_).handle.received_splits();
}

const Handle& TensorHandle::handle() const { return checked(state_).handle; }

TensorHandle allreduce_async(const at::Tensor& tensor, const AllreduceOptions& options, Location where) {
  at::Tensor input = staged(tensor);
  at::Tensor output = at::empty_like(input, at::MemoryFormat::Contiguous);
  Handle handle = kolo::allreduce_async(view_of(input), view_of(output), options, where);
  return TensorHandle(make_state(std::move(handle), {input, output}, returns(output)));
}

TensorHandle allreduce_async_(const at::Tensor& tensor, const AllreduceOptions& options, Location where) {
  at::Tensor staging = staged(tensor);
  Handle handle = kolo::allreduce_async(view_of(staging), options, where);
  return TensorHandle(make_state(std::move(handle), {tensor, staging}, write_back(tensor, staging)));
}

at::Tensor allreduce(const at::Tensor& tensor, const AllreduceOptions& options, Location where) {
  return allreduce_async(tensor, options, where).wait();
}

at::Tensor allreduce_(const at::Tensor& tensor, const AllreduceOptions& options, Location where) {
  return allreduce_async_(tensor, options, where).wait();
}

TensorHandle allgather_async(const at::Tensor& tensor, const CollectiveOptions& options, Location where) {
  at::Tensor input = staged(tensor);
  Handle handle = kolo::allgather_async(view_of(input), options, where);
  return TensorHandle(make_state(std::move(handle), {input}, kolo_output));
}

at::Tensor allgather(const at::Tensor& tensor, const CollectiveOptions& options, Location where) {
  return allgather_async(tensor, options, where).wait();
}

TensorHandle broadcast_async(const at::Tensor& tensor, int root, const CollectiveOptions& options,
                             Location where) {
  detail::check_supported(tensor);
  // Out of place: the copy is what kolo overwrites, the caller's tensor stays as it was.
  at::Tensor copy = tensor.detach().clone(at::MemoryFormat::Contiguous);
  Handle handle = kolo::broadcast_async(view_of(copy), root, options, where);
  return TensorHandle(make_state(std::move(handle), {copy}, returns(copy)));
}

TensorHandle broadcast_async_(const at::Tensor& tensor, int root, const CollectiveOptions& options,
                              Location where) {
  at::Tensor staging = staged(tensor);
  Handle handle = kolo::broadcast_async(view_of(staging), root, options, where);
  return TensorHandle(make_state(std::move(handle), {tensor, staging}, write_back(tensor, staging)));
}

at::Tensor broadcast(const at::Tensor& tensor, int root, const CollectiveOptions& options, Location where) {
  return broadcast_async(tensor, root, options, where).wait();
}

at::Tensor broadcast_(const at::Tensor& tensor, int root, const CollectiveOptions& options, Location where) {
  return broadcast_async_(tensor, root, options, where).wait();
}

TensorHandle alltoall_async(const at::Tensor& tensor, std::vector<std::int64_t> splits,
                            const CollectiveOptions& options, Location where) {
  at::Tensor input = staged(tensor);
  Handle handle = kolo::alltoall_async(view_of(input), std::move(splits), options, where);
  return TensorHandle(make_state(std::move(handle), {input}, kolo_output));
}

at::Tensor alltoall(const at::Tensor& tensor, std::vector<std::int64_t> splits, const CollectiveOptions& options,
                    Location where) {
  return alltoall_async(tensor, std::move(splits), options, where).wait();
}

TensorHandle reducescatter_async(const at::Tensor& tensor, const AllreduceOptions& options, Location where) {
  at::Tensor input = staged(tensor);
  Handle handle = kolo::reducescatter_async(view_of(input), options, where);
  return TensorHandle(make_state(std::move(handle), {input}, kolo_output));
}

at::Tensor reducescatter(const at::Tensor& tensor, const AllreduceOptions& options, Location where) {
  return reducescatter_async(tensor, options, where).wait();
}

TensorHandle reducescatter_async(const at::Tensor& tensor, ReduceOp op, const CollectiveOptions& options,
                                 Location where) {
  return reducescatter_async(tensor, {.op = op, .name = options.name, .process_set = options.process_set}, where);
}

at::Tensor reducescatter(const at::Tensor& tensor, ReduceOp op, const CollectiveOptions& options,
                         Location where) {
  return reducescatter_async(tensor, op, options, where).wait();
}

}  // namespace kolo::torch
