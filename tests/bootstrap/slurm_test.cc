// Jobs started by Slurm's srun, without kolorun, on a real one-node Slurm cluster
// that the test starts itself (Debian's slurm-wlm: slurmctld and slurmd on
// loopback, auth/none, state in a temporary folder; ready in about 2 s). The
// SlurmWorker tests, which skip unless KOLO_SLURM_WORKER is set, run inside the
// srun tasks: kolo::init() must learn rank, size and local rank from Slurm's
// environment, and with KOLO_BACKEND=gloo find the store through the rendezvous
// file that rank 0 publishes. Skipped when slurm-wlm is not installed or the test
// does not run as root (slurmd must start job steps as any user).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/topology.h"
#include "comm/gloo/gloo_communicator.h"
#include "harness/agreement.h"
#include "kolo/error.h"
#include "kolo/kolo.h"

extern char** environ;

namespace kolo {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool in_slurm_worker() { return std::getenv("KOLO_SLURM_WORKER") != nullptr && std::getenv("SLURM_PROCID"); }

std::string self_path() {
  char buf[4096] = {};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, n) : std::string();
}

bool installed(const char* program) {
  for (const char* dir : {"/usr/sbin/", "/usr/bin/"}) {
    if (access((std::string(dir) + program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

int free_loopback_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string run_command(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return output;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe)) output += buf.data();
  *status = pclose(pipe);
  return output;
}

// slurmctld and slurmd for one test, stopped and removed at the end.
class SlurmCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!installed("slurmctld") || !installed("slurmd") || !installed("srun"))
      GTEST_SKIP() << "slurm-wlm is not installed (apt-get install slurm-wlm)";
    if (geteuid() != 0) GTEST_SKIP() << "a private slurmd must run as root";
    dir_ = std::filesystem::temp_directory_path() / ("kolo-slurm-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_ / "state");
    std::filesystem::create_directories(dir_ / "spool");
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::mt19937 rng(std::random_device{}());
    std::ofstream conf(dir_ / "slurm.conf");
    const std::string d = dir_.string();
    conf << "ClusterName=kolotest\nSlurmctldHost=" << host << "(127.0.0.1)\n"
         << "SlurmUser=root\nSlurmdUser=root\nAuthType=auth/none\nCredType=cred/none\n"
         << "ProctrackType=proctrack/pgid\nTaskPlugin=task/none\nSchedulerType=sched/builtin\n"
         << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nMpiDefault=none\nReturnToService=2\n"
         << "JobAcctGatherType=jobacct_gather/none\nFirstJobId=" << 1000 + rng() % 1000000 << "\n"
         << "SlurmctldPort=" << free_loopback_port() << "\nSlurmdPort=" << free_loopback_port() << "\n"
         << "StateSaveLocation=" << d << "/state\nSlurmdSpoolDir=" << d << "/spool\n"
         << "SlurmctldPidFile=" << d << "/slurmctld.pid\nSlurmdPidFile=" << d << "/slurmd.pid\n"
         << "SlurmctldLogFile=" << d << "/slurmctld.log\nSlurmdLogFile=" << d << "/slurmd.log\n"
         << "NodeName=" << host << " NodeAddr=127.0.0.1 CPUs=" << std::max(1u, std::thread::hardware_concurrency())
         << " State=UNKNOWN\n"
         << "PartitionName=debug Nodes=" << host << " Default=YES MaxTime=5 State=UP OverSubscribe=FORCE\n";
    conf.close();
    setenv("SLURM_CONF", (dir_ / "slurm.conf").c_str(), 1);
    ctld_ = spawn({"slurmctld", "-D", "-i"});
    slurmd_ = spawn({"slurmd", "-D"});
    const auto deadline = Clock::now() + 20s;
    int status = 0;
    while (run_command("sinfo -h -o %T", &status).find("idle") == std::string::npos) {
      ASSERT_LT(Clock::now(), deadline) << "the Slurm cluster did not come up; logs in " << d;
      std::this_thread::sleep_for(200ms);
    }
  }

  void TearDown() override {
    for (pid_t pid : {slurmd_, ctld_}) {
      if (pid <= 0) continue;
      kill(pid, SIGTERM);
      const auto deadline = Clock::now() + 5s;
      while (waitpid(pid, nullptr, WNOHANG) == 0) {
        if (Clock::now() > deadline) {
          kill(pid, SIGKILL);
          waitpid(pid, nullptr, 0);
          break;
        }
        std::this_thread::sleep_for(50ms);
      }
    }
    unsetenv("SLURM_CONF");
    if (!dir_.empty() && !HasFailure()) std::filesystem::remove_all(dir_);
  }

  pid_t spawn(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = (dir_ / (args[0] + ".out")).string();
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = -1;
    posix_spawnp(&pid, args[0].c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    return pid;
  }

  // Runs this binary's SlurmWorker tests matching `filter` as `tasks` srun tasks.
  std::string srun(int tasks, const std::string& filter, const std::string& env, int* status) {
    return run_command("timeout -s KILL 90 env KOLO_SLURM_WORKER=1 " + env + " srun -N1 -n" + std::to_string(tasks) +
                           " --overcommit --kill-on-bad-exit=1 " + self_path() +
                           " --gtest_color=no --gtest_filter='" + filter + "'",
                       status);
  }

  std::filesystem::path dir_;
  pid_t ctld_ = -1;
  pid_t slurmd_ = -1;
};

int passed_ranks(const std::string& output) {
  int n = 0;
  for (auto pos = output.find("[  PASSED  ] 1 test."); pos != std::string::npos;
       pos = output.find("[  PASSED  ] 1 test.", pos + 1))
    ++n;
  return n;
}

TEST_F(SlurmCluster, SrunJobOnOneNodeUsesSharedMemoryWithoutAStore) {
  int status = -1;
  auto output = srun(3, "SlurmWorker.Collectives", "", &status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(passed_ranks(output), 3) << output;
}

TEST_F(SlurmCluster, SrunJobOverTcpFindsTheStoreThroughTheRendezvousFile) {
  if (!comm::gloo_available()) GTEST_SKIP() << "built with KOLO_WITH_GLOO=OFF";
  const std::string file = (dir_ / "rendezvous").string();
  int status = -1;
  auto output = srun(3, "SlurmWorker.Collectives",
                     "KOLO_BACKEND=gloo KOLO_HOST_ADDR=127.0.0.1 KOLO_RENDEZVOUS_FILE=" + file, &status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(passed_ranks(output), 3) << output;
  EXPECT_FALSE(std::filesystem::exists(file)) << "rank 0 removes the rendezvous file when it exits";
}

TEST(SlurmWorker, Collectives) {
  if (!in_slurm_worker()) GTEST_SKIP() << "runs inside srun (started by the SlurmCluster tests)";
  Topology t = topology_from_env();
  EXPECT_EQ(t.launcher, Launcher::Srun);
  EXPECT_EQ(t.rank, std::atoi(std::getenv("SLURM_PROCID")));
  EXPECT_EQ(t.local_rank, std::atoi(std::getenv("SLURM_LOCALID")));
  kolo::init();
  const int n = kolo::size(), me = kolo::rank();
  EXPECT_EQ(n, std::atoi(std::getenv("SLURM_NTASKS")));
  EXPECT_EQ(kolo::local_size(), n);
  std::vector<float> grads(100003, static_cast<float>(me));
  kolo::allreduce(kolo::make_tensor(grads.data(), static_cast<std::int64_t>(grads.size())),
                  {.op = ReduceOp::Sum, .name = "grads"});
  for (float g : grads) ASSERT_EQ(g, n * (n - 1) / 2.0f);
  testing::expect_bitwise_equal_everywhere(grads.data(), grads.size() * 4, "grads");
  std::int64_t seed = me == n - 1 ? 7 : 0;
  kolo::broadcast(kolo::make_tensor(&seed, 1), n - 1, {.name = "seed"});
  EXPECT_EQ(seed, 7);
  kolo::barrier();
  kolo::shutdown();
}

}  // namespace
}  // namespace kolo
