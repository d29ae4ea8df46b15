// A communicator made of a transport's mesh (a direct::Links that can also fail
// and abort) and kolo's direct collectives on it: the gloo and TCP communicators.
#pragma once

#include <exception>
#include <span>
#include <string>
#include <utility>

#include "comm/direct/direct_collectives.h"
#include "comm/direct/failure_state.h"
#include "comm/mesh/mesh_communicator.h"
#include "kolo/error.h"

namespace kolo::comm::direct {

// Mesh: a direct::Links with abort(reason), fail_from_outside(job_rank, message)
// and fail_locally(exception_ptr) (which closes it and rethrows).
template <typename Mesh>
class DirectCommunicator : public MeshCommunicator {
 public:
  // `tuning`: the transport's defaults, which <tuning_prefix>_* settings override.
  template <typename... MeshArgs>
  DirectCommunicator(std::string name, const std::string& tuning_prefix, Tuning tuning, MeshArgs&&... mesh_args)
      : name_(std::move(name)),
        tuning_prefix_(tuning_prefix),
        mesh_(std::forward<MeshArgs>(mesh_args)...),
        collectives_(mesh_, Tuning::from_env(tuning_prefix, tuning)) {}

  int rank() const override { return mesh_.rank(); }
  int size() const override { return mesh_.size(); }
  std::string name() const override { return name_; }
  // Both cut a collective into messages: ranks that disagree would post different ones.
  std::vector<SharedSetting> shared_settings() const override {
    const Tuning& t = collectives_.tuning();
    return {{tuning_prefix_ + "_SMALL_BYTES", static_cast<std::int64_t>(t.small_bytes)},
            {tuning_prefix_ + "_ROUND_BYTES", static_cast<std::int64_t>(t.round_bytes_for(size()))}};
  }

  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                 const ResultScale& scale = {}, Placement = {}) override {
    guarded([&] { collectives_.allreduce(send, recv, count, dtype, op, scale); });
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
  // direct::guarded on this communicator's mesh.
  template <typename Body>
  void guarded(Body&& body) {
    direct::guarded(mesh_, std::forward<Body>(body));
  }

  const std::string name_;
  const std::string tuning_prefix_;
  Mesh mesh_;
  Collectives collectives_;
};

}  // namespace kolo::comm::direct
