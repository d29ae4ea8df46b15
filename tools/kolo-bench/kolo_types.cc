#include "kolo_types.h"

namespace kolo::bench {

DataType to_kolo(ElemType type) {
  switch (type) {
    case ElemType::Float32: return DataType::Float32;
    case ElemType::Float64: return DataType::Float64;
    case ElemType::Float16: return DataType::Float16;
    case ElemType::BFloat16: return DataType::BFloat16;
    case ElemType::Int32: return DataType::Int32;
    case ElemType::Int64: return DataType::Int64;
    case ElemType::Int8: return DataType::Int8;
    case ElemType::UInt8: return DataType::UInt8;
  }
  return DataType::Float32;
}

ReduceOp to_kolo(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::Sum: return ReduceOp::Sum;
    case ReduceKind::Average: return ReduceOp::Average;
    case ReduceKind::Min: return ReduceOp::Min;
    case ReduceKind::Max: return ReduceOp::Max;
  }
  return ReduceOp::Sum;
}

}  // namespace kolo::bench
