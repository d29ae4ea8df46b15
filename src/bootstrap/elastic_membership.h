// The membership of an elastic job (kolorun --min-np): which workers form the job
// at each generation, in rank order. kolorun writes it to the job's store; every
// worker reads it when it joins (bootstrap.h), so that survivors and newcomers
// agree on ranks without a launcher environment that could only describe the
// job as it started.
//
// Store keys, all under "elastic/":
//   elastic/membership/<g>  the record of generation g (encode_membership)
//   elastic/latest          the newest generation, written after its record
//   elastic/reset/<worker>  a worker asks for a new generation (ResetRequest)
//   elastic/requests        counts the requests, so kolorun looks with one call
//   elastic/finished        a worker finished training: no generation follows
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kolo::elastic {

// A worker is a process kolorun started; its id (KOLO_ELASTIC_WORKER) is never
// reused within a job, so it names the same process in every generation.
struct Member {
  int worker = 0;
  std::string host;  // the host name kolorun placed it on
};

struct Membership {
  int generation = 0;
  std::vector<Member> members;  // rank order: rank r is members[r]

  // The rank of `worker`, or -1 when it is not a member.
  int rank_of(int worker) const;
  // Each member's host index, hosts numbered as the list first meets them.
  std::vector<int> host_indices() const;
};

// Rank order for a generation: hosts in the order of their oldest worker, each
// host's workers oldest first (lower ids are older). So rank 0 is the oldest
// survivor, which holds the job's current state, and each host's ranks are
// consecutive, as a launch plan makes them.
std::vector<Member> in_rank_order(std::vector<Member> members);

// One line per rank, "worker host". Throws InvalidArgumentError for a record that
// is not one: no members, a bad number, a duplicate worker, a host name with
// white space or past 255 bytes, more than kMaxMembers.
std::string encode_membership(const Membership& membership);
Membership decode_membership(std::string_view text, int generation);

inline constexpr int kMaxMembers = 1 << 16;

std::string membership_key(int generation);
inline constexpr const char* kLatestKey = "elastic/latest";
std::string reset_key(int worker);
// Written by a new worker once it waits to join: kolorun includes it in the next
// generation only then, so the running workers never wait for a joiner's start.
std::string ready_key(int worker);
inline constexpr const char* kRequestsKey = "elastic/requests";
// Written once a worker has finished training: workers that wait to join stop.
inline constexpr const char* kFinishedKey = "elastic/finished";

// What a worker asks of kolorun when it needs a new generation: the generation
// it last joined, and the rank of that generation its failure blames (-1 when
// none: it only wants to re-form, after a user error or a host update).
struct ResetRequest {
  int generation = -1;
  int blamed_rank = -1;
};
std::string encode_reset_request(const ResetRequest& request);
std::optional<ResetRequest> decode_reset_request(std::string_view text);

}  // namespace kolo::elastic
