// The size of a tensor, checked: what a shape from the user may describe before
// anything is allocated or sent for it.
#pragma once

#include <cstddef>
#include <string>

#include "kolo/types.h"

namespace kolo::detail {

// Why a shape has no size: a negative dimension, or more bytes than an int64
// counts (what every later size computation relies on).
enum class ShapeFault { None, Negative, Overflow };
ShapeFault shape_fault(DataType dtype, const Shape& shape, std::size_t& bytes);
[[noreturn]] void throw_shape_fault(ShapeFault fault, DataType dtype, const Shape& shape, const std::string& what);

// The bytes of a tensor of `dtype` and `shape`; throws InvalidArgumentError when
// it has none, naming what `what()` returns (called only then: the check is on
// every collective's path).
template <class What>
std::size_t checked_nbytes(DataType dtype, const Shape& shape, What what) {
  std::size_t bytes = 0;
  const ShapeFault fault = shape_fault(dtype, shape, bytes);
  if (fault != ShapeFault::None) throw_shape_fault(fault, dtype, shape, what());
  return bytes;
}

}  // namespace kolo::detail
