// The public collectives: check the arguments this rank alone can judge, describe
// the operation as a Request, and hand it to the engine.
#include "kolo/collectives.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <utility>

#include "kolo/internal/blocking.h"
#include "kolo/internal/naming.h"
#include "api/runtime.h"
#include "common/tensor_bytes.h"
#include "engine/engine.h"
#include "engine/entry.h"
#include "kolo/error.h"

namespace kolo {
namespace {

using engine::Entry;
using engine::OpType;
using engine::Request;

void check_tensor(const Tensor& t, const char* role, const std::string& name) {
  if (!is_valid(t.dtype)) throw InvalidArgumentError(std::string(role) + " of '" + name + "' has an invalid dtype");
  detail::checked_nbytes(t.dtype, t.shape, [&] { return std::string(role) + " of '" + name + "'"; });
  if (t.data == nullptr && t.numel() > 0)
    throw InvalidArgumentError(std::string(role) + " of '" + name + "' has null data but " + std::to_string(t.numel()) +
                               " elements");
}

// Who waits for an operation. A blocking call (Caller) waits right away and so
// drives the engine's cycles itself (Engine::drive): waking the background
// thread would only add a context switch. An asynchronous one (Handle) may be
// waited for much later, so the background thread runs it.
enum class Waiter { Handle, Caller };

std::string name_for(const std::string& given, const char* op, const Location& where) {
  return given.empty() ? auto_name(op, where) : given;
}

Request describe(std::string name, OpType op, const Tensor& t) {
  Request r;
  r.name = std::move(name);
  r.op = op;
  r.dtype = t.dtype;
  r.shape = t.shape;
  return r;
}

// The state behind an operation's Handle. A blocking call's Handle is gone when
// the call returns, so the thread's next blocking call reuses the state (no
// allocation, no mutex to construct) once nothing else holds it: the engine
// drops its reference after completing the operation, and a background thread
// that completed it may still hold it for a moment, in which case this takes a
// new one.
std::shared_ptr<detail::OpState> new_state(const std::string& name, int parts, Waiter waiter) {
  if (waiter != Waiter::Caller) return std::make_shared<detail::OpState>(name, parts);
  thread_local std::shared_ptr<detail::OpState> reusable;
  if (reusable && reusable.use_count() == 1) {
    // Pairs with the release in the other holder's reference drop.
    std::atomic_thread_fence(std::memory_order_acquire);
    reusable->reset(name, parts);
  } else {
    reusable = std::make_shared<detail::OpState>(name, parts);
  }
  return reusable;
}

// The entries are moved from.
Handle submit(std::span<Entry> entries, const ProcessSet& set, Waiter waiter) {
  auto engine = runtime::engine(set);
  auto state = entries.front().state;
  state->engine = engine;
  engine->submit(entries, /*wake=*/waiter != Waiter::Caller);
  return Handle(state);
}

Handle submit(Request request, const void* input, void* output, comm::Placement placement, const ProcessSet& set,
              Waiter waiter = Waiter::Handle) {
  auto state = new_state(request.name, 1, waiter);
  Entry entry{std::move(request), input, output, std::move(state)};
  entry.placement = placement;
  return submit({&entry, 1}, set, waiter);
}

// A blocking allgather, broadcast, alltoall or reducescatter: the engine's express
// path when it applies (the operation cached, nothing else pending), else
// submitted as usual. The Handle is complete, or about to be waited on.
Handle run_blocking(Request request, const void* input, void* output, comm::Placement placement,
                    const ProcessSet& set) {
  auto engine = runtime::engine(set);
  auto state = new_state(request.name, 1, Waiter::Caller);
  Entry entry{std::move(request), input, output, state};
  entry.placement = placement;
  switch (engine->express(entry)) {
    case engine::Engine::Express::Done:
    case engine::Engine::Express::Pending: state->engine = engine; return Handle(std::move(state));
    case engine::Engine::Express::NotApplicable: break;
  }
  return submit({&entry, 1}, set, Waiter::Caller);
}

// The shareable memory of an operation's input and, where the caller gives it,
// output (the others' outputs are Buffers the executor allocates).
comm::Placement placement_of(const Tensor& input, const Tensor* output = nullptr) {
  return {input.memory, output ? output->memory : nullptr};
}

void check_reduction(const AllreduceOptions& o, const char* op, const std::string& name) {
  if (!is_valid(o.op)) throw InvalidArgumentError(std::string(op) + " of '" + name + "' has an invalid reduce op");
  // NaN is unequal even to itself: ranks would be told they disagree with themselves.
  for (auto [what, factor] : {std::pair{"prescale", o.prescale}, std::pair{"postscale", o.postscale}}) {
    if (!std::isfinite(factor))
      throw InvalidArgumentError(std::string(what) + " of " + op + " '" + name + "' must be a finite number, not " +
                                 std::to_string(factor));
  }
}

// A broadcast's root is a job rank (as in Horovod); a set's engine counts its
// members from 0. A rank outside the set travels so that the engine refuses it
// on every rank (engine/messages.h).
std::int32_t root_in_set(int root, const ProcessSet& set) {
  if (set.id == 0 || root < 0 || root >= engine::kRootOutsideSet) return root;
  const std::vector<int> ranks = process_set_ranks(set);
  const auto it = std::find(ranks.begin(), ranks.end(), root);
  if (it == ranks.end()) return engine::kRootOutsideSet + root;
  return static_cast<std::int32_t>(it - ranks.begin());
}

// The in-place form passes the same tensor twice: one check, one name ("tensor").
void check_allreduce(const Tensor& input, const Tensor& output, const AllreduceOptions& o, const std::string& name) {
  const bool in_place = &input == &output;
  check_tensor(input, in_place ? "tensor" : "input", name);
  if (!in_place) {
    check_tensor(output, "output", name);
    if (output.dtype != input.dtype || output.shape != input.shape)
      throw InvalidArgumentError("output of allreduce '" + name + "' must match the input: input " +
                                 to_string(input.dtype) + to_string(input.shape) + ", output " +
                                 to_string(output.dtype) + to_string(output.shape));
  }
  check_reduction(o, "allreduce", name);
}

Request allreduce_request(std::string name, const Tensor& t, const AllreduceOptions& o) {
  Request r = describe(std::move(name), OpType::Allreduce, t);
  r.reduce_op = o.op;
  r.prescale = o.prescale;
  r.postscale = o.postscale;
  return r;
}

}  // namespace

// A blocking allreduce: the engine's express path when it applies (one step, no
// queue, entry or handle), else an ordinary operation the caller waits for.
Handle detail::start_allreduce(const Tensor& input, const Tensor& output, const AllreduceOptions& options,
                               const Location& where) {
  std::string generated;  // the name when the user gave none; else options.name is used as it is
  const std::string& name = options.name.empty() ? (generated = auto_name("allreduce", where)) : options.name;
  check_allreduce(input, output, options, name);
  auto engine = runtime::engine(options.process_set);
  std::shared_ptr<detail::OpState> pending;
  const engine::AllreduceCall call{name,        input.data, output.data,      input.dtype,
                                   input.shape, options.op, options.prescale, options.postscale,
                                   placement_of(input, &output)};
  switch (engine->express(call, pending)) {
    case engine::Engine::Express::Done: return Handle();
    case engine::Engine::Express::Pending: pending->engine = engine; return Handle(std::move(pending));
    case engine::Engine::Express::NotApplicable: break;
  }
  return submit(call.request(), input.data, output.data, call.placement, options.process_set, Waiter::Caller);
}

namespace {

void run_allreduce(const Tensor& input, const Tensor& output, const AllreduceOptions& options, const Location& where) {
  if (Handle pending = detail::start_allreduce(input, output, options, where); pending.valid()) pending.wait();
}

}  // namespace

Handle allreduce_async(const Tensor& tensor, const AllreduceOptions& options, Location where) {
  return allreduce_async(tensor, tensor, options, where);
}

Handle allreduce_async(const Tensor& input, const Tensor& output, const AllreduceOptions& options, Location where) {
  auto name = name_for(options.name, "allreduce", where);
  check_allreduce(input, output, options, name);
  return submit(allreduce_request(std::move(name), input, options), input.data, output.data,
                placement_of(input, &output), options.process_set);
}

void allreduce(const Tensor& tensor, const AllreduceOptions& options, Location where) {
  run_allreduce(tensor, tensor, options, where);
}

void allreduce(const Tensor& input, const Tensor& output, const AllreduceOptions& options, Location where) {
  run_allreduce(input, output, options, where);
}

namespace {

Handle start_grouped_allreduce(std::span<const Tensor> tensors, const AllreduceOptions& options,
                               const Location& where, Waiter waiter) {
  auto group = name_for(options.name, "grouped_allreduce", where);
  if (tensors.empty()) throw InvalidArgumentError("grouped allreduce '" + group + "' has no tensors");
  check_reduction(options, "grouped allreduce", group);
  auto state = new_state(group, static_cast<int>(tensors.size()), waiter);
  std::vector<Entry> entries;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    auto name = group + "." + std::to_string(i);
    check_tensor(tensors[i], "tensor", name);
    Request r = allreduce_request(name, tensors[i], options);
    r.group = group;
    r.group_size = static_cast<std::int32_t>(tensors.size());
    entries.push_back(Entry{std::move(r), tensors[i].data, tensors[i].data, state});
    entries.back().placement = placement_of(tensors[i], &tensors[i]);
  }
  return submit(entries, options.process_set, waiter);
}

}  // namespace

Handle grouped_allreduce_async(std::span<const Tensor> tensors, const AllreduceOptions& options, Location where) {
  return start_grouped_allreduce(tensors, options, where, Waiter::Handle);
}

void grouped_allreduce(std::span<const Tensor> tensors, const AllreduceOptions& options, Location where) {
  start_grouped_allreduce(tensors, options, where, Waiter::Caller).wait();
}

namespace {

// The requests of the collectives below, checked; shared by the async and
// blocking forms.
Request allgather_request(const Tensor& input, const CollectiveOptions& options, const Location& where) {
  auto name = name_for(options.name, "allgather", where);
  check_tensor(input, "input", name);
  return describe(std::move(name), OpType::Allgather, input);
}

Request broadcast_request(const Tensor& tensor, int root, const CollectiveOptions& options, const Location& where) {
  auto name = name_for(options.name, "broadcast", where);
  check_tensor(tensor, "tensor", name);
  Request r = describe(std::move(name), OpType::Broadcast, tensor);
  r.root = root_in_set(root, options.process_set);
  return r;
}

Request alltoall_request(const Tensor& input, std::vector<std::int64_t> splits, const CollectiveOptions& options,
                         const Location& where) {
  auto name = name_for(options.name, "alltoall", where);
  check_tensor(input, "input", name);
  Request r = describe(std::move(name), OpType::Alltoall, input);
  r.splits = std::move(splits);
  return r;
}

Request reducescatter_request(const Tensor& input, const AllreduceOptions& options, const Location& where) {
  auto name = name_for(options.name, "reducescatter", where);
  check_tensor(input, "input", name);
  check_reduction(options, "reducescatter", name);
  Request r = describe(std::move(name), OpType::Reducescatter, input);
  r.reduce_op = options.op;
  r.prescale = options.prescale;
  r.postscale = options.postscale;
  return r;
}

AllreduceOptions reduction_options(ReduceOp op, const CollectiveOptions& options) {
  return {.op = op, .name = options.name, .process_set = options.process_set};
}

}  // namespace

Handle allgather_async(const Tensor& input, const CollectiveOptions& options, Location where) {
  return submit(allgather_request(input, options, where), input.data, nullptr, placement_of(input),
                options.process_set);
}

Handle detail::start_allgather(const Tensor& input, const CollectiveOptions& options, const Location& where) {
  return run_blocking(allgather_request(input, options, where), input.data, nullptr, placement_of(input),
                      options.process_set);
}

Buffer allgather(const Tensor& input, const CollectiveOptions& options, Location where) {
  return detail::start_allgather(input, options, where).take_output();
}

Handle broadcast_async(const Tensor& tensor, int root, const CollectiveOptions& options, Location where) {
  return submit(broadcast_request(tensor, root, options, where), tensor.data, tensor.data,
                placement_of(tensor, &tensor), options.process_set);
}

Handle detail::start_broadcast(const Tensor& tensor, int root, const CollectiveOptions& options,
                               const Location& where) {
  return run_blocking(broadcast_request(tensor, root, options, where), tensor.data, tensor.data,
                      placement_of(tensor, &tensor), options.process_set);
}

void broadcast(const Tensor& tensor, int root, const CollectiveOptions& options, Location where) {
  detail::start_broadcast(tensor, root, options, where).wait();
}

Handle alltoall_async(const Tensor& input, std::vector<std::int64_t> splits, const CollectiveOptions& options,
                      Location where) {
  return submit(alltoall_request(input, std::move(splits), options, where), input.data, nullptr,
                placement_of(input), options.process_set);
}

Handle detail::start_alltoall(const Tensor& input, std::vector<std::int64_t> splits, const CollectiveOptions& options,
                              const Location& where) {
  return run_blocking(alltoall_request(input, std::move(splits), options, where), input.data, nullptr,
                      placement_of(input), options.process_set);
}

Buffer alltoall(const Tensor& input, std::vector<std::int64_t> splits, const CollectiveOptions& options,
                Location where) {
  return detail::start_alltoall(input, std::move(splits), options, where).take_output();
}

Handle reducescatter_async(const Tensor& input, const AllreduceOptions& options, Location where) {
  return submit(reducescatter_request(input, options, where), input.data, nullptr, placement_of(input),
                options.process_set);
}

Handle reducescatter_async(const Tensor& input, ReduceOp op, const CollectiveOptions& options, Location where) {
  return reducescatter_async(input, reduction_options(op, options), where);
}

Handle detail::start_reducescatter(const Tensor& input, const AllreduceOptions& options, const Location& where) {
  return run_blocking(reducescatter_request(input, options, where), input.data, nullptr, placement_of(input),
                      options.process_set);
}

Buffer reducescatter(const Tensor& input, const AllreduceOptions& options, Location where) {
  return detail::start_reducescatter(input, options, where).take_output();
}

Buffer reducescatter(const Tensor& input, ReduceOp op, const CollectiveOptions& options, Location where) {
  return detail::start_reducescatter(input, reduction_options(op, options), where).take_output();
}

Handle detail::start_barrier(const CollectiveOptions& options, const Location& where) {
  Request r;
  r.name = name_for(options.name, "barrier", where);
  r.op = OpType::Barrier;
  return submit(std::move(r), nullptr, nullptr, {}, options.process_set, Waiter::Caller);
}

void barrier(const CollectiveOptions& options, Location where) { detail::start_barrier(options, where).wait(); }

Handle detail::start_join() {
  Request r;
  r.name = "kolo.join";
  r.op = OpType::Join;
  return submit(std::move(r), nullptr, nullptr, {}, global_process_set, Waiter::Caller);
}

int join() { return detail::start_join().last_joined_rank(); }

}  // namespace kolo
