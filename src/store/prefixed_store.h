// A view of a store in which every key lives under one prefix, so that several
// worlds of one job (init with a list of ranks) share the job's store without
// meeting each other's keys.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "store/store.h"

namespace kolo::store {

std::unique_ptr<StoreClient> with_key_prefix(std::unique_ptr<StoreClient> inner, std::string prefix);

}  // namespace kolo::store
