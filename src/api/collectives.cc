// The public collectives: check the arguments this rank alone can judge, describe
// the operation as a Request, and hand it to the engine.
#include "kolo/collectives.h"

#include "api/naming.h"
#include "api/runtime.h"
#include "engine/entry.h"
#include "kolo/error.h"

namespace kolo {
namespace {

using engine::Entry;
using engine::OpType;
using engine::Request;

void check_tensor(const Tensor& t, const char* role, const std::string& name) {
  if (!is_valid(t.dtype)) throw InvalidArgumentError(std::string(role) + " of '" + name + "' has an invalid dtype");
  for (auto d : t.shape) {
    if (d < 0) throw InvalidArgumentError(std::string(role) + " of '" + name + "' has a negative dimension " + to_string(t.shape));
  }
  if (t.data == nullptr && t.numel() > 0)
    throw InvalidArgumentError(std::string(role) + " of '" + name + "' has null data but " + std::to_string(t.numel()) +
                               " elements");
}

// Set while a blocking call submits: it waits right away and so drives the
// engine's cycles itself (Engine::drive); waking the background thread would only
// add a context switch.
thread_local bool t_caller_waits = false;

struct CallerWaits {
  CallerWaits() { t_caller_waits = true; }
  ~CallerWaits() { t_caller_waits = false; }
};

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

// The entries are moved from.
Handle submit(std::span<Entry> entries) {
  auto engine = runtime::engine();
  auto state = entries.front().state;
  state->engine = engine;
  engine->submit(entries, !t_caller_waits);
  t_caller_waits = false;
  return Handle(state);
}

Handle submit(Request request, Tensor input, Tensor output) {
  auto state = std::make_shared<detail::OpState>(request.name);
  Entry entry{std::move(request), std::move(input), std::move(output), std::move(state)};
  return submit({&entry, 1});
}

Request allreduce_request(std::string name, const Tensor& t, const AllreduceOptions& o) {
  if (!is_valid(o.op)) throw InvalidArgumentError("allreduce of '" + name + "' has an invalid reduce op");
  Request r = describe(std::move(name), OpType::Allreduce, t);
  r.reduce_op = o.op;
  r.prescale = o.prescale;
  r.postscale = o.postscale;
  return r;
}

}  // namespace

Handle allreduce_async(Tensor tensor, const AllreduceOptions& options, Location where) {
  Tensor output = tensor;
  return allreduce_async(std::move(tensor), std::move(output), options, where);
}

Handle allreduce_async(Tensor input, Tensor output, const AllreduceOptions& options, Location where) {
  auto name = name_for(options.name, "allreduce", where);
  check_tensor(input, "input", name);
  check_tensor(output, "output", name);
  if (output.dtype != input.dtype || output.shape != input.shape)
    throw InvalidArgumentError("output of allreduce '" + name + "' must match the input: input " + to_string(input.dtype) +
                               to_string(input.shape) + ", output " + to_string(output.dtype) + to_string(output.shape));
  Request request = allreduce_request(std::move(name), input, options);
  return submit(std::move(request), std::move(input), std::move(output));
}

void allreduce(Tensor tensor, const AllreduceOptions& options, Location where) {
  CallerWaits waits;
  allreduce_async(std::move(tensor), options, where).wait();
}

void allreduce(Tensor input, Tensor output, const AllreduceOptions& options, Location where) {
  CallerWaits waits;
  allreduce_async(std::move(input), std::move(output), options, where).wait();
}

Handle grouped_allreduce_async(std::span<const Tensor> tensors, const AllreduceOptions& options, Location where) {
  auto group = name_for(options.name, "grouped_allreduce", where);
  if (tensors.empty()) throw InvalidArgumentError("grouped allreduce '" + group + "' has no tensors");
  auto state = std::make_shared<detail::OpState>(group, static_cast<int>(tensors.size()));
  std::vector<Entry> entries;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    auto name = group + "." + std::to_string(i);
    check_tensor(tensors[i], "tensor", name);
    Request r = allreduce_request(name, tensors[i], options);
    r.group = group;
    r.group_size = static_cast<std::int32_t>(tensors.size());
    entries.push_back(Entry{std::move(r), tensors[i], tensors[i], state});
  }
  return submit(entries);
}

void grouped_allreduce(std::span<const Tensor> tensors, const AllreduceOptions& options, Location where) {
  CallerWaits waits;
  grouped_allreduce_async(tensors, options, where).wait();
}

Handle allgather_async(Tensor input, const CollectiveOptions& options, Location where) {
  auto name = name_for(options.name, "allgather", where);
  check_tensor(input, "input", name);
  return submit(describe(std::move(name), OpType::Allgather, input), input, Tensor{});
}

Buffer allgather(Tensor input, const CollectiveOptions& options, Location where) {
  CallerWaits waits;
  return allgather_async(input, options, where).take_output();
}

Handle broadcast_async(Tensor tensor, int root, const CollectiveOptions& options, Location where) {
  auto name = name_for(options.name, "broadcast", where);
  check_tensor(tensor, "tensor", name);
  Request r = describe(name, OpType::Broadcast, tensor);
  r.root = root;
  return submit(std::move(r), tensor, tensor);
}

void broadcast(Tensor tensor, int root, const CollectiveOptions& options, Location where) {
  CallerWaits waits;
  broadcast_async(tensor, root, options, where).wait();
}

Handle alltoall_async(Tensor input, std::vector<std::int64_t> splits, const CollectiveOptions& options, Location where) {
  auto name = name_for(options.name, "alltoall", where);
  check_tensor(input, "input", name);
  Request r = describe(name, OpType::Alltoall, input);
  r.splits = std::move(splits);
  return submit(std::move(r), input, Tensor{});
}

Buffer alltoall(Tensor input, std::vector<std::int64_t> splits, const CollectiveOptions& options, Location where) {
  CallerWaits waits;
  return alltoall_async(input, std::move(splits), options, where).take_output();
}

Handle reducescatter_async(Tensor input, ReduceOp op, const CollectiveOptions& options, Location where) {
  auto name = name_for(options.name, "reducescatter", where);
  check_tensor(input, "input", name);
  if (!is_valid(op)) throw InvalidArgumentError("reducescatter of '" + name + "' has an invalid reduce op");
  Request r = describe(name, OpType::Reducescatter, input);
  r.reduce_op = op;
  return submit(std::move(r), input, Tensor{});
}

Buffer reducescatter(Tensor input, ReduceOp op, const CollectiveOptions& options, Location where) {
  CallerWaits waits;
  return reducescatter_async(input, op, options, where).take_output();
}

void barrier(const CollectiveOptions& options, Location where) {
  Request r;
  r.name = name_for(options.name, "barrier", where);
  r.op = OpType::Barrier;
  CallerWaits waits;
  submit(std::move(r), Tensor{}, Tensor{}).wait();
}

int join() {
  Request r;
  r.name = "kolo.join";
  r.op = OpType::Join;
  CallerWaits waits;
  return submit(std::move(r), Tensor{}, Tensor{}).last_joined_rank();
}

}  // namespace kolo
