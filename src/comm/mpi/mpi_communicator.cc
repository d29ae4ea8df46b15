// The MPI communicator.
//
// ALLREDUCE, small (<= KOLO_MPI_SMALL_BYTES): MPI_Iallgather of the whole inputs,
// then every rank reduces all of them in rank order with reduce_many: the same
// bits as the shm and gloo communicators, in one step.
// ALLREDUCE, large: MPI_Ireduce_scatter with kolo's operator (mpi_ops.h), then
// MPI_Iallgatherv of the reduced blocks. Each element is reduced at one rank
// only, so every rank gets the same bits whatever algorithm MPI picks (a plain
// MPI_Allreduce does not promise that); the bits may differ from shm's, as MPI
// chooses the association.
// The other collectives map onto MPI's (byte-typed); in place uses MPI_IN_PLACE
// or a private copy of the input. MPI counts and displacements are int: larger
// byte counts are rejected with a clear error, allreduce is done in pieces.
#include "comm/mpi/mpi_communicator.h"

#include <climits>
#include <cstring>
#include <vector>

#include "comm/mpi/mpi_ops.h"
#include "comm/mpi/mpi_session.h"
#include "comm/mpi/mpi_settings.h"
#include "comm/mpi/mpi_wait.h"
#include "common/reduce.h"
#include "kolo/error.h"

namespace kolo::comm {
namespace {

// KOLO_MPI_SMALL_BYTES: allreduce up to this size in one MPI_Allreduce call.
std::size_t small_bytes_from_env() { return static_cast<std::size_t>(mpi_impl::kSmallBytes.integer()); }

using mpi_impl::check_mpi;
using mpi_impl::ReductionOps;

// Largest element count of one allreduce piece: the int counts MPI takes, with
// room for the per-rank split.
constexpr std::size_t kMaxPiece = std::size_t{1} << 28;

int as_int(std::size_t value, const char* what) {
  if (value > static_cast<std::size_t>(INT_MAX))
    throw InvalidArgumentError(std::string(what) + ": " + std::to_string(value) +
                               " bytes exceed what one MPI call can move (2 GiB); split the tensor");
  return static_cast<int>(value);
}

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

// Counts and displacements for a byte-level v-collective.
struct Layout {
  std::vector<int> counts;
  std::vector<int> displs;
  std::size_t total = 0;
  Layout(std::span<const std::size_t> bytes, const char* what) {
    for (std::size_t b : bytes) {
      counts.push_back(as_int(b, what));
      displs.push_back(as_int(total, what));
      total += b;
    }
    as_int(total, what);
  }
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const CommunicatorOptions& options)
      : waiter_(mpi_impl::PollPolicy::from_env(), options.peer_timeout),
        small_bytes_(small_bytes_from_env()) {
    mpi_impl::ensure_mpi_initialized();
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    ops_ = std::make_unique<ReductionOps>();
  }

  ~MpiCommunicator() override {
    // After an abandoned request even freeing could let MPI progress into buffers
    // that are gone: leak the handles instead; the process ends through MPI_Abort.
    if (waiter_.abandoned()) {
      (void)ops_.release();
      return;
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    ops_.reset();
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  // Ranks on either side of it would call different MPI collectives.
  std::vector<SharedSetting> shared_settings() const override {
    return {{mpi_impl::kSmallBytes.name, static_cast<std::int64_t>(small_bytes_)}};
  }

  // Each rank scales the block it reduced before the allgather hands it on.
  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                 const ResultScale& scale = {}, Placement = {}) override {
    MPI_Op mpi_op = ops_->op(dtype, op);
    waiter_.check_usable();
    const std::size_t es = element_size(dtype);
    auto* in = static_cast<const std::byte*>(send);
    auto* out = static_cast<std::byte*>(recv);
    for (std::size_t done = 0; done < count;) {
      const std::size_t piece = std::min(kMaxPiece, count - done);
      if (piece * es <= small_bytes_) {
        allreduce_small(in + done * es, out + done * es, piece, dtype, op);
        scale.apply(out + done * es, piece, dtype);
      } else {
        allreduce_large(in + done * es, out + done * es, piece, dtype, mpi_op, scale);
      }
      done += piece;
    }
  }

  void reduce_scatter(const void* send, void* recv, std::span<const std::size_t> recv_counts, DataType dtype,
                      ReduceOp op) override {
    MPI_Op mpi_op = ops_->op(dtype, op);
    check_sizes(recv_counts.size(), "reduce_scatter");
    waiter_.check_usable();
    std::vector<int> counts;
    std::size_t total = 0;
    for (std::size_t c : recv_counts) {
      counts.push_back(as_int(c, "reduce_scatter"));
      total += c;
    }
    const std::size_t es = element_size(dtype);
    const void* in = send;
    std::vector<std::byte> input_copy;  // MPI forbids overlapping buffers
    if (overlaps(send, total * es, recv, recv_counts[rank_] * es)) {
      input_copy.assign(static_cast<const std::byte*>(send), static_cast<const std::byte*>(send) + total * es);
      in = input_copy.data();
    }
    MPI_Request request;
    check_mpi(MPI_Ireduce_scatter(in, recv, counts.data(), ReductionOps::element_type(dtype), mpi_op, comm_, &request),
              "MPI_Ireduce_scatter");
    waiter_.wait(request, "MPI_Ireduce_scatter");
  }

  void allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                  Placement = {}) override {
    check_sizes(recv_bytes.size(), "allgatherv");
    check_own_block(send_bytes, recv_bytes[rank_], "allgatherv");
    waiter_.check_usable();
    Layout layout(recv_bytes, "allgatherv");
    auto* out = static_cast<std::byte*>(recv);
    place_own_block(send, out + layout.displs[rank_], send_bytes);
    MPI_Request request;
    check_mpi(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, out, layout.counts.data(), layout.displs.data(), MPI_BYTE,
                              comm_, &request),
              "MPI_Iallgatherv");
    waiter_.wait(request, "MPI_Iallgatherv");
  }

  void gatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
               int root) override {
    check_sizes(recv_bytes.size(), "gatherv");
    check_root(root, "gatherv");
    check_own_block(send_bytes, recv_bytes[rank_], "gatherv");
    waiter_.check_usable();
    Layout layout(recv_bytes, "gatherv");
    MPI_Request request;
    if (rank_ == root) {
      auto* out = static_cast<std::byte*>(recv);
      place_own_block(send, out + layout.displs[rank_], send_bytes);
      check_mpi(MPI_Igatherv(MPI_IN_PLACE, 0, MPI_BYTE, out, layout.counts.data(), layout.displs.data(), MPI_BYTE,
                             root, comm_, &request),
                "MPI_Igatherv");
    } else {
      check_mpi(MPI_Igatherv(send, layout.counts[rank_], MPI_BYTE, nullptr, nullptr, nullptr, MPI_BYTE, root, comm_,
                             &request),
                "MPI_Igatherv");
    }
    waiter_.wait(request, "MPI_Igatherv");
  }

  void broadcast(void* buffer, std::size_t bytes, int root) override {
    check_root(root, "broadcast");
    waiter_.check_usable();
    MPI_Request request;
    check_mpi(MPI_Ibcast(buffer, as_int(bytes, "broadcast"), MPI_BYTE, root, comm_, &request), "MPI_Ibcast");
    waiter_.wait(request, "MPI_Ibcast");
  }

  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, void* recv,
                 std::span<const std::size_t> recv_bytes) override {
    check_sizes(send_bytes.size(), "alltoallv");
    check_sizes(recv_bytes.size(), "alltoallv");
    waiter_.check_usable();
    Layout out_layout(send_bytes, "alltoallv"), in_layout(recv_bytes, "alltoallv");
    const void* in = send;
    std::vector<std::byte> input_copy;  // MPI forbids overlapping buffers
    if (overlaps(send, out_layout.total, recv, in_layout.total)) {
      input_copy.assign(static_cast<const std::byte*>(send), static_cast<const std::byte*>(send) + out_layout.total);
      in = input_copy.data();
    }
    MPI_Request request;
    check_mpi(MPI_Ialltoallv(in, out_layout.counts.data(), out_layout.displs.data(), MPI_BYTE, recv,
                             in_layout.counts.data(), in_layout.displs.data(), MPI_BYTE, comm_, &request),
              "MPI_Ialltoallv");
    waiter_.wait(request, "MPI_Ialltoallv");
  }

  void barrier() override {
    waiter_.check_usable();
    MPI_Request request;
    check_mpi(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
    waiter_.wait(request, "MPI_Ibarrier");
  }

  void abort(const std::string& reason) override { waiter_.abort(reason); }

 private:
  void allreduce_small(const std::byte* in, std::byte* out, std::size_t count, DataType dtype, ReduceOp op) {
    const std::size_t bytes = count * element_size(dtype);
    gathered_.resize(bytes * size_);
    MPI_Request request;
    check_mpi(MPI_Iallgather(in, static_cast<int>(bytes), MPI_BYTE, gathered_.data(), static_cast<int>(bytes), MPI_BYTE,
                             comm_, &request),
              "MPI_Iallgather");
    waiter_.wait(request, "MPI_Iallgather");
    std::vector<const void*> srcs(size_);
    for (int k = 0; k < size_; ++k) srcs[k] = gathered_.data() + k * bytes;
    reduce_many(out, srcs.data(), size_, count, dtype, op);
  }

  void allreduce_large(const std::byte* in, std::byte* out, std::size_t count, DataType dtype, MPI_Op op,
                       const ResultScale& scale) {
    const std::size_t es = element_size(dtype);
    std::vector<int> counts(size_), displs(size_);
    for (int j = 0, offset = 0; j < size_; ++j) {
      counts[j] = static_cast<int>(count / size_ + (static_cast<std::size_t>(j) < count % size_ ? 1 : 0));
      displs[j] = offset;
      offset += counts[j];
    }
    gathered_.resize(counts[rank_] * es);
    MPI_Datatype type = ReductionOps::element_type(dtype);
    MPI_Request request;
    check_mpi(MPI_Ireduce_scatter(in, gathered_.data(), counts.data(), type, op, comm_, &request),
              "MPI_Ireduce_scatter");
    waiter_.wait(request, "MPI_Ireduce_scatter (allreduce)");
    scale.apply(gathered_.data(), static_cast<std::size_t>(counts[rank_]), dtype);
    check_mpi(MPI_Iallgatherv(gathered_.data(), counts[rank_], type, out, counts.data(), displs.data(), type, comm_,
                              &request),
              "MPI_Iallgatherv");
    waiter_.wait(request, "MPI_Iallgatherv (allreduce)");
  }

  void place_own_block(const void* send, std::byte* slot, std::size_t bytes) {
    if (send != slot && bytes > 0) std::memmove(slot, send, bytes);
  }
  void check_sizes(std::size_t got, const char* what) const {
    if (got != static_cast<std::size_t>(size_))
      throw InvalidArgumentError(std::string(what) + ": expected one size per rank (" + std::to_string(size_) +
                                 "), got " + std::to_string(got));
  }
  void check_root(int root, const char* what) const {
    if (root < 0 || root >= size_)
      throw InvalidArgumentError(std::string(what) + ": root rank " + std::to_string(root) + " is not below " +
                                 std::to_string(size_));
  }
  void check_own_block(std::size_t send_bytes, std::size_t block, const char* what) const {
    if (send_bytes != block)
      throw InvalidArgumentError(std::string(what) + ": this rank sends " + std::to_string(send_bytes) +
                                 " bytes but its block is " + std::to_string(block));
  }

  mpi_impl::Waiter waiter_;
  std::size_t small_bytes_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<ReductionOps> ops_;
  std::vector<std::byte> gathered_;
};

}  // namespace

bool mpi_available() { return true; }

std::unique_ptr<Communicator> make_mpi_communicator(const CommunicatorOptions& options) {
  return std::make_unique<MpiCommunicator>(options);
}

}  // namespace kolo::comm
