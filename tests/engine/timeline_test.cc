// KOLO_TIMELINE writes a Chrome trace that is valid JSON, also after a kill.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "harness/multiprocess.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;

nlohmann::json read_trace(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);  // throws when the file is not valid JSON
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "-" + make_job_id() + ".json")).string();
}

void some_steps(int rank) {
  for (int step = 0; step < 3; ++step) {
    std::vector<float> a(1000, 1.0f), b(10, 2.0f);
    Handle ha = kolo::allreduce_async(make_tensor(a.data(), 1000), {.name = "grad.a"});
    Handle hb = kolo::allreduce_async(make_tensor(b.data(), 10), {.name = "grad.b"});
    ha.wait();
    hb.wait();
  }
  std::vector<std::int32_t> big(1 << 16, rank);
  kolo::broadcast(make_tensor(big.data(), 1 << 16), 0, {.name = "weights"});
}

TEST(Timeline, TracesEveryTensorPhase) {
  const auto path = temp_path("kolo-timeline");
  SpawnOptions options;
  options.env["KOLO_TIMELINE"] = path;
  run_ranks(2, [](int rank) {
    kolo::init();
    some_steps(rank);
    kolo::shutdown();
  }, options);
  auto trace = read_trace(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(trace.is_array());
  std::set<std::string> tracks, phases;
  for (const auto& e : trace) {
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "X") {
      phases.insert(e["name"].get<std::string>());
      EXPECT_GE(e["dur"].get<std::int64_t>(), 0);
      EXPECT_EQ(e["pid"], 0) << "only rank 0 writes by default";
    }
  }
  for (const char* t : {"grad.a", "grad.b", "weights"}) EXPECT_TRUE(tracks.count(t)) << t;
  for (const char* p : {"QUEUE", "NEGOTIATE", "allreduce", "broadcast"}) EXPECT_TRUE(phases.count(p)) << p;
}

// start_timeline() and stop_timeline() at run time: only what ran in between is
// traced, blocking calls (the express path otherwise) included.
TEST(Timeline, StartsAndStopsAtRunTime) {
  const auto path = temp_path("kolo-timeline-runtime");
  run_ranks(2, [&](int rank) {
    kolo::init();
    float x = 1.0f;
    for (int i = 0; i < 20; ++i) kolo::allreduce(make_tensor(&x, 1), {.name = "before"});
    kolo::start_timeline(path);
    some_steps(rank);
    for (int i = 0; i < 3; ++i) kolo::allreduce(make_tensor(&x, 1), {.name = "blocking"});
    kolo::stop_timeline();
    kolo::allreduce(make_tensor(&x, 1), {.name = "after"});
    if (rank == 0) EXPECT_THROW(kolo::start_timeline("/nonexistent-dir/trace.json"), InvalidArgumentError);
    kolo::shutdown();
  });
  auto trace = read_trace(path);
  std::filesystem::remove(path);
  std::set<std::string> tracks;
  for (const auto& e : trace)
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks.insert(e["args"]["name"].get<std::string>());
  for (const char* t : {"grad.a", "weights", "blocking"}) EXPECT_TRUE(tracks.count(t)) << t;
  for (const char* t : {"before", "after"}) EXPECT_FALSE(tracks.count(t)) << t;
}

TEST(Timeline, EveryRankWritesItsOwnFileWhenAsked) {
  const auto path = temp_path("kolo-timeline-all");
  SpawnOptions options;
  options.env["KOLO_TIMELINE"] = path;
  options.env["KOLO_TIMELINE_ALL_RANKS"] = "1";
  run_ranks(2, [](int rank) {
    kolo::init();
    some_steps(rank);
    kolo::shutdown();
  }, options);
  for (int r = 0; r < 2; ++r) {
    auto file = path.substr(0, path.size() - 5) + ".rank" + std::to_string(r) + ".json";
    auto trace = read_trace(file);
    std::filesystem::remove(file);
    EXPECT_GT(trace.size(), 10u) << file;
  }
}

TEST(Timeline, StaysValidJsonWhenTheJobIsKilled) {
  const auto path = temp_path("kolo-timeline-killed");
  SpawnOptions options;
  options.env["KOLO_TIMELINE"] = path;
  auto outcomes = spawn_ranks(2, [](int rank) {
    kolo::init();
    some_steps(rank);
    std::this_thread::sleep_for(300ms);  // the writer flushes at least every 100 ms
    raise(SIGKILL);
  }, options);
  EXPECT_EQ(outcomes[0].signal, SIGKILL);
  auto trace = read_trace(path);
  std::filesystem::remove(path);
  EXPECT_GT(trace.size(), 10u);
}

TEST(Timeline, UnwritablePathIsAClearError) {
  SpawnOptions options;
  options.env["KOLO_TIMELINE"] = "/nonexistent-dir/trace.json";
  run_ranks(1, [](int) {
    try {
      kolo::init();
      ADD_FAILURE() << "init succeeded";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/trace.json"), std::string::npos) << e.what();
    }
  }, options);
}

// Rank 0 writes the timeline: its init() fails, and the others, which were
// waiting for it, are told why (not that the ranks ran different collectives).
TEST(Timeline, UnwritablePathIsNamedOnTheOtherRanks) {
  SpawnOptions options;
  options.env["KOLO_TIMELINE"] = "/nonexistent-dir/trace.json";
  run_ranks(2, [](int rank) {
    if (rank == 0) {
      EXPECT_THROW(kolo::init(), InvalidArgumentError);
      return;
    }
    kolo::init();
    float x = 1.0f;
    try {
      kolo::allreduce(make_tensor(&x, 1), {.name = "first"});
      ADD_FAILURE() << "the allreduce ran without rank 0";
    } catch (const PeerFailureError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.peer_rank(), 0) << what;
      EXPECT_NE(what.find("/nonexistent-dir/trace.json"), std::string::npos) << what;
      EXPECT_EQ(what.find("same sequence"), std::string::npos) << what;
    }
    kolo::shutdown();
  }, options);
}

// A job of one whose KOLO_TIMELINE is `path`: init() must fail with `fragment`.
void expect_init_fails(const std::string& path, const std::string& fragment) {
  SpawnOptions options;
  options.env["KOLO_TIMELINE"] = path;
  run_ranks(1, [&](int) {
    try {
      kolo::init();
      ADD_FAILURE() << "init succeeded";
      kolo::shutdown();
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }, options);
}

// A timeline that cannot be written is an error at init(), not truncated JSON.
TEST(Timeline, UnwritableFromTheStartFailsInit) { expect_init_fails("/dev/full", "No space left on device"); }

// A disk that fills during the job (here a file size limit): the rank says so
// once, the job goes on, and the trace is valid JSON up to where it stopped.
TEST(Timeline, AFullDiskEndsTheTraceWholeAndSaysSo) {
  const auto path = temp_path("kolo-timeline-full");
  const auto log = temp_path("kolo-timeline-full-log");
  SpawnOptions options;
  options.env["KOLO_TIMELINE"] = path;
  run_ranks(1, [&](int rank) {
    ::signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead
    rlimit limit{8192, 8192};
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
    ASSERT_NE(std::freopen(log.c_str(), "w", stderr), nullptr);
    kolo::init();
    for (int i = 0; i < 20; ++i) some_steps(rank);
    kolo::shutdown();
  }, options);
  // Read everything first, so that the files go whatever the checks find.
  bool valid = false;
  try {
    valid = read_trace(path).is_array();
  } catch (const std::exception&) {
  }
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  std::ifstream in(log);
  const std::string warnings((std::istreambuf_iterator<char>(in)), {});
  std::filesystem::remove(path, ec);
  std::filesystem::remove(log, ec);
  EXPECT_TRUE(valid) << "the trace is not valid JSON";
  EXPECT_LE(bytes, 8192u);
  EXPECT_NE(warnings.find("the timeline '" + path + "' cannot be written"), std::string::npos) << warnings;
  EXPECT_EQ(std::count(warnings.begin(), warnings.end(), '\n'), 1) << warnings;
}

// A symbolic link planted at the path is not followed (the job would truncate
// whatever it points to).
TEST(Timeline, ASymbolicLinkAtThePathIsRefused) {
  const auto target = temp_path("kolo-timeline-target");
  const auto link = temp_path("kolo-timeline-link");
  std::ofstream(target) << "precious";
  std::filesystem::create_symlink(target, link);
  expect_init_fails(link, "symbolic link");
  std::ifstream in(target);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), "precious");
  std::filesystem::remove(link);
  std::filesystem::remove(target);
}

}  // namespace
}  // namespace kolo::testing
