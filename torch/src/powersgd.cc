// PowerSGD (see powersgd.h): factors computed as gradients arrive, two fused
// allreduces per step, error feedback.
#include "kolo/torch/powersgd.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/sub.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "kolo/error.h"
#include "kolo/torch/collectives.h"

namespace kolo::torch {

namespace {

constexpr const char* kQ = "q.";
constexpr const char* kError = "local.error.";
constexpr const char* kSteps = "steps";

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

// The matrix a gradient is seen as: its first dimension by the rest.
std::pair<std::int64_t, std::int64_t> matrix_shape(const at::Tensor& grad) {
  const std::int64_t rows = grad.size(0);
  return {rows, rows == 0 ? 0 : grad.numel() / rows};
}

bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

// Orthonormal columns, in place, for a batch of matrices of one shape (B x n x
// r): Gram-Schmidt, column by column over the whole batch at once. A column
// with nothing left (a zero gradient) stays zero.
void orthogonalize(const at::Tensor& batch) {
  const std::int64_t columns = batch.size(2);
  const double tiny = batch.scalar_type() == at::kDouble ? std::numeric_limits<double>::min()
                                                         : static_cast<double>(std::numeric_limits<float>::min());
  for (std::int64_t i = 0; i < columns; ++i) {
    at::Tensor column = batch.narrow(2, i, 1);  // B x n x 1
    column.div_(column.norm(2, {1}, /*keepdim=*/true).clamp_min_(tiny));
    if (i + 1 == columns) break;
    at::Tensor rest = batch.narrow(2, i + 1, columns - i - 1);  // B x n x k
    rest.sub_(at::bmm(column, at::bmm(column.transpose(1, 2), rest)));
  }
}

}  // namespace

// One compressed gradient of this step.
struct PendingMatrix {
  std::string name;
  at::Tensor grad;  // the caller's gradient
  at::Tensor work;  // grad, or its contiguous copy
  at::Tensor m;     // work as rows x cols
  at::Tensor p;     // rows x r
  std::int64_t rank = 0;
};

struct PowerSGD::Impl {
  std::map<std::string, at::Tensor> q;      // warm-start factors, by gradient name
  std::map<std::string, at::Tensor> error;  // error feedback, by gradient name
  std::vector<PendingMatrix> pending;
  std::set<std::string> pending_names;
  std::int64_t steps = 0;
  std::int64_t last_sent = 0;
  std::int64_t last_compressed = 0;
};

PowerSGD::PowerSGD(PowerSGDOptions options) : options_(options), impl_(std::make_unique<Impl>()) {
  if (options_.rank < 1) {
    throw InvalidArgumentError("PowerSGD: rank must be at least 1, got " + std::to_string(options_.rank));
  }
  if (options_.start_step < 0) {
    throw InvalidArgumentError("PowerSGD: start_step must be 0 or more, got " + std::to_string(options_.start_step));
  }
  if (options_.min_size < 0) {
    throw InvalidArgumentError("PowerSGD: min_size must be 0 or more, got " + std::to_string(options_.min_size));
  }
}

PowerSGD::~PowerSGD() = default;

std::string PowerSGD::settings() const {
  return "powersgd rank=" + std::to_string(options_.rank) + " start_step=" + std::to_string(options_.start_step) +
         " min_size=" + std::to_string(options_.min_size) + " warm_start=" + (options_.warm_start ? "1" : "0") +
         " error_feedback=" + (options_.error_feedback ? "1" : "0") + " seed=" + std::to_string(options_.seed);
}

bool PowerSGD::takes(const at::Tensor& grad) const {
  if (impl_->steps < options_.start_step) return false;
  if (!grad.defined() || grad.layout() != c10::Layout::Strided || !grad.device().is_cpu()) return false;
  if (grad.scalar_type() != at::kFloat && grad.scalar_type() != at::kDouble) return false;
  if (grad.dim() < 2 || grad.numel() < std::max<std::int64_t>(options_.min_size, 1)) return false;
  const auto [rows, cols] = matrix_shape(grad);
  const std::int64_t r = std::min<std::int64_t>({options_.rank, rows, cols});
  return r * (rows + cols) < rows * cols;  // the factors are smaller than the matrix
}

void PowerSGD::add(const std::string& name, const at::Tensor& grad) {
  if (!takes(grad)) {
    throw InvalidArgumentError("PowerSGD: gradient '" + name + "' is not one it compresses (see takes())");
  }
  if (!impl_->pending_names.insert(name).second) {
    throw InvalidArgumentError("PowerSGD: gradient '" + name + "' was added twice in one step");
  }
  PendingMatrix entry;
  entry.name = name;
  entry.grad = grad;
  entry.work = grad.is_contiguous() ? grad.detach() : grad.detach().contiguous();
  const auto [rows, cols] = matrix_shape(grad);
  entry.m = entry.work.view({rows, cols});
  entry.rank = std::min<std::int64_t>({options_.rank, rows, cols});

  if (options_.error_feedback) {
    auto found = impl_->error.find(name);
    if (found != impl_->error.end() && found->second.sizes() == entry.m.sizes() &&
        found->second.scalar_type() == entry.m.scalar_type()) {
      entry.m.add_(found->second);
    }
  }
  at::Tensor& q = impl_->q[name];
  const bool fits = q.defined() && q.size(0) == cols && q.size(1) == entry.rank && q.scalar_type() == grad.scalar_type();
  if (!options_.warm_start || !fits) {
    // The same draw on every rank: the seed, the gradient's name, and (without
    // warm start) the step.
    const std::uint64_t draw = options_.warm_start ? 0 : static_cast<std::uint64_t>(impl_->steps);
    at::Generator generator =
        at::make_generator<at::CPUGeneratorImpl>(options_.seed ^ fnv1a(name) ^ (draw * 0x9e3779b97f4a7c15ull));
    q = at::randn({cols, entry.rank}, generator, at::TensorOptions().dtype(grad.scalar_type()));
  }
  entry.p = at::mm(entry.m, q);
  impl_->pending.push_back(std::move(entry));
}

void PowerSGD::finish() {
  struct Clear {
    Impl& impl;
    ~Clear() {
      impl.pending.clear();
      impl.pending_names.clear();
    }
  } clear{*impl_};
  const CompressorBinding& bound = binding();
  auto& pending = impl_->pending;
  // One order on every rank, whatever order backward produced the gradients in.
  std::sort(pending.begin(), pending.end(),
            [](const PendingMatrix& a, const PendingMatrix& b) { return a.name < b.name; });

  // The factors of each dtype travel end to end in one buffer.
  std::map<c10::ScalarType, std::vector<PendingMatrix*>> by_dtype;
  for (PendingMatrix& entry : pending) by_dtype[entry.m.scalar_type()].push_back(&entry);
  auto reduce = [&](const char* what, ReduceOp op, auto size_of, auto fill) {
    std::vector<std::pair<at::Tensor, TensorHandle>> flights;
    for (auto& [dtype, entries] : by_dtype) {
      std::int64_t total = 0;
      for (PendingMatrix* entry : entries) total += size_of(*entry);
      at::Tensor flat = at::empty({total}, at::TensorOptions().dtype(dtype));
      std::int64_t offset = 0;
      for (PendingMatrix* entry : entries) {
        fill(*entry, flat.narrow(0, offset, size_of(*entry)));
        offset += size_of(*entry);
      }
      AllreduceOptions options;
      options.op = op;
      options.process_set = bound.process_set;
      options.name = bound.name_prefix + ".powersgd." + what + "." + c10::toString(dtype);
      flights.emplace_back(flat, allreduce_async_(flat, options));
    }
    for (auto& flight : flights) flight.second.wait();
  };

  // P = M Q, summed; it is made orthonormal after, so its scale does not matter.
  reduce("P", ReduceOp::Sum, [](const PendingMatrix& e) { return e.p.numel(); },
         [](PendingMatrix& e, const at::Tensor& place) {
           place.copy_(e.p.view({-1}));
           e.p = place.view(e.p.sizes());
         });

  // Orthonormal P, each shape's matrices as one batch.
  std::map<std::tuple<std::int64_t, std::int64_t, c10::ScalarType>, std::vector<PendingMatrix*>> by_shape;
  for (PendingMatrix& entry : pending) {
    by_shape[{entry.p.size(0), entry.p.size(1), entry.p.scalar_type()}].push_back(&entry);
  }
  for (auto& [shape, entries] : by_shape) {
    if (entries.size() == 1) {
      orthogonalize(entries.front()->p.unsqueeze(0));
      continue;
    }
    std::vector<at::Tensor> ps;
    for (PendingMatrix* entry : entries) ps.push_back(entry->p);
    at::Tensor batch = at::stack(ps);
    orthogonalize(batch);
    for (std::size_t i = 0; i < entries.size(); ++i) entries[i]->p.copy_(batch[static_cast<std::int64_t>(i)]);
  }

  // Q = M^T P, averaged (or summed).
  std::vector<at::Tensor> qs(pending.size());
  reduce("Q", bound.op, [](const PendingMatrix& e) { return e.m.size(1) * e.rank; },
         [&](PendingMatrix& e, const at::Tensor& place) {
           at::Tensor q = place.view({e.m.size(1), e.rank});
           at::mm_out(q, e.m.t(), e.p);
           qs[&e - pending.data()] = q;
         });

  std::int64_t sent = 0;
  std::int64_t compressed = 0;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    PendingMatrix& entry = pending[i];
    const at::Tensor approximation = at::mm(entry.p, qs[i].t());
    if (options_.error_feedback) {
      at::Tensor& error = impl_->error[entry.name];
      if (error.defined() && error.sizes() == entry.m.sizes() && error.scalar_type() == entry.m.scalar_type()) {
        at::sub_out(error, entry.m, approximation);
      } else {
        error = at::sub(entry.m, approximation);
      }
    }
    entry.m.copy_(approximation);
    if (!entry.work.is_same(entry.grad)) entry.grad.detach().copy_(entry.work);
    if (options_.warm_start) impl_->q[entry.name] = qs[i].clone();
    sent += entry.p.numel() + qs[i].numel();
    compressed += entry.m.numel();
  }
  impl_->last_sent = sent;
  impl_->last_compressed = compressed;
  ++impl_->steps;
}

void PowerSGD::abandon() {
  impl_->pending.clear();
  impl_->pending_names.clear();
}

std::int64_t PowerSGD::steps() const { return impl_->steps; }
std::int64_t PowerSGD::last_sent_elements() const { return impl_->last_sent; }
std::int64_t PowerSGD::last_compressed_elements() const { return impl_->last_compressed; }

TensorMemory PowerSGD::memory() const {
  TensorMemory memory;
  memory.emplace_back(kSteps, at::scalar_tensor(impl_->steps, at::TensorOptions().dtype(at::kLong)));
  for (const auto& [name, q] : impl_->q) memory.emplace_back(kQ + name, q);
  for (const auto& [name, error] : impl_->error) memory.emplace_back(kError + name, error);
  return memory;
}

void PowerSGD::load_memory(const TensorMemory& memory) {
  Impl loaded;
  for (const auto& [name, tensor] : memory) {
    if (name == kSteps) {
      loaded.steps = tensor.item<std::int64_t>();
    } else if (starts_with(name, kQ)) {
      loaded.q[name.substr(std::string(kQ).size())] = tensor.clone();
    } else if (starts_with(name, kError)) {
      loaded.error[name.substr(std::string(kError).size())] = tensor.clone();
    } else {
      throw InvalidArgumentError("PowerSGD: unknown memory entry '" + name + "'");
    }
  }
  abandon();
  impl_->q = std::move(loaded.q);
  impl_->error = std::move(loaded.error);
  impl_->steps = loaded.steps;
}

}  // namespace kolo::torch
