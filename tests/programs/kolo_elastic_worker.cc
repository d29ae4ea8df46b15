// A worker of an elastic job, for kolorun's elastic tests: trains a small model
// (a vector of floats, each step minus the average of the ranks' gradients)
// under kolo::elastic::run, committing every step, and at the end prints
//   "worker W rank R size S steps N checksum C"
// where every rank that trained the same steps has the same checksum.
//
//   kolo_elastic_worker STEPS [FAULT WORKER STEP]...
// FAULT, done by worker WORKER when it reaches step STEP (once per process):
//   exit   - exits with code 3;
//   kill   - SIGKILLs itself;
//   stop   - SIGSTOPs itself (a stall its peers time out on);
//   throw  - throws a PeerFailureError of its own (kolo::elastic::run resets);
//   sleep  - sleeps 3 s (a slow step, or with sync- a slow state broadcast);
//   sync-exit, sync-kill, ... - the same inside the state's sync (between its
//            two broadcasts), at the first sync at or after step STEP;
//   save-exit, save-kill, ... - inside the commit of step STEP (half saved);
//   reset-exit, reset-kill, ... - in the reset callback (the job re-formed, not
//            yet synced), at the first reset at or after step STEP.
// KOLO_TEST_STEP_MS: a pause per step (default 20), so that changes land mid-run.
// KOLO_TEST_PROGRESS_FILE: rank 0 writes the steps done there after each step.
// KOLO_TEST_SLOW_START="FROM MS": workers FROM and later sleep MS ms before
// init() (a joiner's slow start, as importing torch is), then say on stderr
// "worker W calls init at T".
// KOLO_TEST_SLOW_MODEL="FROM MS [MORE]": workers FROM and later say on stderr
// "worker W planned as rank R of N at T" once init() returns, then sleep MS ms
// (and MORE ms for each worker after FROM) before run() (a joiner building its
// model).
// Each reset is said on stderr: "worker W reset at step S: rank R of N at T".
// T: milliseconds of CLOCK_MONOTONIC, one clock for every process of the host.
// KOLO_TEST_FAIL_BEFORE_RUN=W: worker W, once init() returned, fails as a
// Python program's uncaught exception does (kolo's fail(), then exit code 5).
// KOLO_TEST_PROCESS_SET: a process set of every rank, made again after each reset
// (the old one must be refused, said on stderr).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kolo/internal/fail.h"
#include "kolo/kolo.h"

namespace {

struct Fault {
  std::string how;
  int worker = -1;
  int step = -1;
};

class ModelState : public kolo::elastic::State {
 public:
  std::vector<float> weights = std::vector<float>(4096, 1.0f);
  int step = 0;

  std::function<void()> during_save;  // a fault's hook, between the weights and the step
  int worker = -1;

  void prepare_to_join() override {
    std::fprintf(stderr, "worker %d prepares to join, %s\n", worker,
                 kolo::elastic::awaits_admission() ? "awaiting admission" : "already taken in");
  }

  void save() override {
    saved_weights_ = weights;
    if (during_save) during_save();
    saved_step_ = step;
  }
  void restore() override {
    weights = saved_weights_;
    step = saved_step_;
  }
  std::function<void()> during_sync;  // a fault's hook, between the two broadcasts

  void sync() override {
    kolo::broadcast(kolo::make_tensor(weights.data(), static_cast<std::int64_t>(weights.size())), 0,
                    {.name = "state.weights"});
    if (during_sync) during_sync();
    kolo::broadcast(kolo::make_tensor(&step, 1), 0, {.name = "state.step"});
    save();
  }

 private:
  std::vector<float> saved_weights_ = weights;
  int saved_step_ = 0;
};

void do_fault(const std::string& how) {
  std::fprintf(stderr, "fault: %s\n", how.c_str());
  std::fflush(stderr);
  if (how == "exit") std::_Exit(3);
  if (how == "kill") ::raise(SIGKILL);
  if (how == "stop") ::raise(SIGSTOP);
  if (how == "throw") throw kolo::PeerFailureError(-1, "the worker's own test fault");
  if (how == "sleep") std::this_thread::sleep_for(std::chrono::seconds(3));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || (argc - 2) % 3 != 0) {
    std::fprintf(stderr, "usage: kolo_elastic_worker STEPS [FAULT WORKER STEP]...\n");
    return 2;
  }
  const int steps = std::atoi(argv[1]);
  std::vector<Fault> faults;
  for (int i = 2; i + 2 < argc; i += 3) faults.push_back(Fault{argv[i], std::atoi(argv[i + 1]), std::atoi(argv[i + 2])});
  const char* worker_text = std::getenv("KOLO_ELASTIC_WORKER");
  const int worker = worker_text ? std::atoi(worker_text) : -1;
  const char* pause_text = std::getenv("KOLO_TEST_STEP_MS");
  const auto pause = std::chrono::milliseconds(pause_text ? std::atoi(pause_text) : 20);

  auto now_ms = [] {
    return static_cast<long long>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  };
  if (const char* slow = std::getenv("KOLO_TEST_SLOW_START")) {
    int from = 0, delay_ms = 0;
    if (std::sscanf(slow, "%d %d", &from, &delay_ms) == 2 && worker >= from) {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      std::fprintf(stderr, "worker %d calls init at %lld\n", worker, now_ms());
      std::fflush(stderr);
    }
  }
  kolo::init();
  if (const char* slow = std::getenv("KOLO_TEST_SLOW_MODEL")) {
    int from = 0, delay_ms = 0, more_ms = 0;
    if (std::sscanf(slow, "%d %d %d", &from, &delay_ms, &more_ms) >= 2 && worker >= from) {
      std::fprintf(stderr, "worker %d planned as rank %d of %d at %lld\n", worker, kolo::rank(), kolo::size(),
                   now_ms());
      std::fflush(stderr);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms + (worker - from) * more_ms));
    }
  }
  if (const char* failing = std::getenv("KOLO_TEST_FAIL_BEFORE_RUN"); failing && std::atoi(failing) == worker) {
    kolo::runtime::fail("worker " + std::to_string(worker) + " failed before run()");
    std::fprintf(stderr, "worker %d failed before run()\n", worker);
    return 5;
  }
  ModelState state;
  state.worker = worker;
  // KOLO_TEST_PROCESS_SET: a set of every rank, made at the start and again
  // after each reset, where the old one must be refused.
  const bool with_set = std::getenv("KOLO_TEST_PROCESS_SET") != nullptr;
  auto every_rank = [] {
    std::vector<int> ranks;
    for (int r = 0; r < kolo::size(); ++r) ranks.push_back(r);
    return kolo::add_process_set(ranks);
  };
  kolo::ProcessSet set = with_set ? every_rank() : kolo::global_process_set;
  // Faults whose name starts with `prefix`, due at or after the state's step.
  auto fault_hook = [&](const std::string& prefix, bool exact_step) {
    return [&faults, &state, worker, prefix, exact_step] {
      for (auto& f : faults) {
        const bool due = exact_step ? state.step == f.step : state.step >= f.step;
        if (f.worker == worker && f.how.rfind(prefix, 0) == 0 && due) {
          f.worker = -1;  // once
          do_fault(f.how.substr(prefix.size()));
        }
      }
    };
  };
  const auto reset_faults = fault_hook("reset-", false);
  state.register_reset_callbacks({[&] {
    std::fprintf(stderr, "worker %d reset at step %d: rank %d of %d at %lld\n", worker, state.step, kolo::rank(),
                 kolo::size(), now_ms());
    std::fflush(stderr);
    reset_faults();
    if (with_set) {
      float x = 1.0f;
      try {
        kolo::allreduce(kolo::make_tensor(&x, 1), {.name = "stale", .process_set = set});
        std::fprintf(stderr, "worker %d: the old process set %d still works\n", worker, set.id);
      } catch (const kolo::InvalidArgumentError& e) {
        std::fprintf(stderr, "worker %d: old set refused: %s\n", worker, e.what());
      }
      set = every_rank();
      kolo::allreduce(kolo::make_tensor(&x, 1), {.op = kolo::ReduceOp::Sum, .name = "fresh", .process_set = set});
      std::fprintf(stderr, "worker %d: new set %d sums to %g\n", worker, set.id, static_cast<double>(x));
    }
    std::fflush(stderr);
  }});
  const char* progress_file = std::getenv("KOLO_TEST_PROGRESS_FILE");
  state.during_sync = fault_hook("sync-", false);
  state.during_save = fault_hook("save-", true);
  try {
    kolo::elastic::run(state, [&] {
      while (state.step < steps) {
        for (auto& f : faults) {
          if (f.worker == worker && f.step == state.step && f.how.find('-') == std::string::npos) {
            f.worker = -1;  // once
            do_fault(f.how);
          }
        }
        std::vector<float> gradient(state.weights.size());
        for (std::size_t i = 0; i < gradient.size(); ++i)
          gradient[i] = 0.001f * static_cast<float>((i % 7) + 1) * state.weights[i];
        kolo::allreduce(kolo::make_tensor(gradient.data(), static_cast<std::int64_t>(gradient.size())),
                        {.op = kolo::ReduceOp::Average, .name = "gradient"});
        for (std::size_t i = 0; i < gradient.size(); ++i) state.weights[i] -= gradient[i];
        ++state.step;
        if (progress_file && kolo::rank() == 0) {
          if (std::FILE* f = std::fopen(progress_file, "w")) {
            std::fprintf(f, "%d\n", state.step);
            std::fclose(f);
          }
        }
        state.commit();
        std::this_thread::sleep_for(pause);
      }
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker %d failed: %s\n", worker, e.what());
    return 4;
  }
  double checksum = 0;
  for (std::size_t i = 0; i < state.weights.size(); ++i) checksum += state.weights[i] * static_cast<double>(i + 1);
  std::printf("worker %d rank %d size %d steps %d checksum %.9g\n", worker, kolo::rank(), kolo::size(), state.step,
              checksum);
  std::fflush(stdout);
  kolo::shutdown();
  return 0;
}
