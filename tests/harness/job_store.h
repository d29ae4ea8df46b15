// In a rank the harness started: a client of the job's store (KOLO_STORE_ADDR,
// KOLO_SECRET), as the TCP communicators need for their rendezvous.
#pragma once

#include <chrono>
#include <cstdlib>
#include <memory>

#include "store/store.h"

namespace kolo::testing {

inline std::unique_ptr<store::StoreClient> connect_job_store() {
  const auto address = store::parse_store_address(std::getenv("KOLO_STORE_ADDR"));
  return store::StoreClient::connect(address.host, address.port, std::getenv("KOLO_SECRET"), std::chrono::seconds(10));
}

}  // namespace kolo::testing
