// KOLO_* settings: every bad value fails init() with one message naming the
// variable, the value and what is allowed (not the first large output, not
// silently another value), 0 never means "at once", and ranks whose settings
// must agree but differ all get the same message naming the setting and ranks.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "api/known_settings.h"
#include "harness/multiprocess.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

// init() must fail with InvalidArgumentError whose message holds every fragment.
void expect_init_fails(const std::string& what, const std::vector<std::string>& fragments) {
  try {
    kolo::init();
    ADD_FAILURE() << what << ": init() succeeded";
    kolo::shutdown();
  } catch (const InvalidArgumentError& e) {
    for (const auto& fragment : fragments)
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << what << ": " << e.what();
  }
}

TEST(Settings, BadValuesFailInitNamingVariableValueAndWhatIsAllowed) {
  run_ranks(1, [](int) {
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"KOLO_BUFFER_CACHE_BYTES", "abc"},  // read at the first large Buffer
        {"KOLO_BUFFER_CACHE_BYTES", "-5"},   // clamped to 0
        {"KOLO_SHAREABLE_BUFFERS", "2"},     // read at the first large Buffer
        {"KOLO_LOG_LEVEL", "verbose"},       // became warning
        {"KOLO_PEER_TIMEOUT", "0"},          // meant "fail at once"
        {"KOLO_START_TIMEOUT", "0"},
        {"KOLO_PEER_TIMEOUT", "0.0001"},     // 0 in milliseconds
        {"KOLO_WAKE_SLICE_US", "50"},        // below the kernel's shortest slice
        {"KOLO_WAKE_SLICE_US", "200000"},
        {"KOLO_CACHE_CAPACITY", "-1"},
        {"KOLO_FUSION_THRESHOLD", "-1"},
        {"KOLO_STALL_CHECK_TIME", "-2"},
        {"KOLO_FLIGHT_RECORDER_SIZE", "99999999999"},
        // The transports' settings, which this one-rank job never reads otherwise.
        {"KOLO_SHM_SLOT_BYTES", "abc"},
        {"KOLO_SHM_SMALL_BYTES", "-1"},
        {"KOLO_SHM_SINGLE_COPY", "sometimes"},
        {"KOLO_TCP_SMALL_BYTES", "abc"},
        {"KOLO_TCP_SPIN_US", "5000000"},  // clamped to a second
        {"KOLO_TCP_CONGESTION", "no-such-algorithm"},
        {"KOLO_GLOO_ROUND_BYTES", "12"},
        {"KOLO_MPI_SPIN_US", "-1"},
    };
    for (const auto& [name, value] : bad) {
      setenv(name.c_str(), value.c_str(), 1);
      expect_init_fails(name + "=" + value, {name, "'" + value + "'", "allowed"});
      unsetenv(name.c_str());
    }
    // The log level names what it takes.
    setenv("KOLO_LOG_LEVEL", "verbose", 1);
    expect_init_fails("KOLO_LOG_LEVEL", {"error, warning, info, debug"});
    unsetenv("KOLO_LOG_LEVEL");
    // 0 is off where a setting can be off.
    setenv("KOLO_STALL_CHECK_TIME", "0", 1);
    setenv("KOLO_BUFFER_CACHE_BYTES", "0", 1);
    kolo::init();
    float x = 1.0f;
    kolo::allreduce(make_tensor(&x, 1), {.name = "works"});
    kolo::shutdown();
    unsetenv("KOLO_STALL_CHECK_TIME");
    unsetenv("KOLO_BUFFER_CACHE_BYTES");
  }, {.use_store = false});
}

// Sets `name` to `value` for one init(), which must fail as expect_init_fails says.
void expect_setting_fails(const std::string& name, const std::string& value,
                          const std::vector<std::string>& fragments) {
  setenv(name.c_str(), value.c_str(), 1);
  expect_init_fails(name + "=" + value, fragments);
  unsetenv(name.c_str());
}

// Sizes near 2^63 passed: KOLO_SHM_SLOT_BYTES=2^62 wrapped the segment's size
// (a rank's SIGSEGV), the round sizes aborted in malloc or threw bad_alloc.
// Every size and count has an upper bound, and a value past it, or past what an
// int64 holds, is "out of range", never "not an integer".
TEST(Settings, EverySizeAndCountHasAnUpperBound) {
  run_ranks(1, [](int) {
    const std::vector<std::string> names = {
        "KOLO_FUSION_THRESHOLD", "KOLO_CACHE_CAPACITY", "KOLO_EAGER_BYTES", "KOLO_FLIGHT_RECORDER_SIZE",
        "KOLO_WAKE_SLICE_US", "KOLO_BUFFER_CACHE_BYTES", "KOLO_SHM_SLOT_BYTES", "KOLO_SHM_SMALL_BYTES",
        "KOLO_SHM_MAPPED_BYTES", "KOLO_SHM_FIRST_STEP", "KOLO_TCP_SMALL_BYTES", "KOLO_TCP_ROUND_BYTES",
        "KOLO_TCP_SPIN_US", "KOLO_GLOO_SMALL_BYTES", "KOLO_GLOO_ROUND_BYTES", "KOLO_MPI_SMALL_BYTES",
        "KOLO_MPI_SPIN_US", "KOLO_MPI_POLL_US", "KOLO_NUM_SERVERS", "KOLO_PS_PARTITION_BYTES",
    };
    for (const auto& name : names) {
      for (const std::string value : {"4611686018427387904", "9223372036854775807", "99999999999999999999", "2048G"})
        expect_setting_fails(name, value, {name + ": '" + value + "' is out of range: allowed are "});
    }
    // Up to 1 GiB where a size is a transfer, a slot or a threshold.
    for (const char* name : {"KOLO_SHM_SLOT_BYTES", "KOLO_TCP_SMALL_BYTES", "KOLO_FUSION_THRESHOLD"}) {
      expect_setting_fails(name, "2G", {"allowed are ", " to 1073741824 (1G)"});
      setenv(name, "1G", 1);
      kolo::init();
      kolo::shutdown();
      unsetenv(name);
    }
    // A rank's scratch holds 2 x (ranks - 1) rounds: 1 TiB was bad_alloc.
    expect_setting_fails("KOLO_TCP_ROUND_BYTES", "1024G", {"allowed are 1024 to 67108864 (64M)"});
    for (const std::string value : {"1e400", "20000", "abc"})
      expect_setting_fails("KOLO_CYCLE_TIME", value, {"KOLO_CYCLE_TIME: '" + value + "'", "allowed are more than 0"});
  }, {.use_store = false});
}

// A job of one chose no transport and so never read KOLO_BACKEND: a typo passed
// at -np 1 and failed at -np 2.
TEST(Settings, AJobOfOneChecksTheTransportChoice) {
  run_ranks(1, [](int) {
    expect_setting_fails("KOLO_BACKEND", "abc",
                         {"KOLO_BACKEND: 'abc' is not allowed: use one of auto, shm, gloo, tcp, mpi"});
    expect_setting_fails("KOLO_HIERARCHICAL", "maybe",
                         {"KOLO_HIERARCHICAL: 'maybe' is not a boolean: allowed are 1 and 0"});
  }, {.use_store = false});
}

// A timeout said "allowed are 0 (off)" for -1 and then refused 0: a timeout
// cannot be off (no wait without an end), and every message says so.
TEST(Settings, TimeoutsSayTheyCannotBeOff) {
  run_ranks(1, [](int) {
    for (const std::string name : {"KOLO_PEER_TIMEOUT", "KOLO_START_TIMEOUT"}) {
      for (const std::string value : {"-1", "0", "0.0001", "2e9", "1e400"}) {
        expect_setting_fails(name, value,
                             {name + ": '" + value + "' is out of range: allowed are 0.001 to 1e9 seconds",
                              "(a timeout cannot be off)"});
      }
    }
    // 0 is off where a setting can be off, and its message says so.
    expect_setting_fails("KOLO_STALL_CHECK_TIME", "-1", {"allowed are 0 (off) to 1e9 seconds"});
  }, {.use_store = false});
}

// The ranks used to fail the first operation one by one: one rank with the
// negotiation's error, the others told that a rank had shut down.
TEST(Settings, SettingsThatDifferAcrossRanksFailInitOnEveryRankAlike) {
  run_ranks(3, [](int rank) {
    setenv("KOLO_CACHE_CAPACITY", rank == 1 ? "0" : "1024", 1);
    expect_init_fails("cache capacity", {"KOLO_CACHE_CAPACITY is 0 on rank 1; 1024 on ranks 0, 2"});
    unsetenv("KOLO_CACHE_CAPACITY");
    setenv("KOLO_FUSION_THRESHOLD", std::to_string(1024 * (rank + 1)).c_str(), 1);
    expect_init_fails("fusion threshold",
                      {"KOLO_FUSION_THRESHOLD is 1024 on rank 0; 2048 on rank 1; 3072 on rank 2"});
    unsetenv("KOLO_FUSION_THRESHOLD");
    // The job starts once they agree.
    kolo::init();
    float x = 1.0f;
    kolo::allreduce(make_tensor(&x, 1), {.op = ReduceOp::Sum, .name = "agreed"});
    EXPECT_EQ(x, 3.0f);
    kolo::shutdown();
  }, {.timeout = std::chrono::seconds(60)});
}

// A transport's message sizes must agree too: ranks that cut a collective into
// other messages would fail it out of step, one of them naming a malformed frame.
TEST(Settings, TransportSettingsThatDifferAcrossRanksFailInitAlike) {
  run_ranks(2, [](int rank) {
    setenv("KOLO_BACKEND", "tcp", 1);
    setenv("KOLO_TCP_ROUND_BYTES", rank == 0 ? "4096" : "8192", 1);
    expect_init_fails("tcp round bytes", {"KOLO_TCP_ROUND_BYTES is 4096 on rank 0; 8192 on rank 1"});
    unsetenv("KOLO_TCP_ROUND_BYTES");
    kolo::init();
    std::vector<float> x(100000, 1.0f);
    kolo::allreduce(make_tensor(x.data(), x.size()), {.op = ReduceOp::Sum, .name = "agreed"});
    EXPECT_EQ(x.back(), 2.0f);
    kolo::shutdown();
    unsetenv("KOLO_BACKEND");
  }, {.timeout = std::chrono::seconds(60)});
}

TEST(Settings, UnknownNamesGetAWarningWithTheClosestKnownName) {
  const char* environment[] = {"PATH=/usr/bin", "KOLO_FUSION_THRESOLD=1", "KOLO_RANK=0", "KOLO_TOTALLY_ELSE=1",
                               "KOLO_LOG_LEVEL=debug", "KOLO_TEST_TIME_SCALE=4", nullptr};
  const auto warnings = detail::unknown_setting_warnings(environment);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0],
            "KOLO_FUSION_THRESOLD is not a kolo setting and is ignored (did you mean KOLO_FUSION_THRESHOLD?)");
  EXPECT_EQ(warnings[1], "KOLO_TOTALLY_ELSE is not a kolo setting and is ignored");
  EXPECT_TRUE(detail::unknown_setting_warnings(environment + 2).size() == 1);
}

TEST(Settings, InitWarnsAboutAMisspeltSetting) {
  run_ranks(1, [](int) {
    setenv("KOLO_CYCLE_TME", "0.001", 1);
    ::testing::internal::CaptureStderr();
    kolo::init();
    kolo::shutdown();
    const auto err = ::testing::internal::GetCapturedStderr();
    unsetenv("KOLO_CYCLE_TME");
    EXPECT_NE(err.find("warning: KOLO_CYCLE_TME is not a kolo setting and is ignored (did you mean KOLO_CYCLE_TIME?)"),
              std::string::npos)
        << err;
  }, {.use_store = false});
}

// A name the sources read but the list lacks would get the warning although kolo
// reads it. Names built from a prefix (KOLO_TCP + _SMALL_BYTES) show up as the prefix.
TEST(Settings, EveryNameTheSourcesUseIsKnown) {
  namespace fs = std::filesystem;
  const std::regex literal("[\"'](KOLO_[A-Z0-9_]+)");
  const auto& known = detail::known_settings();
  std::size_t files = 0;
  for (const char* folder : {"src", "tools", "python", "include"}) {
    for (const auto& entry : fs::recursive_directory_iterator(fs::path(KOLO_SOURCE_DIR) / folder)) {
      const auto ext = entry.path().extension();
      if (!entry.is_regular_file() || (ext != ".cc" && ext != ".h" && ext != ".py")) continue;
      ++files;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string content = text.str();
      for (std::sregex_iterator m(content.begin(), content.end(), literal), end; m != end; ++m) {
        const std::string name = (*m)[1];
        const bool reserved = name.rfind("KOLO_TEST_", 0) == 0;  // the test harness's own
        const bool listed = reserved || std::any_of(known.begin(), known.end(), [&](std::string_view k) {
          return k == name || (k.substr(0, name.size()) == name && k[name.size()] == '_');
        });
        EXPECT_TRUE(listed) << name << " in " << entry.path() << " is not in detail::known_settings()";
      }
    }
  }
  EXPECT_GT(files, 100u);
}

}  // namespace
}  // namespace kolo::testing
