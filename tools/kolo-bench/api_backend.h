// kolo-bench --mode api: every collective through kolo's public API, as a training
// program calls it: negotiation by name, the response cache, fusion, the
// background thread and the handle's wake-up are all inside the timed region.
#pragma once

#include "core/driver.h"
#include "kolo_types.h"

namespace kolo::bench {

// Requires kolo::init() to have run.
class ApiBackend : public Backend {
 public:
  explicit ApiBackend(BufferKind buffers) : buffers_(buffers) {}
  int rank() const override;
  int size() const override;
  std::string label() const override { return "kolo-api"; }
  void validate(const BenchOptions& options) const override;
  std::map<std::string, std::string> details() const override { return {{"buffers", to_string(buffers_.kind())}}; }
  BufferMemory allocate(std::size_t bytes) override { return buffers_.allocate(bytes); }
  RunOnce prepare(const BenchOptions& options, const SizePoint& point, void* send, void* recv) override;
  void barrier() override;
  std::int64_t sum_over_ranks(std::int64_t value) override;

 private:
  BenchBuffers buffers_;
};

}  // namespace kolo::bench
