// kolo::elastic::digest and differ_from_rank_0 (kolo/elastic.h): which items of
// a state a sync must send.
#include <cstdint>
#include <vector>

#include "common/digest.h"
#include "kolo/collectives.h"
#include "kolo/elastic.h"
#include "kolo/types.h"

namespace kolo::elastic {

std::uint64_t digest(const void* data, std::size_t size) { return digest_bytes(data, size); }

std::vector<bool> differ_from_rank_0(const std::vector<std::uint64_t>& digests, const std::string& name) {
  // The count leads, so that the broadcast has an element even for no items,
  // and ranks passing different counts fail it alike (MismatchError).
  std::vector<std::int64_t> root(digests.size() + 1);
  root[0] = static_cast<std::int64_t>(digests.size());
  for (std::size_t i = 0; i < digests.size(); ++i) root[i + 1] = static_cast<std::int64_t>(digests[i]);
  const std::vector<std::int64_t> mine = root;
  CollectiveOptions broadcast_options;
  broadcast_options.name = name + ".digests";
  broadcast(make_tensor(root.data(), static_cast<std::int64_t>(root.size())), 0, broadcast_options);

  std::vector<std::uint8_t> differs(digests.size() + 1, 0);
  for (std::size_t i = 1; i < root.size(); ++i) differs[i] = root[i] != mine[i] ? 1 : 0;
  AllreduceOptions allreduce_options;
  allreduce_options.op = ReduceOp::Max;
  allreduce_options.name = name + ".differ";
  allreduce(make_tensor(differs.data(), static_cast<std::int64_t>(differs.size())), allreduce_options);
  return std::vector<bool>(differs.begin() + 1, differs.end());
}

}  // namespace kolo::elastic
