// COLLECTIVES IN PLACE OF THE RANKS' BUFFERS. When every rank's call says its
// buffers lie in shareable memory (its placement, comm/placement.h: views of
// shareable kolo::Buffers carry it, memory/shareable_memory.h), the ranks read
// and write each other's buffers where they are, instead of copying through
// the segment's slots: no copy in between, and two synchronizations per call
// (the publish step of shm_buffer_exchange.h, then a barrier, so that no rank
// returns while a peer still reads or writes its buffers) instead of counters
// per slot-sized chunk. Each returns false on every rank alike, having written
// nothing, when some rank's buffers cannot take this path (a buffer without
// its placement, even one in shareable memory, is plain memory); the caller
// then runs the slot algorithm.
//
// ALLREDUCE: rank r reduces its piece of the elements from every rank's input,
// in rank order through a 16 KiB block that stays in L1 (the slot path's kernel
// and order, so the same bits), and copies each block into the piece of every
// rank's output. Only rank r touches those elements of any buffer, so in place
// works: a block is read before it is overwritten. Each rank reads and writes
// 2x the buffer whatever the job size.
// ALLGATHERV: rank r copies its block into block r of every rank's output (only
// the outputs need be shareable, as the API's are where shared memory gets huge
// pages).
#pragma once

#include <cstddef>
#include <span>

#include "comm/placement.h"
#include "comm/regions.h"
#include "comm/result_scale.h"
#include "comm/shm/shm_buffer_exchange.h"
#include "comm/shm/shm_channel.h"
#include "kolo/types.h"

namespace kolo::comm::shm {

// `srcs`: scratch for one pointer per rank. `scale` is applied to each block
// of the sum where it is reduced.
bool allreduce_in_place(ShmChannel& channel, BufferExchange& exchange, const void* send, void* recv,
                        std::size_t count, DataType dtype, ReduceOp op, const ResultScale& scale,
                        Placement placement, std::span<const void*> srcs);

// A fused batch (regions.h) in place: every region's send buffer lies in one
// shareable memory and its recv buffer in one, at the same offsets on every
// rank (a gradient bucket laid out alike everywhere: gaps and order free). The
// ranks agree on that through the layout word of the exchange, a hash of the
// regions' offsets and sizes; false on every rank alike when it differs or some
// rank's regions are not so placed. The regions must not overlap one another,
// except a region exactly in place.
// `list`: the regions as one index space (the caller's, built once per call).
bool allreduce_regions_in_place(ShmChannel& channel, BufferExchange& exchange, std::span<const Region> regions,
                                const RegionList& list, DataType dtype, ReduceOp op, const ResultScale& scale,
                                std::span<const void*> srcs);

// `send` may be this rank's block of `recv` (in place) or apart from it; only
// the output's memory matters (`recv_memory`: the shareable memory it lies in).
bool allgather_in_place(ShmChannel& channel, BufferExchange& exchange, const std::byte* send, std::byte* recv,
                        std::span<const std::size_t> sizes, const ShareableMemory* recv_memory);

}  // namespace kolo::comm::shm
