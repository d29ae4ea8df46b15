// The benchmark's element types and reductions as kolo's.
#pragma once

#include "core/bench_types.h"
#include "kolo/types.h"

namespace kolo::bench {

DataType to_kolo(ElemType type);
ReduceOp to_kolo(ReduceKind kind);

}  // namespace kolo::bench
