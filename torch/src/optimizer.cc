// DistributedOptimizer: gradient hooks that start allreduces during backward.
//
// Life of one parameter's gradient in a step (k = backward_passes_per_step):
//  1. Each backward pass runs the parameter's AccumulateGrad node; our post hook
//     counts the pass. On the k-th pass the gradient is complete and the hook
//     starts its allreduce (compressed into a 16-bit copy, or in place).
//  2. synchronize() starts the allreduce of every parameter whose hook did not
//     reach k (a missing gradient travels as zeros), then waits for all of them
//     and writes the results into the gradients.
//  3. step() steps the wrapped optimizer on the result.
// With a compressor (compressor.h), a gradient it takes goes to it in step 1
// instead of an allreduce, and synchronize() has it finish them all before
// waiting for the allreduces of the rest.
//
// Where the job's transport is shared memory and gradients travel as they are,
// the first synchronize() lays every dtype's gradients out end to end in one
// shareable Buffer, in the order their allreduces started (the order backward
// produces them), and makes each gradient a view of its place. Backward then
// accumulates into the views, and a fused batch of consecutive gradients is one
// buffer that the ranks reduce in place of each other's memory instead of
// copying it through the transport's segment and back. A gradient that is no
// longer its view (assigned, or reset to undefined) moves back into it.
#include "kolo/torch/optimizer.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/strides.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

#include "kolo/collectives.h"
#include "kolo/error.h"
#include "kolo/runtime.h"
#include "kolo/torch/collectives.h"
#include "kolo/torch/internal/tensor_view.h"

namespace kolo::torch {

Compression parse_compression(const std::string& text) {
  if (text == "none") return Compression::None;
  if (text == "fp16") return Compression::FP16;
  if (text == "bf16") return Compression::BF16;
  throw InvalidArgumentError("unknown compression '" + text + "': expected none, fp16 or bf16");
}

const char* to_string(Compression compression) {
  switch (compression) {
    case Compression::None: return "none";
    case Compression::FP16: return "fp16";
    case Compression::BF16: return "bf16";
  }
  return "invalid";
}

namespace {

// Runs before AccumulateGrad adds a new gradient: the place to refuse one that
// would land in memory an allreduce is still working on.
class GradientArrivingHook final : public ::torch::autograd::FunctionPreHook {
 public:
  explicit GradientArrivingHook(std::function<void()> on_arriving) : on_arriving_(std::move(on_arriving)) {}

  ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& grads) override {
    on_arriving_();
    return grads;
  }

 private:
  std::function<void()> on_arriving_;
};

// Runs once AccumulateGrad has updated the parameter's gradient.
class GradientReadyHook final : public ::torch::autograd::FunctionPostHook {
 public:
  explicit GradientReadyHook(std::function<void()> on_ready) : on_ready_(std::move(on_ready)) {}

  ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& outputs,
                                               const ::torch::autograd::variable_list& /*inputs*/) override {
    on_ready_();
    return outputs;
  }

 private:
  std::function<void()> on_ready_;
};

void check_options(const DistributedOptimizerOptions& options) {
  if (options.backward_passes_per_step < 1) {
    throw InvalidArgumentError("DistributedOptimizer: backward_passes_per_step must be at least 1, got " +
                               std::to_string(options.backward_passes_per_step));
  }
  if (options.op != ReduceOp::Average && options.op != ReduceOp::Sum) {
    throw InvalidArgumentError(std::string("DistributedOptimizer: op must be average or sum, got ") +
                               kolo::to_string(options.op));
  }
  const double factor = options.gradient_predivide_factor;
  if (!std::isfinite(factor) || factor <= 0.0) {
    throw InvalidArgumentError("DistributedOptimizer: gradient_predivide_factor must be a positive number, got " +
                               std::to_string(factor));
  }
  if (factor != 1.0 && options.op != ReduceOp::Average) {
    throw InvalidArgumentError("DistributedOptimizer: gradient_predivide_factor applies to op average only");
  }
  if (options.compressor && options.compression != Compression::None) {
    throw InvalidArgumentError(std::string("DistributedOptimizer: a compressor and compression ") +
                               to_string(options.compression) + " do not combine; choose one");
  }
  if (options.compressor && factor != 1.0) {
    throw InvalidArgumentError("DistributedOptimizer: gradient_predivide_factor does not apply with a compressor");
  }
}

// The dtype gradients travel in, or nullopt to send them as they are.
std::optional<c10::ScalarType> wire_dtype(Compression compression, c10::ScalarType grad_dtype) {
  const bool wide_float = grad_dtype == c10::ScalarType::Float || grad_dtype == c10::ScalarType::Double;
  if (!wide_float) return std::nullopt;
  switch (compression) {
    case Compression::None: return std::nullopt;
    case Compression::FP16: return c10::ScalarType::Half;
    case Compression::BF16: return c10::ScalarType::BFloat16;
  }
  return std::nullopt;
}

}  // namespace

class DistributedOptimizer::State : public std::enable_shared_from_this<State> {
 public:
  State(std::shared_ptr<::torch::optim::Optimizer> optimizer, const NamedParameters& named_parameters,
        DistributedOptimizerOptions options)
      : optimizer_(std::move(optimizer)), options_(std::move(options)) {
    if (!optimizer_) throw InvalidArgumentError("DistributedOptimizer: the wrapped optimizer is null");
    check_options(options_);
    collect_parameters(named_parameters);
    if (options_.compressor) options_.compressor->bind({options_.op, global_process_set, options_.name_prefix});
    // Buckets pay off where the transport works in place of shareable memory;
    // compressed gradients travel in copies anyway.
    buckets_wanted_ = options_.compression == Compression::None && !options_.compressor && kolo::is_initialized() &&
                      kolo::size() > 1 && kolo::works_in_shared_buffers();
    if (buckets_wanted_) make_bucket_memory();
  }

  ~State() {
    for (Slot& slot : slots_) {
      if (slot.accumulator) remove_hooks(slot);
      // Never free gradient memory under a running allreduce.
      if (slot.in_flight && !slot.compressed) {
        try {
          slot.handle.wait();
        } catch (...) {
        }
      }
    }
  }

  // Separate from the constructor: the hooks refer to the state through weak_from_this().
  void install_hooks() {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      slot.accumulator = ::torch::autograd::impl::grad_accumulator(slot.param);
      if (!slot.accumulator) {
        throw InvalidArgumentError("DistributedOptimizer: parameter '" + slot.name +
                                   "' is not a leaf tensor that requires grad");
      }
      std::weak_ptr<State> weak = weak_from_this();
      auto arriving = std::make_unique<GradientArrivingHook>([weak, i] {
        if (auto state = weak.lock()) state->before_gradient(i);
      });
      slot.pre_hook = arriving.get();
      slot.accumulator->add_pre_hook(std::move(arriving));
      slot.post_hook_key = slot.accumulator->add_post_hook(std::make_unique<GradientReadyHook>([weak, i] {
        if (auto state = weak.lock()) state->after_gradient(i);
      }));
    }
  }

  void synchronize() {
    std::lock_guard lock(mutex_);
    std::exception_ptr error;
    try {
      if (!agreed()) {
        check_settings_agree(*options_.compressor);
        agreed_session_ = kolo::session_number();
      }
      for (Slot& slot : slots_) {
        if (!slot.in_flight) start(slot);
      }
    } catch (...) {
      error = std::current_exception();
    }
    if (options_.compressor) {
      try {
        if (error) {
          options_.compressor->abandon();
        } else {
          options_.compressor->finish();
        }
      } catch (...) {
        error = std::current_exception();
      }
    }
    // Wait for everything that started, even after an error: the engine may be
    // writing into those gradients.
    for (Slot& slot : slots_) {
      if (!slot.in_flight) continue;
      try {
        finish_allreduce(slot, /*write_result=*/error == nullptr);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    reset_passes();
    if (error) std::rethrow_exception(error);
    if (buckets_wanted_ && !laid_out_) lay_out_buckets();
    synchronized_ = true;
  }

  void step() {
    if (!synchronized_) synchronize();
    optimizer_->step();
    synchronized_ = false;
  }

  void zero_grad() {
    {
      std::lock_guard lock(mutex_);
      std::exception_ptr error;
      for (Slot& slot : slots_) {
        if (!slot.in_flight) continue;
        try {
          finish_allreduce(slot, /*write_result=*/false);
        } catch (...) {
          if (!error) error = std::current_exception();
        }
      }
      reset_passes();
      if (options_.compressor) options_.compressor->abandon();
      if (error) std::rethrow_exception(error);
    }
    optimizer_->zero_grad();
  }

  ::torch::optim::Optimizer& optimizer() { return *optimizer_; }
  const DistributedOptimizerOptions& options() const { return options_; }

  std::vector<std::string> operation_names() const {
    std::vector<std::string> names;
    for (const Slot& slot : slots_) names.push_back(slot.name);
    return names;
  }

 private:
  struct Slot {
    std::string name;  // the operation name
    std::string param_name;  // the parameter's own name: what a compressor knows it by, as in Python
    at::Tensor param;
    // Held so that every graph built on the parameter reuses this node (the
    // parameter itself keeps only a weak reference) and so runs our hook.
    std::shared_ptr<::torch::autograd::Node> accumulator;
    const ::torch::autograd::FunctionPreHook* pre_hook = nullptr;
    std::uintptr_t post_hook_key = 0;
    int passes_left = 1;
    bool in_flight = false;
    bool compressed = false;  // in flight in the compressor, which writes the result
    bool recorded = false;  // in start_order_
    Handle handle;
    at::Tensor grad;  // the gradient being reduced
    at::Tensor wire;  // the memory kolo reduces: grad itself or a contiguous/compressed copy
    at::Tensor place;  // the gradient's view of its bucket, once laid out
  };

  void collect_parameters(const NamedParameters& named_parameters) {
    std::unordered_map<const c10::TensorImpl*, std::string> names;
    for (const auto& [name, tensor] : named_parameters) names.emplace(tensor.unsafeGetTensorImpl(), name);

    std::set<const c10::TensorImpl*> seen;
    std::set<std::string> used_names;
    const auto& groups = optimizer_->param_groups();
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const auto& params = groups[g].params();
      for (std::size_t i = 0; i < params.size(); ++i) {
        const at::Tensor& param = params[i];
        if (!param.requires_grad() || !seen.insert(param.unsafeGetTensorImpl()).second) continue;
        auto found = names.find(param.unsafeGetTensorImpl());
        std::string name = found != names.end() ? found->second
                                                : "group" + std::to_string(g) + ".param" + std::to_string(i);
        if (!used_names.insert(name).second) {
          throw InvalidArgumentError("DistributedOptimizer: two parameters are both named '" + name + "'");
        }
        Slot slot;
        slot.name = options_.name_prefix + "." + name;
        slot.param_name = name;
        slot.param = param;
        slot.passes_left = options_.backward_passes_per_step;
        slots_.push_back(std::move(slot));
      }
    }
  }

  static void remove_hooks(Slot& slot) {
    slot.accumulator->del_post_hook(slot.post_hook_key);
    auto& pre_hooks = slot.accumulator->pre_hooks();
    for (auto it = pre_hooks.begin(); it != pre_hooks.end(); ++it) {
      if (it->get() == slot.pre_hook) {
        pre_hooks.erase(it);
        break;
      }
    }
  }

  // Throwing here aborts backward before the gradient memory is touched.
  void before_gradient(std::size_t index) {
    std::lock_guard lock(mutex_);
    const Slot& slot = slots_[index];
    if (slot.in_flight) {
      throw InvalidArgumentError("DistributedOptimizer: parameter '" + slot.name +
                                 "' got another gradient while its allreduce was in flight; call step() (or "
                                 "synchronize()) after every " +
                                 std::to_string(options_.backward_passes_per_step) +
                                 " backward pass(es), as set by backward_passes_per_step");
    }
  }

  void after_gradient(std::size_t index) {
    std::lock_guard lock(mutex_);
    synchronized_ = false;
    Slot& slot = slots_[index];
    // Until the ranks agreed on the compressor, synchronize() starts everything.
    if (--slot.passes_left == 0 && agreed()) start(slot);
  }

  // Whether this session's ranks agreed on the compressor's settings (or there is none).
  bool agreed() const { return !options_.compressor || agreed_session_ == kolo::session_number(); }

  void start(Slot& slot) {
    at::Tensor grad = slot.param.grad();
    if (!grad.defined()) {
      // No gradient on this rank: its share is zero, and the name still goes out so
      // that ranks which did compute one are not left waiting.
      grad = at::zeros_like(slot.param, at::MemoryFormat::Contiguous);
      slot.param.mutable_grad() = grad;
    }
    if (grad.layout() != c10::Layout::Strided) {
      throw InvalidArgumentError("DistributedOptimizer: parameter '" + slot.name +
                                 "' has a sparse gradient; kolo reduces dense gradients only");
    }
    if (options_.compressor && options_.compressor->takes(grad)) {
      options_.compressor->add(slot.param_name, grad);
      slot.compressed = true;
      slot.in_flight = true;
      return;
    }
    start_allreduce(slot, grad);
  }

  void start_allreduce(Slot& slot, at::Tensor grad) {
    if (buckets_wanted_) grad = into_place(slot, grad);
    at::Tensor wire;
    if (auto dtype = wire_dtype(options_.compression, grad.scalar_type())) {
      wire = grad.detach().to(*dtype, /*non_blocking=*/false, /*copy=*/false, at::MemoryFormat::Contiguous);
    } else {
      wire = grad.detach().contiguous();
    }

    AllreduceOptions allreduce;
    allreduce.op = options_.op;
    allreduce.name = slot.name;
    if (options_.op == ReduceOp::Average) {
      allreduce.prescale = 1.0 / options_.gradient_predivide_factor;
      allreduce.postscale = options_.gradient_predivide_factor;
    }
    slot.handle = kolo::allreduce_async(view_of(wire), allreduce);
    slot.grad = grad;
    slot.wire = wire;
    slot.in_flight = true;
  }

  void finish_allreduce(Slot& slot, bool write_result) {
    struct Clear {
      Slot& slot;
      ~Clear() {
        slot.in_flight = false;
        slot.compressed = false;
        slot.handle = Handle();
        slot.grad = at::Tensor();
        slot.wire = at::Tensor();
      }
    } clear{slot};
    if (slot.compressed) return;  // the compressor's finish() wrote the result
    slot.handle.wait();
    if (write_result && !slot.wire.is_same(slot.grad)) slot.grad.detach().copy_(slot.wire);
  }

  void reset_passes() {
    for (Slot& slot : slots_) slot.passes_left = options_.backward_passes_per_step;
  }

  // Before the buckets exist: notes the order gradients start in. After: the
  // gradient moved into its place, unless it is there already.
  at::Tensor into_place(Slot& slot, const at::Tensor& grad) {
    if (!laid_out_) {
      if (!slot.recorded) {
        slot.recorded = true;
        start_order_.push_back(&slot - slots_.data());
      }
      return grad;
    }
    if (!slot.place.defined() || grad.is_same(slot.place)) return grad;
    if (grad.data_ptr() == slot.place.data_ptr() && grad.sizes() == slot.place.sizes()) return grad;
    if (grad.sizes() != slot.place.sizes() || grad.scalar_type() != slot.place.scalar_type()) return grad;
    slot.place.copy_(grad.detach());
    slot.param.mutable_grad() = slot.place;
    return slot.place;
  }

  // Each dtype's bucket, sized for every parameter and written once, made with
  // the optimizer: a process touches fresh memory a page at a time, and a
  // worker that joins an elastic job builds its optimizer before the job takes
  // it in, so its first step (which the others wait for) does not pay for it.
  void make_bucket_memory() {
    for (const Slot& slot : slots_) bucket_memory_[slot.param.scalar_type()].count += slot.param.numel();
    for (auto& [dtype, memory] : bucket_memory_) {
      memory.tensor = detail::from_buffer(Buffer::shareable(to_kolo_dtype(dtype), Shape{memory.count}));
      memory.tensor.zero_();
    }
  }

  void lay_out_buckets() {
    laid_out_ = true;
    std::vector<c10::ScalarType> dtypes;
    for (std::size_t index : start_order_) {
      const auto dtype = slots_[index].param.scalar_type();
      if (std::find(dtypes.begin(), dtypes.end(), dtype) == dtypes.end()) dtypes.push_back(dtype);
    }
    for (const c10::ScalarType dtype : dtypes) {
      std::int64_t total = 0;
      for (std::size_t index : start_order_) {
        if (slots_[index].param.scalar_type() == dtype) total += slots_[index].param.numel();
      }
      const auto made = bucket_memory_.find(dtype);
      const at::Tensor bucket = made != bucket_memory_.end() && made->second.count >= total
                                    ? made->second.tensor
                                    : detail::from_buffer(Buffer::shareable(to_kolo_dtype(dtype), Shape{total}));
      std::int64_t offset = 0;
      for (std::size_t index : start_order_) {
        Slot& slot = slots_[index];
        if (slot.param.scalar_type() != dtype) continue;
        // A tensor over the bucket's storage, not an autograd view of the bucket:
        // libtorch's zero_grad() detaches gradients in place, which views refuse.
        slot.place = at::empty({0}, bucket.options())
                         .set_(bucket.storage(), offset, slot.param.sizes(),
                               c10::contiguous_strides(slot.param.sizes()));
        offset += slot.param.numel();
        const at::Tensor grad = slot.param.grad();
        if (grad.defined() && grad.layout() == c10::Layout::Strided) {
          slot.place.copy_(grad.detach());
          slot.param.mutable_grad() = slot.place;
        }
      }
    }
    bucket_memory_.clear();
  }

  std::mutex mutex_;
  std::shared_ptr<::torch::optim::Optimizer> optimizer_;
  DistributedOptimizerOptions options_;
  std::vector<Slot> slots_;
  // synchronize() ran and no gradient arrived since.
  bool synchronized_ = false;
  // Gradient buckets (see the top of this file): wanted, and laid out yet.
  bool buckets_wanted_ = false;
  bool laid_out_ = false;
  struct BucketMemory {
    std::int64_t count = 0;
    at::Tensor tensor;
  };
  std::map<c10::ScalarType, BucketMemory> bucket_memory_;  // until the buckets are laid out
  std::vector<std::size_t> start_order_;  // slots in the order their first allreduces started
  std::uint64_t agreed_session_ = 0;       // the session whose ranks agreed on the compressor
};

namespace {

NamedParameters to_named(const ::torch::OrderedDict<std::string, at::Tensor>& dict) {
  NamedParameters named;
  for (const auto& item : dict) named.emplace_back(item.key(), item.value());
  return named;
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<::torch::optim::Optimizer> optimizer,
                                           const NamedParameters& named_parameters,
                                           DistributedOptimizerOptions options)
    : state_(std::make_shared<State>(std::move(optimizer), named_parameters, std::move(options))) {
  state_->install_hooks();
}

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<::torch::optim::Optimizer> optimizer,
                                           const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                                           DistributedOptimizerOptions options)
    : DistributedOptimizer(std::move(optimizer), to_named(named_parameters), std::move(options)) {}

DistributedOptimizer::~DistributedOptimizer() = default;
DistributedOptimizer::DistributedOptimizer(DistributedOptimizer&&) noexcept = default;
DistributedOptimizer& DistributedOptimizer::operator=(DistributedOptimizer&&) noexcept = default;

DistributedOptimizer::State& DistributedOptimizer::state() const {
  if (!state_) throw InvalidArgumentError("DistributedOptimizer was moved from");
  return *state_;
}

void DistributedOptimizer::synchronize() { state().synchronize(); }
void DistributedOptimizer::step() { state().step(); }
void DistributedOptimizer::zero_grad() { state().zero_grad(); }
::torch::optim::Optimizer& DistributedOptimizer::optimizer() { return state().optimizer(); }
const DistributedOptimizerOptions& DistributedOptimizer::options() const { return state().options(); }
std::vector<std::string> DistributedOptimizer::operation_names() const { return state().operation_names(); }

}  // namespace kolo::torch
