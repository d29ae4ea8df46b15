// kolorun's side of an elastic job (--min-np, --max-np, --host-discovery-script):
// keeps the job's workers and hosts, and writes each generation's membership to
// the job's store (src/bootstrap/elastic_membership.h), from which the workers
// learn their ranks.
//
//  - A worker that fails excludes its host from new workers (Horovod's rule),
//    until a cooldown ends when --blacklist-cooldown-range gives one. Unlike
//    Horovod, the host's other workers go on: one failed slot does not cost a
//    host. A new generation holds the survivors, oldest first.
//  - New slots (a host the discovery script adds, a host back from its cooldown)
//    get new workers, up to --max-np. They start at once; each says when it
//    waits to join (membership ready_key), and only then is it written into a
//    new generation, which the running workers take at their next commit
//    (kolo::elastic::hosts_updated): they never wait for a joiner's start.
//  - A host the script no longer prints loses its workers (no exclusion).
//  - A worker that asks for a new generation (its collectives failed) gets one;
//    when its failure blames a worker still running (stalled), that one is killed.
//  - The job fails when no worker is left, when it has fewer than --min-np
//    workers for --elastic-timeout, or past --reset-limit generations.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "elastic/host_discovery.h"
#include "options/host_list.h"
#include "options/options.h"
#include "store/store.h"
#include "supervision/job_policy.h"

namespace kolorun {

class ElasticDriver : public JobPolicy {
 public:
  using SpecMaker = std::function<LaunchSpec(int worker, const std::string& host)>;

  // `hosts`: what -H gave, or the discovery script's first list (initial_hosts).
  // `verbose`: say each worker's request to re-form.
  ElasticDriver(ElasticOptions options, int np, std::vector<HostSlots> hosts, SpecMaker make_spec,
                std::unique_ptr<kolo::store::StoreClient> store, bool verbose = false);

  // Places the first workers and writes generation 0. Throws LaunchError when
  // there are fewer than --min-np slots.
  std::vector<LaunchSpec> start();

  bool goes_on_without(int worker, int code, const std::string& text) override;
  Actions tick() override;
  std::chrono::milliseconds period() const override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Worker {
    int id = 0;
    std::string host;
    bool alive = true;
  };

  int alive_count() const;
  int alive_on(const std::string& host) const;
  bool excluded(const std::string& host) const;
  void exclude(const std::string& host, Actions& actions);
  void discover(Actions& actions);
  void read_requests(Actions& actions);
  // Places new workers on free slots of usable hosts, up to the target (into starting_).
  void grow();
  // Moves the new workers that wait to join from starting_ to joining_.
  void take_in_ready();
  // Stops new workers on hosts no longer listed; they end on purpose.
  void drop_new_workers_off(const std::vector<HostSlots>& listed, Actions& actions);
  void reform(Actions& actions);
  void publish();

  const bool verbose_;
  const ElasticOptions options_;
  const int min_np_;  // --min-np, else -np
  const int max_np_;
  int target_;  // workers wanted: -np, raised by new slots up to max_np_
  std::vector<HostSlots> hosts_;
  SpecMaker make_spec_;
  std::unique_ptr<kolo::store::StoreClient> store_;

  std::vector<Worker> workers_;
  std::vector<Worker> starting_;  // started, not yet waiting to join
  std::vector<Worker> joining_;   // waiting to join: members of the next generation
  std::set<int> dropped_;         // new workers stopped before they joined
  std::set<int> removing_;       // killed on purpose: their end is no failure
  std::set<int> requested_;      // asked for a generation after the current one
  struct Blame {
    Clock::time_point until;  // killed unless it asks to re-form by then
    int by = 0;               // the worker that blames it
    int rank = 0;             // its rank in the current generation
  };
  std::map<int, Blame> blames_;  // by blamed worker
  std::set<int> stalled_;        // blamed and killed: their ends are failures
  std::map<std::string, std::optional<Clock::time_point>> excluded_;  // nullopt: for good
  int next_id_ = 0;
  int generation_ = 0;
  bool reform_ = false;
  bool finishing_ = false;  // a worker ended with 0: training is over
  std::optional<Clock::time_point> short_since_;  // fewer than min-np since
  std::int64_t requests_seen_ = 0;
  Clock::time_point next_discovery_{};
  std::unique_ptr<DiscoveryRun> discovery_;  // the script's run in progress
  std::vector<std::string> failed_hosts_;  // of workers that failed since the last tick
};

}  // namespace kolorun
