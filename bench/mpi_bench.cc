// mpi_bench: the same sweep as kolo-bench, on raw MPI collectives (MPI_Allreduce,
// MPI_Allgather, MPI_Bcast, MPI_Alltoall, MPI_Reduce_scatter_block), so that kolo
// can be compared with OpenMPI on the same machine in the same report format.
//   mpirun --allow-run-as-root --oversubscribe -np 2 mpi_bench --check     (shared memory)
//   mpirun ... --mca btl tcp,self --mca btl_tcp_if_include lo -np 2 mpi_bench   (TCP)
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "core/driver.h"

namespace {

using namespace kolo::bench;

// Turns an MPI error code into an exception at exactly this boundary.
void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string(what) + " failed: " + text);
}

MPI_Datatype mpi_type(ElemType t) {
  switch (t) {
    case ElemType::Float32: return MPI_FLOAT;
    case ElemType::Float64: return MPI_DOUBLE;
    case ElemType::Int32: return MPI_INT32_T;
    case ElemType::Int64: return MPI_INT64_T;
    case ElemType::Int8: return MPI_INT8_T;
    case ElemType::UInt8: return MPI_UINT8_T;
    case ElemType::Float16:
    case ElemType::BFloat16: break;
  }
  throw UsageError(std::string("MPI has no standard type for ") + to_string(t));
}

MPI_Op mpi_op(ReduceKind k) {
  switch (k) {
    case ReduceKind::Sum: return MPI_SUM;
    case ReduceKind::Min: return MPI_MIN;
    case ReduceKind::Max: return MPI_MAX;
    case ReduceKind::Average: break;
  }
  throw UsageError("MPI has no average reduction; use --reduce sum");
}

class MpiBackend : public Backend {
 public:
  MpiBackend() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string label() const override { return "mpi"; }
  std::map<std::string, std::string> details() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string v(version, static_cast<std::size_t>(length));
    if (auto comma = v.find(','); comma != std::string::npos) v.resize(comma);
    return {{"library", v}};
  }
  void validate(const BenchOptions& o) const override {
    mpi_type(o.type);
    if (is_reduction(o.collective)) mpi_op(o.reduce);
  }

  RunOnce prepare(const BenchOptions& o, const SizePoint& p, void* send, void* recv) override {
    const MPI_Datatype type = mpi_type(o.type);
    const int count = checked_int(p.send_count);
    const int block = checked_int(p.block_count);
    switch (o.collective) {
      case Collective::Allreduce: {
        const MPI_Op op = mpi_op(o.reduce);
        const void* source = o.in_place ? MPI_IN_PLACE : send;
        return [=] {
          check_mpi(MPI_Allreduce(source, recv, count, type, op, MPI_COMM_WORLD), "MPI_Allreduce");
          return recv;
        };
      }
      case Collective::Broadcast:
        return [=, root = o.root] {
          check_mpi(MPI_Bcast(send, count, type, root, MPI_COMM_WORLD), "MPI_Bcast");
          return send;
        };
      case Collective::Allgather:
        return [=] {
          check_mpi(MPI_Allgather(send, block, type, recv, block, type, MPI_COMM_WORLD), "MPI_Allgather");
          return recv;
        };
      case Collective::Alltoall:
        return [=] {
          check_mpi(MPI_Alltoall(send, block, type, recv, block, type, MPI_COMM_WORLD), "MPI_Alltoall");
          return recv;
        };
      case Collective::Reducescatter: {
        const MPI_Op op = mpi_op(o.reduce);
        return [=] {
          check_mpi(MPI_Reduce_scatter_block(send, recv, block, type, op, MPI_COMM_WORLD), "MPI_Reduce_scatter_block");
          return recv;
        };
      }
    }
    throw UsageError("unsupported collective");
  }

  void barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  std::int64_t sum_over_ranks(std::int64_t value) override {
    std::int64_t total = 0;
    check_mpi(MPI_Allreduce(&value, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    return total;
  }

 private:
  static int checked_int(std::size_t count) {
    if (count > static_cast<std::size_t>(INT32_MAX)) throw UsageError("MPI counts are limited to 2^31-1 elements");
    return static_cast<int>(count);
  }

  int rank_ = 0;
  int size_ = 1;
};

// MPI_Init/MPI_Finalize around the run; errors come back as codes, not aborts.
struct MpiSession {
  MpiSession(int* argc, char*** argv) {
    MPI_Init(argc, argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

}  // namespace

int main(int argc, char** argv) {
  MpiSession session(&argc, &argv);
  try {
    const auto options = parse_bench_options(std::vector<std::string>(argv + 1, argv + argc));
    if (options.show_help) {
      std::cout << bench_usage("mpi_bench", "Times raw MPI collectives; run under mpirun -np N.");
      return 0;
    }
    MpiBackend backend;
    return run_sweep(options, backend, "mpi_bench", std::cout);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "mpi_bench: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_bench: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}
