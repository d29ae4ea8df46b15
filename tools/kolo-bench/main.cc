// kolo-bench: collective bandwidth and latency in the nccl-tests format, through
// kolo's public API (--mode api), on the communicator alone (--mode comm), or a
// ResNet-50 training step's gradients (--mode step). Run it under kolorun:
//   kolorun -np 2 kolo-bench --op allreduce --min-bytes 8 --max-bytes 256M --check
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "api_backend.h"
#include "comm_backend.h"
#include "core/driver.h"
#include "kolo/kolo.h"
#include "training_step.h"

namespace {

enum class Mode { Api, Comm, Step };

Mode parse_mode(const std::string& text) {
  if (text == "api") return Mode::Api;
  if (text == "comm") return Mode::Comm;
  if (text == "step") return Mode::Step;
  throw kolo::bench::UsageError("--mode needs api, comm or step, got '" + text + "'");
}

// Holds kolo initialized for the run and shuts it down on every way out, so that
// peers see an orderly end rather than a dead rank.
struct KoloSession {
  KoloSession() { kolo::init(); }
  ~KoloSession() { kolo::shutdown(); }
  KoloSession(const KoloSession&) = delete;
  KoloSession& operator=(const KoloSession&) = delete;
};

int run(const std::vector<std::string>& args) {
  using namespace kolo::bench;
  Mode mode = Mode::Api;
  BufferKind buffers = BufferKind::Kolo;
  const std::vector<ExtraFlag> extras = {
      {"--mode", "api|comm|step",
       "api: through kolo's public API (negotiation, cache, fusion); comm: the communicator KOLO_BACKEND chooses (shm on one host), alone; "
       "step: ResNet-50's 161 gradients per step vs one fused allreduce (api)",
       [&](const std::string& v) { mode = parse_mode(v); }},
      {"--buffers", "kolo|plain",
       "kolo: the buffers are shareable kolo::Buffers (Buffer::shareable: the shm communicator reduces and gathers "
       "large ones in place); plain: aligned_alloc memory, as a tensor library's (kolo)",
       [&](const std::string& v) { buffers = parse_buffer_kind(v); }},
  };
  const BenchOptions options = parse_bench_options(args, extras);
  if (options.show_help) {
    std::cout << bench_usage("kolo-bench", "Times kolo's collectives; run under kolorun -np N.", extras);
    return 0;
  }
  if (mode == Mode::Comm) {
    CommBackend backend(make_bench_communicator(kCommModeGeneration), buffers);
    return run_sweep(options, backend, "kolo-bench", std::cout);
  }
  KoloSession session;
  if (mode == Mode::Step) return run_training_step(options, std::cout);
  ApiBackend backend(buffers);
  return run_sweep(options, backend, "kolo-bench", std::cout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const kolo::bench::UsageError& e) {
    std::fprintf(stderr, "kolo-bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kolo-bench: %s\n", e.what());
    return 1;
  }
}
