#include "training_step.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/ps/ps_settings.h"
#include "comm_backend.h"
#include "core/report.h"
#include "kolo/kolo.h"
#include "core/resnet50_layers.h"

namespace kolo::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Variant {
  std::string name;
  std::size_t tensors = 0;
  Stats stats;  // microseconds per step
  double busbw_gbps = 0;

  double mean_ms() const { return stats.mean_us / 1e3; }
  double median_ms() const { return stats.median_us / 1e3; }
  double min_ms() const { return stats.min_us / 1e3; }
};

Stats time_steps(const std::function<void()>& step, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    step();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  return summarize(us);
}

// After any number of averaging steps from rank+1 inputs, every value is (n+1)/2.
std::int64_t count_not_average(const std::vector<float>& values, int nranks) {
  const double want = (nranks + 1) / 2.0;
  std::int64_t wrong = 0;
  for (float v : values)
    if (!(std::abs(v - want) <= 1e-5 * want)) ++wrong;
  return wrong;
}

std::int64_t sum_over_ranks(std::int64_t value) {
  AllreduceOptions options;
  options.op = ReduceOp::Sum;
  options.name = "kolo-bench/step/sum-over-ranks";
  allreduce(make_tensor(&value, 1), options);
  return value;
}

Tensor whole(std::vector<float>& v) { return make_tensor(v.data(), static_cast<std::int64_t>(v.size())); }

// Gradients live in separate allocations, as a model's parameters do.
class ResNet50Step {
 public:
  // `max_bytes` below the model's size shrinks every tensor by one factor (at least
  // one element each), keeping the count and order of tensors: quick runs and tests.
  explicit ResNet50Step(std::size_t max_bytes) : params_(resnet50_parameters()) {
    std::size_t full = 0;
    for (const auto& p : params_) full += p.numel * sizeof(float);
    if (full > max_bytes) {
      const std::size_t divisor = (full + max_bytes - 1) / max_bytes;
      for (auto& p : params_) p.numel = std::max<std::size_t>(1, p.numel / divisor);
    }
    const auto start_value = static_cast<float>(kolo::rank() + 1);
    for (const auto& p : params_) {
      grads_.emplace_back(p.numel, start_value);
      total_ += p.numel;
    }
    fused_.assign(total_, start_value);
    names_.reserve(params_.size());
    for (const auto& p : params_) names_.push_back("resnet50/" + p.name);
  }

  std::size_t tensors() const { return params_.size(); }
  std::size_t total_params() const { return total_; }

  // Backward produces the last layer's gradients first.
  void per_tensor() {
    AllreduceOptions options;  // Average, as a distributed optimizer does
    std::vector<Handle> handles;
    handles.reserve(grads_.size());
    for (std::size_t i = grads_.size(); i-- > 0;) {
      options.name = names_[i];
      handles.push_back(allreduce_async(whole(grads_[i]), options));
    }
    for (const auto& h : handles) h.wait();
  }

  void fused() {
    AllreduceOptions options;
    options.name = "resnet50/fused";
    allreduce(whole(fused_), options);
  }

  std::int64_t wrong() const {
    std::int64_t wrong = count_not_average(fused_, kolo::size());
    for (const auto& g : grads_) wrong += count_not_average(g, kolo::size());
    return wrong;
  }

 private:
  std::vector<ParamTensor> params_;
  std::vector<std::string> names_;
  std::vector<std::vector<float>> grads_;
  std::vector<float> fused_;
  std::size_t total_ = 0;
};

void print_table(std::ostream& out, const BenchOptions& o, const ResNet50Step& step, const std::vector<Variant>& v,
                 std::int64_t wrong) {
  char line[256];
  out << "# kolo-bench  mode=step  model=resnet50  tensors=" << step.tensors() << "  params=" << step.total_params()
      << "  bytes=" << step.total_params() * sizeof(float) << "  ranks=" << kolo::size()
      << "  dtype=float32  reduce=avg  warmup=" << o.warmup << "  iters=" << o.iters << "\n#\n";
  std::snprintf(line, sizeof line, "# %-22s %8s %12s %12s %12s %9s %9s\n", "variant", "tensors", "time/step",
                "median", "min", "busbw", "vs fused");
  out << line;
  std::snprintf(line, sizeof line, "# %-22s %8s %12s %12s %12s %9s %9s\n", "", "", "(ms)", "(ms)", "(ms)", "(GB/s)",
                "");
  out << line;
  const double fused_ms = v[1].mean_ms();
  for (const auto& r : v) {
    std::snprintf(line, sizeof line, "  %-22s %8zu %12.2f %12.2f %12.2f %9.3f %8.2fx\n", r.name.c_str(), r.tensors,
                  r.mean_ms(), r.median_ms(), r.min_ms(), r.busbw_gbps, r.mean_ms() / fused_ms);
    out << line;
  }
  if (wrong >= 0) out << "# Out of bounds values : " << wrong << (wrong == 0 ? " OK" : " FAILED") << "\n";
}

void print_json(std::ostream& out, const BenchOptions& o, const ResNet50Step& step, const std::vector<Variant>& v,
                std::int64_t wrong) {
  nlohmann::json j = {
      {"program", "kolo-bench"},        {"mode", "step"},
      {"model", "resnet50"},            {"tensors", step.tensors()},
      {"params", step.total_params()},  {"bytes", step.total_params() * sizeof(float)},
      {"ranks", kolo::size()},          {"warmup", o.warmup},
      {"iters", o.iters},               {"checked", wrong >= 0},
      {"wrong_total", wrong >= 0 ? nlohmann::json(wrong) : nlohmann::json()},
  };
  j["results"] = nlohmann::json::array();
  for (const auto& r : v) {
    j["results"].push_back({{"variant", r.name},
                            {"tensors", r.tensors},
                            {"time_ms", r.mean_ms()},
                            {"median_ms", r.median_ms()},
                            {"min_ms", r.min_ms()},
                            {"busbw_gbps", r.busbw_gbps}});
  }
  j["overhead_vs_api_fused"] = v[0].mean_ms() / v[1].mean_ms();
  if (v.size() > 2) j["overhead_vs_comm"] = v[0].mean_ms() / v[2].mean_ms();  // comm-fused, where it ran
  out << j.dump() << "\n";
}

}  // namespace

int run_training_step(const BenchOptions& o, std::ostream& out) {
  if (o.type != ElemType::Float32) throw UsageError("--mode step runs float32 gradients only");
  ResNet50Step step(o.max_bytes);
  const int n = kolo::size();
  const double bytes = static_cast<double>(step.total_params() * sizeof(float));
  auto variant = [&](std::string name, std::size_t tensors, const Stats& s) {
    const double algbw = s.mean_us > 0 ? bytes / (s.mean_us * 1e3) : 0;
    return Variant{std::move(name), tensors, s, algbw * 2.0 * (n - 1) / n};
  };
  std::vector<Variant> variants;
  barrier({"kolo-bench/step/begin", {}});
  variants.push_back(variant("api-per-tensor", step.tensors(), time_steps([&] { step.per_tensor(); }, o.warmup, o.iters)));
  barrier({"kolo-bench/step/fused", {}});
  variants.push_back(variant("api-fused", 1, time_steps([&] { step.fused(); }, o.warmup, o.iters)));
  const std::int64_t wrong = o.check ? sum_over_ranks(step.wrong()) : -1;

  // The floor: the same bytes on a communicator of its own, no engine at all (Sum:
  // the communicator has no Average; the data movement is the same). Not with
  // parameter servers, which serve init()'s session only while it lasts.
  barrier({"kolo-bench/step/comm", {}});
  if (comm::ps::PsSettings::from_env().servers == 0) {
    auto bench = make_bench_communicator(kBesideInitGeneration);
    comm::Communicator* comm = bench.comm.get();
    std::vector<float> raw(step.total_params(), 1.0f);
    variants.push_back(variant("comm-fused", 1, time_steps([&] {
                                 comm->allreduce(raw.data(), raw.data(), raw.size(), DataType::Float32, ReduceOp::Sum);
                               }, o.warmup, o.iters)));
    comm->barrier();
  }
  if (kolo::rank() == 0) {
    if (o.json) {
      print_json(out, o, step, variants, wrong);
    } else {
      print_table(out, o, step, variants, wrong);
    }
  }
  return wrong > 0 ? 1 : 0;
}

}  // namespace kolo::bench
