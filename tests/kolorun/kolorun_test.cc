// kolorun, run as a real subprocess: output tagging, the ranks' environment,
// failure and signal handling, timeouts, and its answers to bad input.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#ifndef KOLORUN_PATH
#error "tests/CMakeLists.txt defines KOLORUN_PATH as the kolorun binary"
#endif

#include "common/job_names.h"
#include "harness/job_processes.h"
#include "harness/kolorun_process.h"
#include "supervision/job_cgroup.h"
#include "harness/temp_dir.h"
#include "harness/time_bound.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using kolo::testing::time_bound;

using kolo::testing::KolorunProcess;
using kolo::testing::lines_of;
using kolo::testing::RunResult;
using kolo::testing::process_alive;

RunResult run_kolorun(const std::vector<std::string>& args, std::chrono::milliseconds timeout = 10s) {
  return kolo::testing::run_kolorun_at(KOLORUN_PATH, args, timeout);
}


bool wait_until_gone(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (process_alive(pid)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Waits until the file exists and holds a complete line.
std::optional<std::string> wait_for_line(const fs::path& path, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    std::string content = read_file(path);
    if (auto newline = content.find('\n'); newline != std::string::npos) return content.substr(0, newline);
    std::this_thread::sleep_for(10ms);
  }
  return std::nullopt;
}

std::vector<pid_t> read_pids(const fs::path& dir, const std::string& prefix) {
  std::vector<pid_t> pids;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind(prefix, 0) != 0) continue;
    std::string text = read_file(entry.path());
    if (!text.empty()) pids.push_back(std::stoi(text));
  }
  return pids;
}

class KolorunTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return temp_.file(name); }

  std::string write_script(const std::string& name, const std::string& body, mode_t mode = 0755) const {
    std::string file = path(name);
    std::ofstream(file) << body;
    chmod(file.c_str(), mode);
    return file;
  }

  kolo::testing::TempDir temp_{"kolorun_test"};
  const fs::path dir_ = temp_.path();
};

// Expects kolorun's answer to bad input: one line starting "kolorun: ".
void expect_one_error_line(const RunResult& result, const std::string& must_contain) {
  EXPECT_FALSE(result.timed_out);
  EXPECT_TRUE(result.exited);
  EXPECT_NE(result.exit_code, 0);
  auto lines = lines_of(result.err);
  ASSERT_EQ(lines.size(), 1u) << result.err;
  EXPECT_EQ(lines[0].rfind("kolorun: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(must_contain), std::string::npos) << lines[0];
  EXPECT_EQ(result.out, "");
}

TEST_F(KolorunTest, TagsEachLineWithRankAndStream) {
  auto result = run_kolorun({"-np", "2", "sh", "-c", "echo out$KOLO_RANK; echo err$KOLO_RANK >&2"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto out = lines_of(result.out);
  auto err = lines_of(result.err);
  EXPECT_EQ(std::set<std::string>(out.begin(), out.end()),
            (std::set<std::string>{"[0]<stdout>:out0", "[1]<stdout>:out1"}));
  EXPECT_EQ(std::set<std::string>(err.begin(), err.end()),
            (std::set<std::string>{"[0]<stderr>:err0", "[1]<stderr>:err1"}));
}

TEST_F(KolorunTest, NoTagOutputPassesLinesPlain) {
  auto result = run_kolorun({"--no-tag-output", "-np", "1", "sh", "-c", "echo plain; echo oops >&2"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "plain\n");
  EXPECT_EQ(result.err, "oops\n");
}

// Untagged output is passed on byte for byte: a newline was added to its end.
TEST_F(KolorunTest, NoTagOutputKeepsBinaryOutputExact) {
  auto result = run_kolorun({"--no-tag-output", "-np", "1", "printf", "\\001\\000binary\\nno newline"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, std::string("\x01\0binary\nno newline", 19));
}

TEST_F(KolorunTest, PartialLastLineIsStillPrinted) {
  auto result = run_kolorun({"-np", "1", "printf", "first\\nlast without newline"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "[0]<stdout>:first\n[0]<stdout>:last without newline\n");
}

TEST_F(KolorunTest, EachRankSeesItsEnvironment) {
  auto result = run_kolorun({"-np", "3", "sh", "-c",
                             "echo $KOLO_RANK/$KOLO_SIZE/$KOLO_LOCAL_RANK/$KOLO_LOCAL_SIZE/$KOLO_CROSS_RANK/"
                             "$KOLO_CROSS_SIZE; echo job=$KOLO_JOB_ID host=$KOLO_HOSTNAME >&2"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto out = lines_of(result.out);
  EXPECT_EQ(std::set<std::string>(out.begin(), out.end()),
            (std::set<std::string>{"[0]<stdout>:0/3/0/3/0/1", "[1]<stdout>:1/3/1/3/0/1", "[2]<stdout>:2/3/2/3/0/1"}));

  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  std::set<std::string> job_lines;
  for (const auto& line : lines_of(result.err)) job_lines.insert(line.substr(line.find(':') + 1));
  ASSERT_EQ(job_lines.size(), 1u) << "every rank sees the same job id and host:\n" << result.err;
  EXPECT_TRUE(std::regex_match(*job_lines.begin(), std::regex("job=[0-9a-f]{16} host=" + std::string(hostname))))
      << *job_lines.begin();
}

TEST_F(KolorunTest, EachRankSeesWhatHorovodrunWouldSet) {
  auto result = run_kolorun({"-np", "2", "sh", "-c",
                             "echo $HOROVOD_RANK/$HOROVOD_SIZE/$HOROVOD_LOCAL_RANK/$HOROVOD_LOCAL_SIZE/"
                             "$HOROVOD_CROSS_RANK/$HOROVOD_CROSS_SIZE/${HOROVOD_HOSTNAME:+host}"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto out = lines_of(result.out);
  EXPECT_EQ(std::set<std::string>(out.begin(), out.end()),
            (std::set<std::string>{"[0]<stdout>:0/2/0/2/0/1/host", "[1]<stdout>:1/2/1/2/0/1/host"}));
}

// kolorun asks glibc for transparent huge pages in every rank
// (plan/rank_environment.cc), after the user's own tunables, unless
// KOLO_TUNE_MALLOC is off or the user chose.
std::string rank_tunables(const std::vector<std::string>& env) {
  std::vector<std::string> argv{"env", "-u", "GLIBC_TUNABLES"};
  argv.insert(argv.end(), env.begin(), env.end());
  for (auto& arg : kolo::testing::kolorun_command(
           KOLORUN_PATH, {"--no-tag-output", "-np", "1", "sh", "-c", "echo \"<$GLIBC_TUNABLES>\""}))
    argv.push_back(arg);
  auto result = kolo::testing::run_command(argv, 10s);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return result.out;
}

TEST_F(KolorunTest, RanksAskGlibcForHugePagesUnlessTold) {
  EXPECT_EQ(rank_tunables({}), "<glibc.malloc.hugetlb=1>\n");
  EXPECT_EQ(rank_tunables({"GLIBC_TUNABLES=glibc.malloc.arena_max=2"}),
            "<glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1>\n");
  EXPECT_EQ(rank_tunables({"GLIBC_TUNABLES=glibc.malloc.hugetlb=0"}), "<glibc.malloc.hugetlb=0>\n");
  EXPECT_EQ(rank_tunables({"KOLO_TUNE_MALLOC=0"}), "<>\n");
  EXPECT_EQ(rank_tunables({"KOLO_TUNE_MALLOC=off"}), "<>\n");
}

// And glibc follows: a rank's 64 MiB block is backed by huge pages.
TEST_F(KolorunTest, ARanksLargeBlockIsBackedByHugePages) {
  std::ifstream mode_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode((std::istreambuf_iterator<char>(mode_file)), std::istreambuf_iterator<char>());
  if (mode.find("[never]") != std::string::npos || mode.empty())
    GTEST_SKIP() << "transparent huge pages are off on this machine";
  const std::string program =
      "b = bytearray(64 << 20)\n"
      "print([l.split()[1] for l in open('/proc/self/smaps_rollup') if l.startswith('AnonHugePages')][0])\n";
  auto result = run_kolorun({"--no-tag-output", "-np", "1", "/usr/bin/python3", "-c", program});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_GE(std::stol(result.out), 32 << 10) << "kB of huge pages: " << result.out;
}

TEST_F(KolorunTest, SlotsOfHostsGiveTheRankCount) {
  auto result = run_kolorun({"-H", "localhost:2", "sh", "-c", "echo $KOLO_RANK/$KOLO_SIZE"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto out = lines_of(result.out);
  EXPECT_EQ(std::set<std::string>(out.begin(), out.end()),
            (std::set<std::string>{"[0]<stdout>:0/2", "[1]<stdout>:1/2"}));

  result = run_kolorun({"-np", "3", "-H", "127.0.0.1:2,localhost:2", "sh", "-c", "echo $KOLO_LOCAL_SIZE"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(lines_of(result.out).size(), 3u);
  for (const auto& line : lines_of(result.out)) EXPECT_EQ(line.substr(line.find(':') + 1), "3");
}

TEST_F(KolorunTest, ArgumentsAfterProgramPassThroughUntouched) {
  auto result = run_kolorun({"-np", "1", "sh", "-c", "for a in \"$@\"; do echo \"<$a>\"; done", "sh", "-np", "5",
                             "--verbose", "--", "two words", "--timeout=1"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out,
            "[0]<stdout>:<-np>\n[0]<stdout>:<5>\n[0]<stdout>:<--verbose>\n[0]<stdout>:<-->\n"
            "[0]<stdout>:<two words>\n[0]<stdout>:<--timeout=1>\n");
  EXPECT_EQ(result.err, "");
}

TEST_F(KolorunTest, StdinIsDevNullAndEachRankLeadsItsProcessGroup) {
  // Field 5 of /proc/PID/stat is the process group.
  auto result = run_kolorun(
      {"-np", "2", "sh", "-c", "readlink /proc/$$/fd/0; cat; [ \"$(cut -d' ' -f5 /proc/$$/stat)\" = $$ ] && echo leader"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto out = lines_of(result.out);
  EXPECT_EQ(std::multiset<std::string>(out.begin(), out.end()),
            (std::multiset<std::string>{"[0]<stdout>:/dev/null", "[0]<stdout>:leader", "[1]<stdout>:/dev/null",
                                        "[1]<stdout>:leader"}));
}

TEST_F(KolorunTest, ScriptWithoutInterpreterLineRunsWithSh) {
  std::string script = write_script("plain.sh", "echo from script $KOLO_RANK\n");
  auto result = run_kolorun({"-np", "1", script});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "[0]<stdout>:from script 0\n");
}

TEST_F(KolorunTest, SecretIsInTheEnvironmentButOnNoCommandLine) {
  // Each rank writes its secret, then waits (bounded) while the test looks at every
  // process's command line.
  auto result_future = std::make_unique<KolorunProcess>(KOLORUN_PATH, std::vector<std::string>{
      "-np", "2", "sh", "-c",
      "echo $KOLO_SECRET > " + path("secret.") + "$KOLO_RANK; i=0; while [ ! -e " + path("go") +
          " ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done"});
  auto secret = wait_for_line(path("secret.0"), 5s);
  ASSERT_TRUE(secret.has_value());
  ASSERT_TRUE(wait_for_line(path("secret.1"), 5s).has_value());
  EXPECT_EQ(*wait_for_line(path("secret.1"), 1s), *secret);
  EXPECT_GE(secret->size(), 32u);

  int scanned = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline;
    try {
      cmdline = read_file(entry.path() / "cmdline");
    } catch (const std::exception&) {
      continue;  // the process exited while being read (libstdc++ throws on ESRCH): no command line left
    }
    EXPECT_EQ(cmdline.find(*secret), std::string::npos) << "the secret is on the command line of pid " << name;
    ++scanned;
  }
  EXPECT_GT(scanned, 2);
  std::ofstream(path("go")) << "go\n";
  auto result = result_future->wait(10s);
  EXPECT_EQ(result.exit_code, 0) << result.err;
}

TEST_F(KolorunTest, StoreAddressIsAListeningLoopbackPort) {
  auto result = run_kolorun({"-np", "2", "bash", "-c",
                             "case $KOLO_STORE_ADDR in 127.0.0.1:*) ;; *) exit 5;; esac; "
                             "exec 3<>/dev/tcp/${KOLO_STORE_ADDR%:*}/${KOLO_STORE_ADDR#*:} && echo connected"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, result.out.find("[0]") == 0 ? "[0]<stdout>:connected\n[1]<stdout>:connected\n"
                                                    : "[1]<stdout>:connected\n[0]<stdout>:connected\n");
}

TEST_F(KolorunTest, FailedRankEndsTheJobWithItsCode) {
  // Every rank runs a sleeping child (so the group kill must reach grandchildren);
  // rank 1 exits 3 once all of them are running.
  std::string body = "sleep 60 & echo $! > " + path("child.") + "$KOLO_RANK; echo $$ > " + path("rank.") +
                     "$KOLO_RANK; if [ $KOLO_RANK = 1 ]; then i=0; while [ $(ls " + path("") +
                     " | grep -c child) -lt 3 ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done; exit 3; fi; wait";
  auto result = run_kolorun({"-np", "3", "sh", "-c", body});
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_LT(result.elapsed, time_bound(5s));
  EXPECT_TRUE(std::regex_search(result.err, std::regex("kolorun: rank 1 \\(pid [0-9]+\\) exited with code 3")))
      << result.err;
  auto children = read_pids(dir_, "child.");
  auto ranks = read_pids(dir_, "rank.");
  EXPECT_EQ(children.size(), 3u);
  EXPECT_EQ(ranks.size(), 3u);
  for (pid_t pid : children) EXPECT_TRUE(wait_until_gone(pid, 2s)) << "sleeping child " << pid << " survived";
  for (pid_t pid : ranks) EXPECT_FALSE(process_alive(pid)) << "rank " << pid << " survived";
}

// A program that is not a kolo program keeps no flight record: kolorun used to
// print that it could not read the record directory for every failed one.
TEST_F(KolorunTest, FailedProgramWithoutFlightRecordGetsNoFlightReport) {
  auto result = run_kolorun({"-np", "2", "sh", "-c", "exit 3"});
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_EQ(result.err.find("flight record"), std::string::npos) << result.err;
}

TEST_F(KolorunTest, RankKilledBySignalIsNamedWithTheSignal) {
  auto result = run_kolorun({"-np", "2", "sh", "-c", "if [ $KOLO_RANK = 1 ]; then kill -9 $$; fi; sleep 30"});
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_code, 128 + SIGKILL) << result.err;
  EXPECT_TRUE(std::regex_search(result.err,
                                std::regex("kolorun: rank 1 \\(pid [0-9]+\\) was killed by signal 9 \\(Killed\\)")))
      << result.err;
}

// kolorun's stdout closed under it (`kolorun -np 2 yes | head -2`) used to keep
// it reading and dropping the ranks' output at full speed forever.
TEST_F(KolorunTest, ClosedStdoutEndsTheJobAsInAShellPipeline) {
  const std::string pipeline = std::string("timeout 20 ") + KOLORUN_PATH +
                               " -np 2 yes | head -2 > /dev/null; echo \"${PIPESTATUS[0]}\"";
  auto result = kolo::testing::run_command({"bash", "-c", pipeline}, 30s);
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.out, std::to_string(128 + SIGPIPE) + "\n") << result.err;
  EXPECT_LT(result.elapsed, time_bound(5s));
  EXPECT_TRUE(std::regex_search(result.err, std::regex("rank [01] \\(pid [0-9]+\\) was killed by signal 13")))
      << result.err;
}

// A full disk used to lose the output silently, with exit 0.
TEST_F(KolorunTest, OutputThatCannotBeWrittenIsSaidAndFailsTheJob) {
  const std::string command = std::string(KOLORUN_PATH) + " -np 2 sh -c 'echo hello' > /dev/full";
  auto result = kolo::testing::run_command({"sh", "-c", command}, 20s);
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_code, 74) << result.err;
  EXPECT_NE(result.err.find("kolorun: cannot write the ranks' output to kolorun's stdout"), std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find("No space left on device"), std::string::npos) << result.err;
  EXPECT_EQ(lines_of(result.err).size(), 1u) << result.err;
}

void expect_stops_on_signal(const fs::path& dir, int sig) {
  std::string body = "sleep 60 & echo $! > " + (dir / "child.").string() + "$KOLO_RANK; wait";
  KolorunProcess process(KOLORUN_PATH, {"-np", "2", "sh", "-c", body});
  ASSERT_TRUE(wait_for_line(dir / "child.0", 5s).has_value());
  ASSERT_TRUE(wait_for_line(dir / "child.1", 5s).has_value());
  kill(process.pid(), sig);
  auto result = process.wait(10s);
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_code, 128 + sig) << result.err;
  EXPECT_LT(result.elapsed, time_bound(5s));
  for (pid_t pid : read_pids(dir, "child.")) EXPECT_TRUE(wait_until_gone(pid, 2s)) << pid << " survived";
}

TEST_F(KolorunTest, SigtermToKolorunStopsEveryRank) { expect_stops_on_signal(dir_, SIGTERM); }

TEST_F(KolorunTest, SigintToKolorunStopsEveryRank) { expect_stops_on_signal(dir_, SIGINT); }

TEST_F(KolorunTest, SecondSignalKillsAtOnce) {
  // The rank ignores SIGTERM and the grace is long: only the second signal ends it.
  KolorunProcess process(KOLORUN_PATH, {"--kill-grace", "30", "-np", "1", "sh", "-c",
                          "trap '' TERM; echo $$ > " + path("rank") + "; while :; do sleep 0.05; done"});
  auto pid = wait_for_line(path("rank"), 5s);
  ASSERT_TRUE(pid.has_value());
  kill(process.pid(), SIGTERM);
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(process_alive(std::stoi(*pid)));
  kill(process.pid(), SIGTERM);
  auto result = process.wait(10s);
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  EXPECT_LT(result.elapsed, time_bound(5s));
  EXPECT_NE(result.err.find("received SIGTERM again; killing every rank now"), std::string::npos) << result.err;
  EXPECT_TRUE(wait_until_gone(std::stoi(*pid), 2s));
}

// Started in the background by a script (`kolorun ... &` in a shell without job
// control), kolorun inherits SIGINT and SIGQUIT ignored, and its ranks did too:
// the Ctrl-C it forwarded did nothing, and they were killed after the grace,
// without their cleanup. Every rank starts with every signal at its default.
TEST_F(KolorunTest, RanksOfAKolorunThatIgnoresSigintDieOfTheSigintItForwards) {
  const std::string command = "trap '' INT QUIT; exec " + std::string(KOLORUN_PATH) +
                              " --verbose --kill-grace 30 -np 2 sh -c 'echo $$ > " + path("rank.") +
                              "$KOLO_RANK; exec sleep 60'";
  kolo::testing::Subprocess process({"sh", "-c", command});
  ASSERT_TRUE(wait_for_line(path("rank.0"), 5s).has_value());
  ASSERT_TRUE(wait_for_line(path("rank.1"), 5s).has_value());
  const auto start = Clock::now();
  kill(process.pid(), SIGINT);
  auto result = process.wait(40s);
  EXPECT_EQ(result.exit_code, 128 + SIGINT) << result.err;
  EXPECT_LT(Clock::now() - start, time_bound(5s)) << result.err;
  EXPECT_EQ(result.err.find("did not stop"), std::string::npos) << result.err;
  for (const char* rank : {"0", "1"}) {
    EXPECT_TRUE(std::regex_search(result.err, std::regex(std::string("rank ") + rank +
                                                         " \\(pid [0-9]+\\) was killed by signal 2 ")))
        << result.err;
  }
}

// The flight directory kolorun chose for the job (/tmp/kolo-flight-<job tag>)
// stayed unless the job succeeded: after SIGTERM, SIGHUP, a double SIGINT or a
// failed rank. Each end removes it. The ranks ignore SIGINT, so that only the
// second SIGINT (which kills them) ends the job.
void expect_flight_directory_gone_after(const fs::path& dir, const std::vector<int>& signals, int status,
                                        const std::string& rank_1_does = "") {
  const std::string body = "mkdir -p $KOLO_FLIGHT_RECORDER_DIR; echo $KOLO_FLIGHT_RECORDER_DIR > " +
                           (dir / "flight.").string() + "$KOLO_RANK; " + rank_1_does +
                           "trap '' INT; while :; do sleep 0.05; done";
  KolorunProcess process(KOLORUN_PATH, {"--kill-grace", "30", "-np", "2", "sh", "-c", body});
  ASSERT_TRUE(wait_for_line(dir / "flight.0", 5s).has_value());
  ASSERT_TRUE(wait_for_line(dir / "flight.1", 5s).has_value());
  const fs::path flight = *wait_for_line(dir / "flight.0", 1s);
  for (int sig : signals) {
    kill(process.pid(), sig);
    std::this_thread::sleep_for(200ms);
  }
  auto result = process.wait(20s);
  EXPECT_EQ(result.exit_code, status) << result.err;
  EXPECT_FALSE(fs::exists(flight)) << flight << " stayed after kolorun exited";
  std::error_code ec;
  fs::remove_all(flight, ec);
}

TEST_F(KolorunTest, FlightDirectoryGoesAfterSigterm) {
  expect_flight_directory_gone_after(dir_, {SIGTERM}, 128 + SIGTERM);
}

TEST_F(KolorunTest, FlightDirectoryGoesAfterSighup) {
  expect_flight_directory_gone_after(dir_, {SIGHUP}, 128 + SIGHUP);
}

TEST_F(KolorunTest, FlightDirectoryGoesAfterADoubleSigint) {
  expect_flight_directory_gone_after(dir_, {SIGINT, SIGINT}, 128 + SIGINT);
}

TEST_F(KolorunTest, FlightDirectoryGoesAfterAFailedRank) {
  expect_flight_directory_gone_after(dir_, {}, 3, "if [ $KOLO_RANK = 1 ]; then exit 3; fi; ");
}

// A rank that starts a job of its own: kolorun set the rank's
// KOLO_FLIGHT_RECORDER_DIR to its job's directory, and the inner job takes one of
// its own instead (each job would otherwise read the other's records as its
// ranks' and name the wrong rank as the one that failed first). A directory the
// rank itself chose for the inner job is kept.
TEST_F(KolorunTest, AJobStartedByARankTakesAFlightDirectoryOfItsOwn) {
  const std::string inner = std::string(KOLORUN_PATH) + " -np 2 sh -c 'echo $KOLO_FLIGHT_RECORDER_DIR > " +
                            path("inner.") + "$KOLO_RANK'";
  const std::string chosen = std::string("KOLO_FLIGHT_RECORDER_DIR=") + path("chosen") + " " + KOLORUN_PATH +
                             " -np 1 sh -c 'echo $KOLO_FLIGHT_RECORDER_DIR > " + path("chosen.0") + "'";
  auto result = run_kolorun(
      {"-np", "1", "sh", "-c", "echo $KOLO_FLIGHT_RECORDER_DIR > " + path("outer") + " && " + inner + " && " + chosen},
      30s);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string outer = *wait_for_line(path("outer"), 1s);
  const std::string inner_0 = *wait_for_line(path("inner.0"), 1s);
  EXPECT_EQ(outer.rfind("/tmp/kolo-flight-", 0), 0u) << outer;
  EXPECT_EQ(inner_0.rfind("/tmp/kolo-flight-", 0), 0u) << inner_0;
  EXPECT_NE(inner_0, outer);
  EXPECT_EQ(*wait_for_line(path("inner.1"), 1s), inner_0);
  EXPECT_EQ(*wait_for_line(path("chosen.0"), 1s), path("chosen"));
}

TEST_F(KolorunTest, RanksDieWhenKolorunIsKilled) {
  // SIGKILL leaves kolorun no chance to clean up: the ranks' death signal does it.
  KolorunProcess process(KOLORUN_PATH, {"-np", "2", "sh", "-c", "echo $$ > " + path("rank.") + "$KOLO_RANK; exec sleep 60"});
  ASSERT_TRUE(wait_for_line(path("rank.0"), 5s).has_value());
  ASSERT_TRUE(wait_for_line(path("rank.1"), 5s).has_value());
  kill(process.pid(), SIGKILL);
  auto result = process.wait(10s);
  EXPECT_EQ(result.signal, SIGKILL);
  for (pid_t pid : read_pids(dir_, "rank.")) EXPECT_TRUE(wait_until_gone(pid, 2s)) << "rank " << pid << " survived";
}

// Processes a rank left running, in its group or out of it (setsid), used to
// outlive kolorun under PID 1 (the group kill of a rank that ended can also race
// with its children's death): none may be there once kolorun has exited.
TEST_F(KolorunTest, NoProcessOfTheJobOutlivesKolorun) {
  const std::string body = "sleep 60 & echo $! > " + path("child.") + "$KOLO_RANK; setsid sleep 60 & echo $! > " +
                           path("session.") + "$KOLO_RANK; sleep 0.3; if [ $KOLO_RANK = 1 ]; then exit 3; fi; exit 0";
  auto result = run_kolorun({"-np", "3", "sh", "-c", body});
  EXPECT_EQ(result.exit_code, 3) << result.err;
  auto left = read_pids(dir_, "child.");
  auto sessions = read_pids(dir_, "session.");
  EXPECT_EQ(left.size(), 3u);
  EXPECT_EQ(sessions.size(), 3u);
  left.insert(left.end(), sessions.begin(), sessions.end());
  for (pid_t pid : left) EXPECT_FALSE(process_alive(pid)) << pid << " outlived kolorun";
}

// Ctrl-Z (SIGTSTP) stopped kolorun but not the ranks, which lead groups of their
// own; they stop with it, and go on with it.
TEST_F(KolorunTest, CtrlZStopsTheRanksWithKolorun) {
  KolorunProcess process(KOLORUN_PATH, {"-np", "2", "sh", "-c", "echo $$ > " + path("rank.") + "$KOLO_RANK; exec sleep 60"});
  ASSERT_TRUE(wait_for_line(path("rank.0"), 5s).has_value());
  ASSERT_TRUE(wait_for_line(path("rank.1"), 5s).has_value());
  const auto ranks = read_pids(dir_, "rank.");
  auto state = [](pid_t pid) {
    std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    const auto close = stat.rfind(')');
    return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
  };
  auto all_in = [&](char wanted, std::vector<pid_t> pids) {
    const auto deadline = Clock::now() + 5s;
    while (Clock::now() < deadline) {
      if (std::all_of(pids.begin(), pids.end(), [&](pid_t p) { return state(p) == wanted; })) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  };
  kill(process.pid(), SIGTSTP);
  EXPECT_TRUE(all_in('T', {ranks[0], ranks[1], process.pid()}));
  kill(process.pid(), SIGCONT);
  EXPECT_TRUE(all_in('S', {ranks[0], ranks[1]}));
  kill(process.pid(), SIGTERM);
  auto result = process.wait(10s);
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
}

// The tag that names the job's files (common/job_names.h), as a rank's shell
// finds it: the end of the flight directory kolorun chose.
const std::string kShellJobTag = "t=${KOLO_FLIGHT_RECORDER_DIR#/tmp/kolo-flight-}; ";

// SIGKILL leaves kolorun no chance: the ranks' children used to survive it, and
// the job's flight directory and shared-memory files stayed. Its watchdog
// removes them.
TEST_F(KolorunTest, KillingKolorunLeavesNoProcessOrFileOfTheJob) {
  const std::string body = kShellJobTag + "sleep 60 & echo $! > " + path("child.") + "$KOLO_RANK; mkdir -p "
                           "$KOLO_FLIGHT_RECORDER_DIR; : > /dev/shm/kolo-$t-test$KOLO_RANK; echo $t > " + path("tag.") +
                           "$KOLO_RANK; wait";
  KolorunProcess process(KOLORUN_PATH, {"-np", "2", "sh", "-c", body});
  ASSERT_TRUE(wait_for_line(path("tag.0"), 5s).has_value());
  ASSERT_TRUE(wait_for_line(path("tag.1"), 5s).has_value());
  const std::string tag = *wait_for_line(path("tag.0"), 1s);
  ASSERT_TRUE(fs::exists("/tmp/kolo-flight-" + tag));
  ASSERT_TRUE(fs::exists("/dev/shm/kolo-" + tag + "-test0"));
  kill(process.pid(), SIGKILL);
  process.wait(10s);
  for (pid_t pid : read_pids(dir_, "child.")) EXPECT_TRUE(wait_until_gone(pid, 2s)) << "child " << pid << " survived";
  const auto deadline = Clock::now() + 2s;
  auto leftovers = [&] {
    return fs::exists("/tmp/kolo-flight-" + tag) || fs::exists("/dev/shm/kolo-" + tag + "-test0") ||
           fs::exists("/dev/shm/kolo-" + tag + "-test1");
  };
  while (leftovers() && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(leftovers()) << "the job's flight directory or shared memory stayed";
}

// What a rank started in a session of its own (setsid) is in no process group
// kolorun knows, and its parent is gone: the watchdog finds it by the job's id in
// its environment.
TEST_F(KolorunTest, KillingKolorunLeavesNoProcessOfTheJobEvenInOtherSessions) {
  const std::string body = kShellJobTag + "echo $KOLO_JOB_ID > " + path("job.") + "$KOLO_RANK; echo $t > " +
                           path("tag.") + "$KOLO_RANK; : > /dev/shm/kolo-$t-test$KOLO_RANK; setsid sleep 300 & sleep 300";
  KolorunProcess process(KOLORUN_PATH, {"-np", "2", "sh", "-c", body});
  ASSERT_TRUE(wait_for_line(path("job.0"), 5s).has_value());
  ASSERT_TRUE(wait_for_line(path("job.1"), 5s).has_value());
  const std::string job = *wait_for_line(path("job.0"), 1s);
  const std::string tag = *wait_for_line(path("tag.0"), 1s);
  const auto deadline = Clock::now() + 5s;
  while (kolo::testing::processes_of_job(job).size() < 4 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  ASSERT_GE(kolo::testing::processes_of_job(job).size(), 4u) << "two ranks, each with a sleep in another session";
  kill(process.pid(), SIGKILL);
  process.wait(10s);
  auto leftovers = [&] {
    return !kolo::testing::processes_of_job(job).empty() || fs::exists("/dev/shm/kolo-" + tag + "-test0") ||
           fs::exists("/dev/shm/kolo-" + tag + "-test1");
  };
  const auto gone_by = Clock::now() + time_bound(5s);
  while (leftovers() && Clock::now() < gone_by) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(kolo::testing::processes_of_job(job).empty()) << "a process of the job outlived kolorun";
  EXPECT_FALSE(leftovers()) << "the job's shared memory stayed";
}

// A descendant that leaves the rank's session and clears its environment is in
// no group kolorun knows and carries no job id: the job's cgroup still holds it
// (where kolorun may make one), so the watchdog kills it too.
TEST_F(KolorunTest, KillingKolorunKillsWhatLeftTheSessionAndTheEnvironment) {
  if (kolorun::own_cgroup_dir().empty() || ::geteuid() != 0) GTEST_SKIP() << "no writable cgroup2 hierarchy";
  const std::string body = "setsid env -i sleep 300 & echo $! > " + path("escaped.") + "$KOLO_RANK; sleep 300";
  KolorunProcess process(KOLORUN_PATH, {"-np", "2", "sh", "-c", body});
  ASSERT_TRUE(wait_for_line(path("escaped.0"), 5s).has_value());
  ASSERT_TRUE(wait_for_line(path("escaped.1"), 5s).has_value());
  std::vector<pid_t> escaped;
  for (const char* rank : {"0", "1"})
    escaped.push_back(std::stoi(*wait_for_line(path(std::string("escaped.") + rank), 1s)));
  std::this_thread::sleep_for(200ms);  // env has exec'd sleep, without the job's environment
  kill(process.pid(), SIGKILL);
  process.wait(10s);
  auto alive = [&] {
    for (pid_t pid : escaped)
      if (::kill(pid, 0) == 0) return true;
    return false;
  };
  const auto gone_by = Clock::now() + time_bound(5s);
  while (alive() && Clock::now() < gone_by) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(alive()) << "a process that left the session and the environment outlived kolorun";
  for (pid_t pid : escaped) ::kill(pid, SIGKILL);
}

// A rank that runs a job of its own (kolorun under kolorun): the outer job's
// watchdog kills the inner kolorun, whose watchdog must still clean up the inner job.
TEST_F(KolorunTest, KillingKolorunCleansUpAJobThatOneOfItsRanksStarted) {
  const std::string inner = "echo $KOLO_JOB_ID > " + path("job") + "; setsid sleep 300 & sleep 300";
  KolorunProcess process(KOLORUN_PATH, {"-np", "1", KOLORUN_PATH, "-np", "1", "sh", "-c", inner});
  ASSERT_TRUE(wait_for_line(path("job"), 5s).has_value());
  const std::string job = *wait_for_line(path("job"), 1s);
  const auto deadline = Clock::now() + 5s;
  while (kolo::testing::processes_of_job(job).size() < 3 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  ASSERT_GE(kolo::testing::processes_of_job(job).size(), 3u);
  kill(process.pid(), SIGKILL);
  process.wait(10s);
  const auto gone_by = Clock::now() + time_bound(5s);
  while (!kolo::testing::processes_of_job(job).empty() && Clock::now() < gone_by) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(kolo::testing::processes_of_job(job).empty()) << "a process of the inner job outlived both kolorun";
}

TEST_F(KolorunTest, RanksInheritNoSocketOfKolorun) {
  // The store's listening socket and connections stay in kolorun.
  auto result = run_kolorun({"-np", "2", "sh", "-c", "ls -l /proc/$$/fd | grep -c socket: || true"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, result.out.find("[0]") == 0 ? "[0]<stdout>:0\n[1]<stdout>:0\n" : "[1]<stdout>:0\n[0]<stdout>:0\n");
}

TEST_F(KolorunTest, RankIgnoringSigtermIsKilledAfterTheGrace) {
  // Rank 0 ignores SIGTERM (and so does its sleep, which inherits that).
  std::string body = "if [ $KOLO_RANK = 0 ]; then trap '' TERM; sleep 60 & echo $! > " + path("stubborn") +
                     "; wait; fi; i=0; while [ ! -s " + path("stubborn") +
                     " ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done; exit 4";
  auto result = run_kolorun({"--kill-grace", "0.5", "-np", "2", "sh", "-c", body});
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_code, 4) << result.err;
  EXPECT_GE(result.elapsed, 500ms);
  EXPECT_LT(result.elapsed, time_bound(4s));
  EXPECT_TRUE(std::regex_search(result.err, std::regex("kolorun: rank 0 \\(pid [0-9]+\\) did not stop within 0.5 s")))
      << result.err;
  auto stubborn = read_pids(dir_, "stubborn");
  ASSERT_EQ(stubborn.size(), 1u);
  EXPECT_TRUE(wait_until_gone(stubborn[0], 2s));
}

TEST_F(KolorunTest, TimeoutEndsTheJob) {
  auto result = run_kolorun({"--timeout", "0.5", "-np", "2", "sleep", "30"});
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_code, 124) << result.err;
  EXPECT_GE(result.elapsed, 500ms);
  EXPECT_LT(result.elapsed, time_bound(4s));
  EXPECT_NE(result.err.find("kolorun: the job did not finish within 0.5 s"), std::string::npos) << result.err;
}

// The job's files are named by a tag keyed with its secret, never by its id,
// which other users must not learn (nor predict the names).
TEST_F(KolorunTest, JobSharedMemoryIsRemovedAfterTheJob) {
  auto result = run_kolorun({"-np", "2", "sh", "-c",
                             kShellJobTag + "touch /dev/shm/kolo-$t-r$KOLO_RANK; echo $KOLO_JOB_ID $KOLO_SECRET $t"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto out = lines_of(result.out);
  ASSERT_FALSE(out.empty());
  std::istringstream words(out[0].substr(out[0].find(':') + 1));
  std::string job_id, secret, tag;
  words >> job_id >> secret >> tag;
  ASSERT_EQ(job_id.size(), 16u);
  EXPECT_EQ(tag, kolo::job_tag(secret));
  EXPECT_NE(tag, job_id);
  EXPECT_FALSE(fs::exists("/dev/shm/kolo-" + tag + "-r0"));
  EXPECT_FALSE(fs::exists("/dev/shm/kolo-" + tag + "-r1"));
}

TEST_F(KolorunTest, ManyLinesFromManyRanksStayWhole) {
  // Lines of varying length, up to several pipe buffers long, from four ranks at
  // once on both streams.
  const int lines_per_rank = 20000;
  std::string awk =
      "awk -v r=$KOLO_RANK 'BEGIN { x = \"x\"; while (length(x) < 200000) x = x x; for (i = 0; i < " + std::to_string(lines_per_rank) +
      "; i++) { n = (i * 7919) % 300; if (i % 5000 == 0) n = 200000;"
      " print \"r\" r \" i\" i \" \" substr(x, 1, n); if (i % 100 == 0) print \"e\" r \" i\" i > \"/dev/stderr\" } }'";
  auto start = Clock::now();
  auto result = run_kolorun({"-np", "4", "sh", "-c", awk}, 30s);
  auto elapsed = Clock::now() - start;
  ASSERT_EQ(result.exit_code, 0) << result.err.substr(0, 2000);

  // Parsed by hand: std::regex recurses once per character and overflows the
  // stack on the 200 kB lines.
  std::map<int, int> next_index;
  for (const auto& line : lines_of(result.out)) {
    int tag_rank = -1, rank = -1, index = -1, consumed = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "[%d]<stdout>:r%d i%d %n", &tag_rank, &rank, &index, &consumed), 3)
        << "mangled line: " << line.substr(0, 200);
    ASSERT_EQ(tag_rank, rank) << line.substr(0, 200);
    ASSERT_TRUE(rank >= 0 && rank < 4) << line.substr(0, 200);
    ASSERT_EQ(index, next_index[rank]) << "rank " << rank << " lines out of order";
    std::string_view payload = std::string_view(line).substr(static_cast<std::size_t>(consumed));
    std::size_t expected_length = index % 5000 == 0 ? 200000 : (index * 7919) % 300;
    ASSERT_EQ(payload.size(), expected_length) << "rank " << rank << " line " << index;
    ASSERT_EQ(payload.find_first_not_of('x'), std::string_view::npos) << "rank " << rank << " line " << index;
    ++next_index[rank];
  }
  for (int r = 0; r < 4; ++r) EXPECT_EQ(next_index[r], lines_per_rank) << "rank " << r;
  std::regex err_line("\\[([0-3])\\]<stderr>:e([0-3]) i([0-9]+)");
  int err_lines = 0;
  for (const auto& line : lines_of(result.err)) {
    ASSERT_TRUE(std::regex_match(line, err_line)) << "mangled line: " << line.substr(0, 200);
    ++err_lines;
  }
  EXPECT_EQ(err_lines, 4 * lines_per_rank / 100);
  std::cout << "relayed " << result.out.size() / 1e6 << " MB in "
            << std::chrono::duration<double>(elapsed).count() << " s\n";
}

TEST_F(KolorunTest, HelpAndVersion) {
  auto help = run_kolorun({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("usage: kolorun -np N"), std::string::npos);
  auto version = run_kolorun({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("kolorun (kolo) ", 0), 0u);
}

TEST_F(KolorunTest, VerbosePrintsThePlanWithoutTheSecret) {
  auto result = run_kolorun({"--verbose", "-np", "2", "sh", "-c", "echo $KOLO_SECRET"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find("2 ranks on 1 host"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("rank 1 on "), std::string::npos) << result.err;
  auto out = lines_of(result.out);
  ASSERT_FALSE(out.empty());
  std::string secret = out[0].substr(out[0].find(':') + 1);
  ASSERT_FALSE(secret.empty());
  EXPECT_EQ(result.err.find(secret), std::string::npos);
}

struct BadInput {
  std::vector<std::string> args;
  int exit_code;
  std::string message;
};

class KolorunBadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(KolorunBadInputTest, IsOneClearLineAndAFailingExit) {
  auto result = run_kolorun(GetParam().args);
  expect_one_error_line(result, GetParam().message);
  EXPECT_EQ(result.exit_code, GetParam().exit_code);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KolorunBadInputTest,
    ::testing::Values(BadInput{{"--bogus", "-np", "2", "true"}, 2, "unknown flag '--bogus'"},
                      BadInput{{"-np", "0", "true"}, 2, "-np needs a positive whole number, got '0'"},
                      BadInput{{"-np", "-1", "true"}, 2, "got '-1'"},
                      BadInput{{"-np", "abc", "true"}, 2, "got 'abc'"},
                      BadInput{{"-np", "2x", "true"}, 2, "got '2x'"},
                      BadInput{{"-np", "99999999999", "true"}, 2, "too large"},
                      BadInput{{"-np"}, 2, "-np needs a value"},
                      BadInput{{"-np", "2"}, 2, "no PROGRAM given"},
                      BadInput{{"true"}, 2, "-np N"},
                      BadInput{{"-np", "2", "--timeout", "0", "true"}, 2, "--timeout needs a positive number"},
                      BadInput{{"-np", "2", "--timeout", "soon", "true"}, 2, "got 'soon'"},
                      BadInput{{"-np", "2", "--kill-grace", "-1", "true"}, 2, "--kill-grace"},
                      BadInput{{"-np", "2", "--verbose=yes", "true"}, 2, "--verbose takes no value"},
                      BadInput{{"-np", "3", "-H", "localhost:2", "true"}, 2, "-np 3 is more than the 2 slots"},
                      BadInput{{"-np", "2", "-H", ":2", "true"}, 2, "has no host name"},
                      BadInput{{"-np", "2", "-H", "localhost:two", "true"}, 2, "positive slot count"},
                      BadInput{{"-np", "2", "-H", "localhost:2,", "true"}, 2, "empty entry"},
                      BadInput{{"-np", "2", "-H", "localhost:2:3", "true"}, 2, "'localhost:2' has a ':' but is no IPv6"},
                      BadInput{{"-np", "2", "--timeout", "99999999999999", "true"}, 2, "at most 1e9 seconds"},
                      BadInput{{"-np", "2", "--hostfile", "/nonexistent/hosts", "true"}, 2, "cannot read hostfile"},
                      BadInput{{"-np", "2", "kolo-no-such-program"}, 127, "command not found"},
                      BadInput{{"-np", "2", "/nonexistent/program"}, 127, "cannot run '/nonexistent/program'"},
                      BadInput{{"-np", "2", "/tmp"}, 126, "is a directory"},
                      BadInput{{"-np", "2", "--num-servers", "0", "true"}, 2,
                               "--num-servers needs a positive whole number, got '0'"},
                      BadInput{{"-np", "2", "--num-servers", "-1", "true"}, 2, "got '-1'"},
                      BadInput{{"-np", "2", "--num-servers", "two", "true"}, 2, "got 'two'"},
                      BadInput{{"-np", "2", "--num-servers"}, 2, "--num-servers needs a value"},
                      BadInput{{"-np", "2", "--server-hosts", "localhost:1", "true"}, 2,
                               "--server-hosts needs --num-servers"},
                      BadInput{{"-np", "2", "--num-servers", "3", "--server-hosts", "localhost:2", "true"}, 2,
                               "--num-servers 3 is more than the 2 slots given by --server-hosts"},
                      BadInput{{"-np", "2", "--num-servers", "1", "--server-hosts", "localhost:x", "true"}, 2,
                               "--server-hosts entry 'localhost:x' needs a positive slot count"},
                      BadInput{{"-np", "2", "--num-servers", "1", "--server-hosts", "a,,b", "true"}, 2,
                               "--server-hosts 'a,,b' has an empty entry"},
                      BadInput{{"-np", "2", "--num-servers", "1", "--mpi", "true"}, 2,
                               "cannot be used with --mpi"}));

// A hostfile was read whole, however large: `--hostfile /dev/zero` grew kolorun
// until it was killed. At most 1 MiB is read, and a line holds at most 4096 bytes.
TEST_F(KolorunTest, HostfileReadsAreBounded) {
  // Under a memory limit, so that a regression fails at once instead of filling
  // the machine (not under the sanitizers, which reserve terabytes of addresses).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const std::string limit;
#else
  const std::string limit = "ulimit -v 2000000; ";
#endif
  auto endless = kolo::testing::run_command(
      {"sh", "-c", limit + "exec " + KOLORUN_PATH + " -np 2 --hostfile /dev/zero true"}, 10s);
  expect_one_error_line(endless, "hostfile '/dev/zero' is larger than 1 MiB");
  EXPECT_EQ(endless.exit_code, 2);
  std::ofstream(path("large")) << std::string(2 << 20, 'a') << " slots=2\n";
  expect_one_error_line(run_kolorun({"-np", "2", "--hostfile", path("large"), "true"}),
                        "hostfile '" + path("large") + "' is larger than 1 MiB");
  std::ofstream(path("long")) << "localhost slots=2\n" << std::string(5000, 'a') << " slots=2\n";
  expect_one_error_line(run_kolorun({"-np", "2", "--hostfile", path("long"), "true"}),
                        "hostfile '" + path("long") + "' line 2 is longer than 4096 bytes");
}

// A NUL byte in a hostfile ended kolorun's message at the byte: it is shown.
TEST_F(KolorunTest, ANulByteInAHostfileIsShownInTheMessage) {
  std::ofstream(path("hosts")) << std::string("good\0bad slots=2\n", 18);
  auto result = run_kolorun({"-np", "2", "--hostfile", path("hosts"), "true"});
  expect_one_error_line(result, "host name 'good\\x00bad' has a character that cannot be in a host name");
  EXPECT_EQ(result.exit_code, 2);
}

TEST_F(KolorunTest, NonExecutableProgramIsRefusedBeforeAnyRankStarts) {
  std::string script = write_script("not_executable.sh", "#!/bin/sh\necho ran\n", 0644);
  auto result = run_kolorun({"-np", "2", script});
  expect_one_error_line(result, "is not an executable file");
  EXPECT_EQ(result.exit_code, 126);
}

TEST_F(KolorunTest, ExecFailureInTheRankIsReported) {
  // Passes the up-front check (an executable file) but exec fails: no interpreter.
  std::string script = write_script("bad_interpreter.sh", "#!/nonexistent/interpreter\necho ran\n");
  auto result = run_kolorun({"-np", "2", script});
  expect_one_error_line(result, "rank 0: cannot execute '" + script + "'");
  EXPECT_EQ(result.exit_code, 127);
}

}  // namespace
