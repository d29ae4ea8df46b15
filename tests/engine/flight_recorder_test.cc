// The flight recorder: a cheap ring of recent operations, dumped as JSON on an
// error, a stall or SIGUSR1.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/flight_recorder.h"
#include "flight_report.h"
#include "harness/multiprocess.h"
#include "kolo/kolo.h"

namespace kolo::engine {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

Request request(const std::string& name, std::int64_t n) {
  Request r;
  r.name = name;
  r.shape = {n};
  return r;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(FlightRecorder, KeepsTheLastOperationsOldestFirst) {
  FlightRecorder recorder(3, 1, 4, "/unused");
  std::vector<std::uint64_t> seqs;
  for (int i = 0; i < 5; ++i) seqs.push_back(recorder.begin(request("t" + std::to_string(i), 10), std::chrono::steady_clock::now()));
  recorder.update(seqs[3], OpPhase::Executing);
  recorder.update(seqs[4], OpPhase::Done);
  recorder.update(seqs[0], OpPhase::Done);  // long gone from the ring: ignored
  auto j = nlohmann::json::parse(recorder.to_json("test"));
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["reason"], "test");
  ASSERT_EQ(j["records"].size(), 3u);
  EXPECT_EQ(j["records"][0]["name"], "t2");
  EXPECT_EQ(j["records"][0]["state"], "negotiating");
  EXPECT_EQ(j["records"][1]["state"], "executing");
  EXPECT_EQ(j["records"][2]["state"], "done");
  EXPECT_EQ(j["records"][2]["bytes"], 40);
  EXPECT_EQ(j["records"][2]["seq"], 5);
}

TEST(FlightRecorder, Sigusr1DumpsWhatARankIsWaitingFor) {
  const fs::path dir = fs::temp_directory_path() / ("kolo-flight-test-" + kolo::testing::make_job_id());
  kolo::testing::SpawnOptions options;
  options.env["KOLO_FLIGHT_RECORDER_DIR"] = dir.string();
  kolo::testing::run_ranks(2, [&](int rank) {
    kolo::init();
    float x = 1.0f;
    kolo::allreduce(make_tensor(&x, 1), {.name = "done-before"});
    if (rank == 0) {
      Handle pending = kolo::allreduce_async(make_tensor(&x, 1), {.name = "waits-for-rank-1"});
      std::this_thread::sleep_for(100ms);
      ::kill(::getpid(), SIGUSR1);
      const auto file = (dir / "rank0.json").string();
      for (int i = 0; i < 200 && !fs::exists(file); ++i) std::this_thread::sleep_for(10ms);
      auto j = read_json(file);
      EXPECT_EQ(j["reason"], "SIGUSR1");
      auto& records = j["records"];
      ASSERT_GE(records.size(), 2u);
      EXPECT_EQ(records[records.size() - 1]["name"], "waits-for-rank-1");
      EXPECT_EQ(records[records.size() - 1]["state"], "negotiating");
      EXPECT_EQ(records[records.size() - 2]["state"], "done");
      kolo::barrier({.name = "dumped"});
      pending.wait();
    } else {
      kolo::barrier({.name = "dumped"});
      kolo::allreduce(make_tensor(&x, 1), {.name = "waits-for-rank-1"});
    }
    kolo::shutdown();
  }, options);
  fs::remove_all(dir);
}

TEST(FlightRecorder, AnErrorWritesTheRecord) {
  const fs::path dir = fs::temp_directory_path() / ("kolo-flight-test-" + kolo::testing::make_job_id());
  kolo::testing::SpawnOptions options;
  options.env["KOLO_FLIGHT_RECORDER_DIR"] = dir.string();
  options.env["KOLO_STALL_CHECK_TIME"] = "0.4";
  options.env["KOLO_STALL_SHUTDOWN_TIME"] = "1";
  kolo::testing::run_ranks(2, [&](int rank) {
    kolo::init();
    float x = 1.0f;
    if (rank == 0) EXPECT_THROW(kolo::allreduce(make_tensor(&x, 1), {.name = "lonely"}), PeerFailureError);
    else std::this_thread::sleep_for(2500ms);
    kolo::shutdown();
  }, options);
  auto j = read_json((dir / "rank0.json").string());
  EXPECT_NE(j["reason"].get<std::string>().find("lonely"), std::string::npos) << j["reason"];
  // Rank 0 stopped because of rank 1 and says so; rank 1 blames nobody else.
  EXPECT_EQ(j.value("blames", -1), 1) << j.dump();
  EXPECT_EQ(kolo::flight::blamed_rank(dir.string(), 0), 1);
  EXPECT_EQ(kolo::flight::blamed_rank(dir.string(), 1), -1);
  EXPECT_EQ(kolo::flight::blamed_rank(dir.string(), 7), -1);  // no such record
  // The records name the job's tensors: they were world-readable.
  EXPECT_EQ(fs::status(dir).permissions() & fs::perms::all, fs::perms::owner_all);
  for (const auto& entry : fs::directory_iterator(dir))
    EXPECT_EQ(entry.status().permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write)
        << entry.path();
  fs::remove_all(dir);
}

// A symbolic link planted where a record goes is not followed.
TEST(FlightRecorder, DoesNotWriteThroughASymbolicLink) {
  const fs::path dir = fs::temp_directory_path() / ("kolo-flight-link-" + kolo::testing::make_job_id());
  fs::create_directories(dir);
  const fs::path target = dir / "precious";
  std::ofstream(target) << "precious";
  fs::create_symlink(target, dir / "rank0.json.tmp");
  FlightRecorder recorder(4, 0, 1, (dir / "rank0.json").string());
  recorder.dump("test");
  std::ifstream in(target);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), "precious");
  EXPECT_FALSE(fs::exists(dir / "rank0.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kolo::engine
