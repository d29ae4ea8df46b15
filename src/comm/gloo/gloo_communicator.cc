#include "comm/gloo/gloo_communicator.h"

#include <exception>

#include "comm/gloo/gloo_collectives.h"
#include "comm/gloo/gloo_mesh.h"
#include "kolo/error.h"

namespace kolo::comm {
namespace {

using gloo_impl::Collectives;
using gloo_impl::Mesh;
using gloo_impl::Tuning;

class TcpCommunicator final : public GlooCommunicator {
 public:
  TcpCommunicator(const GlooGroup& group, store::StoreClient& store, const GlooNetwork& network,
                   const CommunicatorOptions& options)
      : mesh_(group, store, network, options), collectives_(mesh_, Tuning::from_env()) {}

  int rank() const override { return mesh_.rank(); }
  int size() const override { return mesh_.size(); }
  std::string name() const override { return "gloo"; }

  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) override {
    guarded([&] { collectives_.allreduce(send, recv, count, dtype, op); });
  }
  void reduce_scatter(const void* send, void* recv, std::span<const std::size_t> recv_counts, DataType dtype,
                      ReduceOp op) override {
    guarded([&] { collectives_.reduce_scatter(send, recv, recv_counts, dtype, op); });
  }
  void allgatherv(const void* send, std::size_t send_bytes, void* recv,
                  std::span<const std::size_t> recv_bytes) override {
    guarded([&] { collectives_.allgatherv(send, send_bytes, recv, recv_bytes); });
  }
  void gatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
               int root) override {
    guarded([&] { collectives_.gatherv(send, send_bytes, recv, recv_bytes, root); });
  }
  void broadcast(void* buffer, std::size_t bytes, int root) override {
    guarded([&] { collectives_.broadcast(buffer, bytes, root); });
  }
  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, void* recv,
                 std::span<const std::size_t> recv_bytes) override {
    guarded([&] { collectives_.alltoallv(send, send_bytes, recv, recv_bytes); });
  }
  void barrier() override {
    guarded([&] { collectives_.barrier(); });
  }
  void abort(const std::string& reason) override { mesh_.abort(reason); }
  void fail_peer(int job_rank, const std::string& message) override { mesh_.fail_from_outside(job_rank, message); }

 private:
  // Errors the mesh already handled, and arguments rejected before anything was
  // posted, pass through; anything else may leave transfers half done, so the
  // mesh is closed before the error goes up.
  template <typename Body>
  void guarded(Body&& body) {
    try {
      body();
    } catch (const PeerFailureError&) {
      throw;
    } catch (const ShutdownError&) {
      throw;
    } catch (const InvalidArgumentError&) {
      throw;
    } catch (...) {
      mesh_.fail_locally(std::current_exception());
    }
  }

  Mesh mesh_;
  Collectives collectives_;
};

}  // namespace

bool gloo_available() { return true; }

std::unique_ptr<GlooCommunicator> make_gloo_communicator(const GlooGroup& group, store::StoreClient& store,
                                                         const GlooNetwork& network,
                                                         const CommunicatorOptions& options) {
  return std::make_unique<TcpCommunicator>(group, store, network, options);
}

}  // namespace kolo::comm
