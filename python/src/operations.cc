// The collectives on torch tensors, and the Handle Python waits on.
//
// Every tensor reaches kolo as a view of its own memory: no copy on the way in or
// out. Inputs must be contiguous CPU tensors (the Python layer makes contiguous
// copies of the others where Horovod accepts them); outputs whose size only
// negotiation knows are kolo Buffers that become torch tensors owning them.
#include <ATen/ops/empty.h>

#include <utility>

#include "kolo/internal/blocking.h"
#include "binding.h"
#include "kolo/collectives.h"
#include "kolo/error.h"
#include "kolo/process_set.h"
#include "kolo/torch/collectives.h"
#include "kolo/torch/elastic.h"
#include "kolo/torch/internal/tensor_view.h"

namespace kolo::python {
namespace {

using Tensors = std::vector<at::Tensor>;

// Horovod's values of its op constants, which scripts may have stored.
enum HorovodOp { kAverage = 0, kSum = 1, kAdasum = 2, kMin = 3, kMax = 4, kProduct = 5 };

ReduceOp reduce_op(int op) {
  switch (op) {
    case kAverage: return ReduceOp::Average;
    case kSum: return ReduceOp::Sum;
    case kMin: return ReduceOp::Min;
    case kMax: return ReduceOp::Max;
    case kProduct: return ReduceOp::Product;
    case kAdasum:
      throw InvalidArgumentError("kolo does not implement Adasum; use op=Average or op=Sum");
    default: break;
  }
  throw InvalidArgumentError("unknown reduction op " + std::to_string(op) +
                             "; use Average, Sum, Min, Max or Product");
}

at::Tensor splits_tensor(const std::vector<std::int64_t>& splits) {
  at::Tensor t = at::empty({static_cast<std::int64_t>(splits.size())}, at::TensorOptions().dtype(at::kInt));
  auto* out = t.data_ptr<std::int32_t>();
  for (std::size_t i = 0; i < splits.size(); ++i) out[i] = static_cast<std::int32_t>(splits[i]);
  return t;
}

}  // namespace

// What an operation gives back once it is done.
enum class Result {
  Tensor,    // `result`, known from the start (allreduce, broadcast)
  Tensors,   // the kept tensors (grouped allreduce)
  Output,    // the Buffer kolo allocated (allgather, reducescatter)
  Alltoall,  // that Buffer and the received splits
  Nothing,   // barrier
  Joined,    // the last rank to join
};

// The Handle of Python's *_async functions: Horovod's opaque handle, which
// poll() and synchronize() take. It holds the tensors kolo uses until the
// operation is done, also when Python drops it first.
class PendingOperation {
 public:
  PendingOperation(Handle handle, Tensors tensors, Result kind, at::Tensor result = {})
      : handle_(std::move(handle)), tensors_(std::move(tensors)), kind_(kind), tensor_(std::move(result)) {}
  PendingOperation(const PendingOperation&) = delete;
  PendingOperation& operator=(const PendingOperation&) = delete;
  ~PendingOperation() { keep_until_done(std::move(handle_), std::move(tensors_)); }

  bool poll() const { return !handle_.valid() || handle_.poll(); }

  py::object wait() {
    if (result_) return *result_;
    wait_interruptibly(handle_);
    result_ = build();
    return *result_;
  }

  std::string name() const { return handle_.valid() ? handle_.name() : std::string(); }

 private:
  py::object build() {
    switch (kind_) {
      case Result::Tensor: return py::cast(tensor_);
      case Result::Tensors: return py::cast(tensors_);
      case Result::Output: return py::cast(torch::detail::from_buffer(handle_.take_output()));
      case Result::Alltoall: {
        at::Tensor splits = splits_tensor(handle_.received_splits());
        return py::make_tuple(torch::detail::from_buffer(handle_.take_output()), splits);
      }
      case Result::Nothing: return py::none();
      case Result::Joined: return py::cast(handle_.last_joined_rank());
    }
    return py::none();
  }

  Handle handle_;
  Tensors tensors_;
  Result kind_;
  at::Tensor tensor_;
  std::optional<py::object> result_;
};

namespace {

using Pending = std::unique_ptr<PendingOperation>;
using Name = std::optional<std::string>;

// Waits for a blocking call's operation; if Python interrupts the wait, the
// tensors stay alive with the operation.
void finish(const Handle& handle, Tensors tensors) {
  try {
    wait_interruptibly(handle);
  } catch (const py::error_already_set&) {
    keep_until_done(handle, std::move(tensors));
    throw;
  }
}

// Runs `start` (a detail::start_* call, which may run the engine's express step
// and so wait for peers) without the GIL.
template <class Start>
Handle started(Start&& start) {
  py::gil_scoped_release released;
  return start();
}

// An allreduce's or a reducescatter's (`what`) options.
AllreduceOptions reduce_options(const char* what, const Name& name, int op, double prescale, double postscale,
                                int set) {
  return AllreduceOptions{reduce_op(op), prescale, postscale, operation_name(what, name), ProcessSet{set}};
}

CollectiveOptions collective_options(const char* op, const Name& name, int set) {
  return CollectiveOptions{operation_name(op, name), ProcessSet{set}};
}

// The output of an out-of-place operation: a kolo Buffer, whose memory from
// 2 MiB up is reused from released outputs of the same size instead of being
// faulted in afresh by the kernel on every call.
at::Tensor new_output(const Tensor& like) {
  return torch::detail::from_buffer(Buffer::uninitialized(like.dtype, like.shape));
}

// Zeros of `like`'s dtype, `count` of them, in memory this host's other ranks
// can map: allreduces of views of it work in place on shared memory (a gradient
// bucket of DistributedOptimizer).
at::Tensor shareable_zeros(std::int64_t count, const at::Tensor& like) {
  if (count < 0) throw InvalidArgumentError("shareable_zeros needs a count of 0 or more, not " + std::to_string(count));
  return torch::detail::from_buffer(Buffer::shareable(torch::to_kolo_dtype(like.scalar_type()), Shape{count}));
}

at::Tensor allreduce(const at::Tensor& input, bool in_place, const Name& name, int op, double prescale,
                     double postscale, int set) {
  release_finished();
  const AllreduceOptions options = reduce_options("allreduce", name, op, prescale, postscale, set);
  const Tensor in = torch::view_of(input);
  at::Tensor output = in_place ? input : new_output(in);
  const Tensor out = in_place ? in : torch::view_of(output);
  Handle handle = started([&] { return detail::start_allreduce(in, out, options, Location::current()); });
  finish(handle, {input, output});
  return output;
}

Pending allreduce_async(const at::Tensor& input, bool in_place, const Name& name, int op, double prescale,
                        double postscale, int set) {
  release_finished();
  const AllreduceOptions options = reduce_options("allreduce", name, op, prescale, postscale, set);
  const Tensor in = torch::view_of(input);
  at::Tensor output = in_place ? input : new_output(in);
  Handle handle = in_place ? kolo::allreduce_async(in, options) : kolo::allreduce_async(in, torch::view_of(output), options);
  return std::make_unique<PendingOperation>(std::move(handle), Tensors{input, output}, Result::Tensor, output);
}

// In place: the Python layer passes copies for the out-of-place form.
Pending grouped_allreduce_async(const Tensors& tensors, const Name& name, int op, double prescale,
                                double postscale, int set) {
  release_finished();
  AllreduceOptions options{reduce_op(op), prescale, postscale, operation_name("grouped_allreduce", name),
                           ProcessSet{set}};
  std::vector<Tensor> views;
  views.reserve(tensors.size());
  for (const auto& t : tensors) views.push_back(torch::view_of(t));
  Handle handle = kolo::grouped_allreduce_async(views, options);
  return std::make_unique<PendingOperation>(std::move(handle), tensors, Result::Tensors);
}

at::Tensor allgather(const at::Tensor& input, const Name& name, int set) {
  release_finished();
  const CollectiveOptions options = collective_options("allgather", name, set);
  const Tensor in = torch::view_of(input);
  Handle handle = started([&] { return detail::start_allgather(in, options, Location::current()); });
  finish(handle, {input});
  return torch::detail::from_buffer(handle.take_output());
}

Pending allgather_async(const at::Tensor& input, const Name& name, int set) {
  release_finished();
  Handle handle = kolo::allgather_async(torch::view_of(input), collective_options("allgather", name, set));
  return std::make_unique<PendingOperation>(std::move(handle), Tensors{input}, Result::Output);
}

// In place, on `tensor`.
void broadcast(const at::Tensor& tensor, int root, const Name& name, int set) {
  release_finished();
  const CollectiveOptions options = collective_options("broadcast", name, set);
  const Tensor t = torch::view_of(tensor);
  Handle handle = started([&] { return detail::start_broadcast(t, root, options, Location::current()); });
  finish(handle, {tensor});
}

Pending broadcast_async(const at::Tensor& tensor, int root, const Name& name, int set) {
  release_finished();
  Handle handle = kolo::broadcast_async(torch::view_of(tensor), root, collective_options("broadcast", name, set));
  return std::make_unique<PendingOperation>(std::move(handle), Tensors{tensor}, Result::Tensor, tensor);
}

py::tuple alltoall(const at::Tensor& input, std::vector<std::int64_t> splits, const Name& name, int set) {
  release_finished();
  const CollectiveOptions options = collective_options("alltoall", name, set);
  const Tensor in = torch::view_of(input);
  Handle handle =
      started([&] { return detail::start_alltoall(in, std::move(splits), options, Location::current()); });
  finish(handle, {input});
  at::Tensor received = splits_tensor(handle.received_splits());
  return py::make_tuple(torch::detail::from_buffer(handle.take_output()), received);
}

Pending alltoall_async(const at::Tensor& input, std::vector<std::int64_t> splits, const Name& name, int set) {
  release_finished();
  Handle handle = kolo::alltoall_async(torch::view_of(input), std::move(splits), collective_options("alltoall", name, set));
  return std::make_unique<PendingOperation>(std::move(handle), Tensors{input}, Result::Alltoall);
}

at::Tensor reducescatter(const at::Tensor& input, int op, const Name& name, double prescale, double postscale,
                         int set) {
  release_finished();
  const AllreduceOptions options = reduce_options("reducescatter", name, op, prescale, postscale, set);
  const Tensor in = torch::view_of(input);
  Handle handle = started([&] { return detail::start_reducescatter(in, options, Location::current()); });
  finish(handle, {input});
  return torch::detail::from_buffer(handle.take_output());
}

Pending reducescatter_async(const at::Tensor& input, int op, const Name& name, double prescale, double postscale,
                            int set) {
  release_finished();
  const AllreduceOptions options = reduce_options("reducescatter", name, op, prescale, postscale, set);
  Handle handle = kolo::reducescatter_async(torch::view_of(input), options);
  return std::make_unique<PendingOperation>(std::move(handle), Tensors{input}, Result::Output);
}

void barrier(const Name& name, int set) {
  const CollectiveOptions options = collective_options("barrier", name, set);
  Handle handle = started([&] { return detail::start_barrier(options, Location::current()); });
  finish(handle, {});
}

int join() {
  Handle handle = started([] { return detail::start_join(); });
  finish(handle, {});
  return handle.last_joined_rank();
}

}  // namespace

void define_operations(py::module_& m) {
  py::class_<PendingOperation>(m, "Handle", "An operation in flight; poll() and synchronize() take it.")
      .def("poll", &PendingOperation::poll, "True once the operation has finished.")
      .def("wait", &PendingOperation::wait, "Waits and returns the operation's result.")
      .def_property_readonly("name", &PendingOperation::name);

  using py::arg;
  const auto none = py::none();
  const auto set = arg("process_set") = 0;
  m.def("_elastic_digest", [](const at::Tensor& tensor) {
    py::gil_scoped_release released;
    return kolo::torch::elastic::digest(tensor);
  }, arg("tensor"));
  m.def("shareable_zeros", &shareable_zeros, arg("count"), arg("like"));
  m.def("allreduce", &allreduce, arg("tensor"), arg("in_place"), arg("name") = none, arg("op"),
        arg("prescale"), arg("postscale"), set);
  m.def("allreduce_async", &allreduce_async, arg("tensor"), arg("in_place"), arg("name") = none, arg("op"),
        arg("prescale"), arg("postscale"), set);
  m.def("grouped_allreduce_async", &grouped_allreduce_async, arg("tensors"), arg("name") = none, arg("op"),
        arg("prescale"), arg("postscale"), set);
  m.def("allgather", &allgather, arg("tensor"), arg("name") = none, set);
  m.def("allgather_async", &allgather_async, arg("tensor"), arg("name") = none, set);
  m.def("broadcast", &broadcast, arg("tensor"), arg("root_rank"), arg("name") = none, set);
  m.def("broadcast_async", &broadcast_async, arg("tensor"), arg("root_rank"), arg("name") = none, set);
  m.def("alltoall", &alltoall, arg("tensor"), arg("splits"), arg("name") = none, set);
  m.def("alltoall_async", &alltoall_async, arg("tensor"), arg("splits"), arg("name") = none, set);
  m.def("reducescatter", &reducescatter, arg("tensor"), arg("op"), arg("name") = none, arg("prescale") = 1.0,
        arg("postscale") = 1.0, set);
  m.def("reducescatter_async", &reducescatter_async, arg("tensor"), arg("op"), arg("name") = none,
        arg("prescale") = 1.0, arg("postscale") = 1.0, set);
  m.def("barrier", &barrier, arg("name") = none, set);
  m.def("join", &join);
  m.def("operation_name", &operation_name, arg("op"), arg("name") = none,
        "The name an operation of kind `op` gets (Horovod's '<op>.<name>', or one from the caller's line).");
}

}  // namespace kolo::python
