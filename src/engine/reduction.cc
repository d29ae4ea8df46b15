#include "engine/reduction.h"

#include "common/reduce.h"

namespace kolo::engine {

void Reduction::scale_by(void* data, std::size_t count, double factor) const { scale(data, count, dtype_, factor); }

bool Reduction::divides_first(const Response& response) {
  return response.reduce_op == ReduceOp::Average &&
         (response.dtype == DataType::Float16 || response.dtype == DataType::BFloat16);
}

double Reduction::prescale_of(const Response& response, int job_size) {
  return divides_first(response) ? response.prescale / job_size : response.prescale;
}

comm::ResultScale Reduction::result_scale_of(const Response& response, int job_size) {
  const bool average = response.reduce_op == ReduceOp::Average && !divides_first(response);
  // One multiply for both: a sum divided by the job size, then postscaled. For
  // integers too (in double, truncated: common/reduce.h), Horovod's one rule.
  double factor = response.postscale;
  if (average) factor /= job_size;
  return factor == 1.0 ? comm::ResultScale{} : comm::ResultScale::multiply(factor);
}

}  // namespace kolo::engine
