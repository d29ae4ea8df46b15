#include "engine/fusion.h"

namespace kolo::engine {
namespace {

bool fusible(const Response& r) { return r.op == OpType::Allreduce && r.error_kind == ErrorKind::None; }

bool same_kind(const Response& a, const Response& b) {
  return a.dtype == b.dtype && a.reduce_op == b.reduce_op && a.prescale == b.prescale && a.postscale == b.postscale;
}

}  // namespace

std::size_t allreduce_bytes(const Response& response) {
  std::size_t elements = 0;
  for (auto n : response.sizes) elements += static_cast<std::size_t>(n);
  return elements * element_size(response.dtype);
}

std::vector<std::vector<std::size_t>> plan_batches(const std::vector<Response>& responses, std::size_t threshold) {
  std::vector<std::vector<std::size_t>> batches;
  std::vector<bool> taken(responses.size(), false);
  for (std::size_t i = 0; i < responses.size(); ++i) {
    if (taken[i]) continue;
    taken[i] = true;
    std::vector<std::size_t> batch{i};
    if (fusible(responses[i])) {
      std::size_t bytes = allreduce_bytes(responses[i]);
      // Look ahead for more of the same kind: backward produces gradients of
      // several dtypes interleaved, and each kind should still fuse.
      for (std::size_t j = i + 1; j < responses.size() && bytes < threshold; ++j) {
        if (taken[j] || !fusible(responses[j]) || !same_kind(responses[i], responses[j])) continue;
        std::size_t more = allreduce_bytes(responses[j]);
        if (bytes + more > threshold) continue;
        bytes += more;
        taken[j] = true;
        batch.push_back(j);
      }
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

}  // namespace kolo::engine
