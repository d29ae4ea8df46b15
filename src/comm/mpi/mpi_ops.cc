#include "comm/mpi/mpi_ops.h"

#include <cstdlib>
#include <utility>

#include "comm/mpi/mpi_session.h"
#include "common/logging.h"
#include "common/reduce.h"
#include "kolo/error.h"

namespace kolo::comm::mpi_impl {
namespace {

// inout[i] = in[i] op inout[i], MPI's convention (`in` holds the lower ranks' part).
template <int D, int O>
void reduce_function(void* in, void* inout, int* len, MPI_Datatype*) noexcept {
  const void* srcs[2] = {in, inout};
  try {
    reduce_many(inout, srcs, 2, static_cast<std::size_t>(*len), static_cast<DataType>(D), static_cast<ReduceOp>(O));
  } catch (const std::exception& e) {
    // Unreachable for the combinations built below; an exception must not cross MPI's C frames.
    KOLO_LOG(Error, "MPI reduction failed: " << e.what());
    std::abort();
  }
}

using Function = void (*)(void*, void*, int*, MPI_Datatype*);

template <int D, std::size_t... O>
void fill_row(Function (&row)[kNumReduceOps], std::index_sequence<O...>) {
  ((row[O] = &reduce_function<D, static_cast<int>(O)>), ...);
}

template <std::size_t... D>
void fill_table(Function (&table)[kNumDataTypes][kNumReduceOps], std::index_sequence<D...>) {
  (fill_row<static_cast<int>(D)>(table[D], std::make_index_sequence<kNumReduceOps>{}), ...);
}

bool has_kernel(ReduceOp op) { return op != ReduceOp::Average; }

}  // namespace

ReductionOps::ReductionOps() {
  Function table[kNumDataTypes][kNumReduceOps];
  fill_table(table, std::make_index_sequence<kNumDataTypes>{});
  for (int d = 0; d < kNumDataTypes; ++d) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      ops_[d][o] = MPI_OP_NULL;
      if (!has_kernel(static_cast<ReduceOp>(o))) continue;
      // Commutative: each element is reduced at one rank only (reduce-scatter),
      // so the order MPI picks cannot make ranks disagree.
      check_mpi(MPI_Op_create(table[d][o], 1, &ops_[d][o]), "MPI_Op_create");
    }
  }
}

ReductionOps::~ReductionOps() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& row : ops_) {
    for (auto& op : row) {
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    }
  }
}

MPI_Op ReductionOps::op(DataType dtype, ReduceOp op) const {
  if (!is_valid(dtype) || !is_valid(op) || !has_kernel(op))
    throw InvalidArgumentError("MPI communicator: reductions take Sum, Min, Max or Product on a valid data type");
  return ops_[static_cast<int>(dtype)][static_cast<int>(op)];
}

MPI_Datatype ReductionOps::element_type(DataType dtype) {
  switch (element_size(dtype)) {
    case 1: return MPI_UINT8_T;
    case 2: return MPI_UINT16_T;
    case 4: return MPI_UINT32_T;
    default: return MPI_UINT64_T;
  }
}

}  // namespace kolo::comm::mpi_impl
