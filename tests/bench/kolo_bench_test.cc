// kolo-bench: its sweep/report core (sizes, bus factors, result checks, the
// ResNet-50 parameter list) and the real binary run under kolorun for tiny sizes,
// with --check and --json, in both modes and for every collective.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/bench_options.h"
#include "core/pattern.h"
#include "core/report.h"
#include "core/resnet50_layers.h"
#include "core/size_plan.h"
#include "harness/subprocess.h"

#ifndef KOLO_BENCH_PATH
#error "tests/CMakeLists.txt defines KOLO_BENCH_PATH as the kolo-bench binary"
#endif
#ifndef KOLORUN_PATH
#error "tests/CMakeLists.txt defines KOLORUN_PATH as the kolorun binary"
#endif

namespace {

using namespace kolo::bench;
using kolo::testing::run_command;
using kolo::testing::Subprocess;

// ---------------------------------------------------------------------------
// The core, in process.

BenchOptions options_from(const std::vector<std::string>& args) { return parse_bench_options(args); }

TEST(KoloBenchCore, SizesGrowByTheFactorAndRoundToWholeBlocks) {
  auto o = options_from({"--op", "allgather", "--min-bytes", "8", "--max-bytes", "1K", "--step-factor", "4"});
  auto points = plan_sizes(o, 3);
  // 8 B of float32 across 3 ranks rounds up to one element per rank (12 B); later
  // sizes round down to a multiple of 3 elements.
  std::vector<std::size_t> bytes;
  for (const auto& p : points) bytes.push_back(p.bytes);
  EXPECT_EQ(bytes, (std::vector<std::size_t>{12, 24, 120, 504}));
  for (const auto& p : points) {
    EXPECT_EQ(p.send_count, p.block_count);
    EXPECT_EQ(p.recv_count, 3 * p.block_count);
  }
}

TEST(KoloBenchCore, SizesThatRoundAlikeAppearOnce) {
  auto o = options_from({"--dtype", "float64", "--min-bytes", "1", "--max-bytes", "16", "--step-factor", "2"});
  auto points = plan_sizes(o, 2);
  ASSERT_EQ(points.size(), 2u);  // 1, 2, 4 and 8 bytes all become one double
  EXPECT_EQ(points[0].bytes, 8u);
  EXPECT_EQ(points[1].bytes, 16u);
}

TEST(KoloBenchCore, ExplicitSizesReplaceTheSweep) {
  auto o = options_from({"--sizes", "8,4K,64M", "--min-bytes", "1M"});
  auto points = plan_sizes(o, 2);
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(points[0].bytes, 8u);
  EXPECT_EQ(points[1].bytes, 4096u);
  EXPECT_EQ(points[2].bytes, 64u << 20);
  EXPECT_THROW(options_from({"--sizes", "4K,8"}), UsageError);
  EXPECT_THROW(options_from({"--sizes", "8,,16"}), UsageError);
  EXPECT_THROW(options_from({"--sizes", "0"}), UsageError);
}

TEST(KoloBenchCore, BudgetCutsIterationsOfLargeSizesOnly) {
  auto o = options_from({"--min-bytes", "1K", "--max-bytes", "64M", "--step-factor", "16", "--iters", "20",
                         "--warmup", "4", "--budget-bytes", "128M"});
  auto points = plan_sizes(o, 2);
  ASSERT_EQ(points.size(), 5u);  // 1K, 16K, 256K, 4M, 64M
  EXPECT_EQ(points[0].iters, 20);
  EXPECT_EQ(points[3].iters, 20);
  EXPECT_EQ(points[4].bytes, 64u << 20);
  EXPECT_EQ(points[4].iters, 2);
  EXPECT_EQ(points[4].warmup, 1);
}

TEST(KoloBenchCore, BusFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor(Collective::Allreduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::Allgather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::Reducescatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::Alltoall, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::Broadcast, 8), 1.0);
  auto row = make_row(SizePoint{1000, 250, 250, 250, 0, 1}, Stats{1.0, 1.0, 1.0, 1.0}, Collective::Allreduce, 2, 0);
  EXPECT_DOUBLE_EQ(row.algbw_gbps, 1.0);  // 1000 B in 1 us
  EXPECT_DOUBLE_EQ(row.busbw_gbps, 1.0);
}

TEST(KoloBenchCore, ByteSizesAcceptSuffixesAndRejectJunk) {
  EXPECT_EQ(parse_byte_size("4K", "--x"), 4096u);
  EXPECT_EQ(parse_byte_size("256M", "--x"), 256u << 20);
  EXPECT_EQ(parse_byte_size("1g", "--x"), 1u << 30);
  for (const char* bad : {"", "K", "-1", "1.5M", "12Q", "17G", "99999999999999999999"})
    EXPECT_THROW(parse_byte_size(bad, "--x"), UsageError) << bad;
}

TEST(KoloBenchCore, BadCommandLinesAreRefusedWithTheFlagNamed) {
  auto message_of = [](const std::vector<std::string>& args) {
    try {
      parse_bench_options(args);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message_of({"--op", "allsum"}).find("allsum"), std::string::npos);
  EXPECT_NE(message_of({"--iters", "0"}).find("--iters"), std::string::npos);
  EXPECT_NE(message_of({"--iters"}).find("needs a value"), std::string::npos);
  EXPECT_NE(message_of({"--check=yes"}).find("takes no value"), std::string::npos);
  EXPECT_NE(message_of({"--min-bytes", "1M", "--max-bytes", "1K"}).find("larger"), std::string::npos);
  EXPECT_NE(message_of({"--op", "allgather", "--in-place"}).find("--in-place"), std::string::npos);
  EXPECT_NE(message_of({"--op", "broadcast", "--reduce", "max"}).find("--reduce"), std::string::npos);
  EXPECT_NE(message_of({"--step-factor", "1"}).find("--step-factor"), std::string::npos);
  EXPECT_NE(message_of({"--frobnicate"}).find("--frobnicate"), std::string::npos);
  EXPECT_EQ(message_of({"--op=alltoall", "--max-bytes=64K", "--json"}), "accepted");
}

// Runs `op` across `n` simulated ranks with plain loops, then checks each rank's
// output; one flipped element must be counted.
void expect_check_catches_corruption(const std::vector<std::string>& args, int n) {
  auto o = options_from(args);
  const auto points = plan_sizes(o, n);
  const auto& p = points.back();
  const std::size_t elem = elem_size(o.type);
  std::vector<std::vector<unsigned char>> send(n, std::vector<unsigned char>(p.send_count * elem));
  for (int r = 0; r < n; ++r) fill_input(o, p, r, send[r].data());
  for (int r = 0; r < n; ++r) {
    std::vector<unsigned char> out(p.recv_count * elem);
    switch (o.collective) {
      case Collective::Allgather:
        for (int j = 0; j < n; ++j)
          std::memcpy(out.data() + j * p.block_count * elem, send[j].data(), p.block_count * elem);
        break;
      case Collective::Alltoall:
        for (int j = 0; j < n; ++j)
          std::memcpy(out.data() + j * p.block_count * elem, send[j].data() + r * p.block_count * elem,
                      p.block_count * elem);
        break;
      case Collective::Broadcast: out = send[o.root]; break;
      default: FAIL() << "not simulated";
    }
    EXPECT_EQ(count_wrong(o, p, r, n, out.data()), 0u) << "rank " << r;
    out[elem * (p.recv_count / 2)] ^= 0x40;
    EXPECT_EQ(count_wrong(o, p, r, n, out.data()), 1u) << "rank " << r;
  }
}

TEST(KoloBenchCore, CheckCatchesAMisplacedOrCorruptElement) {
  expect_check_catches_corruption({"--op", "allgather", "--max-bytes", "600", "--min-bytes", "600"}, 3);
  expect_check_catches_corruption({"--op", "alltoall", "--max-bytes", "4K", "--min-bytes", "4K", "--dtype", "int8"}, 4);
  expect_check_catches_corruption({"--op", "broadcast", "--root", "1", "--min-bytes", "256", "--max-bytes", "256",
                                   "--dtype", "bfloat16"}, 2);
}

TEST(KoloBenchCore, CheckKnowsEveryReduction) {
  // A job of one: the reduction of one input is that input (average included).
  for (const char* type : {"float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8"}) {
    for (const char* reduce : {"sum", "avg", "min", "max"}) {
      auto o = options_from({"--dtype", type, "--reduce", reduce, "--min-bytes", "96", "--max-bytes", "96"});
      const auto p = plan_sizes(o, 1).front();
      std::vector<unsigned char> buf(p.send_count * elem_size(o.type));
      fill_input(o, p, 0, buf.data());
      EXPECT_EQ(count_wrong(o, p, 0, 1, buf.data()), 0u) << type << " " << reduce;
      poison(o.type, buf.data(), p.recv_count);
      EXPECT_EQ(count_wrong(o, p, 0, 1, buf.data()), p.recv_count) << type << " " << reduce;
    }
  }
}

TEST(KoloBenchCore, ResNet50HasItsRealParameterCount) {
  const auto params = resnet50_parameters();
  std::size_t total = 0;
  for (const auto& p : params) total += p.numel;
  EXPECT_EQ(params.size(), 161u);  // 53 conv weights, 53 x 2 batch-norm, fc weight and bias
  EXPECT_EQ(total, 25557032u);     // torchvision's resnet50
  EXPECT_EQ(params.front().name, "conv1.weight");
  EXPECT_EQ(params.front().numel, 64u * 3 * 7 * 7);
  EXPECT_EQ(params.back().name, "fc.bias");
}

// ---------------------------------------------------------------------------
// The binary, as a subprocess.

using ProcessResult = Subprocess::Result;

ProcessResult kolo_bench(int nranks, std::vector<std::string> args, const Subprocess::Environment& env = {},
                         int servers = 0) {
  std::vector<std::string> argv = {KOLORUN_PATH, "-np", std::to_string(nranks), "--no-tag-output", "--timeout", "60"};
  if (servers > 0) argv.insert(argv.end(), {"--num-servers", std::to_string(servers)});
  argv.push_back(KOLO_BENCH_PATH);
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, std::chrono::seconds(90), env);
}

// The last line of stdout that parses as a JSON object.
nlohmann::json json_of(const ProcessResult& run) {
  std::string line, last;
  for (char c : run.out) {
    if (c != '\n') {
      line += c;
      continue;
    }
    if (!line.empty() && line.front() == '{') last = line;
    line.clear();
  }
  return nlohmann::json::parse(last);
}

void expect_valid_sweep(const nlohmann::json& j, const std::string& backend, const std::string& op, int nranks) {
  EXPECT_EQ(j.at("program"), "kolo-bench");
  EXPECT_EQ(j.at("backend"), backend);
  EXPECT_EQ(j.at("op"), op);
  EXPECT_EQ(j.at("ranks"), nranks);
  EXPECT_EQ(j.at("checked"), true);
  EXPECT_EQ(j.at("wrong_total"), 0);
  const auto& results = j.at("results");
  ASSERT_GE(results.size(), 3u);
  const double factor = bus_factor(parse_collective(op), nranks);
  std::size_t previous = 0;
  for (const auto& r : results) {
    const auto bytes = r.at("bytes").get<std::size_t>();
    EXPECT_GT(bytes, previous);
    previous = bytes;
    EXPECT_EQ(r.at("wrong"), 0);
    EXPECT_GT(r.at("time_us").get<double>(), 0);
    EXPECT_LE(r.at("min_us").get<double>(), r.at("time_us").get<double>());
    EXPECT_NEAR(r.at("algbw_gbps").get<double>(), bytes / (r.at("time_us").get<double>() * 1e3), 1e-9);
    EXPECT_NEAR(r.at("busbw_gbps").get<double>(), r.at("algbw_gbps").get<double>() * factor, 1e-9);
  }
}

const char* kSmallSweep[] = {"--min-bytes", "8", "--max-bytes", "4K", "--step-factor", "8",
                             "--warmup",    "1", "--iters",     "3",  "--check",       "--json"};

std::vector<std::string> small_sweep(const std::string& mode, const std::string& op) {
  std::vector<std::string> args = {"--mode", mode, "--op", op};
  args.insert(args.end(), std::begin(kSmallSweep), std::end(kSmallSweep));
  return args;
}

class KoloBenchUnderKolorun : public ::testing::TestWithParam<std::tuple<std::string, std::string, int>> {};

TEST_P(KoloBenchUnderKolorun, ChecksEveryRankAndReportsJson) {
  const auto& [mode, op, nranks] = GetParam();
  const ProcessResult run = kolo_bench(nranks, small_sweep(mode, op));
  ASSERT_FALSE(run.timed_out) << run.err;
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  expect_valid_sweep(json_of(run), "kolo-" + mode, op, nranks);
}

INSTANTIATE_TEST_SUITE_P(EveryCollective, KoloBenchUnderKolorun,
                         ::testing::Combine(::testing::Values("comm", "api"),
                                            ::testing::Values("allreduce", "allgather", "broadcast", "alltoall",
                                                              "reducescatter"),
                                            ::testing::Values(2)));
INSTANTIATE_TEST_SUITE_P(ThreeRanks, KoloBenchUnderKolorun,
                         ::testing::Combine(::testing::Values("comm", "api"),
                                            ::testing::Values("allreduce", "alltoall"), ::testing::Values(3)));

TEST(KoloBench, InPlaceHalfPrecisionAverageThroughTheApi) {
  auto args = small_sweep("api", "allreduce");
  for (const char* a : {"--in-place", "--dtype", "bfloat16", "--reduce", "avg"}) args.push_back(a);
  const ProcessResult run = kolo_bench(3, args);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const auto j = json_of(run);
  EXPECT_EQ(j.at("in_place"), true);
  EXPECT_EQ(j.at("dtype"), "bfloat16");
  EXPECT_EQ(j.at("reduce"), "avg");
  EXPECT_EQ(j.at("wrong_total"), 0);
}

TEST(KoloBench, PrintsAnNcclTestsStyleTable) {
  const ProcessResult run = kolo_bench(2, {"--mode", "comm", "--min-bytes", "1K", "--max-bytes", "4K", "--iters", "2", "--check"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("# kolo-bench  backend=kolo-comm  op=allreduce  ranks=2"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("busbw"), std::string::npos);
  EXPECT_NE(run.out.find("# Out of bounds values : 0 OK"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("# Avg bus bandwidth"), std::string::npos);
  // Only rank 0 reports: one header line.
  EXPECT_EQ(run.out.find("# kolo-bench"), run.out.rfind("# kolo-bench"));
}

TEST(KoloBench, CommModeMeasuresTheCommunicatorKoloBackendChooses) {
  for (const std::string backend : {"shm", "gloo", "tcp"}) {
    const ProcessResult run = kolo_bench(2, small_sweep("comm", "allgather"), {{"KOLO_BACKEND", backend}});
    ASSERT_EQ(run.exit_code, 0) << backend << ": " << run.out << run.err;
    const auto j = json_of(run);
    EXPECT_EQ(j.at("extra").at("communicator"), backend);
    EXPECT_EQ(j.at("wrong_total"), 0);
  }
}

// Large allreduces over kolo::Buffers take the shm communicator's in-place path,
// over plain memory the slots: both must be right, across the 1 MiB threshold
// and at a count that is no multiple of the pieces' alignment, in place too.
TEST(KoloBench, CommModeReducesKoloAndPlainBuffersAlike) {
  for (const std::string buffers : {"kolo", "plain"}) {
    for (const bool in_place : {false, true}) {
      std::vector<std::string> args = {"--mode", "comm", "--sizes", "512K,1M,3000004", "--warmup", "1",
                                       "--iters", "2", "--check", "--json", "--buffers", buffers};
      if (in_place) args.push_back("--in-place");
      const ProcessResult run = kolo_bench(3, args);
      ASSERT_EQ(run.exit_code, 0) << buffers << ": " << run.out << run.err;
      const auto j = json_of(run);
      EXPECT_EQ(j.at("extra").at("buffers"), buffers);
      EXPECT_EQ(j.at("wrong_total"), 0) << buffers << " in_place=" << in_place;
      EXPECT_EQ(j.at("results").size(), 3u);
    }
  }
}

TEST(KoloBench, RunsAsAJobOfOneWithoutKolorun) {
  const ProcessResult run = run_command(
      {KOLO_BENCH_PATH, "--mode", "comm", "--max-bytes", "1K", "--iters", "2", "--check", "--json"},
      std::chrono::seconds(30));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto j = json_of(run);
  EXPECT_EQ(j.at("ranks"), 1);
  EXPECT_EQ(j.at("extra").at("communicator"), "self");
  EXPECT_EQ(j.at("wrong_total"), 0);
}

TEST(KoloBench, TrainingStepReportsPerTensorAgainstFused) {
  // The model shrunk to 1 MiB keeps its 161 tensors and their order.
  const ProcessResult run = kolo_bench(2, {"--mode", "step", "--max-bytes", "1M", "--warmup", "1", "--iters", "2",
                                           "--check", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const auto j = json_of(run);
  EXPECT_EQ(j.at("tensors"), 161);
  EXPECT_LE(j.at("bytes").get<std::size_t>(), 1u << 20);
  EXPECT_GT(j.at("params").get<std::size_t>(), 100000u);
  EXPECT_EQ(j.at("wrong_total"), 0);
  ASSERT_EQ(j.at("results").size(), 3u);
  EXPECT_EQ(j.at("results")[0].at("variant"), "api-per-tensor");
  EXPECT_EQ(j.at("results")[0].at("tensors"), 161);
  EXPECT_EQ(j.at("results")[1].at("variant"), "api-fused");
  EXPECT_EQ(j.at("results")[2].at("variant"), "comm-fused");
  EXPECT_GT(j.at("overhead_vs_api_fused").get<double>(), 0);
}

// With parameter servers --mode comm times the communicator through them, and
// --mode step the API's two variants (the servers serve init()'s session, not
// one beside it, so the communicator-alone variant is left out).
TEST(KoloBench, ModesRunThroughParameterServers) {
  const ProcessResult comm = kolo_bench(2, {"--mode", "comm", "--sizes", "8,64K", "--warmup", "1", "--iters", "3",
                                            "--check", "--json"}, {}, /*servers=*/1);
  ASSERT_EQ(comm.exit_code, 0) << comm.out << comm.err;
  EXPECT_EQ(json_of(comm).at("extra").at("communicator"), "ps");
  EXPECT_EQ(json_of(comm).at("wrong_total"), 0);
  const ProcessResult step = kolo_bench(2, {"--mode", "step", "--max-bytes", "1M", "--warmup", "1", "--iters", "2",
                                            "--check", "--json"}, {}, /*servers=*/1);
  ASSERT_EQ(step.exit_code, 0) << step.out << step.err;
  const auto j = json_of(step);
  EXPECT_EQ(j.at("wrong_total"), 0);
  ASSERT_EQ(j.at("results").size(), 2u);
  EXPECT_EQ(j.at("results")[0].at("variant"), "api-per-tensor");
  EXPECT_EQ(j.at("results")[1].at("variant"), "api-fused");
  EXPECT_FALSE(j.contains("overhead_vs_comm"));
}

TEST(KoloBench, BadArgumentsExitWithUsageErrorAndAMessage) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--op", "allsum"}, "allsum"},
      {{"--mode", "fast"}, "--mode"},
      {{"--mode", "comm", "--reduce", "avg"}, "--mode api"},
      {{"--mode", "api", "--op", "reducescatter", "--reduce", "max"}, "sum or avg"},
      {{"--mode", "step", "--dtype", "float64"}, "float32"},
      {{"--op", "broadcast", "--root", "5"}, "--root"},
      {{"--mode", "comm", "--buffers", "pinned"}, "--buffers needs kolo or plain"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {KOLO_BENCH_PATH};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const ProcessResult run = run_command(argv, std::chrono::seconds(30));
    EXPECT_EQ(run.exit_code, 2) << c.says << ": " << run.err;
    EXPECT_NE(run.err.find(c.says), std::string::npos) << run.err;
  }
}

}  // namespace
