// The arithmetic around every reduction the engine runs, one definition for
// every route (a fused batch, one tensor in place, inputs carried in the
// agreement step, a reducescatter): prescale each rank's input before it is
// reduced, send Average as a Sum, then one pass over the result that divides by
// the job size and applies postscale. Routes differ only in where the data is
// reduced, so that they give the same bits.
#pragma once

#include <cstddef>

#include "engine/messages.h"

namespace kolo::engine {

class Reduction {
 public:
  Reduction(const Response& response, int job_size)
      : dtype_(response.dtype),
        op_(response.reduce_op),
        prescale_(response.prescale),
        postscale_(response.postscale),
        job_size_(job_size) {}

  // The operation the communicator (or the local reduction) applies.
  ReduceOp wire_op() const { return op_ == ReduceOp::Average ? ReduceOp::Sum : op_; }
  // Whether the input must be scaled before it is reduced (then it is scaled in
  // a copy: the caller's input is never written).
  bool prescales() const { return prescale_ != 1.0; }
  // Scales `count` elements of an input's copy by prescale.
  void prescale(void* data, std::size_t count) const {
    if (prescales()) scale_by(data, count, prescale_);
  }
  // Turns a reduced sum into the result: divides by the job size for Average
  // (integer average divides, truncating) and applies postscale. Inline up to
  // the arithmetic, as a plain sum (the common case, and every 8-byte express
  // allreduce of a loss) has none.
  void finish(void* data, std::size_t count) const {
    if (op_ != ReduceOp::Average && postscale_ == 1.0) return;
    finish_average_or_postscale(data, count);
  }

 private:
  void scale_by(void* data, std::size_t count, double factor) const;
  void finish_average_or_postscale(void* data, std::size_t count) const;

  DataType dtype_;
  ReduceOp op_;
  double prescale_, postscale_;
  int job_size_;
};

}  // namespace kolo::engine
