// How a process joins its job: the one entry point of src/bootstrap/, called by
// init() (api/runtime.cc), process sets and kolo-bench. Behind it:
//   topology.h             who this rank is, from kolorun's, mpirun's or Slurm's environment;
//   world.h                a world of some of the job's ranks (init with a list of ranks);
//   rendezvous_file.h      the store for srun and mpirun jobs that no kolorun serves;
//   communicator_choice.h  which communicator the job's ranks use.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "bootstrap/topology.h"
#include "comm/communicator.h"
#include "store/store.h"

namespace kolo::bootstrap {

// A rank that has joined its job: where it stands, and how it reaches the others.
class Job {
 public:
  // Reads the launcher's environment (topology_from_env) and, when the job has a
  // rendezvous store, connects to it, announces this rank (init/<generation>/rank/<r>)
  // and waits for every rank, so that a rank that never started is named here
  // (TimeoutError, within KOLO_START_TIMEOUT) instead of hanging the first
  // collective. Log lines carry the rank from here on. The generation tells this
  // process's sessions apart: every session gets fresh rendezvous keys and
  // shared-memory names. join() takes it from `generations` (and counts it) only
  // once the arguments have passed their checks, so that a call refused on one
  // rank alone leaves every rank's count in step.
  // With `world_ranks`, the process joins the world of those job ranks instead
  // (world.h): its rank is its index in the list, and only the listed ranks meet.
  // In an elastic job (KOLO_ELASTIC_WORKER, elastic_join.h) the rank, the ranks
  // and the generation come from the newest membership kolorun wrote to the store;
  // `blamed_rank` is the rank of the last generation whose failure makes this
  // worker join again (-1: none), which kolorun hears when it must form a new one.
  static Job join(int& generations, const std::optional<std::vector<int>>& world_ranks = std::nullopt,
                  int blamed_rank = -1);
  // A job made of what join() found.
  static Job of(Topology topology, int generation, std::unique_ptr<store::StoreClient> store);

  const Topology& topology() const { return topology_; }
  int generation() const { return generation_; }
  // Null when the job has no store (a job of one, or mpirun without one).
  store::StoreClient* store() const { return store_.get(); }

  // A communicator between every rank of the job (communicator_choice.h). The
  // job must outlive it (it may use the store).
  std::unique_ptr<comm::Communicator> communicator() const;
  // A communicator of process set `set_id` among its members `ranks` (job ranks,
  // ascending, this rank among them) on `hosts` (each member's cross rank); its
  // ranks are the members' indices.
  std::unique_ptr<comm::Communicator> set_communicator(int set_id, const std::vector<int>& ranks,
                                                       const std::vector<int>& hosts) const;

 private:
  Job(Topology topology, int generation, std::unique_ptr<store::StoreClient> store);

  Topology topology_;
  int generation_ = 0;
  std::unique_ptr<store::StoreClient> store_;
};

}  // namespace kolo::bootstrap
