// How a worker of an elastic job joins it (kolorun --min-np): its rank and its
// peers come from the newest membership kolorun wrote to the job's store
// (elastic_membership.h), not from the environment it started with, so that the
// same call serves the first init(), a survivor's reset and a newcomer.
#pragma once

#include <optional>

#include "bootstrap/topology.h"
#include "common/settings.h"
#include "store/store.h"

namespace kolo::bootstrap {

extern const settings::Setting kElasticWorker, kElasticTimeout;

// This process's worker id in an elastic job; nullopt outside one.
std::optional<int> elastic_worker();

struct ElasticJoin {
  Topology topology;
  int generation = 0;
  std::unique_ptr<store::StoreClient> store;
};

// Joins the newest generation after the one this process last joined (every
// generation at most once): asks kolorun for a new one when there is none, with
// the rank of the last one that its failure blames (-1: none), and waits for it
// up to KOLO_ELASTIC_TIMEOUT. A generation that a newer one replaces while its
// members meet is given up for the newer. Throws ShutdownError when kolorun
// removed this worker from the job, TimeoutError when no generation forms.
ElasticJoin join_elastic(int worker, int blamed_rank);

// What a new worker (one that joined no generation yet and is not in the newest)
// will most likely be once the job takes it in: the newest membership with this
// worker added on its host (KOLO_HOSTNAME), in rank order. Its init() returns
// with this plan and it says it is ready only at its first collective, so that
// the others train on while it builds its model (runtime.cc). The plan is wrong
// when other workers are taken in with it or leave meanwhile. nullopt for a
// worker that is not new.
std::optional<Topology> plan_elastic_join(int worker);

}  // namespace kolo::bootstrap
