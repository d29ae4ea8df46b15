// The collective operations. Each has an asynchronous form returning a Handle and a
// blocking form that waits for it.
//
// Every operation has a name. Ranks match operations by name, so they may submit
// them in different orders. An operation submitted without a name is named after
// its call site and how often that call site has been reached, which is the same
// on every rank that runs the same program. Two operations with the same name may
// not be in flight on one rank at once.
#pragma once

#include <cstdint>
#include <source_location>
#include <span>
#include <string>
#include <vector>

#include "kolo/handle.h"
#include "kolo/process_set.h"
#include "kolo/types.h"

namespace kolo {

struct AllreduceOptions {
  ReduceOp op = ReduceOp::Average;
  // Each rank's input is multiplied by prescale before the reduction, and the result
  // by postscale after it. Integers are scaled in double and truncated toward zero
  // (Horovod's rule; a result past the type's range is held at its bound), as is
  // an integer Average; bool takes no factors.
  double prescale = 1.0;
  double postscale = 1.0;
  std::string name;
  // The ranks that take part; every rank of the job by default.
  ProcessSet process_set{};
};

struct CollectiveOptions {
  std::string name;
  ProcessSet process_set{};
};

using Location = std::source_location;

// In place: `tensor` holds this rank's input and receives the result.
Handle allreduce_async(const Tensor& tensor, const AllreduceOptions& options = {},
                       Location where = Location::current());
// Out of place: `output` must have the shape and dtype of `input`.
Handle allreduce_async(const Tensor& input, const Tensor& output, const AllreduceOptions& options = {},
                       Location where = Location::current());
void allreduce(const Tensor& tensor, const AllreduceOptions& options = {}, Location where = Location::current());
void allreduce(const Tensor& input, const Tensor& output, const AllreduceOptions& options = {},
               Location where = Location::current());

// Negotiates the tensors as one unit: none is reduced before all are ready on every
// rank. Tensor i is named "<name>.<i>". In place.
Handle grouped_allreduce_async(std::span<const Tensor> tensors, const AllreduceOptions& options = {},
                               Location where = Location::current());
void grouped_allreduce(std::span<const Tensor> tensors, const AllreduceOptions& options = {},
                       Location where = Location::current());

// Concatenates every rank's input along the first dimension, in rank order. The
// first dimension may differ between ranks; the others must agree.
Handle allgather_async(const Tensor& input, const CollectiveOptions& options = {},
                      Location where = Location::current());
Buffer allgather(const Tensor& input, const CollectiveOptions& options = {}, Location where = Location::current());

// Overwrites `tensor` on every rank with root's. `root` is a rank of the job, also
// in a process set (as in Horovod and torch.distributed); it must be a member.
Handle broadcast_async(const Tensor& tensor, int root, const CollectiveOptions& options = {},
                       Location where = Location::current());
void broadcast(const Tensor& tensor, int root, const CollectiveOptions& options = {},
               Location where = Location::current());

// Sends splits[j] first-dimension rows of `input` to rank j (in order) and receives
// the rows every rank sent here, concatenated in rank order. Empty splits divide
// the first dimension evenly (it must be divisible by the number of ranks).
Handle alltoall_async(const Tensor& input, std::vector<std::int64_t> splits = {}, const CollectiveOptions& options = {},
                      Location where = Location::current());
Buffer alltoall(const Tensor& input, std::vector<std::int64_t> splits = {}, const CollectiveOptions& options = {},
                Location where = Location::current());

// Reduces every rank's input (same shape everywhere) and gives rank r the r-th block
// of the first dimension; when it does not divide evenly the first ranks get one
// row more. Sum or Average only.
Handle reducescatter_async(const Tensor& input, ReduceOp op = ReduceOp::Average, const CollectiveOptions& options = {},
                           Location where = Location::current());
Buffer reducescatter(const Tensor& input, ReduceOp op = ReduceOp::Average, const CollectiveOptions& options = {},
                     Location where = Location::current());
// The same with scale factors: options.op (Sum or Average), prescale and postscale
// as an allreduce's.
Handle reducescatter_async(const Tensor& input, const AllreduceOptions& options, Location where = Location::current());
Buffer reducescatter(const Tensor& input, const AllreduceOptions& options, Location where = Location::current());

// Returns once every rank has entered the barrier.
void barrier(const CollectiveOptions& options = {}, Location where = Location::current());

// Declares that this rank has no more data (in the global set). Until every rank has joined, the
// others' allreduces go on with zeros in place of this rank's input (other
// collectives fail while a rank has joined). Returns the last rank to join.
int join();

}  // namespace kolo
