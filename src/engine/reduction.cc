#include "engine/reduction.h"

#include "common/reduce.h"

namespace kolo::engine {

void Reduction::scale_by(void* data, std::size_t count, double factor) const { scale(data, count, dtype_, factor); }

void Reduction::finish_average_or_postscale(void* data, std::size_t count) const {
  if (op_ == ReduceOp::Average && !is_floating_point(dtype_)) {
    divide_integer(data, count, dtype_, job_size_);
    return;
  }
  // One multiply for both: a sum divided by the job size, then postscaled.
  double factor = postscale_;
  if (op_ == ReduceOp::Average) factor /= job_size_;
  if (factor != 1.0) scale(data, count, dtype_, factor);
}

}  // namespace kolo::engine
