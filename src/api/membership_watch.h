// Elastic jobs: rank 0 watches the job's store for a generation newer than its
// own (kolorun wrote one because workers joined) and tells its engine, whose
// agreement step tells every rank (Engine::note_new_membership).
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "bootstrap/bootstrap.h"
#include "engine/engine.h"

namespace kolo::runtime {

class MembershipWatch {
 public:
  // Watches only on rank 0 of an elastic job; otherwise does nothing.
  MembershipWatch(const bootstrap::Job& job, std::shared_ptr<engine::Engine> engine);
  ~MembershipWatch();
  MembershipWatch(const MembershipWatch&) = delete;
  MembershipWatch& operator=(const MembershipWatch&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kolo::runtime
