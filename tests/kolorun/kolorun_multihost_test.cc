// kolorun across hosts, where the "hosts" are network namespaces on this machine
// (tests/harness/netns.h) joined by a bridge: ranks started through
// --launcher-command 'ip netns exec {host}' and through real ssh into a namespace,
// their places and environment, the store reached from every namespace, failures
// of a remote rank or host, the KOLO_HOST_ADDR each host's ranks get, and bad
// host lists. The public-API collective suite (programs/kolo_collective_suite.cc)
// runs across the namespace hosts (KolorunSuiteAcrossHosts) and under mpirun and
// kolorun --mpi (KolorunMpi). Every test checks that nothing is left running in
// any namespace.
//
// Suites that need no namespaces (KolorunHostInput, KolorunRemoteExec, KolorunMpi,
// KolorunSuiteProgram, KolorunHostAddress) run everywhere; the others skip when
// namespaces cannot be made (not root).
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "harness/job_processes.h"
#include "harness/netns.h"
#include "harness/time_bound.h"

#ifndef KOLORUN_PATH
#error "tests/CMakeLists.txt defines KOLORUN_PATH as the kolorun binary"
#endif

namespace {

namespace fs = std::filesystem;
using kolo::testing::NetnsHosts;
using kolo::testing::NetnsOptions;
using kolo::testing::Subprocess;
using kolo::testing::lines_of;
using kolo::testing::process_alive;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using kolo::testing::seconds_bound;
using kolo::testing::time_bound;
using Fields = std::map<std::string, std::string>;


// "[3]<stdout>:rank=3 size=4 ..." lines -> rank -> {key: value}.
std::map<int, Fields> rank_reports(const std::string& out) {
  static const std::regex line_pattern(R"(\[(\d+)\]<stdout>:(.*))");
  std::map<int, Fields> reports;
  for (const auto& line : lines_of(out)) {
    std::smatch match;
    if (!std::regex_match(line, match, line_pattern)) continue;
    std::istringstream words(match[2].str());
    for (std::string word; words >> word;) {
      auto eq = word.find('=');
      if (eq != std::string::npos) reports[std::stoi(match[1].str())][word.substr(0, eq)] = word.substr(eq + 1);
    }
  }
  return reports;
}

// A rank that reports where it is and whether it can open a TCP connection to
// the job's store from there (an IPv6 store address comes in brackets, which
// bash's /dev/tcp does not take).
const char kReportScript[] =
    "store_host=${KOLO_STORE_ADDR%:*}; store_host=${store_host#[}; store_host=${store_host%]}; "
    "if (exec 3<>/dev/tcp/$store_host/${KOLO_STORE_ADDR##*:}) 2>/dev/null; then reach=ok; else reach=no; fi; "
    "echo rank=$KOLO_RANK size=$KOLO_SIZE local=$KOLO_LOCAL_RANK/$KOLO_LOCAL_SIZE "
    "cross=$KOLO_CROSS_RANK/$KOLO_CROSS_SIZE host=$KOLO_HOSTNAME ns=$(ip netns identify) iface=$KOLO_IFACE "
    "store=$KOLO_STORE_ADDR secret_length=${#KOLO_SECRET} job=$KOLO_JOB_ID cwd=$(pwd) reach=$reach "
    "host_addr=$KOLO_HOST_ADDR launcher=$KOLO_LAUNCHER";


std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<pid_t> read_pids(const fs::path& dir, const std::string& prefix) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind(prefix, 0) != 0) continue;
    std::istringstream words(read_file(entry.path()));
    for (pid_t pid; words >> pid;) pids.push_back(pid);
  }
  return pids;
}

bool wait_for(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!condition()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// A temporary directory on the filesystem every namespace shares.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "kolorun_multihost.XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& content, fs::perms perms = fs::perms::owner_all) const {
    std::ofstream(file(name)) << content;
    fs::permissions(file(name), perms);
    return file(name);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ---------------------------------------------------------------------------
// Hosts made of network namespaces; kolorun runs in host 0.

class KolorunMultihostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = NetnsHosts::unavailable()) GTEST_SKIP() << "no network namespaces here: " << *why;
  }

  // After every test, passed or failed: nothing may be left in any namespace.
  void TearDown() override {
    if (hosts_) expect_hosts_empty(still_allowed_, settle_time_);
  }

  void make_hosts(int count, const std::string& qdisc = "", bool resolvable_names = false, bool ipv6 = false) {
    hosts_ = std::make_unique<NetnsHosts>(NetnsOptions{count, qdisc, resolvable_names, ipv6});
  }

  // "-H h0:2,h1:2" with the namespace names as host names.
  std::string host_list(const std::vector<int>& slots) const {
    std::string list;
    for (std::size_t i = 0; i < slots.size(); ++i)
      list += (i ? "," : "") + hosts_->name(static_cast<int>(i)) + ":" + std::to_string(slots[i]);
    return list;
  }

  std::vector<std::string> kolorun_in_host0(const std::vector<std::string>& args) const {
    return concat(concat(hosts_->exec_prefix(0), {KOLORUN_PATH}), args);
  }

  // kolorun in host 0, reaching the hosts through 'ip netns exec {host}'.
  Subprocess::Result run_netns_job(const std::vector<std::string>& args, std::chrono::milliseconds timeout = 20s) {
    return kolo::testing::run_command(
        kolorun_in_host0(concat({"--launcher-command", "ip netns exec {host}"}, args)), timeout);
  }

  // Nothing but `allowed` may be left running in any namespace.
  void expect_hosts_empty(const std::set<pid_t>& allowed = {}, std::chrono::milliseconds timeout = 3s) {
    for (int h = 0; h < hosts_->size(); ++h) {
      std::vector<pid_t> left;
      bool empty = wait_for(
          [&] {
            left.clear();
            for (pid_t pid : hosts_->pids(h))
              if (!allowed.count(pid)) left.push_back(pid);
            return left.empty();
          },
          timeout);
      std::string listing;
      for (pid_t pid : left) listing += " " + std::to_string(pid) + ":" + read_file("/proc/" + std::to_string(pid) + "/comm");
      EXPECT_TRUE(empty) << "left running in " << hosts_->name(h) << ":" << listing;
    }
  }

  void expect_report(const Fields& report, int rank, int size, const std::string& local, const std::string& cross,
                     int host) const {
    EXPECT_EQ(report.at("rank"), std::to_string(rank));
    EXPECT_EQ(report.at("size"), std::to_string(size));
    EXPECT_EQ(report.at("local"), local) << "rank " << rank;
    EXPECT_EQ(report.at("cross"), cross) << "rank " << rank;
    EXPECT_EQ(report.at("host"), hosts_->name(host)) << "rank " << rank;
    EXPECT_EQ(report.at("ns"), hosts_->name(host)) << "rank " << rank << " runs in the wrong namespace";
    EXPECT_EQ(report.at("reach"), "ok") << "rank " << rank << " cannot reach the store at " << report.at("store");
    EXPECT_EQ(report.at("secret_length"), "64");
    EXPECT_EQ(report.at("cwd"), fs::current_path().string());
    EXPECT_EQ(report.at("launcher"), "kolorun");
  }

  // KOLO_STORE_ADDR's beginning for a store on `address`.
  static std::string store_prefix(const std::string& address) {
    return address.find(':') == std::string::npos ? address + ":" : "[" + address + "]:";
  }

  // Three hosts whose names resolve (to IPv6 addresses only, with `ipv6`): each
  // host's ranks get its address, and the store listens on host 0's.
  void expect_resolved_addresses(bool ipv6) {
    make_hosts(3, "", /*resolvable_names=*/true, ipv6);
    auto result = run_netns_job({"--verbose", "-H", host_list({2, 1, 1}), "bash", "-c", kReportScript});
    ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
    auto reports = rank_reports(result.out);
    ASSERT_EQ(reports.size(), 4u) << result.out;
    const int host_of[] = {0, 0, 1, 2};
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(reports[r]["host_addr"], hosts_->address(host_of[r])) << "rank " << r;
      EXPECT_EQ(reports[r]["ns"], hosts_->name(host_of[r])) << "rank " << r;
      EXPECT_EQ(reports[r]["store"].rfind(store_prefix(hosts_->address(0)), 0), 0u) << reports[r]["store"];
      EXPECT_EQ(reports[r]["reach"], "ok") << "rank " << r << " cannot reach the store at " << reports[r]["store"];
    }
    // Every namespace host is another host to kolorun, host 0 included.
    EXPECT_NE(result.err.find("this host's address toward " + hosts_->name(0)), std::string::npos) << result.err;
  }

  std::unique_ptr<NetnsHosts> hosts_;
  TempDir dir_;
  // Processes a test's own fixture keeps running (sshd), and how long what the job
  // left may take to go.
  std::set<pid_t> still_allowed_;
  std::chrono::milliseconds settle_time_ = 3s;
};

TEST_F(KolorunMultihostTest, TwoHostsTwoRanksEachGetTheirPlacesAndReachTheStore) {
  make_hosts(2);
  auto result = run_netns_job({"-H", host_list({2, 2}), "--network-interface", NetnsHosts::kInterface, "bash", "-c",
                               kReportScript});
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  auto reports = rank_reports(result.out);
  ASSERT_EQ(reports.size(), 4u) << result.out;
  expect_report(reports[0], 0, 4, "0/2", "0/2", 0);
  expect_report(reports[1], 1, 4, "1/2", "0/2", 0);
  expect_report(reports[2], 2, 4, "0/2", "1/2", 1);
  expect_report(reports[3], 3, 4, "1/2", "1/2", 1);
  std::set<std::string> stores, jobs;
  for (auto& [rank, report] : reports) {
    stores.insert(report["store"]);
    jobs.insert(report["job"]);
    EXPECT_EQ(report["iface"], NetnsHosts::kInterface);
    EXPECT_EQ(report["host_addr"], "") << "KOLO_IFACE serves the ranks; no KOLO_HOST_ADDR beside it";
  }
  ASSERT_EQ(stores.size(), 1u);
  EXPECT_EQ(stores.begin()->rfind(hosts_->address(0) + ":", 0), 0u) << "the store listens on host 0's kolo0";
  EXPECT_EQ(jobs.size(), 1u);
  EXPECT_LT(result.elapsed, time_bound(10s));
}

TEST_F(KolorunMultihostTest, ThreeHostsOneRankEachOverShapedLinks) {
  // netem where the kernel has it; a rate limit (tbf) where it does not.
  const std::string netem = "netem delay 2ms rate 1gbit", tbf = "tbf rate 1gbit burst 64kb latency 50ms";
  const std::string qdisc = NetnsHosts::qdisc_available(netem) ? netem : tbf;
  RecordProperty("qdisc", qdisc);
  make_hosts(3, qdisc);
  auto result = run_netns_job({"-H", host_list({1, 1, 1}), "--network-interface", NetnsHosts::kInterface, "bash", "-c",
                               kReportScript});
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  auto reports = rank_reports(result.out);
  ASSERT_EQ(reports.size(), 3u) << result.out;
  for (int r = 0; r < 3; ++r) expect_report(reports[r], r, 3, "0/1", std::to_string(r) + "/3", r);
}

TEST_F(KolorunMultihostTest, HostfileWithFewerRanksThanSlotsFillsHostsInOrder) {
  make_hosts(3);
  std::string hostfile = dir_.write("hosts",
                                    "# three hosts, two slots each\n" + hosts_->name(0) + " slots=2\n\n   " +
                                        hosts_->name(1) + "   slots=2   # comment\n" + hosts_->name(2) + " slots=2\n",
                                    fs::perms::owner_read | fs::perms::owner_write);
  auto result = run_netns_job({"-np", "3", "--hostfile", hostfile, "--network-interface", NetnsHosts::kInterface,
                               "bash", "-c", kReportScript});
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  auto reports = rank_reports(result.out);
  ASSERT_EQ(reports.size(), 3u) << result.out;
  // Host 2 gets no rank; local rank 1 exists only on host 0 (Horovod's cross ranks).
  expect_report(reports[0], 0, 3, "0/2", "0/2", 0);
  expect_report(reports[1], 1, 3, "1/2", "0/1", 0);
  expect_report(reports[2], 2, 3, "0/1", "1/2", 1);
}

TEST_F(KolorunMultihostTest, WithoutNetworkInterfaceTheStoreUsesAnAddressTheHostsReach) {
  make_hosts(2);
  // The namespace names do not resolve: kolorun falls back to the first interface
  // that is up, which in host 0 is kolo0.
  auto result = run_netns_job({"--verbose", "-H", host_list({1, 1}), "bash", "-c", kReportScript});
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  auto reports = rank_reports(result.out);
  ASSERT_EQ(reports.size(), 2u) << result.out;
  EXPECT_EQ(reports[1]["store"].rfind(hosts_->address(0) + ":", 0), 0u) << reports[1]["store"];
  EXPECT_EQ(reports[1]["reach"], "ok");
  EXPECT_EQ(reports[1]["iface"], "");
  EXPECT_NE(result.err.find("the address of kolo0"), std::string::npos) << result.err;
  // Neither host name resolves, so kolorun knows no address for them.
  EXPECT_EQ(reports[0]["host_addr"], "");
  EXPECT_EQ(reports[1]["host_addr"], "");
}

TEST_F(KolorunMultihostTest, RanksGetTheAddressTheirHostNameResolvesTo) { expect_resolved_addresses(false); }

// Hosts with IPv6 addresses only: the store listens on host 0's, written in
// brackets before its port, and each host's ranks get the address their host
// name resolves to.
TEST_F(KolorunMultihostTest, IPv6OnlyHostsGetTheirAddressesAndReachTheStore) { expect_resolved_addresses(true); }

// Hosts named by their IPv6 addresses, in brackets ("-H [fd00::2]:1"): the
// ranks get the addresses without them. A launcher script finds each address's
// namespace.
TEST_F(KolorunMultihostTest, IPv6HostsGivenAsAddressesGetThemWithoutBrackets) {
  make_hosts(2, "", /*resolvable_names=*/false, /*ipv6=*/true);
  std::string enter = "#!/bin/sh\ncase \"$1\" in\n";
  for (int h = 0; h < 2; ++h) enter += "  \"[" + hosts_->address(h) + "]\") ns=" + hosts_->name(h) + " ;;\n";
  enter += "  *) echo \"no such host $1\" >&2; exit 1 ;;\nesac\nshift\nexec ip netns exec \"$ns\" \"$@\"\n";
  const std::string script = dir_.write("enter", enter);
  const std::string hosts = "[" + hosts_->address(0) + "]:1,[" + hosts_->address(1) + "]:1";
  auto result = kolo::testing::run_command(
      kolorun_in_host0({"--launcher-command", script + " {host}", "-H", hosts, "bash", "-c", kReportScript}), 20s);
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  auto reports = rank_reports(result.out);
  ASSERT_EQ(reports.size(), 2u) << result.out;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(reports[r]["ns"], hosts_->name(r)) << "rank " << r;
    EXPECT_EQ(reports[r]["host_addr"], hosts_->address(r)) << "rank " << r;
    EXPECT_EQ(reports[r]["store"].rfind(store_prefix(hosts_->address(0)), 0), 0u) << reports[r]["store"];
    EXPECT_EQ(reports[r]["reach"], "ok") << "rank " << r;
  }
}

TEST_F(KolorunMultihostTest, IPv6OnlyHostsWithTheirNetworkInterfaceNamed) {
  make_hosts(2, "", /*resolvable_names=*/false, /*ipv6=*/true);
  auto result = run_netns_job({"-H", host_list({1, 1}), "--network-interface", NetnsHosts::kInterface, "bash", "-c",
                               kReportScript});
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  auto reports = rank_reports(result.out);
  ASSERT_EQ(reports.size(), 2u) << result.out;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(reports[r]["store"].rfind(store_prefix(hosts_->address(0)), 0), 0u) << reports[r]["store"];
    EXPECT_EQ(reports[r]["reach"], "ok") << "rank " << r;
    EXPECT_EQ(reports[r]["iface"], NetnsHosts::kInterface);
  }
}

TEST_F(KolorunMultihostTest, KoloHostAddrSetByTheUserIsPassedUnchanged) {
  make_hosts(2, "", /*resolvable_names=*/true);
  const std::string chosen = hosts_->unused_address();
  auto result = kolo::testing::run_command(
      concat(hosts_->exec_prefix(0), {"env", "KOLO_HOST_ADDR=" + chosen, KOLORUN_PATH, "--launcher-command",
                                      "ip netns exec {host}", "-H", host_list({1, 1}), "bash", "-c", kReportScript}),
      20s);
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  auto reports = rank_reports(result.out);
  ASSERT_EQ(reports.size(), 2u) << result.out;
  EXPECT_EQ(reports[0]["host_addr"], chosen);
  EXPECT_EQ(reports[1]["host_addr"], chosen);
}

TEST_F(KolorunMultihostTest, RemoteRankFailureEndsTheJobAndNamesRankAndHost) {
  make_hosts(3);
  // Every other rank sleeps with a child in the background: all must go.
  std::string script = "if [ $KOLO_RANK = 4 ]; then sleep 0.5; exit 3; fi; sleep 100 & echo $$ $! > " +
                       dir_.file("pids.") + "$KOLO_RANK; wait";
  auto result = run_netns_job({"-H", host_list({2, 2, 2}), "--network-interface", NetnsHosts::kInterface, "sh", "-c",
                               script});
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_NE(result.err.find("kolorun: rank 4 on host " + hosts_->name(2) + ": exited with code 3"), std::string::npos)
      << result.err;
  EXPECT_LT(result.elapsed, time_bound(8s));
  EXPECT_EQ(read_pids(dir_.path(), "pids.").size(), 10u) << "five ranks, each with a child";
  for (pid_t pid : read_pids(dir_.path(), "pids.")) EXPECT_FALSE(process_alive(pid)) << pid << " survived";
}

TEST_F(KolorunMultihostTest, LauncherCommandThatCannotReachTheHostFailsTheJob) {
  make_hosts(2);
  const std::string missing = hosts_->name(1) + "-missing";
  auto result = run_netns_job({"-H", hosts_->name(1) + ":1," + missing + ":1", "--network-interface",
                               NetnsHosts::kInterface, "sleep", "100"});
  EXPECT_TRUE(result.exited);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("kolorun: rank 1 on host " + missing + ": exited with code"), std::string::npos)
      << result.err;
  EXPECT_LT(result.elapsed, time_bound(8s));
}

TEST_F(KolorunMultihostTest, KillingKolorunLeavesNothingOnAnyHost) {
  make_hosts(2);
  std::string script = "sleep 100 & echo $$ $! > " + dir_.file("pids.") + "$KOLO_RANK; wait";
  Subprocess kolorun(kolorun_in_host0({"--launcher-command", "ip netns exec {host}", "-H", host_list({1, 2}),
                                       "--network-interface", NetnsHosts::kInterface, "sh", "-c", script}));
  ASSERT_TRUE(wait_for([&] { return read_pids(dir_.path(), "pids.").size() == 6; }, 10s));
  ::kill(kolorun.pid(), SIGKILL);
  kolorun.wait(5s);
  // The remote ends see their stdin end and kill their rank's whole group,
  // children included.
  for (pid_t pid : read_pids(dir_.path(), "pids."))
    EXPECT_TRUE(wait_for([&] { return !process_alive(pid); }, 3s)) << pid << " survived";
}

TEST_F(KolorunMultihostTest, SignalsReachRemoteRanks) {
  make_hosts(2);
  std::string script = "trap 'echo got=TERM; exit 7' TERM; echo $$ > " + dir_.file("pids.") +
                       "$KOLO_RANK; sleep 100 & wait";
  Subprocess kolorun(kolorun_in_host0({"--launcher-command", "ip netns exec {host}", "-H", host_list({1, 1}),
                                       "--network-interface", NetnsHosts::kInterface, "sh", "-c", script}));
  ASSERT_TRUE(wait_for([&] { return read_pids(dir_.path(), "pids.").size() == 2; }, 10s));
  ::kill(kolorun.pid(), SIGTERM);
  auto result = kolorun.wait(10s);
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  auto reports = rank_reports(result.out);
  EXPECT_EQ(reports[0]["got"], "TERM") << result.out;
  EXPECT_EQ(reports[1]["got"], "TERM") << "the remote rank heard SIGTERM through its control channel\n" << result.out;
}

TEST_F(KolorunMultihostTest, SecretIsNeverOnACommandLine) {
  make_hosts(2);
  std::string script = "echo $KOLO_SECRET > " + dir_.file("secret.") + "$KOLO_RANK; sleep 2";
  Subprocess kolorun(kolorun_in_host0({"--launcher-command", "ip netns exec {host}", "-H", host_list({1, 1}),
                                       "--network-interface", NetnsHosts::kInterface, "sh", "-c", script}));
  std::string secret;
  ASSERT_TRUE(wait_for(
      [&] {
        secret = read_file(dir_.file("secret.1"));
        return secret.size() > 1 && secret.back() == '\n';
      },
      10s));
  secret.pop_back();
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::string cmdline = read_file(entry.path() / "cmdline");
    EXPECT_EQ(cmdline.find(secret), std::string::npos) << "the secret is on the command line of " << entry.path();
  }
  EXPECT_EQ(kolorun.wait(10s).exit_code, 0);
}

// A link taken down under a running job: the rank on the other side names the
// unreachable rank within KOLO_PEER_TIMEOUT, and the job ends.
class KolorunLinkDown : public KolorunMultihostTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(KolorunLinkDown, IsNamedWithinThePeerTimeout) {
  make_hosts(2, "", /*resolvable_names=*/true);
  Subprocess kolorun(kolorun_in_host0({"--launcher-command", "ip netns exec {host}", "--bind-to", "none", "-H",
                                       host_list({1, 1}), "env", std::string("KOLO_BACKEND=") + GetParam(),
                                       "KOLO_PEER_TIMEOUT=2", KOLO_STUCK_PATH, "steady", dir_.file("running")}));
  ASSERT_TRUE(wait_for([&] { return fs::exists(dir_.file("running.0")) && fs::exists(dir_.file("running.1")); }, 20s));
  const auto start = std::chrono::steady_clock::now();
  hosts_->set_link(1, false);
  auto result = kolorun.wait(time_bound(20s));
  EXPECT_FALSE(result.timed_out);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, time_bound(12s));
  EXPECT_NE(result.err.find("rank 0: rank 1 made no progress for 2"), std::string::npos) << result.err;
}

INSTANTIATE_TEST_SUITE_P(Backends, KolorunLinkDown, ::testing::Values("tcp", "gloo"),
                         [](const auto& info) { return std::string(info.param); });

// ---------------------------------------------------------------------------
// The public-API collective suite (tests/programs/kolo_collective_suite.cc: every
// collective x dtype x size, barrier, grouped allreduce, join) in jobs across the
// namespace hosts. The host names resolve and no --network-interface is given, so
// the ranks reach each other only through the KOLO_HOST_ADDR kolorun gives them.

class KolorunSuiteAcrossHosts : public KolorunMultihostTest {
 protected:
  // kolorun in host 0 runs the suite with `slots` ranks per host; `env` goes to
  // the ranks, `args` to the suite. Expects every rank to pass, rank 0 to have
  // chosen `communicator`, and `logged` (if any) in the ranks' log.
  void run_suite(const std::vector<int>& slots, const std::vector<std::string>& env, const std::string& communicator,
                 bool ipv6 = false, const std::vector<std::string>& args = {}, const std::string& logged = "") {
    make_hosts(static_cast<int>(slots.size()), "", /*resolvable_names=*/true, ipv6);
    int size = 0;
    for (int n : slots) size += n;
    // The hosts share this machine's CPUs: binding each host's ranks to "its"
    // cores would stack ranks of different hosts on the same core.
    auto result = run_netns_job(concat(concat({"--timeout", seconds_bound(50s), "--bind-to", "none", "-H", host_list(slots), "env",
                                               "KOLO_LOG_LEVEL=info"},
                                              env),
                                       concat({KOLO_COLLECTIVE_SUITE_PATH}, args)),
                                time_bound(60s));
    RecordProperty("seconds", std::to_string(result.elapsed.count() / 1000.0));
    ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
    for (int r = 0; r < size; ++r)
      EXPECT_NE(result.out.find("[" + std::to_string(r) + "]<stdout>:rank " + std::to_string(r) + " of " +
                                std::to_string(size) + ": passed"),
                std::string::npos)
          << result.out;
    const std::string choice = "communicator: " + communicator + " (" + std::to_string(size) + " ranks on " +
                               std::to_string(slots.size()) + " host(s), started by kolorun)";
    EXPECT_NE(result.err.find(choice), std::string::npos) << result.err;
    if (!logged.empty()) EXPECT_NE(result.err.find(logged), std::string::npos) << result.err;
  }
};

TEST_F(KolorunSuiteAcrossHosts, TwoHostsTwoRanksEachHierarchical) { run_suite({2, 2}, {}, "hierarchical"); }

// A process set of every rank composes the hosts' shared memory with TCP as the world does.
TEST_F(KolorunSuiteAcrossHosts, TwoHostsTwoRanksEachThroughAProcessSet) {
  run_suite({2, 2}, {}, "hierarchical", false, {"--through-a-process-set"},
            "process set 1: communicator hierarchical (4 ranks on 2 host(s))");
}

TEST_F(KolorunSuiteAcrossHosts, TwoHostsTwoRanksEachFlatGloo) {
  run_suite({2, 2}, {"KOLO_BACKEND=gloo"}, "gloo");
}

TEST_F(KolorunSuiteAcrossHosts, ThreeHostsOneRankEach) { run_suite({1, 1, 1}, {}, "hierarchical"); }

TEST_F(KolorunSuiteAcrossHosts, TwoHostsTwoRanksEachFlatTcp) { run_suite({2, 2}, {"KOLO_HIERARCHICAL=0"}, "tcp"); }

TEST_F(KolorunSuiteAcrossHosts, TwoHostsTwoRanksEachHierarchicalOverGloo) {
  run_suite({2, 2}, {"KOLO_BACKEND=gloo", "KOLO_HIERARCHICAL=1"}, "hierarchical");
}

TEST_F(KolorunSuiteAcrossHosts, ThreeHostsOneRankEachOverGloo) {
  run_suite({1, 1, 1}, {"KOLO_BACKEND=gloo", "KOLO_HIERARCHICAL=1"}, "hierarchical");
}

// Hosts with IPv6 addresses only: kolo's TCP connections and Gloo's pairs
// between them.
TEST_F(KolorunSuiteAcrossHosts, IPv6OnlyHostsTwoRanksEachHierarchical) {
  run_suite({2, 2}, {}, "hierarchical", /*ipv6=*/true);
}

TEST_F(KolorunSuiteAcrossHosts, IPv6OnlyHostsOverGloo) {
  run_suite({1, 1}, {"KOLO_BACKEND=gloo"}, "gloo", /*ipv6=*/true);
}

// The suite program itself, on this host: a wrong result is reported per
// operation on every rank, and the job fails.
TEST(KolorunSuiteProgram, WrongResultsAreNamedAndFailTheJob) {
  auto result = kolo::testing::run_command({KOLORUN_PATH, "-np", "2", "--timeout", "30", "env",
                                            "KOLO_FUSION_THRESHOLD=1K", KOLO_COLLECTIVE_SUITE_PATH, "--large-bytes",
                                            "4096", "--wrong-inputs-on-rank", "1"},
                                           40s);
  EXPECT_EQ(result.exit_code, 1) << result.err;
  for (const std::string rank : {"0", "1"}) {
    const std::string prefix = "[" + rank + "]<stderr>:kolo_collective_suite: rank " + rank + ": ";
    EXPECT_NE(result.err.find(prefix + "allreduce.uint8.7919.sum (sum) element "), std::string::npos) << result.err;
    EXPECT_NE(result.err.find(prefix + "allreduce.float32.7919.max: "), std::string::npos) << result.err;
    EXPECT_NE(result.err.find(" checks failed"), std::string::npos) << result.err;
  }
  EXPECT_NE(result.err.find("exited with code 1"), std::string::npos) << result.err;
  EXPECT_EQ(result.out.find(": passed "), std::string::npos) << result.out;
}

// KOLO_HOST_ADDR is for jobs across hosts: on one host gloo uses loopback.
TEST(KolorunHostAddress, OneHostJobGetsNone) {
  auto result = kolo::testing::run_command(
      {KOLORUN_PATH, "-np", "2", "sh", "-c", "echo host_addr=${KOLO_HOST_ADDR-unset} launcher=$KOLO_LAUNCHER"}, 10s);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto reports = rank_reports(result.out);
  ASSERT_EQ(reports.size(), 2u) << result.out;
  for (auto& [rank, report] : reports) {
    EXPECT_EQ(report["host_addr"], "unset") << "rank " << rank;
    EXPECT_EQ(report["launcher"], "kolorun") << "rank " << rank;
  }
}

TEST(KolorunSuiteProgram, BadArgumentsAreNamed) {
  auto result = kolo::testing::run_command({KOLO_COLLECTIVE_SUITE_PATH, "--large-bytes", "lots"}, 10s);
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find("kolo_collective_suite: "), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("--large-bytes"), std::string::npos) << result.err;
  result = kolo::testing::run_command({KOLO_COLLECTIVE_SUITE_PATH, "--frobnicate", "1"}, 10s);
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find("unknown argument '--frobnicate'"), std::string::npos) << result.err;
}

// ---------------------------------------------------------------------------
// Real ssh into a namespace: sshd runs in host 1 on a test port with a fresh host
// key and an authorized key made for the test; kolorun in host 0 reaches it by
// address. Nothing in ~/.ssh is read or written (UserKnownHostsFile, -i).

class SshServer {
 public:
  static constexpr int kPort = 2222;

  static std::optional<std::string> unavailable() {
    for (const char* tool : {"/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen"})
      if (::access(tool, X_OK) != 0) return std::string(tool) + " is not installed (Debian: openssh-server)";
    return std::nullopt;
  }

  SshServer(const NetnsHosts& hosts, int host, const TempDir& dir) : address_(hosts.address(host)), dir_(dir) {
    for (const char* key : {"host_key", "client_key"}) {
      auto made = kolo::testing::run_command({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", dir.file(key)});
      if (made.exit_code != 0) throw std::runtime_error("ssh-keygen failed: " + made.err);
    }
    fs::copy_file(dir.file("client_key.pub"), dir.file("authorized_keys"));
    // sshd refuses to start without its privilege separation directory.
    fs::create_directories("/run/sshd");
    std::string config = dir.write("sshd_config",
                                   "Port " + std::to_string(kPort) + "\nListenAddress " + address_ +
                                       "\nHostKey " + dir.file("host_key") + "\nAuthorizedKeysFile " +
                                       dir.file("authorized_keys") +
                                       "\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                                       "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\n"
                                       // A client that vanished is noticed within seconds.
                                       "ClientAliveInterval 1\nClientAliveCountMax 2\n"
                                       "MaxStartups 100\nMaxSessions 100\nLogLevel ERROR\n",
                                   fs::perms::owner_read | fs::perms::owner_write);
    server_ = std::make_unique<Subprocess>(concat(hosts.exec_prefix(host), sshd_command(config, dir)));
    bool listening = wait_for(
        [&] {
          return kolo::testing::run_command(
                     concat(hosts.exec_prefix(host), {"bash", "-c", "exec 3<>/dev/tcp/" + address_ + "/" +
                                                                        std::to_string(kPort)}),
                     5s)
                     .exit_code == 0;
        },
        5s);
    if (!listening) throw std::runtime_error("sshd did not start listening: " + server_->wait(1s).err);
  }

  pid_t pid() const { return server_->pid(); }

  // sshd runs every command through the login shell, and bash run by sshd reads
  // ~/.bashrc: on a machine where that takes seconds (pyenv init, ...) every rank
  // would wait for it. The shell's startup files are not under test, so sshd gets
  // an empty one, bind-mounted inside the private mount namespace that
  // 'ip netns exec' gives it (the real file is untouched and unseen elsewhere).
  static std::vector<std::string> sshd_command(const std::string& config, const TempDir& dir) {
    const passwd* user = ::getpwuid(::getuid());
    const std::string bashrc = user != nullptr ? std::string(user->pw_dir) + "/.bashrc" : "";
    if (bashrc.empty() || !fs::exists(bashrc)) return {"/usr/sbin/sshd", "-D", "-e", "-f", config};
    return {"sh", "-c", "mount --bind \"$0\" \"$1\" && exec /usr/sbin/sshd -D -e -f \"$2\"",
            dir.write("empty_bashrc", ""), bashrc, config};
  }

  // kolorun's flags for reaching this server.
  std::vector<std::string> kolorun_flags() const {
    return {"-p", std::to_string(kPort), "-i", dir_.file("client_key"), "--ssh-option",
            "UserKnownHostsFile=" + dir_.file("known_hosts")};
  }

 private:
  std::string address_;
  const TempDir& dir_;
  std::unique_ptr<Subprocess> server_;
};

class KolorunSshTest : public KolorunMultihostTest {
 protected:
  void SetUp() override {
    KolorunMultihostTest::SetUp();
    if (IsSkipped()) return;
    if (auto why = SshServer::unavailable()) GTEST_SKIP() << *why;
    make_hosts(2, "", /*resolvable_names=*/false, ipv6());
    ssh_ = std::make_unique<SshServer>(*hosts_, 1, dir_);
    still_allowed_ = {ssh_->pid()};
    // sshd notices a vanished client after ClientAliveInterval * ClientAliveCountMax.
    settle_time_ = 6s;
  }

  // Hosts with IPv6 addresses only, named by them in brackets.
  virtual bool ipv6() const { return false; }

  // Host 1 as -H names it: its address.
  std::string remote_host() const { return ipv6() ? "[" + hosts_->address(1) + "]" : hosts_->address(1); }

  // kolorun in host 0 with one local rank and `remote_slots` ranks on host 1 over ssh.
  std::vector<std::string> ssh_job(const std::vector<std::string>& args, int remote_slots = 1) const {
    return kolorun_in_host0(
        concat(concat(ssh_->kolorun_flags(), {"-H", "localhost:1," + remote_host() + ":" + std::to_string(remote_slots)}),
               args));
  }

  std::unique_ptr<SshServer> ssh_;
};

TEST_F(KolorunSshTest, RanksStartOverSshAndReachTheStore) {
  auto result = kolo::testing::run_command(ssh_job({"bash", "-c", kReportScript}, 2), 20s);
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  auto reports = rank_reports(result.out);
  ASSERT_EQ(reports.size(), 3u) << result.out;
  EXPECT_EQ(reports[0]["ns"], hosts_->name(0));
  for (int r : {1, 2}) {
    EXPECT_EQ(reports[r]["ns"], hosts_->name(1)) << "rank " << r << " did not run behind sshd";
    EXPECT_EQ(reports[r]["host"], hosts_->address(1));
    EXPECT_EQ(reports[r]["local"], std::to_string(r - 1) + "/2");
    EXPECT_EQ(reports[r]["reach"], "ok");
    EXPECT_EQ(reports[r]["secret_length"], "64");
    EXPECT_EQ(reports[r]["cwd"], fs::current_path().string());
  }
  // No --network-interface: the store is on host 0's address toward host 1, and
  // the ranks of this host use it too; host 1's ranks get the address it was named by.
  EXPECT_EQ(reports[2]["store"].rfind(hosts_->address(0) + ":", 0), 0u) << reports[2]["store"];
  EXPECT_EQ(reports[0]["host_addr"], hosts_->address(0));
  EXPECT_EQ(reports[1]["host_addr"], hosts_->address(1));
  EXPECT_EQ(reports[2]["host_addr"], hosts_->address(1));
  EXPECT_EQ(reports[0]["cross"], "0/2");
  EXPECT_EQ(reports[1]["cross"], "1/2");
}

// The same over IPv6: ssh gets the address without brackets, the ranks too.
class KolorunSshIPv6Test : public KolorunSshTest {
 protected:
  bool ipv6() const override { return true; }
};

TEST_F(KolorunSshIPv6Test, RanksStartOverSshAtABracketedAddress) {
  auto result = kolo::testing::run_command(ssh_job({"bash", "-c", kReportScript}), 20s);
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  auto reports = rank_reports(result.out);
  ASSERT_EQ(reports.size(), 2u) << result.out;
  EXPECT_EQ(reports[1]["ns"], hosts_->name(1)) << "rank 1 did not run behind sshd";
  EXPECT_EQ(reports[1]["host"], remote_host());
  EXPECT_EQ(reports[1]["host_addr"], hosts_->address(1));
  EXPECT_EQ(reports[0]["host_addr"], hosts_->address(0));
  for (int r : {0, 1}) {
    EXPECT_EQ(reports[r]["store"].rfind(store_prefix(hosts_->address(0)), 0), 0u) << reports[r]["store"];
    EXPECT_EQ(reports[r]["reach"], "ok") << "rank " << r;
  }
}

TEST_F(KolorunSshTest, RemoteRankFailureOverSshEndsTheJob) {
  std::string script = "if [ $KOLO_RANK = 1 ]; then sleep 0.3; exit 3; fi; sleep 100 & echo $$ $! > " +
                       dir_.file("pids.") + "$KOLO_RANK; wait";
  auto result = kolo::testing::run_command(ssh_job({"sh", "-c", script}), 20s);
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_NE(result.err.find("kolorun: rank 1 on host " + hosts_->address(1) + ": exited with code 3"),
            std::string::npos)
      << result.err;
  for (pid_t pid : read_pids(dir_.path(), "pids.")) EXPECT_FALSE(process_alive(pid)) << pid << " survived";
}

// Behind sshd, a remote rank's processes are no descendants of kolorun: what
// left the rank's session (setsid) is found by the job's id and killed on its
// host before kolorun returns.
TEST_F(KolorunSshTest, RemoteRankLeavesNoProcessWhenTheJobEnds) {
  // The pause lets setsid run before the rank's group is killed at its exit.
  std::string script = "setsid sleep 300 & echo $! > " + dir_.file("session.") + "$KOLO_RANK; sleep 0.3; exit 0";
  auto result = kolo::testing::run_command(ssh_job({"sh", "-c", script}), 20s);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  const auto sessions = read_pids(dir_.path(), "session.");
  EXPECT_EQ(sessions.size(), 2u);
  for (pid_t pid : sessions) EXPECT_FALSE(process_alive(pid)) << pid << " outlived kolorun";
}

TEST_F(KolorunSshTest, ProgramMissingOnTheRemoteHostIsNamed) {
  // Only remote ranks: the program is looked for on the remote host, not here.
  auto result = kolo::testing::run_command(
      kolorun_in_host0(concat(ssh_->kolorun_flags(), {"-H", hosts_->address(1) + ":1", "kolo-no-such-program"})), 20s);
  EXPECT_EQ(result.exit_code, 127) << result.err;
  EXPECT_NE(result.err.find("[0]<stderr>:kolorun: rank 0 on host " + hosts_->address(1) +
                            ": cannot run 'kolo-no-such-program': command not found in PATH"),
            std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find("kolorun: rank 0 on host " + hosts_->address(1) + ": exited with code 127"),
            std::string::npos)
      << result.err;
}

TEST_F(KolorunSshTest, UnreachableHostFailsTheJobNamingIt) {
  const std::string nobody = hosts_->unused_address();
  auto result = kolo::testing::run_command(
      kolorun_in_host0(concat(ssh_->kolorun_flags(),
                              {"--host-timeout", "2", "-H", "localhost:1," + nobody + ":1", "sleep", "100"})),
      20s);
  EXPECT_EQ(result.exit_code, 255) << result.err;
  EXPECT_NE(result.err.find("kolorun: rank 1 on host " + nobody + ": exited with code 255 (ssh's status for a failed "
                            "or lost connection: is " + nobody + " reachable?)"),
            std::string::npos)
      << result.err;
  EXPECT_LT(result.elapsed, time_bound(10s));
}

TEST_F(KolorunSshTest, HostThatBecomesUnreachableEndsTheJobAndItsRankDies) {
  std::string script = "sleep 100 & echo $$ $! > " + dir_.file("pids.") + "$KOLO_RANK; wait";
  Subprocess kolorun(ssh_job({"--host-timeout", "2", "sh", "-c", script}));
  ASSERT_TRUE(wait_for([&] { return read_pids(dir_.path(), "pids.").size() == 4; }, 10s));
  hosts_->set_link(1, false);
  auto result = kolorun.wait(15s);
  EXPECT_FALSE(result.timed_out);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("kolorun: rank 1 on host " + hosts_->address(1) + ": exited with code 255"),
            std::string::npos)
      << result.err;
  // On host 1, the remote end hears no heartbeat and kills the rank's group.
  for (pid_t pid : read_pids(dir_.path(), "pids."))
    EXPECT_TRUE(wait_for([&] { return !process_alive(pid); }, 5s)) << pid << " survived";
}

// ---------------------------------------------------------------------------
// Bad host lists and hostfiles: one "kolorun: " line, exit status 2, nothing
// started and nothing contacted.

struct BadHosts {
  std::vector<std::string> args;
  std::string message;
  std::string hostfile = "";  // written to a file whose path replaces "HOSTFILE" in args
};

class KolorunHostInput : public ::testing::TestWithParam<BadHosts> {};

TEST_P(KolorunHostInput, IsRefusedWithOneLine) {
  TempDir dir;
  std::vector<std::string> argv = {KOLORUN_PATH};
  for (auto arg : GetParam().args) {
    if (arg == "HOSTFILE") arg = dir.write("hostfile", GetParam().hostfile);
    argv.push_back(arg);
  }
  auto result = kolo::testing::run_command(argv, 10s);
  EXPECT_TRUE(result.exited);
  EXPECT_EQ(result.exit_code, 2) << result.err;
  auto lines = lines_of(result.err);
  ASSERT_EQ(lines.size(), 1u) << result.err;
  EXPECT_EQ(lines[0].rfind("kolorun: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(GetParam().message), std::string::npos) << lines[0];
  EXPECT_EQ(result.out, "");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KolorunHostInput,
    ::testing::Values(
        BadHosts{{"-H", "a:", "true"}, "-H entry 'a:' needs a positive slot count, got ''"},
        BadHosts{{"-H", "a:0", "true"}, "got '0'"},
        BadHosts{{"-H", "a:x", "true"}, "got 'x'"},
        BadHosts{{"-H", "a:-1", "true"}, "got '-1'"},
        BadHosts{{"-H", "a:99999999999", "true"}, "too large"},
        BadHosts{{"-H", ":2", "true"}, "-H entry ':2' has no host name"},
        BadHosts{{"-H", "a:1,,b:1", "true"}, "empty entry"},
        BadHosts{{"-H", "-oProxyCommand=x:1", "true"}, "must not start with '-'"},
        BadHosts{{"-H", "a b:1", "true"}, "cannot be in a host name"},
        BadHosts{{"-H", "a:1", "-H", "b:1", "true"}, "-H is given more than once"},
        BadHosts{{"-H", "a:1", "--hosts", "b:1", "true"}, "--hosts is given more than once"},
        BadHosts{{"-H", "a:1", "--hostfile", "HOSTFILE", "true"}, "not both", "a slots=1\n"},
        BadHosts{{"--hostfile", "HOSTFILE", "--hostfile", "HOSTFILE", "true"}, "given more than once", "a\n"},
        BadHosts{{"--hostfile", "/nonexistent/hostfile", "true"},
                 "cannot read hostfile '/nonexistent/hostfile': No such file or directory"},
        BadHosts{{"--hostfile", "HOSTFILE", "true"}, "names no host", ""},
        BadHosts{{"--hostfile", "HOSTFILE", "true"}, "names no host", "# only a comment\n\n   \n"},
        BadHosts{{"--hostfile", "HOSTFILE", "true"}, "line 2 needs a positive slot count, got '-1'",
                 "a slots=1\nb slots=-1\n"},
        BadHosts{{"--hostfile", "HOSTFILE", "true"}, "line 1 needs a positive slot count, got 'x'", "a slots=x\n"},
        BadHosts{{"--hostfile", "HOSTFILE", "true"}, "line 1: expected 'slots=N' after the host name, got 'b'",
                 "a b\n"},
        BadHosts{{"--hostfile", "HOSTFILE", "true"}, "line 1 gives slots= twice", "a slots=1 slots=2\n"},
        BadHosts{{"-np", "5", "-H", "a:2,b:2", "true"}, "-np 5 is more than the 4 slots"},
        BadHosts{{"-H", "a:1", "--launcher-command", "", "true"}, "--launcher-command needs a command"},
        BadHosts{{"-H", "a:1", "--launcher-command", "env", "-p", "22", "true"}, "replaces ssh"},
        BadHosts{{"-H", "a:1", "--mpi", "--launcher-command", "env", "true"}, "cannot be used with --mpi"},
        BadHosts{{"-H", "a:1", "-p", "70000", "true"}, "not a TCP port"},
        BadHosts{{"-H", "a:1", "--mpi-args", "-v", "true"}, "--mpi-args needs --mpi"},
        BadHosts{{"-H", "a:1", "--host-timeout", "0", "true"}, "--host-timeout needs a positive number"},
        BadHosts{{"-H", "a:1", "--network-interface", "kolo-no-such-if", "true"},
                 "--network-interface 'kolo-no-such-if': no such interface"}));

// ---------------------------------------------------------------------------
// The remote end (`kolorun --remote-exec`) through a launcher command that runs it
// on this same host ("env"): no namespaces needed.

class KolorunRemoteExec : public ::testing::Test {
 protected:
  // Two "hosts" named a and b, both reached through `env` (so both remote).
  std::vector<std::string> job(const std::vector<std::string>& args) const {
    return concat({KOLORUN_PATH, "-H", "a:1,b:1", "--network-interface", "lo", "--launcher-command", "env"}, args);
  }
  TempDir dir_;
};

TEST_F(KolorunRemoteExec, RemoteRanksGetTheirEnvironmentAndWorkingDirectory) {
  auto result = kolo::testing::run_command(
      job({"sh", "-c", "echo rank=$KOLO_RANK host=$KOLO_HOSTNAME iface=$KOLO_IFACE cwd=$(pwd)"}),
      10s);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto reports = rank_reports(result.out);
  ASSERT_EQ(reports.size(), 2u) << result.out;
  EXPECT_EQ(reports[0]["host"], "a");
  EXPECT_EQ(reports[1]["host"], "b");
  EXPECT_EQ(reports[1]["iface"], "lo");
  EXPECT_EQ(reports[1]["cwd"], fs::current_path().string());
}

// kolorun SIGKILLed: each --remote-exec sees its stdin end and kills its rank's
// group, but not what left it (setsid); kolorun's watchdog finds those by the
// job's id.
TEST_F(KolorunRemoteExec, KillingKolorunLeavesNoProcessOfItsRemoteRanks) {
  std::string script = "echo $KOLO_JOB_ID > " + dir_.file("job.") + "$KOLO_RANK; setsid sleep 300 & sleep 300";
  Subprocess kolorun(job({"sh", "-c", script}));
  ASSERT_TRUE(wait_for([&] { return fs::exists(dir_.file("job.1")) && !read_file(dir_.file("job.1")).empty(); }, 10s));
  std::string job_id = read_file(dir_.file("job.1"));
  job_id.erase(job_id.find_last_not_of('\n') + 1);
  ASSERT_TRUE(wait_for([&] { return kolo::testing::processes_of_job(job_id).size() >= 4; }, 10s));
  ::kill(kolorun.pid(), SIGKILL);
  kolorun.wait(10s);
  EXPECT_TRUE(wait_for([&] { return kolo::testing::processes_of_job(job_id).empty(); }, time_bound(5s)))
      << kolo::testing::processes_of_job(job_id).size() << " process(es) of the job outlived kolorun";
}

// A --remote-exec SIGKILLed (the far end of a dropped ssh, say): its rank dies of
// its death signal, and the rank's own watchdog kills what left its session, at
// once, while the job's other ranks still run.
TEST_F(KolorunRemoteExec, KilledRemoteExecTakesItsRanksProcessesWithIt) {
  std::string script = "trap '' TERM; echo $PPID > " + dir_.file("remote_exec.") + "$KOLO_RANK; setsid sleep 300 & echo $! > " +
                       dir_.file("session.") + "$KOLO_RANK; sleep 300";
  Subprocess kolorun(job({"--kill-grace", "30", "sh", "-c", script}));
  ASSERT_TRUE(wait_for([&] { return read_pids(dir_.path(), "session.").size() == 2 &&
                                    read_pids(dir_.path(), "remote_exec.").size() == 2; }, 10s));
  const pid_t remote_exec = read_pids(dir_.path(), "remote_exec.1").at(0);
  const pid_t session = read_pids(dir_.path(), "session.1").at(0);
  ::kill(remote_exec, SIGKILL);
  EXPECT_TRUE(wait_for([&] { return !process_alive(session); }, time_bound(3s))) << session << " survived its rank";
  EXPECT_TRUE(process_alive(kolorun.pid()));  // still waiting for rank 0, which ignores SIGTERM
  ::kill(kolorun.pid(), SIGINT);  // the job is stopping already: this kills at once
  kolorun.wait(10s);
}

// A launcher command that never runs `kolorun --remote-exec` (a login that hangs)
// fails the job within --host-timeout, naming the host and the command.
TEST_F(KolorunRemoteExec, LauncherCommandThatNeverStartsTheRemoteSideFailsInTime) {
  const std::string hang = dir_.file("hang");
  std::ofstream(hang) << "#!/bin/sh\nexec sleep 1000\n";
  fs::permissions(hang, fs::perms::owner_all);
  const auto started = Clock::now();
  auto result = kolo::testing::run_command({KOLORUN_PATH, "-H", "a:1,b:1", "--network-interface", "lo",
                                            "--launcher-command", hang + " {host}", "--host-timeout", "1", "true"},
                                           20s);
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_code, 255) << result.err;
  EXPECT_LT(Clock::now() - started, time_bound(5s));
  EXPECT_NE(result.err.find("kolorun: rank 0 on host a: kolorun --remote-exec did not start there within 1 s "
                            "(--host-timeout) of the launcher command: " + hang + " a "),
            std::string::npos)
      << result.err;
}

// One that exits at once without running anything is named with its status.
TEST_F(KolorunRemoteExec, LauncherCommandThatExitsWithoutStartingTheRemoteSideIsNamed) {
  const std::string quit = dir_.file("quit");
  std::ofstream(quit) << "#!/bin/sh\nexit 0\n";
  fs::permissions(quit, fs::perms::owner_all);
  auto result = kolo::testing::run_command(
      {KOLORUN_PATH, "-H", "a:1,b:1", "--network-interface", "lo", "--launcher-command", quit + " {host}", "true"}, 20s);
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_code, 255) << result.err;
  // Both launchers quit at once: the first exit kolorun sees is named.
  auto named = [&](const std::string& rank, const std::string& host) {
    return result.err.find("kolorun: rank " + rank + " on host " + host + ": exited with code 0 before kolorun "
                           "--remote-exec ran there (launcher command: " + quit + " " + host + " ") != std::string::npos;
  };
  EXPECT_TRUE(named("0", "a") || named("1", "b")) << result.err;
}

TEST_F(KolorunRemoteExec, SilenceFromKolorunKillsTheRemoteRankGroup) {
  // The host timeout also bounds the remote side's start: stretched where
  // everything is slow (a sanitizer build's start can take over a second).
  const std::string timeout = seconds_bound(1s);
  std::string script = "sleep 100 & echo $$ $! > " + dir_.file("pids.") + "$KOLO_RANK; wait";
  Subprocess kolorun(job({"--host-timeout", timeout, "sh", "-c", script}));
  ASSERT_TRUE(wait_for([&] { return read_pids(dir_.path(), "pids.").size() == 4; }, 10s));
  // A stopped kolorun sends no heartbeat, yet its pipes stay open.
  ::kill(kolorun.pid(), SIGSTOP);
  for (pid_t pid : read_pids(dir_.path(), "pids."))
    EXPECT_TRUE(wait_for([&] { return !process_alive(pid); }, time_bound(5s))) << pid << " survived";
  ::kill(kolorun.pid(), SIGCONT);
  auto result = kolorun.wait(time_bound(10s));
  EXPECT_EQ(result.exit_code, 128 + SIGKILL) << result.err;
  EXPECT_NE(result.err.find("no word from kolorun for " + timeout + " s"), std::string::npos) << result.err;
}

TEST_F(KolorunRemoteExec, BlockedOutputDoesNotSilenceHeartbeats) {
  // kolorun's stdout is a pipe nobody reads for three host timeouts (a pager, a
  // stopped reader): kolorun blocks writing the ranks' output, yet the remote ends
  // must keep hearing from it. Host b's remote side starts only after half a
  // timeout, while kolorun is already blocked: its start word waits unread past
  // the start deadline, and must not be taken for a start that never came.
  const long timeout = std::stol(seconds_bound(2s));
  const std::string late = dir_.file("late");
  std::ofstream(late) << "#!/bin/sh\nif [ \"$1\" = b ]; then sleep " << timeout / 2.0
                      << "; fi\nshift\nexec env \"$@\"\n";
  fs::permissions(late, fs::perms::owner_all);
  std::string kolorun_command;
  for (const auto& word : std::vector<std::string>{
           KOLORUN_PATH, "-H", "a:1,b:1", "--network-interface", "lo", "--launcher-command", late + " {host}",
           "--host-timeout", std::to_string(timeout), "sh", "-c",
           "head -c 400000 /dev/zero | tr '\\0' x | fold -w 100; echo; sleep " + std::to_string(2 * timeout) +
               "; echo done=$KOLO_RANK"})
    kolorun_command += "'" + word + "' ";
  auto result = kolo::testing::run_command({"bash", "-c",
                                            "set -o pipefail; " + kolorun_command + "| (sleep " +
                                                std::to_string(3 * timeout) + "; cat) | grep -c '<stdout>:done='"},
                                           time_bound(20s));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "2\n") << result.err;
  EXPECT_EQ(result.err.find("no word from kolorun"), std::string::npos) << result.err;
  EXPECT_EQ(result.err.find("did not start"), std::string::npos) << result.err;
}

TEST_F(KolorunRemoteExec, SecondSignalKillsRemoteRanksThatIgnoreTheFirst) {
  std::string script = "trap '' TERM; sleep 100 & echo $$ $! > " + dir_.file("pids.") + "$KOLO_RANK; wait; wait";
  Subprocess kolorun(job({"sh", "-c", script}));
  ASSERT_TRUE(wait_for([&] { return read_pids(dir_.path(), "pids.").size() == 4; }, 10s));
  ::kill(kolorun.pid(), SIGTERM);
  std::this_thread::sleep_for(200ms);
  ::kill(kolorun.pid(), SIGTERM);
  auto result = kolorun.wait(10s);
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  EXPECT_LT(result.elapsed, time_bound(5s));
  for (pid_t pid : read_pids(dir_.path(), "pids."))
    EXPECT_TRUE(wait_for([&] { return !process_alive(pid); }, 3s)) << pid << " survived";
}

TEST_F(KolorunRemoteExec, RefusesInputThatIsNotASpec) {
  auto result = kolo::testing::run_command(
      {"sh", "-c", std::string("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | ") + KOLORUN_PATH + " --remote-exec"}, 10s);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("not a kolorun spec"), std::string::npos) << result.err;

  result = kolo::testing::run_command({KOLORUN_PATH, "--remote-exec"}, 10s);  // stdin is /dev/null
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("stdin ended before the job description"), std::string::npos) << result.err;
}

// ---------------------------------------------------------------------------
// --mpi: Open MPI's mpirun starts the ranks; kolorun keeps the store.

class KolorunMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/usr/bin/mpirun", X_OK) != 0) GTEST_SKIP() << "mpirun is not installed (Debian: openmpi-bin)";
  }
};

TEST_F(KolorunMpi, RanksGetKoloEnvironmentFromMpirun) {
  auto result = kolo::testing::run_command(
      {KOLORUN_PATH, "--mpi", "-np", "2", "sh", "-c",
       "echo mpi=$OMPI_COMM_WORLD_RANK kolo=$KOLO_RANK/$KOLO_SIZE local=$KOLO_LOCAL_RANK/$KOLO_LOCAL_SIZE "
       "cross=$KOLO_CROSS_RANK/$KOLO_CROSS_SIZE secret_length=${#KOLO_SECRET} launcher=$KOLO_LAUNCHER "
       "store=$KOLO_STORE_ADDR"},
      60s);
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  std::set<std::string> lines;
  for (const auto& line : lines_of(result.out)) lines.insert(std::regex_replace(line, std::regex(" store=127\\.0\\.0\\.1:[0-9]+$"), ""));
  EXPECT_EQ(lines, (std::set<std::string>{
                       "[1,0]<stdout>:mpi=0 kolo=0/2 local=0/2 cross=0/1 secret_length=64 launcher=mpirun",
                       "[1,1]<stdout>:mpi=1 kolo=1/2 local=1/2 cross=0/1 secret_length=64 launcher=mpirun"}))
      << result.out;
}

// The collective suite in an MPI job of 4 ranks: kolorun --mpi, or mpirun alone.
// Rank 0 logs the communicator it chose. `small`: a quick run (4 KiB sizes) for
// tests about the choice rather than the collectives.
struct MpiSuiteRun {
  Subprocess::Result result;
  std::string communicator_line;  // "communicator: mpi (4 ranks ...)" or ""
  int passed = 0;                 // ranks that printed "passed"
};

MpiSuiteRun run_mpi_suite(std::vector<std::string> launcher, const std::vector<std::string>& env, bool small = false) {
  launcher.insert(launcher.end(), {"env", "KOLO_LOG_LEVEL=info"});
  launcher.insert(launcher.end(), env.begin(), env.end());
  if (small) launcher.push_back("KOLO_FUSION_THRESHOLD=1K");
  launcher.push_back(KOLO_COLLECTIVE_SUITE_PATH);
  if (small) launcher.insert(launcher.end(), {"--large-bytes", "4096"});
  MpiSuiteRun run;
  run.result = kolo::testing::run_command(launcher, time_bound(60s));
  static const std::regex choice(R"(communicator: \S+ \(.*\))");
  std::smatch match;
  if (std::regex_search(run.result.err, match, choice)) run.communicator_line = match[0].str();
  for (const auto& line : lines_of(run.result.out)) run.passed += line.find(": passed ") != std::string::npos;
  return run;
}

// mpirun ends its ranks on SIGTERM; `timeout` sends it one well before the test's
// own limit would kill mpirun alone.
const std::vector<std::string> kMpirun = {
    "timeout", "-k", "5", seconds_bound(50s), "mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader",
    "--mca", "btl_vader_single_copy_mechanism", "none", "--mca", "oob_tcp_if_include", "lo", "-np", "4"};

TEST_F(KolorunMpi, CollectiveSuiteThroughKolorunMpiUsesMpiByDefault) {
  if (!kolo::comm::mpi_available()) GTEST_SKIP() << "kolo is built without MPI";
  auto run = run_mpi_suite({KOLORUN_PATH, "--mpi", "-np", "4", "--timeout", seconds_bound(50s)}, {});
  RecordProperty("seconds", std::to_string(run.result.elapsed.count() / 1000.0));
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err << run.result.out;
  EXPECT_EQ(run.passed, 4) << run.result.out;
  EXPECT_EQ(run.communicator_line, "communicator: mpi (4 ranks on 1 host(s), started by kolorun --mpi)")
      << run.result.err;
}

TEST_F(KolorunMpi, KolorunMpiTakesTheBackendKoloBackendNames) {
  if (!kolo::comm::mpi_available()) GTEST_SKIP() << "kolo is built without MPI";
  for (const std::string backend : {"shm", "gloo", "tcp"}) {
    auto run = run_mpi_suite({KOLORUN_PATH, "--mpi", "-np", "4", "--timeout", seconds_bound(50s)}, {"KOLO_BACKEND=" + backend},
                             /*small=*/true);
    ASSERT_EQ(run.result.exit_code, 0) << run.result.err << run.result.out;
    EXPECT_EQ(run.passed, 4) << run.result.out;
    EXPECT_EQ(run.communicator_line,
              "communicator: " + backend + " (4 ranks on 1 host(s), started by kolorun --mpi)")
        << run.result.err;
  }
}

TEST_F(KolorunMpi, CollectiveSuiteUnderMpirunAlone) {
  if (!kolo::comm::mpi_available()) GTEST_SKIP() << "kolo is built without MPI";
  // The default backend chooses MPI; KOLO_BACKEND=mpi asks for it.
  for (const std::string env : {"KOLO_BACKEND=auto", "KOLO_BACKEND=mpi"}) {
    auto run = run_mpi_suite(kMpirun, {env}, /*small=*/env == "KOLO_BACKEND=mpi");
    ASSERT_EQ(run.result.exit_code, 0) << env << "\n" << run.result.err << run.result.out;
    EXPECT_EQ(run.passed, 4) << run.result.out;
    EXPECT_EQ(run.communicator_line, "communicator: mpi (4 ranks on 1 host(s), started by mpirun)")
        << env << "\n" << run.result.err;
  }
}

TEST_F(KolorunMpi, FailingRankFailsTheJob) {
  auto result = kolo::testing::run_command(
      {KOLORUN_PATH, "--mpi", "-np", "2", "sh", "-c", "if [ $KOLO_RANK = 1 ]; then exit 3; fi; sleep 30"}, 60s);
  EXPECT_NE(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find("kolorun: mpirun: exited with code"), std::string::npos) << result.err;
  EXPECT_LT(result.elapsed, time_bound(20s));
}

TEST_F(KolorunMpi, SecretIsNeverOnACommandLine) {
  TempDir dir;
  Subprocess kolorun({KOLORUN_PATH, "--mpi", "-np", "2", "sh", "-c",
                      "echo $KOLO_SECRET > " + dir.file("secret.") + "$KOLO_RANK; sleep 1"});
  std::string secret;
  ASSERT_TRUE(wait_for(
      [&] {
        secret = read_file(dir.file("secret.1"));
        return secret.size() > 1 && secret.back() == '\n';
      },
      30s));
  secret.pop_back();
  EXPECT_EQ(secret.size(), 64u);
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::string cmdline = read_file(entry.path() / "cmdline");
    EXPECT_EQ(cmdline.find(secret), std::string::npos) << "the secret is on the command line of " << entry.path();
  }
  EXPECT_EQ(kolorun.wait(30s).exit_code, 0);
}

}  // namespace

namespace {

// A measurement, not a check: --gtest_also_run_disabled_tests
// --gtest_filter='*ShapedLinksNumbers*'. Allreduce busbw over namespace hosts
// whose links tbf shapes to 1 and 10 Gbit/s (the bound: the link rate, since an
// allreduce moves 2(n-1)/n of the data over each host's link in each direction).
TEST_F(KolorunMultihostTest, DISABLED_ShapedLinksNumbers) {
  struct Layout {
    std::vector<int> slots;
    const char* backend;
  };
  // "auto": hierarchical over tcp; "tcp", "gloo": flat.
  const std::vector<Layout> layouts{{{1, 1}, "tcp"}, {{1, 1, 1}, "tcp"}, {{1, 1, 1, 1}, "tcp"}, {{2, 2}, "auto"},
                                    {{2, 2}, "tcp"}, {{1, 1}, "gloo"},   {{2, 2}, "gloo"}};
  for (const char* qdisc : {"tbf rate 1gbit burst 512kb latency 50ms", "tbf rate 10gbit burst 5mb latency 50ms"}) {
    for (const auto& layout : layouts) {
      make_hosts(static_cast<int>(layout.slots.size()), qdisc, /*resolvable_names=*/true);
      auto result = run_netns_job({"--bind-to", "none", "-H", host_list(layout.slots), "--no-tag-output", "env",
                                   std::string("KOLO_BACKEND=") + layout.backend, KOLO_BENCH_PATH, "--mode", "comm",
                                   "--sizes", "16M,64M", "--warmup", "1", "--iters", "3"},
                                  300s);
      std::string hosts;
      for (int n : layout.slots) hosts += (hosts.empty() ? "" : "+") + std::to_string(n);
      std::printf("== %s, hosts %s, %s (exit %d)\n", qdisc, hosts.c_str(), layout.backend, result.exit_code);
      for (const auto& line : kolo::testing::lines_of(result.out))
        if (line.find("    ") == 0) std::printf("%s\n", line.c_str());
      hosts_.reset();
    }
  }
}

}  // namespace
