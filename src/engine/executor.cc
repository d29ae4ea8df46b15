#include "engine/executor.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "common/reduce.h"
#include "engine/reduction.h"
#include "kolo/error.h"

namespace kolo::engine {
namespace {

// The elements of one first-dimension row; a scalar (no dimension) is one row
// of one element.
std::int64_t row_elements(const Shape& shape) {
  if (shape.empty()) return 1;
  return num_elements(Shape(shape.begin() + 1, shape.end()));
}

// memcpy that takes empty tensors, whose data may be null (memcpy's may not,
// even for no bytes).
void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

Entry& entry_for(EntryMap& entries, const Response& response) {
  auto it = entries.find(response.names[0]);
  if (it == entries.end())
    throw InvalidArgumentError("internal: no local operation named '" + response.names[0] + "' for " +
                               to_string(response.op));
  return it->second;
}

// Whether any of the regions' buffers overlap (a region exactly in place counts
// once): the communicator reads inputs after writing earlier outputs, so such a
// batch must go through the fusion buffer. Two overlapping inputs would be
// harmless, but telling them apart is not worth it for so rare a batch.
bool buffers_overlap(const std::vector<comm::Region>& regions, std::size_t esize) {
  struct Span {
    std::uintptr_t begin, end;
  };
  std::vector<Span> spans;
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const auto bytes = regions[i].count * esize;
    if (bytes == 0) continue;
    const auto send = reinterpret_cast<std::uintptr_t>(regions[i].send);
    const auto recv = reinterpret_cast<std::uintptr_t>(regions[i].recv);
    spans.push_back({recv, recv + bytes});
    if (send != recv) spans.push_back({send, send + bytes});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (std::size_t k = 1; k < spans.size(); ++k) {
    if (spans[k].begin < spans[k - 1].end) return true;
  }
  return false;
}

}  // namespace

void Executor::run(const std::vector<const Response*>& batch, EntryMap& entries) {
  const Response& first = *batch.front();
  phases_ = Phases{};
  stamp(phases_.start);
  phases_.comm_start = phases_.start;
  switch (first.op) {
    case OpType::Allreduce: allreduce(batch, entries); break;
    case OpType::Allgather:
    case OpType::Broadcast:
    case OpType::Alltoall:
    case OpType::Reducescatter: run_single(first, entry_for(entries, first), nullptr); break;
    case OpType::Barrier: break;  // negotiation itself synchronized the ranks
    case OpType::Join:
      if (auto it = entries.find(first.names[0]); it != entries.end()) it->second.state->last_joined = first.last_joined;
      break;
  }
  stamp(phases_.end);
  if (phases_.comm_end < phases_.comm_start) phases_.comm_end = phases_.end;
}

std::size_t Executor::largest_input_bytes(const Response& response, int size) {
  const std::size_t row_bytes = static_cast<std::size_t>(row_elements(response.shape)) * element_size(response.dtype);
  std::int64_t rows = response.shape.empty() ? 1 : response.shape[0];
  if (response.op == OpType::Allgather) {
    rows = *std::max_element(response.rank_rows.begin(), response.rank_rows.end());
  } else if (response.op == OpType::Alltoall) {
    rows = 0;
    for (int r = 0; r < size; ++r) {
      rows = std::max(rows, std::accumulate(response.rank_rows.begin() + r * size,
                                            response.rank_rows.begin() + (r + 1) * size, std::int64_t{0}));
    }
  }
  return static_cast<std::size_t>(rows) * row_bytes;
}

void Executor::run_single(const Response& response, Entry& entry, const std::vector<const void*>* gathered) {
  switch (response.op) {
    case OpType::Allgather: allgather(response, entry, gathered); break;
    case OpType::Broadcast: broadcast(response, entry, gathered); break;
    case OpType::Alltoall: alltoall(response, entry, gathered); break;
    case OpType::Reducescatter: reducescatter(response, entry, gathered); break;
    default: throw std::logic_error("Executor::run_single: not a single-entry operation");
  }
}

std::byte* Executor::fusion_buffer(std::size_t bytes) {
  if (fusion_.size() < bytes) fusion_.resize(bytes);
  return fusion_.data();
}

void Executor::allreduce(const std::vector<const Response*>& batch, EntryMap& entries) {
  const Response& first = *batch.front();
  const DataType dtype = first.dtype;
  const std::size_t esize = element_size(dtype);
  const Reduction reduction(first, comm_.size());

  // Every name of the batch as a region of its local entry; a joined rank has
  // none, and contributes zeros and keeps nothing.
  std::vector<comm::Region>& regions = regions_;  // keeps its capacity from batch to batch
  regions.clear();
  bool joined = false;
  for (const Response* r : batch) {
    for (std::size_t i = 0; i < r->names.size(); ++i) {
      const auto count = static_cast<std::size_t>(r->sizes[i]);
      auto it = entries.find(r->names[i]);
      if (it == entries.end()) {
        regions.push_back({nullptr, nullptr, count});
        joined = true;
      } else {
        regions.push_back({it->second.input, it->second.output, count, it->second.placement});
      }
    }
  }

  // A single tensor is reduced in its output directly. Several go to a
  // communicator that takes a list of buffers as they are; to others, and when
  // they cannot be reduced where they lie, through the fusion buffer, so that
  // the communicator is called once.
  if (regions.size() == 1 && !joined) {
    reduce_direct(first, regions[0].send, regions[0].recv, regions[0].placement);
    return;
  }
  if (!joined && !reduction.prescales() && comm_.capabilities().reduces_regions && !buffers_overlap(regions, esize)) {
    stamp(phases_.comm_start);
    comm_.allreduce_regions(regions, dtype, reduction.wire_op(), reduction.result_scale());
    stamp(phases_.comm_end);
    return;
  }
  phases_.fused = true;
  comm::StagingSteps steps;
  steps.staged = [&] { stamp(phases_.comm_start); };
  if (reduction.prescales()) steps.prepare = [&](std::byte* data, std::size_t count) { reduction.prescale(data, count); };
  steps.reduced = [&] { stamp(phases_.comm_end); };
  comm::allreduce_staged(comm_, regions, dtype, reduction.wire_op(), reduction.result_scale(), fusion_, steps);
}

void Executor::reduce_direct(const Response& response, const void* input, void* output, comm::Placement placement) {
  const DataType dtype = response.dtype;
  const std::size_t esize = element_size(dtype);
  const Reduction reduction(response, comm_.size());
  const auto total = static_cast<std::size_t>(response.sizes[0]);
  auto* data = static_cast<std::byte*>(output);
  const auto* send = static_cast<const std::byte*>(input);
  // Out of place straight through the communicator (one pass less), unless the
  // input must be scaled first or the two buffers partly overlap.
  const bool copy_first = send != data && total > 0 &&
                          (reduction.prescales() || (send < data + total * esize && data < send + total * esize));
  if (copy_first) {
    std::memmove(data, send, total * esize);
    send = data;
    placement.send = placement.recv;  // the send buffer is the output, in its memory
  }
  stamp(phases_.comm_start);
  if (reduction.prescales()) reduction.prescale(data, total);  // send == data here
  comm_.allreduce(send, data, total, dtype, reduction.wire_op(), reduction.result_scale(), placement);
  stamp(phases_.comm_end);
}

// The inputs were prescaled where they were offered (Engine::offer).
void Executor::reduce_gathered(const Response& response, void* output, const std::vector<const void*>& inputs) {
  const Reduction reduction(response, comm_.size());
  const auto count = static_cast<std::size_t>(response.sizes[0]);
  reduce_many(output, inputs.data(), comm_.size(), count, response.dtype, reduction.wire_op());
  reduction.finish(output, count);
}

void Executor::allgather(const Response& response, Entry& entry, const std::vector<const void*>* gathered) {
  const int n = comm_.size();
  const std::size_t row_bytes = static_cast<std::size_t>(row_elements(response.shape)) * element_size(response.dtype);
  std::vector<std::size_t>& recv_bytes = recv_sizes_;
  recv_bytes.resize(n);
  std::int64_t rows = 0;
  for (int r = 0; r < n; ++r) {
    recv_bytes[r] = static_cast<std::size_t>(response.rank_rows[r]) * row_bytes;
    rows += response.rank_rows[r];
  }
  Shape shape = entry.request.shape;
  shape[0] = rows;
  Buffer out = Buffer::uninitialized(response.dtype, shape);
  if (gathered) {
    auto* at = static_cast<std::byte*>(out.data());
    for (int r = 0; r < n; ++r) {
      copy_bytes(at, (*gathered)[r], recv_bytes[r]);
      at += recv_bytes[r];
    }
  } else {
    // The output is a Buffer, shareable by policy: a transport may gather into it in place.
    comm_.allgatherv(entry.input, recv_bytes[comm_.rank()], out.data(), recv_bytes,
                     {entry.placement.send, out.memory()});
  }
  entry.state->output = std::move(out);
}

void Executor::broadcast(const Response& response, Entry& entry, const std::vector<const void*>* gathered) {
  const auto bytes = static_cast<std::size_t>(num_elements(entry.request.shape)) * element_size(entry.request.dtype);
  if (!gathered) {
    comm_.broadcast(entry.output, bytes, response.root);
  } else if (comm_.rank() != response.root) {
    copy_bytes(entry.output, (*gathered)[response.root], bytes);
  }
}

void Executor::alltoall(const Response& response, Entry& entry, const std::vector<const void*>* gathered) {
  const int n = comm_.size();
  const int me = comm_.rank();
  const std::size_t row_bytes = static_cast<std::size_t>(row_elements(response.shape)) * element_size(response.dtype);
  std::vector<std::size_t>& send_bytes = send_sizes_;
  std::vector<std::size_t>& recv_bytes = recv_sizes_;
  send_bytes.resize(n);
  recv_bytes.resize(n);
  std::vector<std::int64_t> received(n);  // handed to the caller with the output
  for (int r = 0; r < n; ++r) {
    send_bytes[r] = static_cast<std::size_t>(response.rank_rows[me * n + r]) * row_bytes;
    received[r] = response.rank_rows[r * n + me];
    recv_bytes[r] = static_cast<std::size_t>(received[r]) * row_bytes;
  }
  Shape shape = entry.request.shape;
  shape[0] = std::accumulate(received.begin(), received.end(), std::int64_t{0});
  Buffer out = Buffer::uninitialized(response.dtype, shape);
  if (gathered) {
    // Rank r's input holds its rows for ranks 0..n-1 in order; this rank's follow
    // those r sends the ranks before it.
    auto* at = static_cast<std::byte*>(out.data());
    for (int r = 0; r < n; ++r) {
      std::int64_t before = 0;
      for (int j = 0; j < me; ++j) before += response.rank_rows[r * n + j];
      copy_bytes(at, static_cast<const std::byte*>((*gathered)[r]) + static_cast<std::size_t>(before) * row_bytes,
                 recv_bytes[r]);
      at += recv_bytes[r];
    }
  } else {
    comm_.alltoallv(entry.input, send_bytes, out.data(), recv_bytes);
  }
  entry.state->output = std::move(out);
  entry.state->received_splits = std::move(received);
}

void Executor::reducescatter(const Response& response, Entry& entry, const std::vector<const void*>* gathered) {
  const int n = comm_.size();
  const std::int64_t rows = response.shape[0];
  const std::size_t row = static_cast<std::size_t>(row_elements(response.shape));
  std::vector<std::size_t>& counts = recv_sizes_;
  counts.resize(n);
  for (int r = 0; r < n; ++r) counts[r] = static_cast<std::size_t>(rows / n + (r < rows % n ? 1 : 0)) * row;
  Shape shape = response.shape;
  shape[0] = rows / n + (comm_.rank() < rows % n ? 1 : 0);
  Buffer out = Buffer::uninitialized(response.dtype, shape);
  const Reduction reduction(response, comm_.size());
  if (gathered) {
    // This rank's block of every rank's input, reduced in rank order (as the
    // communicator's owner does).
    const std::size_t esize = element_size(response.dtype);
    std::size_t offset = 0;
    for (int r = 0; r < comm_.rank(); ++r) offset += counts[r];
    std::vector<const void*>& blocks = blocks_;
    blocks.resize(n);
    for (int r = 0; r < n; ++r) blocks[r] = static_cast<const std::byte*>((*gathered)[r]) + offset * esize;
    reduce_many(out.data(), blocks.data(), n, counts[comm_.rank()], response.dtype, reduction.wire_op());
  } else {
    const void* input = entry.input;
    if (reduction.prescales()) {
      // Scaled in a copy: the caller's input is never written.
      const std::size_t total = static_cast<std::size_t>(rows) * row;
      const std::size_t bytes = total * element_size(response.dtype);
      std::byte* copy = fusion_buffer(bytes);
      copy_bytes(copy, entry.input, bytes);
      reduction.prescale(copy, total);
      input = copy;
    }
    comm_.reduce_scatter(input, out.data(), counts, response.dtype, reduction.wire_op());
  }
  reduction.finish(out.data(), counts[comm_.rank()]);
  entry.state->output = std::move(out);
}

}  // namespace kolo::engine
