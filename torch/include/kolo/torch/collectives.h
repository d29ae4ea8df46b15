// kolo's collectives on libtorch tensors.
//
// Tensors must live on the CPU and have a dtype kolo supports: uint8, int8, int16, int32,
// int64, float16, bfloat16, float32, float64 or bool; anything else is an
// InvalidArgumentError naming the tensor's dtype or device. Non-contiguous tensors
// are accepted: kolo works on a contiguous copy and, for in-place operations,
// copies the result back when the operation is waited for.
//
// Operations are matched across ranks by name, exactly as in kolo/collectives.h;
// an unnamed operation is named after the caller's source location.
//
// The functions ending in an underscore work in place, as in libtorch. They write
// the tensor's memory directly, outside autograd.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kolo/collectives.h"
#include "kolo/handle.h"
#include "kolo/types.h"

namespace kolo::torch {

// The kolo dtype of a libtorch scalar type; throws InvalidArgumentError for types
// kolo does not carry (complex, quantized...).
DataType to_kolo_dtype(c10::ScalarType type);
c10::ScalarType to_torch_dtype(DataType dtype);

// A kolo view of a tensor's memory. The tensor must be a contiguous CPU tensor of a
// supported dtype; throws InvalidArgumentError otherwise. The view does not keep
// the tensor alive.
kolo::Tensor view_of(const at::Tensor& tensor);

// An in-flight collective on tensors. Cheap to copy; all copies refer to one
// operation. It keeps the tensors involved alive until the operation is done, and
// the last copy to go away waits for the operation if it is still running.
class TensorHandle {
 public:
  struct State;

  TensorHandle() = default;
  explicit TensorHandle(std::shared_ptr<State> state);

  // True once the operation has finished, successfully or not. Never throws.
  bool poll() const;
  // Waits and returns the result: the updated tensor for in-place operations, a
  // new tensor otherwise. Rethrows the operation's kolo::Error.
  at::Tensor wait() const;
  // As wait(), but throws TimeoutError if the operation is still running after
  // `timeout`; it may be waited for again.
  at::Tensor wait(std::chrono::milliseconds timeout) const;

  const std::string& name() const;
  // For alltoall: how many first-dimension rows came from each rank. Valid after wait().
  const std::vector<std::int64_t>& received_splits() const;
  // The underlying kolo handle.
  const Handle& handle() const;
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<State> state_;
};

// Allreduce into a new tensor (allreduce_async) or in place (allreduce_async_).
TensorHandle allreduce_async(const at::Tensor& tensor, const AllreduceOptions& options = {},
                             Location where = Location::current());
TensorHandle allreduce_async_(const at::Tensor& tensor, const AllreduceOptions& options = {},
                              Location where = Location::current());
at::Tensor allreduce(const at::Tensor& tensor, const AllreduceOptions& options = {},
                     Location where = Location::current());
at::Tensor allreduce_(const at::Tensor& tensor, const AllreduceOptions& options = {},
                      Location where = Location::current());

// Every rank's tensor concatenated along the first dimension, in rank order.
TensorHandle allgather_async(const at::Tensor& tensor, const CollectiveOptions& options = {},
                             Location where = Location::current());
at::Tensor allgather(const at::Tensor& tensor, const CollectiveOptions& options = {},
                     Location where = Location::current());

// Root's tensor on every rank, into a new tensor or in place.
TensorHandle broadcast_async(const at::Tensor& tensor, int root, const CollectiveOptions& options = {},
                             Location where = Location::current());
TensorHandle broadcast_async_(const at::Tensor& tensor, int root, const CollectiveOptions& options = {},
                              Location where = Location::current());
at::Tensor broadcast(const at::Tensor& tensor, int root, const CollectiveOptions& options = {},
                     Location where = Location::current());
at::Tensor broadcast_(const at::Tensor& tensor, int root, const CollectiveOptions& options = {},
                      Location where = Location::current());

// Sends splits[j] first-dimension rows to rank j; empty splits divide evenly. The
// handle's received_splits() tells how many rows came from each rank.
TensorHandle alltoall_async(const at::Tensor& tensor, std::vector<std::int64_t> splits = {},
                            const CollectiveOptions& options = {}, Location where = Location::current());
at::Tensor alltoall(const at::Tensor& tensor, std::vector<std::int64_t> splits = {},
                    const CollectiveOptions& options = {}, Location where = Location::current());

// Reduces and gives this rank its block of the first dimension (Sum or Average).
TensorHandle reducescatter_async(const at::Tensor& tensor, ReduceOp op = ReduceOp::Average,
                                 const CollectiveOptions& options = {}, Location where = Location::current());
at::Tensor reducescatter(const at::Tensor& tensor, ReduceOp op = ReduceOp::Average,
                         const CollectiveOptions& options = {}, Location where = Location::current());
// The same with scale factors (options.op Sum or Average, prescale, postscale).
TensorHandle reducescatter_async(const at::Tensor& tensor, const AllreduceOptions& options,
                                 Location where = Location::current());
at::Tensor reducescatter(const at::Tensor& tensor, const AllreduceOptions& options,
                         Location where = Location::current());

}  // namespace kolo::torch
