// A world made of some of the job's ranks: kolo::init(ranks), Horovod's
// init(comm=[ranks]) or init(comm=<an MPI communicator>). Its rank i is job rank
// ranks[i]; disjoint worlds of one job run side by side, each with its own
// communicator, store keys (under world_name()/) and shared-memory names.
#pragma once

#include <string>
#include <vector>

#include "bootstrap/topology.h"
#include "common/rank_list.h"

namespace kolo::bootstrap {

// True when `ranks` lists every rank of a job of `size` in order: the job itself.
bool is_whole_job(const std::vector<int>& ranks, int size);

// Throws InvalidArgumentError unless `ranks` names ranks of the job, each once,
// with this rank among them.
void check_world_ranks(const Topology& job, const std::vector<int>& ranks);

// The world's name, the same on every member and different for another list:
// "w" and 16 hex digits of a hash of the list.
std::string world_name(const std::vector<int>& ranks);

// This rank's place in the world. `hosts` holds each member's host index in the
// job (its cross rank): members on one host are the world's local ranks, in the
// list's order, and hosts are numbered in the order the list first meets them.
// The store address and secret stay the job's; the job id gains the world's name.
Topology world_topology(const Topology& job, const std::vector<int>& ranks, const std::vector<int>& hosts);

// Sets t's local and cross ranks and sizes from `hosts`, a host index for each of
// its ranks (t.rank among them), as world_topology() numbers them, and
// t.hosts_alike.
void place_on_hosts(Topology& t, const std::vector<int>& hosts);

// The job's id for a world's topology (world_topology adds the world's name to
// it); the topology's own id for the job itself.
std::string job_id_of(const Topology& t);

}  // namespace kolo::bootstrap
