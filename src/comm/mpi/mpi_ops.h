// MPI reduction operators for every kolo dtype x op, computed by kolo's own
// kernels (reduce.h), so float16, bfloat16 and Bool work and integer wrap-around,
// NaN handling and Bool normalization are the same as on every other communicator.
#pragma once

#include <mpi.h>

#include "kolo/types.h"

namespace kolo::comm::mpi_impl {

class ReductionOps {
 public:
  ReductionOps();
  ~ReductionOps();
  ReductionOps(const ReductionOps&) = delete;
  ReductionOps& operator=(const ReductionOps&) = delete;

  // `op` is Sum, Min, Max or Product.
  MPI_Op op(DataType dtype, ReduceOp op) const;
  // The unsigned integer type of the element's size: MPI moves and splits buffers
  // only at element boundaries, and the operator interprets the bits.
  static MPI_Datatype element_type(DataType dtype);

 private:
  MPI_Op ops_[kNumDataTypes][kNumReduceOps];
};

}  // namespace kolo::comm::mpi_impl
