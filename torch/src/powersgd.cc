// PowerSGD (see powersgd.h): factors computed as gradients arrive, sent after
// backward in a few fused chunks (FactorChunk), error feedback. The passes over
// each matrix are low_rank.h's loops.
#include "kolo/torch/powersgd.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "kolo/error.h"
#include "kolo/torch/collectives.h"
#include "low_rank.h"

namespace kolo::torch {

namespace {

constexpr const char* kQ = "q.";
const std::string kError = std::string(kLocalMemoryPrefix) + "error.";
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

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

// Calls f with a zero of the tensor's element type (float or double).
template <typename F>
void with_element_type(const at::Tensor& tensor, F&& f) {
  if (tensor.scalar_type() == at::kDouble) {
    f(double{});
  } else {
    f(float{});
  }
}

}  // namespace

// What one gradient's compression keeps between steps.
struct MatrixMemory {
  at::Tensor qt;  // warm start: the last reduced Qt (rank x cols)
  // Error feedback: the last M (rows x cols) and its approximation's factors;
  // the error is M - last_p last_qt, or M itself without them.
  at::Tensor m;
  at::Tensor last_p;
  at::Tensor last_qt;
};

// One compressed gradient of this step.
struct PendingMatrix {
  std::string name;
  at::Tensor grad;  // the caller's gradient
  at::Tensor work;  // grad, or its contiguous copy
  at::Tensor m;     // what is compressed: the memory's M, or work itself
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t rank = 0;
  at::Tensor p;   // rows x rank: M Qt^T, then its reduced, orthonormal version
  at::Tensor qt;  // rank x cols: P^T M, then its reduced version
};

// The factors of a step travel in a few chunks, each its own pair of
// allreduces: the passes over one chunk's matrices run while another chunk's
// factors are on the wire. A chunk holds matrices of one dtype, consecutive in
// name order, so every rank makes the same chunks.
struct FactorChunk {
  FactorChunk(c10::ScalarType dtype, std::size_t index) : dtype(dtype), index(index) {}
  c10::ScalarType dtype;
  std::size_t index;  // among its dtype's chunks
  std::vector<PendingMatrix*> entries;
  std::int64_t p_size = 0;  // elements of its matrices' P
  std::int64_t q_size = 0;  // and of their Qt
};

// At most this many chunks a dtype, each of at least kMinChunk factor
// elements: a chunk costs one more pair of allreduces to negotiate.
constexpr std::int64_t kMaxChunks = 4;
constexpr std::int64_t kMinChunk = 1 << 16;

std::vector<FactorChunk> chunk_factors(std::vector<PendingMatrix>& pending) {
  std::map<c10::ScalarType, std::vector<PendingMatrix*>> by_dtype;
  for (PendingMatrix& entry : pending) by_dtype[entry.work.scalar_type()].push_back(&entry);
  auto factor_size = [](const PendingMatrix& e) { return e.rank * (e.rows + e.cols); };
  std::vector<FactorChunk> chunks;
  for (auto& [dtype, entries] : by_dtype) {
    std::int64_t total = 0;
    for (PendingMatrix* entry : entries) total += factor_size(*entry);
    const std::int64_t count = std::clamp<std::int64_t>(total / kMinChunk, 1, kMaxChunks);
    std::int64_t done = 0;
    FactorChunk chunk(dtype, 0);
    for (PendingMatrix* entry : entries) {
      chunk.entries.push_back(entry);
      chunk.p_size += entry->p.numel();
      chunk.q_size += entry->rank * entry->cols;
      done += factor_size(*entry);
      // The chunk closes where the factors sent so far pass its share of the total.
      if (done * count >= total * static_cast<std::int64_t>(chunk.index + 1) && entry != entries.back()) {
        const std::size_t next = chunk.index + 1;
        chunks.push_back(std::move(chunk));
        chunk = FactorChunk(dtype, next);
      }
    }
    chunks.push_back(std::move(chunk));
  }
  return chunks;
}

struct PowerSGD::Impl {
  std::map<std::string, MatrixMemory> matrices;  // by gradient name
  std::vector<PendingMatrix> pending;
  std::set<std::string> pending_names;
  std::int64_t steps = 0;
  std::int64_t last_sent = 0;
  std::int64_t last_compressed = 0;
  std::int64_t last_allreduces = 0;
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
  std::tie(entry.rows, entry.cols) = matrix_shape(grad);
  entry.rank = std::min<std::int64_t>({options_.rank, entry.rows, entry.cols});
  const auto options = at::TensorOptions().dtype(grad.scalar_type());

  MatrixMemory& memory = impl_->matrices[name];
  at::Tensor& qt = memory.qt;
  const bool fits = qt.defined() && qt.size(0) == entry.rank && qt.size(1) == entry.cols &&
                    qt.scalar_type() == grad.scalar_type();
  if (!options_.warm_start || !fits) {
    // The same draw on every rank: the seed, the gradient's name, and (without
    // warm start) the step.
    const std::uint64_t draw = options_.warm_start ? 0 : static_cast<std::uint64_t>(impl_->steps);
    at::Generator generator =
        at::make_generator<at::CPUGeneratorImpl>(options_.seed ^ fnv1a(name) ^ (draw * 0x9e3779b97f4a7c15ull));
    qt = at::randn({entry.rank, entry.cols}, generator, options);
  }
  entry.m = entry.work;
  bool folds_last = false;
  if (options_.error_feedback) {
    if (!memory.m.defined() || memory.m.numel() != entry.work.numel() ||
        memory.m.scalar_type() != grad.scalar_type()) {
      memory.m = at::zeros({entry.rows, entry.cols}, options);
      memory.last_p = memory.last_qt = at::Tensor();
    }
    entry.m = memory.m;
    folds_last = memory.last_p.defined() && memory.last_p.size(0) == entry.rows &&
                 memory.last_qt.size(1) == entry.cols;
  }
  entry.p = at::empty({entry.rows, entry.rank}, options);
  with_element_type(grad, [&](auto zero) {
    using T = decltype(zero);
    detail::Approximation<T> last;
    if (folds_last) last = {memory.last_p.data_ptr<T>(), memory.last_qt.data_ptr<T>(), memory.last_p.size(1)};
    detail::fold_and_project<T>(entry.work.data_ptr<T>(), entry.m.data_ptr<T>(), last, qt.data_ptr<T>(),
                                entry.p.data_ptr<T>(), entry.rows, entry.cols, entry.rank);
  });
  // M holds the error now, and this gradient: the last factors are used up.
  memory.last_p = memory.last_qt = at::Tensor();
  impl_->pending.push_back(std::move(entry));
}

void PowerSGD::finish() {
  // On an exception the step is forgotten, as abandon() forgets it.
  struct Forget {
    PowerSGD& self;
    bool done = false;
    ~Forget() {
      if (!done) self.abandon();
    }
  } forget{*this};
  const CompressorBinding& bound = binding();
  auto& pending = impl_->pending;
  // One order on every rank, whatever order backward produced the gradients in.
  std::sort(pending.begin(), pending.end(),
            [](const PendingMatrix& a, const PendingMatrix& b) { return a.name < b.name; });
  std::vector<FactorChunk> chunks = chunk_factors(pending);

  auto launch = [&](FactorChunk& chunk, const char* what, ReduceOp op, at::Tensor flat) {
    AllreduceOptions options;
    options.op = op;
    options.process_set = bound.process_set;
    options.name = bound.name_prefix + ".powersgd." + what + "." + c10::toString(chunk.dtype) + "." +
                   std::to_string(chunk.index);
    return allreduce_async_(flat, options);
  };

  // P = M Qt^T, summed; it is made orthonormal after, so its scale does not
  // matter. Every chunk's P sets off at once.
  std::vector<TensorHandle> p_flights;
  for (FactorChunk& chunk : chunks) {
    at::Tensor flat = at::empty({chunk.p_size}, at::TensorOptions().dtype(chunk.dtype));
    std::int64_t offset = 0;
    for (PendingMatrix* entry : chunk.entries) {
      at::Tensor place = flat.narrow(0, offset, entry->p.numel());
      place.copy_(entry->p.view({-1}));
      entry->p = place.view(entry->p.sizes());
      offset += place.numel();
    }
    p_flights.push_back(launch(chunk, "P", ReduceOp::Sum, flat));
  }

  // As each chunk's P lands: orthonormal P, then Qt = P^T M, averaged (or
  // summed), sent while the next chunks' Qt are computed.
  std::vector<TensorHandle> q_flights;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    p_flights[c].wait();
    at::Tensor flat = at::empty({chunks[c].q_size}, at::TensorOptions().dtype(chunks[c].dtype));
    std::int64_t offset = 0;
    for (PendingMatrix* entry : chunks[c].entries) {
      entry->qt = flat.narrow(0, offset, entry->rank * entry->cols).view({entry->rank, entry->cols});
      offset += entry->qt.numel();
      with_element_type(entry->work, [&](auto zero) {
        using T = decltype(zero);
        detail::orthonormalize_columns<T>(entry->p.data_ptr<T>(), entry->rows, entry->rank);
        detail::project_back<T>(entry->m.data_ptr<T>(), entry->p.data_ptr<T>(), entry->qt.data_ptr<T>(),
                                entry->rows, entry->cols, entry->rank);
      });
    }
    q_flights.push_back(launch(chunks[c], "Q", bound.op, flat));
  }

  // As each chunk's Qt lands, its gradients become P Qt; what that misses is
  // the next step's error.
  std::int64_t sent = 0;
  std::int64_t compressed = 0;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    q_flights[c].wait();
    for (PendingMatrix* entry : chunks[c].entries) {
      with_element_type(entry->work, [&](auto zero) {
        using T = decltype(zero);
        detail::reconstruct<T>(entry->work.data_ptr<T>(), entry->p.data_ptr<T>(), entry->qt.data_ptr<T>(),
                               entry->rows, entry->cols, entry->rank);
      });
      if (!entry->work.is_same(entry->grad)) entry->grad.detach().copy_(entry->work);
      MatrixMemory& memory = impl_->matrices[entry->name];
      if (options_.error_feedback) {
        memory.last_p = entry->p.clone();
        memory.last_qt = entry->qt.clone();
      }
      if (options_.warm_start) memory.qt.copy_(entry->qt);
      sent += entry->p.numel() + entry->qt.numel();
      compressed += entry->work.numel();
    }
  }
  impl_->last_sent = sent;
  impl_->last_compressed = compressed;
  impl_->last_allreduces = static_cast<std::int64_t>(p_flights.size() + q_flights.size());
  ++impl_->steps;
  impl_->pending.clear();
  impl_->pending_names.clear();
  forget.done = true;
}

void PowerSGD::abandon() {
  // A gradient added but not reduced leaves the error feedback as it was
  // (to rounding): its M, the error plus the gradient, gives the gradient back.
  for (PendingMatrix& entry : impl_->pending) {
    if (!entry.m.is_same(entry.work)) entry.m.sub_(entry.work.view({entry.rows, entry.cols}));
  }
  impl_->pending.clear();
  impl_->pending_names.clear();
}

std::int64_t PowerSGD::steps() const { return impl_->steps; }
std::int64_t PowerSGD::last_sent_elements() const { return impl_->last_sent; }
std::int64_t PowerSGD::last_compressed_elements() const { return impl_->last_compressed; }
std::int64_t PowerSGD::last_allreduces() const { return impl_->last_allreduces; }

TensorMemory PowerSGD::memory() const {
  TensorMemory memory;
  memory.emplace_back(kSteps, at::scalar_tensor(impl_->steps, at::TensorOptions().dtype(at::kLong)));
  for (const auto& [name, matrix] : impl_->matrices) {
    if (matrix.qt.defined() && options_.warm_start) memory.emplace_back(kQ + name, matrix.qt);
  }
  for (const auto& [name, matrix] : impl_->matrices) {
    if (!matrix.m.defined()) continue;
    if (!matrix.last_p.defined()) {
      memory.emplace_back(kError + name, matrix.m);
      continue;
    }
    at::Tensor error = at::empty_like(matrix.m);
    with_element_type(error, [&](auto zero) {
      using T = decltype(zero);
      detail::residual<T>(matrix.m.data_ptr<T>(), matrix.last_p.data_ptr<T>(), matrix.last_qt.data_ptr<T>(),
                          error.data_ptr<T>(), matrix.m.size(0), matrix.m.size(1), matrix.last_p.size(1));
    });
    memory.emplace_back(kError + name, error);
  }
  return memory;
}

void PowerSGD::load_memory(const TensorMemory& memory) {
  Impl loaded;
  for (const auto& [name, tensor] : memory) {
    if (name == kSteps) {
      loaded.steps = tensor.item<std::int64_t>();
    } else if (starts_with(name, kQ)) {
      loaded.matrices[name.substr(std::string(kQ).size())].qt = tensor.clone();
    } else if (starts_with(name, kError)) {
      const at::Tensor error = tensor.contiguous();
      loaded.matrices[name.substr(kError.size())].m =
          error.dim() == 2 ? error.clone() : error.reshape({error.size(0), -1}).clone();
    } else {
      throw InvalidArgumentError("PowerSGD: unknown memory entry '" + name + "'");
    }
  }
  abandon();
  impl_->matrices = std::move(loaded.matrices);
  impl_->steps = loaded.steps;
}

}  // namespace kolo::torch
