#include "comm/result_scale.h"

#include "common/reduce.h"

namespace kolo::comm {

void ResultScale::apply_arithmetic(void* data, std::size_t count, DataType dtype) const {
  if (divisor_ != 1) divide_integer(data, count, dtype, divisor_);
  if (factor_ != 1.0) scale(data, count, dtype, factor_);
}

}  // namespace kolo::comm
