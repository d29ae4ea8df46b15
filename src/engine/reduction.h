// The arithmetic around every reduction the engine runs, one definition for
// every route (a fused batch, one tensor in place, inputs carried in the
// agreement step, a reducescatter): prescale each rank's input before it is
// reduced, send Average as a Sum, then one pass over the result that divides by
// the job size and applies postscale (a half-type Average divides in the
// prescale instead). Routes differ only in where the data is
// reduced, so that they give the same bits. A communicator that reduces in
// blocks finishes each block as it reduces it (result_scale(),
// Communicator::allreduce with a ResultScale); the other routes call finish().
#pragma once

#include <cstddef>

#include "comm/result_scale.h"
#include "engine/messages.h"

namespace kolo::engine {

class Reduction {
 public:
  Reduction(const Response& response, int job_size)
      : dtype_(response.dtype),
        op_(response.reduce_op),
        prescale_(prescale_of(response, job_size)),
        result_scale_(result_scale_of(response, job_size)) {}

  // The operation the communicator (or the local reduction) applies.
  ReduceOp wire_op() const { return op_ == ReduceOp::Average ? ReduceOp::Sum : op_; }
  // Whether the input must be scaled before it is reduced (then it is scaled in
  // a copy: the caller's input is never written).
  bool prescales() const { return prescale_ != 1.0; }
  // Scales `count` elements of an input's copy by prescale.
  void prescale(void* data, std::size_t count) const {
    if (prescales()) scale_by(data, count, prescale_);
  }
  // What turns a reduced sum into the result: a division by the job size for
  // Average (integer average divides, truncating) and postscale.
  const comm::ResultScale& result_scale() const { return result_scale_; }
  // Applies it to `count` elements of a reduced sum.
  void finish(void* data, std::size_t count) const { result_scale_.apply(data, count, dtype_); }

 private:
  // A half-type Average divides before it sums, as NCCL's average does: a sum
  // of float16 values overflows past 65504 where their mean would fit.
  static bool divides_first(const Response& response);
  static double prescale_of(const Response& response, int job_size);
  static comm::ResultScale result_scale_of(const Response& response, int job_size);
  void scale_by(void* data, std::size_t count, double factor) const;

  DataType dtype_;
  ReduceOp op_;
  double prescale_;
  comm::ResultScale result_scale_;
};

}  // namespace kolo::engine
