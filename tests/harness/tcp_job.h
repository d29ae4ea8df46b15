// In a rank the harness started: kolo's TCP communicator over the job's store,
// under one prefix, and where a member of it listens, for tests that join it or
// act on its port from outside.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/tcp/tcp_communicator.h"
#include "harness/job_store.h"
#include "harness/multiprocess.h"
#include "harness/time_bound.h"
#include "net/socket.h"
#include "store/store.h"

namespace kolo::testing {

inline constexpr const char* kTcpPrefix = "tcp-test/";

inline std::unique_ptr<comm::MeshCommunicator> join_tcp(store::StoreClient& store, int rank, int size,
                                                        comm::CommunicatorOptions options = {}) {
  comm::MeshGroup group;
  group.rank = rank;
  group.size = size;
  group.key_prefix = kTcpPrefix;
  return comm::make_tcp_communicator(group, store, {}, options, std::getenv("KOLO_SECRET"));
}

// Where group rank `rank` listens, from the store.
inline std::pair<std::string, int> tcp_address_of(store::StoreClient& store, int rank) {
  auto value = store.get(std::string(kTcpPrefix) + "tcp/addr/" + std::to_string(rank), std::chrono::seconds(10));
  std::string text(value.begin(), value.end());
  const auto colon = text.rfind(':');
  return {text.substr(0, colon), std::stoi(text.substr(colon + 1))};
}

inline void expect_sum_works(comm::Communicator& comm) {
  int value = comm.rank() + 1;
  comm.allreduce(&value, &value, 1, DataType::Int32, ReduceOp::Sum);
  EXPECT_EQ(value, comm.size() * (comm.size() + 1) / 2);
}

// A job of 2 where rank 1 first does `attack` to rank 0's port while rank 0 forms
// the mesh, then joins, holding the connections `attack` returns: it must be in
// within 3 s and a collective must run. `prepare` runs first in rank 0.
using PortAttack = std::function<std::vector<net::Fd>(const std::string& host, int port)>;
inline void attack_then_join(const PortAttack& attack, const std::function<void()>& prepare = {}) {
  run_ranks(2, [&](int rank) {
    auto store = connect_job_store();
    if (rank == 0) {
      if (prepare) prepare();
      auto comm = join_tcp(*store, 0, 2);
      expect_sum_works(*comm);
      return;
    }
    const auto [host, port] = tcp_address_of(*store, 0);
    const auto held = attack(host, port);
    const auto start = std::chrono::steady_clock::now();
    auto comm = join_tcp(*store, 1, 2);
    EXPECT_LT(std::chrono::steady_clock::now() - start, time_bound(std::chrono::seconds(3)))
        << "the strangers held up the mesh";
    expect_sum_works(*comm);
  });
}

}  // namespace kolo::testing
