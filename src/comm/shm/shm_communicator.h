// The shared-memory communicator: collectives between the processes of one host
// through one POSIX shared-memory segment, with no other service.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace kolo::comm {

// Joins the job `job_id` as `rank` of `size` (every rank of the job calls this
// with the same job id, size and secret). Rank 0 creates the segment, named by
// a hash keyed with `secret` (the job's, KOLO_SECRET: shm_segment.h; without one
// /dev/shm/kolo-<job_id>-shm); the others wait for it up to
// options.connect_timeout. The name is removed as soon as every rank has
// attached.
//
// Tunables (read by rank 0, which records them in the segment for the others):
//  KOLO_SHM_SLOT_BYTES   bytes per pipeline slot and rank (two slots each; 4K to 1G)
//  KOLO_SHM_SMALL_BYTES  allreduce up to this size takes the one-step path
//  KOLO_SHM_MAPPED_BYTES allreduce and allgatherv from this size whose buffers
//                        every rank places in shareable memory (views of
//                        shareable kolo::Buffers) work in place of the ranks'
//                        buffers (shm_in_place.h; 0: never)
//  KOLO_SHM_SINGLE_COPY  auto, always or never: whether a large broadcast's
//                        receivers copy straight out of the root's buffer, and
//                        a large plain-memory allgatherv's ranks out of each
//                        other's (shm_single_copy.h; auto: while the CPUs are
//                        busy; never: the calls skip the offers too). Within
//                        `auto`, a broadcast's root decides, an allgatherv
//                        takes it when all ranks let it.
//
// Errors: InvalidArgumentError (bad rank/size/job id), kolo::Error (a segment
// of the same name exists: refused, saying why, when the job did not create it),
// TimeoutError (a rank did not show up), PeerFailureError (a rank died during
// setup), MismatchError (ranks disagree on size).
std::unique_ptr<Communicator> make_shm_communicator(int rank, int size, const std::string& job_id,
                                                    const CommunicatorOptions& options,
                                                    const std::string& secret = {});

}  // namespace kolo::comm
