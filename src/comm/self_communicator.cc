// The communicator of a job of one: every collective is a copy (or nothing).
#include <atomic>
#include <cstring>
#include <mutex>
#include <memory>

#include "comm/communicator.h"
#include "kolo/error.h"

namespace kolo::comm {
namespace {

void copy_if_distinct(const void* src, void* dst, std::size_t bytes) {
  if (src != dst && bytes > 0) std::memmove(dst, src, bytes);
}

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "self"; }

  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp,
                 const ResultScale& scale = {}, Placement = {}) override {
    check();
    copy_if_distinct(send, recv, count * element_size(dtype));
    scale.apply(recv, count, dtype);
  }
  // A fused batch of one rank is each tensor's own copy (none when in place).
  Capabilities capabilities() const override { return {.reduces_regions = true}; }
  void allreduce_regions(std::span<const Region> regions, DataType dtype, ReduceOp,
                         const ResultScale& scale) override {
    check();
    for (const Region& r : regions) {
      copy_if_distinct(r.send, r.recv, r.count * element_size(dtype));
      scale.apply(r.recv, r.count, dtype);
    }
  }
  void reduce_scatter(const void* send, void* recv, std::span<const std::size_t> counts, DataType dtype,
                      ReduceOp) override {
    check();
    copy_if_distinct(send, recv, counts[0] * element_size(dtype));
  }
  void allgatherv(const void* send, std::size_t bytes, void* recv, std::span<const std::size_t>,
                  Placement = {}) override {
    check();
    copy_if_distinct(send, recv, bytes);
  }
  void gatherv(const void* send, std::size_t bytes, void* recv, std::span<const std::size_t>, int) override {
    check();
    copy_if_distinct(send, recv, bytes);
  }
  void broadcast(void*, std::size_t, int) override { check(); }
  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, void* recv,
                 std::span<const std::size_t>) override {
    check();
    copy_if_distinct(send, recv, send_bytes[0]);
  }
  void barrier() override { check(); }
  void abort(const std::string& reason) override {
    std::lock_guard lock(mutex_);
    reason_ = reason;
    aborted_ = true;
  }

 private:
  void check() const {
    if (!aborted_) return;
    std::lock_guard lock(mutex_);
    throw ShutdownError(reason_);
  }
  std::atomic<bool> aborted_{false};
  mutable std::mutex mutex_;
  std::string reason_;
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator() { return std::make_unique<SelfCommunicator>(); }

}  // namespace kolo::comm
