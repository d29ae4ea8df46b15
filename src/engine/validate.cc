// build_response: the coordinator's checks that every rank asked for the same
// operation. Each failed check becomes an error response that reaches every rank
// with the same message; the job goes on.
#include <optional>
#include <sstream>

#include "engine/coordinator.h"

namespace kolo::engine {
namespace {

struct Failure {
  ErrorKind kind;
  std::string message;
};

std::string shape_tail(const Shape& shape) {
  return to_string(Shape(shape.begin() + (shape.empty() ? 0 : 1), shape.end()));
}

// Finds the first rank whose request differs from `first` in `field`, and names
// both ranks and both values.
template <typename Get, typename Show>
std::optional<Failure> compare(const std::string& name, const std::vector<std::optional<Request>>& by_rank,
                               int first_rank, const char* what, Get get, Show show) {
  const Request& first = *by_rank[first_rank];
  for (std::size_t r = 0; r < by_rank.size(); ++r) {
    if (!by_rank[r] || get(*by_rank[r]) == get(first)) continue;
    std::ostringstream msg;
    msg << "Mismatched " << what << " for '" << name << "': rank " << first_rank << " submitted "
        << show(first) << ", rank " << r << " submitted " << show(*by_rank[r]) << ".";
    return Failure{ErrorKind::Mismatch, msg.str()};
  }
  return std::nullopt;
}

std::optional<Failure> invalid(const std::string& message) { return Failure{ErrorKind::InvalidArgument, message}; }

std::optional<Failure> check_splits(const std::string& name, const Request& r, int rank, int size) {
  if (r.shape.empty()) return invalid("alltoall of '" + name + "' needs at least one dimension; got a scalar.");
  if (r.splits.empty()) {
    if (r.shape[0] % size != 0)
      return invalid("alltoall of '" + name + "' on rank " + std::to_string(rank) + ": first dimension " +
                     std::to_string(r.shape[0]) + " is not divisible by " + std::to_string(size) +
                     " ranks; pass splits.");
    return std::nullopt;
  }
  if (static_cast<int>(r.splits.size()) != size)
    return invalid("alltoall of '" + name + "' on rank " + std::to_string(rank) + ": " +
                   std::to_string(r.splits.size()) + " splits given for " + std::to_string(size) + " ranks.");
  std::int64_t total = 0;
  for (auto s : r.splits) {
    if (s < 0) return invalid("alltoall of '" + name + "' on rank " + std::to_string(rank) + ": negative split.");
    if (__builtin_add_overflow(total, s, &total))
      return invalid("alltoall of '" + name + "' on rank " + std::to_string(rank) +
                     ": splits sum past what an int64 counts.");
  }
  if (total != r.shape[0])
    return invalid("alltoall of '" + name + "' on rank " + std::to_string(rank) + ": splits sum to " +
                   std::to_string(total) + " but the first dimension is " + std::to_string(r.shape[0]) + ".");
  return std::nullopt;
}

// Each rank checked its own tensor's size, rows included (detail::checked_nbytes:
// row_bytes below fits); what a rank receives, rows from every rank together,
// must fit as well: all of them for allgather, the rows each sends it for
// alltoall (whose splits are checked first).
std::optional<Failure> check_received_bytes(const std::string& name, const std::vector<std::optional<Request>>& by_rank,
                                            const Request& first) {
  const int size = static_cast<int>(by_rank.size());
  std::int64_t row_bytes = static_cast<std::int64_t>(element_size(first.dtype));
  for (std::size_t d = 1; d < first.shape.size(); ++d) row_bytes *= first.shape[d];
  auto rows_to = [&](const Request& sender, int receiver) {
    if (first.op == OpType::Allgather) return sender.shape[0];
    return sender.splits.empty() ? sender.shape[0] / size : sender.splits[receiver];
  };
  const int receivers = first.op == OpType::Allgather ? 1 : size;
  for (int receiver = 0; receiver < receivers; ++receiver) {
    std::int64_t rows = 0, bytes = 0;
    bool overflow = false;
    for (const auto& r : by_rank) overflow = overflow || (r && __builtin_add_overflow(rows, rows_to(*r, receiver), &rows));
    if (overflow || __builtin_mul_overflow(rows, row_bytes, &bytes))
      return invalid(std::string(to_string(first.op)) + " of '" + name +
                     "': a rank would receive more bytes than an int64 counts.");
  }
  return std::nullopt;
}

std::optional<Failure> validate(const std::string& name, const std::vector<std::optional<Request>>& by_rank,
                                int first_rank, bool any_joined) {
  const int size = static_cast<int>(by_rank.size());
  const Request& first = *by_rank[first_rank];
  auto show_op = [](const Request& r) { return std::string(to_string(r.op)); };
  auto show_dtype = [](const Request& r) { return std::string(to_string(r.dtype)); };
  auto show_shape = [](const Request& r) { return to_string(r.shape); };
  auto show_double = [](double v) { std::ostringstream s; s << v; return s.str(); };

  for (int r = 0; r < size; ++r) {
    if (by_rank[r] && by_rank[r]->racing_site)
      return invalid("'" + name + "' comes from a call site where rank " + std::to_string(r) +
                     " had operations from two threads in flight at once. Unnamed operations are numbered per "
                     "call site, in the order threads arrive, so the ranks would pair different tensors: give "
                     "each thread's operations names of their own (name=...).");
  }
  if (auto f = compare(name, by_rank, first_rank, "operations", [](const Request& r) { return r.op; }, show_op)) return f;
  if (any_joined && first.op != OpType::Allreduce)
    return invalid(std::string(to_string(first.op)) + " of '" + name +
                   "' is not supported while ranks have joined; only allreduce is.");
  if (first.op == OpType::Barrier) return std::nullopt;
  if (auto f = compare(name, by_rank, first_rank, "data types", [](const Request& r) { return r.dtype; }, show_dtype))
    return f;
  if (auto f = compare(name, by_rank, first_rank, "groups", [](const Request& r) { return r.group; },
                       [](const Request& r) { return r.group.empty() ? std::string("no group") : "group '" + r.group + "'"; }))
    return f;
  if (auto f = compare(name, by_rank, first_rank, "group sizes", [](const Request& r) { return r.group_size; },
                       [](const Request& r) { return std::to_string(r.group_size); }))
    return f;

  switch (first.op) {
    case OpType::Allreduce:
    case OpType::Broadcast:
    case OpType::Reducescatter:
      if (auto f = compare(name, by_rank, first_rank, "shapes", [](const Request& r) { return r.shape; }, show_shape))
        return f;
      break;
    case OpType::Allgather:
    case OpType::Alltoall: {
      for (int r = 0; r < size; ++r) {
        if (by_rank[r] && by_rank[r]->shape.empty())
          return invalid(std::string(to_string(first.op)) + " of '" + name +
                         "' needs at least one dimension; rank " + std::to_string(r) + " submitted a scalar.");
      }
      auto tail = [](const Request& r) { return Shape(r.shape.begin() + 1, r.shape.end()); };
      if (auto f = compare(name, by_rank, first_rank, "shapes (all but the first dimension must agree)", tail,
                           [&](const Request& r) { return shape_tail(r.shape) + " after the first dimension"; }))
        return f;
      if (first.op == OpType::Allgather) {
        if (auto f = check_received_bytes(name, by_rank, first)) return f;
      }
      break;
    }
    default: break;
  }

  if (first.op == OpType::Allreduce || first.op == OpType::Reducescatter) {
    if (auto f = compare(name, by_rank, first_rank, "reduce operations", [](const Request& r) { return r.reduce_op; },
                         [](const Request& r) { return std::string(to_string(r.reduce_op)); }))
      return f;
    if (auto f = compare(name, by_rank, first_rank, "prescale factors", [](const Request& r) { return r.prescale; },
                         [&](const Request& r) { return show_double(r.prescale); }))
      return f;
    if (auto f = compare(name, by_rank, first_rank, "postscale factors", [](const Request& r) { return r.postscale; },
                         [&](const Request& r) { return show_double(r.postscale); }))
      return f;
    if ((first.prescale != 1.0 || first.postscale != 1.0) && first.dtype == DataType::Bool)
      return invalid("prescale and postscale of '" + name + "' need a numeric tensor, not bool.");
    if (first.dtype == DataType::Bool && first.reduce_op == ReduceOp::Average)
      return invalid("average of '" + name + "' is not defined for bool tensors; use sum (logical or) or min.");
  }
  if (first.op == OpType::Reducescatter) {
    if (first.reduce_op != ReduceOp::Sum && first.reduce_op != ReduceOp::Average)
      return invalid("reducescatter of '" + name + "' supports sum and average, not " +
                     to_string(first.reduce_op) + ".");
    if (first.shape.empty())
      return invalid("reducescatter of '" + name + "' needs at least one dimension; got a scalar.");
  }
  if (first.op == OpType::Broadcast) {
    if (auto f = compare(name, by_rank, first_rank, "root ranks", [](const Request& r) { return r.root; },
                         [](const Request& r) { return std::to_string(r.root); }))
      return f;
    if (first.root >= kRootOutsideSet)
      return invalid("Invalid root rank " + std::to_string(first.root - kRootOutsideSet) + " for broadcast of '" +
                     name + "': the rank is not a member of the process set.");
    if (first.root < 0 || first.root >= size)
      return invalid("Invalid root rank " + std::to_string(first.root) + " for broadcast of '" + name +
                     "': the job has " + std::to_string(size) + " ranks.");
  }
  if (first.op == OpType::Alltoall) {
    for (int r = 0; r < size; ++r) {
      if (!by_rank[r]) continue;
      if (auto f = check_splits(name, *by_rank[r], r, size)) return f;
    }
    if (auto f = check_received_bytes(name, by_rank, first)) return f;
  }
  return std::nullopt;
}

}  // namespace

Response build_response(const std::string& name, const std::vector<std::optional<Request>>& by_rank,
                        bool any_joined) {
  const int size = static_cast<int>(by_rank.size());
  int first_rank = 0;
  while (!by_rank[first_rank]) ++first_rank;
  const Request& first = *by_rank[first_rank];

  Response response;
  response.op = first.op;
  response.names = {name};
  if (auto failure = validate(name, by_rank, first_rank, any_joined)) {
    response.error_kind = failure->kind;
    response.error = failure->message;
    return response;
  }
  response.dtype = first.dtype;
  response.reduce_op = first.reduce_op;
  response.prescale = first.prescale;
  response.postscale = first.postscale;
  response.root = first.root;
  response.shape = first.shape;
  if (first.op == OpType::Allreduce) response.sizes = {num_elements(first.shape)};
  if (first.op == OpType::Allgather) {
    for (int r = 0; r < size; ++r) response.rank_rows.push_back(by_rank[r] ? by_rank[r]->shape[0] : 0);
  }
  if (first.op == OpType::Alltoall) {
    for (int r = 0; r < size; ++r) {
      const Request& req = *by_rank[r];
      for (int d = 0; d < size; ++d)
        response.rank_rows.push_back(req.splits.empty() ? req.shape[0] / size : req.splits[d]);
    }
  }
  return response;
}

}  // namespace kolo::engine
