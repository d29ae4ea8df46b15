// The blocking collectives up to their wait, for callers that wait their own way.
// Internal to kolo and its bindings (kolo.torch), not a stable API.
//
// Each runs what the blocking call in kolo/collectives.h runs (the engine's express
// path when it applies, an ordinary submission otherwise) and returns instead of
// waiting: an invalid Handle when the operation is already complete, else a Handle
// the caller must wait for. The Python binding waits in slices so that Python's
// signal handlers (Ctrl-C) run during a long wait; a plain wait would defer them
// until the call returned.
#pragma once

#include <cstdint>
#include <vector>

#include "kolo/collectives.h"
#include "kolo/handle.h"

namespace kolo::detail {

// The output of an allgather, alltoall or reducescatter is the Handle's, also
// when it is already complete (then it is valid and done).
Handle start_allreduce(const Tensor& input, const Tensor& output, const AllreduceOptions& options,
                       const Location& where);
Handle start_allgather(const Tensor& input, const CollectiveOptions& options, const Location& where);
Handle start_broadcast(const Tensor& tensor, int root, const CollectiveOptions& options, const Location& where);
Handle start_alltoall(const Tensor& input, std::vector<std::int64_t> splits, const CollectiveOptions& options,
                      const Location& where);
Handle start_reducescatter(const Tensor& input, const AllreduceOptions& options, const Location& where);
Handle start_barrier(const CollectiveOptions& options, const Location& where);
// The Handle's last_joined_rank() is join()'s result.
Handle start_join();

}  // namespace kolo::detail
