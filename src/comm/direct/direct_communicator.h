// A communicator made of a transport's mesh (a direct::Links that can also fail
// and abort) and kolo's direct collectives on it: the gloo and TCP communicators.
#pragma once

#include <exception>
#include <span>
#include <string>
#include <utility>

#include "comm/direct/direct_collectives.h"
#include "comm/gloo/gloo_communicator.h"
#include "kolo/error.h"

namespace kolo::comm::direct {

// Mesh: a direct::Links with abort(reason), fail_from_outside(job_rank, message)
// and fail_locally(exception_ptr) (which closes it and rethrows).
template <typename Mesh>
class DirectCommunicator : public GlooCommunicator {
 public:
  template <typename... MeshArgs>
  DirectCommunicator(std::string name, const std::string& tuning_prefix, MeshArgs&&... mesh_args)
      : name_(std::move(name)),
        mesh_(std::forward<MeshArgs>(mesh_args)...),
        collectives_(mesh_, Tuning::from_env(tuning_prefix)) {}

  int rank() const override { return mesh_.rank(); }
  int size() const override { return mesh_.size(); }
  std::string name() const override { return name_; }

  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                 Placement = {}) override {
    guarded([&] { collectives_.allreduce(send, recv, count, dtype, op); });
  }
  void reduce_scatter(const void* send, void* recv, std::span<const std::size_t> recv_counts, DataType dtype,
                      ReduceOp op) override {
    guarded([&] { collectives_.reduce_scatter(send, recv, recv_counts, dtype, op); });
  }
  void allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                  Placement = {}) override {
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

 protected:
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

  const std::string name_;
  Mesh mesh_;
  Collectives collectives_;
};

}  // namespace kolo::comm::direct
