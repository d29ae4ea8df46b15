// TorchState: save, restore and sync of a module, its optimizer, named values
// and ElasticSamplers, for kolo::elastic::run.
#include <c10/util/Exception.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstring>
#include <map>
#include <sstream>
#include <utility>

#include "optimizer_bytes.h"
#include "kolo/collectives.h"
#include "kolo/elastic.h"
#include "kolo/error.h"
#include "kolo/runtime.h"
#include "kolo/torch/broadcast.h"
#include "kolo/torch/elastic.h"

namespace kolo::torch::elastic {
namespace {

// Parameters, then buffers, in the module's order.
std::vector<at::Tensor> module_tensors(const ::torch::nn::Module& module) {
  std::vector<at::Tensor> tensors = module.parameters();
  for (const at::Tensor& buffer : module.buffers()) tensors.push_back(buffer);
  return tensors;
}


// Values and sampler progress travel in one buffer of fixed-width fields, so
// that doubles arrive bitwise and a rank built differently is told how.
class Writer {
 public:
  void u64(std::uint64_t value) { raw(&value, sizeof value); }
  void f64(double value) { raw(&value, sizeof value); }
  void text(const std::string& value) {
    u64(value.size());
    raw(value.data(), value.size());
  }
  void raw(const void* data, std::size_t size) { bytes_.append(static_cast<const char*>(data), size); }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  std::uint64_t u64() {
    std::uint64_t value;
    raw(&value, sizeof value);
    return value;
  }
  double f64() {
    double value;
    raw(&value, sizeof value);
    return value;
  }
  std::string text() {
    const std::uint64_t size = u64();
    std::string value(take(size), size);
    return value;
  }
  void raw(void* out, std::size_t size) { std::memcpy(out, take(size), size); }

 private:
  const char* take(std::uint64_t size) {
    if (size > bytes_.size() - position_) throw MismatchError("TorchState::sync: rank 0's state is cut short");
    const char* at = bytes_.data() + position_;
    position_ += size;
    return at;
  }
  const std::string& bytes_;
  std::size_t position_ = 0;
};

struct SavedSampler {
  std::uint64_t epoch = 0;
  std::vector<std::uint8_t> processed;
};

}  // namespace

class TorchState::Impl {
 public:
  std::shared_ptr<::torch::nn::Module> module;
  std::shared_ptr<::torch::optim::Optimizer> optimizer;
  // std::map: the references add_int() hands out stay valid.
  std::map<std::string, std::int64_t> ints;
  std::map<std::string, double> doubles;
  std::vector<std::shared_ptr<ElasticSampler>> samplers;
  std::vector<std::shared_ptr<GradientCompressor>> compressors;

  // The last save.
  std::vector<at::Tensor> saved_tensors;  // on the CPU; undefined where the module's is
  std::string saved_optimizer;
  std::map<std::string, std::int64_t> saved_ints;
  std::map<std::string, double> saved_doubles;
  std::vector<SavedSampler> saved_samplers;
  std::vector<TensorMemory> saved_memories;  // copies of the compressors' memory()

  void check_new_name(const std::string& name) const {
    if (name.empty()) throw InvalidArgumentError("TorchState: a value needs a name");
    if (ints.count(name) || doubles.count(name)) {
      throw InvalidArgumentError("TorchState: a value named '" + name + "' exists already");
    }
  }

  void keep() {
    saved_tensors.clear();
    for (const at::Tensor& tensor : module_tensors(*module)) {
      saved_tensors.push_back(tensor.defined() ? tensor.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true)
                                               : at::Tensor());
    }
    saved_optimizer = save_optimizer(*optimizer);
    saved_ints = ints;
    saved_doubles = doubles;
    saved_samplers.clear();
    for (const auto& sampler : samplers) saved_samplers.push_back({sampler->epoch(), sampler->processed()});
    saved_memories.clear();
    for (const auto& compressor : compressors) saved_memories.push_back(copy_of(compressor->memory()));
  }

  static TensorMemory copy_of(const TensorMemory& memory) {
    TensorMemory copy;
    for (const auto& [name, tensor] : memory) copy.emplace_back(name, tensor.clone());
    return copy;
  }

  // Rank 0's step counts and factors; each rank's error feedback
  // (kLocalMemoryPrefix) stays its own.
  void sync_compressors() {
    const bool root = kolo::rank() == 0;
    for (std::size_t i = 0; i < compressors.size(); ++i) {
      TensorMemory mine = compressors[i]->memory();
      c10::Dict<std::string, at::Tensor> shared;
      if (root) {
        for (const auto& [name, tensor] : mine) {
          if (name.rfind(kLocalMemoryPrefix, 0) != 0) shared.insert(name, tensor);
        }
      }
      const c10::IValue received =
          broadcast_object(shared, 0, "kolo.elastic.compressor." + std::to_string(i));
      if (root) continue;
      TensorMemory merged;
      for (const auto& [name, tensor] : mine) {
        if (name.rfind(kLocalMemoryPrefix, 0) == 0) merged.emplace_back(name, tensor);
      }
      for (const auto& entry : received.toGenericDict()) {
        merged.emplace_back(entry.key().toStringRef(), entry.value().toTensor());
      }
      compressors[i]->load_memory(merged);
    }
  }

  // Every rank's progress in every rank's samplers: one allreduce (max) of
  // their masks, back to back.
  void merge_sampler_progress() {
    std::vector<std::uint8_t> masks;
    for (const auto& sampler : samplers) {
      masks.insert(masks.end(), sampler->processed().begin(), sampler->processed().end());
    }
    if (masks.empty()) return;
    AllreduceOptions options;
    options.op = ReduceOp::Max;
    options.name = "kolo.elastic.samplers.processed";
    kolo::allreduce(make_tensor(masks.data(), static_cast<std::int64_t>(masks.size())), options);
    std::size_t offset = 0;
    for (const auto& sampler : samplers) {
      const std::size_t size = sampler->dataset_size();
      const auto begin = masks.begin() + static_cast<std::ptrdiff_t>(offset);
      sampler->record_processed(std::vector<std::uint8_t>(begin, begin + static_cast<std::ptrdiff_t>(size)));
      offset += size;
    }
  }

  void restore_module() {
    const std::vector<at::Tensor> tensors = module_tensors(*module);
    if (tensors.size() != saved_tensors.size()) {
      throw InvalidArgumentError("TorchState::restore: the module has " + std::to_string(tensors.size()) +
                                 " parameters and buffers, the save " + std::to_string(saved_tensors.size()));
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (!tensors[i].defined() && !saved_tensors[i].defined()) continue;
      if (!tensors[i].defined() || !saved_tensors[i].defined() || tensors[i].sizes() != saved_tensors[i].sizes() ||
          tensors[i].scalar_type() != saved_tensors[i].scalar_type()) {
        throw InvalidArgumentError("TorchState::restore: the module's tensor " + std::to_string(i) +
                                   " changed shape or type since the save");
      }
      // In place, outside autograd: the optimizer refers to these tensors.
      tensors[i].detach().copy_(saved_tensors[i]);
    }
  }

  // Rank 0's parameters and buffers, sent only where some rank's differ: after
  // a failure the survivors restored the same commit, and only joiners (or a
  // rank a commit behind) receive anything.
  void sync_module() {
    NamedParameters named;
    for (const auto& item : module->named_parameters()) named.emplace_back(item.key(), item.value());
    for (const auto& item : module->named_buffers()) named.emplace_back("buffer." + item.key(), item.value());
    std::vector<std::uint64_t> digests;
    digests.reserve(named.size());
    for (const auto& [name, tensor] : named) digests.push_back(digest(tensor));
    const std::vector<bool> differ = kolo::elastic::differ_from_rank_0(digests, "kolo.elastic.module_digests");
    NamedParameters different;
    for (std::size_t i = 0; i < named.size(); ++i) {
      if (differ[i]) different.push_back(named[i]);
    }
    broadcast_parameters(different, 0, "kolo.elastic.module");
  }

  // Rank 0's optimizer state and options, sent only when some rank's differ.
  void sync_optimizer() {
    const std::string mine = save_optimizer(*optimizer);
    const std::uint64_t digest = kolo::elastic::digest(mine.data(), mine.size());
    if (kolo::elastic::differ_from_rank_0({digest}, "kolo.elastic.optimizer_digest")[0]) {
      broadcast_saved_optimizer(*optimizer, mine, 0, "kolo.elastic.optimizer");
    }
  }

  std::string encode_values_and_samplers() const {
    Writer out;
    out.u64(ints.size());
    for (const auto& [name, value] : ints) {
      out.text(name);
      out.u64(static_cast<std::uint64_t>(value));
    }
    out.u64(doubles.size());
    for (const auto& [name, value] : doubles) {
      out.text(name);
      out.f64(value);
    }
    out.u64(samplers.size());
    for (const auto& sampler : samplers) {
      out.u64(sampler->dataset_size());
      out.u64(sampler->epoch());
      out.raw(sampler->processed().data(), sampler->processed().size());
    }
    return out.bytes();
  }

  // Takes rank 0's values and sampler progress, or throws MismatchError, changing
  // nothing, when rank 0's state is built unlike this rank's.
  void decode_values_and_samplers(const std::string& bytes) {
    Reader in(bytes);
    std::map<std::string, std::int64_t> root_ints;
    for (std::uint64_t n = in.u64(); n > 0; --n) {
      std::string name = in.text();
      root_ints[name] = static_cast<std::int64_t>(in.u64());
    }
    std::map<std::string, double> root_doubles;
    for (std::uint64_t n = in.u64(); n > 0; --n) {
      std::string name = in.text();
      root_doubles[name] = in.f64();
    }
    if (!same_names(root_ints, ints) || !same_names(root_doubles, doubles)) {
      throw MismatchError("TorchState::sync: rank 0 keeps the values " + names_of(root_ints, root_doubles) +
                          ", this rank " + names_of(ints, doubles));
    }
    const std::uint64_t count = in.u64();
    if (count != samplers.size()) {
      throw MismatchError("TorchState::sync: rank 0 keeps " + std::to_string(count) + " sampler(s), this rank " +
                          std::to_string(samplers.size()));
    }
    std::vector<SavedSampler> root_samplers(samplers.size());
    for (std::size_t i = 0; i < samplers.size(); ++i) {
      const std::uint64_t size = in.u64();
      if (size != samplers[i]->dataset_size()) {
        throw MismatchError("TorchState::sync: rank 0's sampler " + std::to_string(i) + " covers " +
                            std::to_string(size) + " samples, this rank's " +
                            std::to_string(samplers[i]->dataset_size()));
      }
      root_samplers[i].epoch = in.u64();
      root_samplers[i].processed.resize(size);
      in.raw(root_samplers[i].processed.data(), size);
    }
    for (const auto& [name, value] : root_ints) ints[name] = value;
    for (const auto& [name, value] : root_doubles) doubles[name] = value;
    for (std::size_t i = 0; i < samplers.size(); ++i) {
      samplers[i]->load(root_samplers[i].epoch, root_samplers[i].processed);
    }
  }

 private:
  template <typename A, typename B>
  static bool same_names(const std::map<std::string, A>& a, const std::map<std::string, B>& b) {
    if (a.size() != b.size()) return false;
    for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j) {
      if (i->first != j->first) return false;
    }
    return true;
  }

  static std::string names_of(const std::map<std::string, std::int64_t>& ints,
                              const std::map<std::string, double>& doubles) {
    std::string names = "{";
    auto add = [&](const std::string& name, const char* type) {
      if (names.size() > 1) names += ", ";
      names += name + " (" + type + ")";
    };
    for (const auto& [name, value] : ints) add(name, "int");
    for (const auto& [name, value] : doubles) add(name, "double");
    return names + "}";
  }
};

std::uint64_t digest(const at::Tensor& tensor) {
  if (!tensor.defined()) return 0;
  const at::Tensor bytes = tensor.detach().to(at::kCPU).contiguous();
  std::vector<std::uint64_t> parts{kolo::elastic::digest(bytes.data_ptr(), bytes.nbytes()),
                                   static_cast<std::uint64_t>(bytes.scalar_type())};
  for (std::int64_t size : bytes.sizes()) parts.push_back(static_cast<std::uint64_t>(size));
  return kolo::elastic::digest(parts.data(), parts.size() * sizeof parts[0]);
}

TorchState::TorchState(std::shared_ptr<::torch::nn::Module> module,
                       std::shared_ptr<::torch::optim::Optimizer> optimizer)
    : impl_(std::make_unique<Impl>()) {
  if (!module) throw InvalidArgumentError("TorchState: the module is null");
  if (!optimizer) throw InvalidArgumentError("TorchState: the optimizer is null");
  impl_->module = std::move(module);
  impl_->optimizer = std::move(optimizer);
  // Local: a rank that joins builds its state while the others wait in sync().
  impl_->keep();
}

TorchState::~TorchState() = default;

void TorchState::reset() {
  for (const auto& sampler : impl_->samplers) sampler->reset();
}

std::int64_t& TorchState::add_int(const std::string& name, std::int64_t initial) {
  impl_->check_new_name(name);
  impl_->saved_ints[name] = initial;
  return impl_->ints[name] = initial;
}

double& TorchState::add_double(const std::string& name, double initial) {
  impl_->check_new_name(name);
  impl_->saved_doubles[name] = initial;
  return impl_->doubles[name] = initial;
}

std::int64_t& TorchState::int_value(const std::string& name) {
  auto it = impl_->ints.find(name);
  if (it == impl_->ints.end()) {
    throw InvalidArgumentError("TorchState: no int value named '" + name + "'" +
                               (impl_->doubles.count(name) ? " (it is a double)" : ""));
  }
  return it->second;
}

double& TorchState::double_value(const std::string& name) {
  auto it = impl_->doubles.find(name);
  if (it == impl_->doubles.end()) {
    throw InvalidArgumentError("TorchState: no double value named '" + name + "'" +
                               (impl_->ints.count(name) ? " (it is an int)" : ""));
  }
  return it->second;
}

void TorchState::add_sampler(std::shared_ptr<ElasticSampler> sampler) {
  if (!sampler) throw InvalidArgumentError("TorchState::add_sampler: the sampler is null");
  for (const auto& known : impl_->samplers) {
    if (known == sampler) throw InvalidArgumentError("TorchState::add_sampler: the sampler is in the state already");
  }
  impl_->saved_samplers.push_back({sampler->epoch(), sampler->processed()});
  impl_->samplers.push_back(std::move(sampler));
}

void TorchState::add_compressor(std::shared_ptr<GradientCompressor> compressor) {
  if (!compressor) throw InvalidArgumentError("TorchState::add_compressor: the compressor is null");
  for (const auto& known : impl_->compressors) {
    if (known == compressor) {
      throw InvalidArgumentError("TorchState::add_compressor: the compressor is in the state already");
    }
  }
  impl_->saved_memories.push_back(Impl::copy_of(compressor->memory()));
  impl_->compressors.push_back(std::move(compressor));
}

void TorchState::save() {
  // The collective first: when it fails, the last save stays whole.
  impl_->merge_sampler_progress();
  impl_->keep();
}

void TorchState::restore() {
  impl_->restore_module();
  try {
    load_optimizer(*impl_->optimizer, impl_->saved_optimizer);
  } catch (const c10::Error& e) {
    throw InvalidArgumentError(std::string("TorchState::restore: the optimizer no longer fits its save "
                                           "(param groups changed?): ") +
                               e.what_without_backtrace());
  }
  for (const auto& [name, value] : impl_->saved_ints) impl_->ints[name] = value;
  for (const auto& [name, value] : impl_->saved_doubles) impl_->doubles[name] = value;
  for (std::size_t i = 0; i < impl_->samplers.size(); ++i) {
    impl_->samplers[i]->load(impl_->saved_samplers[i].epoch, impl_->saved_samplers[i].processed);
  }
  for (std::size_t i = 0; i < impl_->compressors.size(); ++i) {
    impl_->compressors[i]->load_memory(impl_->saved_memories[i]);
  }
}

void TorchState::sync() {
  impl_->sync_module();
  impl_->sync_optimizer();
  impl_->sync_compressors();
  const bool root = kolo::rank() == 0;
  const std::string bytes =
      broadcast_bytes(root ? impl_->encode_values_and_samplers() : std::string(), 0, "kolo.elastic.values");
  if (!root) impl_->decode_values_and_samplers(bytes);
  for (const auto& sampler : impl_->samplers) sampler->reset();
  // Every rank holds the same state now: a local save is the commit.
  impl_->keep();
}

::torch::nn::Module& TorchState::module() const { return *impl_->module; }

::torch::optim::Optimizer& TorchState::optimizer() const { return *impl_->optimizer; }

}  // namespace kolo::torch::elastic
