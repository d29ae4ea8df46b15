// Process-level setup: who am I, how many are we.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kolo {

// Reads this process's place in the job from the environment that kolorun sets
// (KOLO_RANK, KOLO_SIZE, ...); without it the process is a job of one. Connects to
// the peers and starts the background thread. Throws kolo::Error on failure.
// Calling init() twice is an error; init() after shutdown() starts a new session.
void init();
// Joins the world made of these ranks of the job instead (Horovod's
// init(comm=[ranks])): this process's rank is its index in `ranks`, size() is
// their number, and only they meet; other ranks of the job may form other worlds
// with their own lists at the same time. Every listed rank calls init with the
// same list. A list of every rank in order is the job itself. Throws
// InvalidArgumentError for an empty list, a rank listed twice or out of range, or
// a list without this process's rank, and TimeoutError naming the ranks that did
// not join within KOLO_START_TIMEOUT. Such a world runs on shared memory or TCP,
// not MPI, and not through parameter servers.
void init(const std::vector<int>& ranks);

// Completes or fails every pending operation, stops the background thread and
// releases the communicator. Safe to call more than once; also runs at exit.
void shutdown();

bool is_initialized();

// Counts the sessions this process has started: init() calls, an elastic reset's
// included; 0 before the first. What ranks agreed on in one session (the
// settings of a gradient compressor, say) must be agreed again once it changes.
std::uint64_t session_number();

int rank();
int size();
// Rank and size among the processes of this host.
int local_rank();
int local_size();
// Index of this host among the job's hosts, and the number of hosts (Horovod's
// cross rank for local rank 0 processes).
int cross_rank();
int cross_size();
// Whether every host runs as many ranks, where this rank knows every rank's
// host without asking (an elastic job's membership, a world of some ranks);
// nullopt elsewhere (kolo.torch then asks the ranks once, in init()).
std::optional<bool> hosts_alike();

// Starts writing a timeline (a Chrome trace of every operation's phases) to
// `path` on rank 0 (on every rank, as <name>.rank<r>.json, with
// KOLO_TIMELINE_ALL_RANKS=1), replacing one being written; as KOLO_TIMELINE does
// from init(). stop_timeline() closes it. Throws InvalidArgumentError when the
// file cannot be opened.
void start_timeline(const std::string& path);
void stop_timeline();

// The transport the job's collectives run on: "self" (a job of one), "shm",
// "gloo", "hierarchical" or "mpi".
std::string backend();
// Whether the job's transport reduces shareable Buffers (kolo::Buffer, the
// shareable memory of kolo::torch's gradient buckets) in place of the peers'
// memory, which is where such buckets pay off: shared memory on one host.
bool works_in_shared_buffers();

}  // namespace kolo
