// Bootstrap without kolorun: rank, size, local and cross ranks from mpirun's
// (OpenMPI, MPICH hydra) and Slurm's environment, and the rendezvous file through
// which rank 0 of an srun/mpirun job serves the store. Each case runs in a forked
// process (the environment is per process), cleared of the KOLO_* variables the
// harness sets.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bootstrap/launcher_env.h"
#include "bootstrap/topology.h"
#include "comm/gloo/gloo_communicator.h"
#include "harness/multiprocess.h"
#include "kolo/error.h"
#include "kolo/kolo.h"

namespace kolo {
namespace {

using namespace std::chrono_literals;

void clear_kolo_env() {
  for (const char* name : {"KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", "KOLO_CROSS_RANK",
                           "KOLO_CROSS_SIZE", "KOLO_JOB_ID", "KOLO_STORE_ADDR", "KOLO_SECRET", "KOLO_LAUNCHER"})
    unsetenv(name);
}

void set_env(const std::map<std::string, std::string>& env) {
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
}

// Runs `body` in one forked process with a clean environment plus `env`.
void in_child(const std::map<std::string, std::string>& env, const std::function<void()>& body) {
  testing::SpawnOptions options;
  options.use_store = false;
  options.timeout = 30s;
  testing::run_ranks(1, [&](int) {
    clear_kolo_env();
    set_env(env);
    body();
  }, options);
}

TEST(LauncherEnv, SlurmTasksPerNode) {
  EXPECT_EQ(parse_slurm_tasks_per_node("2(x3),1", "X"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(parse_slurm_tasks_per_node("4", "X"), (std::vector<int>{4}));
  EXPECT_EQ(parse_slurm_tasks_per_node("1,3(x2)", "X"), (std::vector<int>{1, 3, 3}));
  for (const char* bad : {"", "2(x", "a", "2(x0)", "0", "2(x3", "-1", "2,,3", "3(y2)"})
    EXPECT_THROW(parse_slurm_tasks_per_node(bad, "X"), InvalidArgumentError) << bad;
}

TEST(LauncherEnv, SanitizedJobIds) { EXPECT_EQ(sanitize_job_id("12.3:a_b"), "12-3-a_b"); }

TEST(LauncherEnv, OpenMpiEnvironment) {
  in_child({{"OMPI_COMM_WORLD_RANK", "3"},
            {"OMPI_COMM_WORLD_SIZE", "4"},
            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
            {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
            {"OMPI_MCA_orte_num_nodes", "2"},
            {"OMPI_MCA_ess_base_jobid", "1677459457"}},
           [] {
             Topology t = topology_from_env();
             EXPECT_EQ(t.launcher, Launcher::Mpirun);
             EXPECT_EQ(t.rank, 3);
             EXPECT_EQ(t.size, 4);
             EXPECT_EQ(t.local_rank, 1);
             EXPECT_EQ(t.local_size, 2);
             EXPECT_EQ(t.cross_rank, 1);
             EXPECT_EQ(t.cross_size, 2);
             EXPECT_EQ(t.job_id, "ompi-1677459457");
             EXPECT_TRUE(t.store_addr.empty());
           });
}

TEST(LauncherEnv, MpichHydraEnvironment) {
  in_child({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"},
            {"PMI_KVSNAME", "kvs_42_0"}},
           [] {
             Topology t = topology_from_env();
             EXPECT_EQ(t.launcher, Launcher::Mpirun);
             EXPECT_EQ(t.rank, 1);
             EXPECT_EQ(t.size, 2);
             EXPECT_EQ(t.local_rank, 1);
             EXPECT_EQ(t.cross_size, 1);
             EXPECT_EQ(t.job_id, "mpich-kvs_42_0");
           });
}

std::map<std::string, std::string> slurm_env(int rank, int tasks, const std::string& per_node, int node, int nodes) {
  return {{"SLURM_PROCID", std::to_string(rank)},   {"SLURM_NTASKS", std::to_string(tasks)},
          {"SLURM_STEP_NUM_TASKS", std::to_string(tasks)},
          {"SLURM_LOCALID", std::to_string(rank % std::stoi(per_node.substr(0, 1)))},
          {"SLURM_NODEID", std::to_string(node)}, {"SLURM_NNODES", std::to_string(nodes)},
          {"SLURM_STEP_NUM_NODES", std::to_string(nodes)}, {"SLURM_STEP_TASKS_PER_NODE", per_node},
          {"SLURM_JOB_ID", "4242"},                 {"SLURM_STEP_ID", "0"}};
}

TEST(LauncherEnv, SlurmEnvironment) {
  auto env = slurm_env(3, 4, "2(x2)", 1, 2);
  env["KOLO_STORE_ADDR"] = "127.0.0.1:1";  // given: no rendezvous file
  env["KOLO_SECRET"] = "s";
  in_child(env, [] {
    Topology t = topology_from_env();
    EXPECT_EQ(t.launcher, Launcher::Srun);
    EXPECT_EQ(t.rank, 3);
    EXPECT_EQ(t.size, 4);
    EXPECT_EQ(t.local_rank, 1);
    EXPECT_EQ(t.local_size, 2);
    EXPECT_EQ(t.cross_rank, 1);
    EXPECT_EQ(t.cross_size, 2);
    EXPECT_EQ(t.job_id, "slurm-4242-0");
    EXPECT_EQ(t.store_addr, "127.0.0.1:1");
  });
}

TEST(LauncherEnv, InconsistentValuesNameTheVariable) {
  auto env = slurm_env(0, 4, "2(x2)", 0, 2);
  env["SLURM_LOCALID"] = "5";
  env["KOLO_STORE_ADDR"] = "127.0.0.1:1";
  env["KOLO_SECRET"] = "s";
  in_child(env, [] {
    try {
      topology_from_env();
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("SLURM_LOCALID=5"), std::string::npos) << e.what();
    }
  });
  in_child({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
           [] { EXPECT_THROW(topology_from_env(), InvalidArgumentError); });
  in_child({{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
           [] { EXPECT_THROW(topology_from_env(), InvalidArgumentError); });
}

// A rank number past what an int64 holds was "not an integer", and one past
// 2^24 "out of range" without the range: both say they are out of range, and what is allowed.
TEST(LauncherEnv, RankNumbersOutOfRangeSaySoAndWhatIsAllowed) {
  auto expect_error = [](const std::map<std::string, std::string>& env, const std::string& fragment) {
    in_child(env, [&] {
      try {
        topology_from_env();
        ADD_FAILURE() << "no error";
      } catch (const InvalidArgumentError& e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      }
    });
  };
  expect_error({{"KOLO_RANK", "0"}, {"KOLO_SIZE", "99999999999999999999"}},
               "KOLO_SIZE: '99999999999999999999' is out of range: allowed are 0 to 16777216");
  expect_error({{"KOLO_RANK", "0"}, {"KOLO_SIZE", "16777217"}},
               "KOLO_SIZE: '16777217' is out of range: allowed are 0 to 16777216");
  expect_error({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4611686018427387904"}},
               "OMPI_COMM_WORLD_SIZE: '4611686018427387904' is out of range: allowed are 0 to 16777216");
}

TEST(LauncherEnv, KolorunVariablesWinOverMpirunOnes) {
  in_child({{"KOLO_RANK", "0"}, {"KOLO_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, [] {
    Topology t = topology_from_env();
    EXPECT_EQ(t.launcher, Launcher::Kolorun);
    EXPECT_EQ(t.size, 1);
  });
}

TEST(LauncherEnv, KolorunMpiRanksAreKnownByKoloLauncher) {
  // kolorun --mpi: KOLO_* from kolorun's plan, the processes from mpirun.
  in_child({{"KOLO_RANK", "1"}, {"KOLO_SIZE", "2"}, {"KOLO_JOB_ID", "j"}, {"KOLO_LAUNCHER", "mpirun"},
            {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
           [] {
             Topology t = topology_from_env();
             EXPECT_EQ(t.launcher, Launcher::KolorunMpi);
             EXPECT_TRUE(started_by_mpirun(t.launcher));
             EXPECT_EQ(t.rank, 1);
             EXPECT_STREQ(to_string(t.launcher), "kolorun --mpi");
           });
  in_child({{"KOLO_RANK", "0"}, {"KOLO_SIZE", "1"}, {"KOLO_LAUNCHER", "kolorun"}}, [] {
    Topology t = topology_from_env();
    EXPECT_EQ(t.launcher, Launcher::Kolorun);
    EXPECT_FALSE(started_by_mpirun(t.launcher));
  });
  in_child({{"KOLO_RANK", "0"}, {"KOLO_SIZE", "1"}, {"KOLO_LAUNCHER", "srun"}}, [] {
    try {
      topology_from_env();
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("KOLO_LAUNCHER='srun'"), std::string::npos) << e.what();
    }
  });
}

std::string fresh_path() { return "/tmp/kolo-rendezvous-test-" + testing::make_job_id(); }

// An srun job of three "nodes" without kolorun and without KOLO_STORE_ADDR: rank
// 0 serves the store, publishes it in the file, and the job runs over TCP.
TEST(RendezvousFile, SrunJobWithoutKolorunFindsItsStore) {
  if (!comm::gloo_available()) GTEST_SKIP() << "built with KOLO_WITH_GLOO=OFF";
  const std::string path = fresh_path();
  testing::SpawnOptions options;
  options.use_store = false;
  options.timeout = 60s;
  testing::run_ranks(3, [&](int rank) {
    clear_kolo_env();
    set_env(slurm_env(rank, 3, "1(x3)", rank, 3));
    setenv("SLURM_JOB_ID", path.substr(path.rfind('-') + 1).c_str(), 1);
    setenv("KOLO_RENDEZVOUS_FILE", path.c_str(), 1);
    setenv("KOLO_HOST_ADDR", "127.0.0.1", 1);
    kolo::init();
    EXPECT_EQ(kolo::size(), 3);
    EXPECT_EQ(kolo::cross_rank(), rank);
    std::int64_t value = rank + 1;
    kolo::allreduce(kolo::make_tensor(&value, 1), {.op = ReduceOp::Sum, .name = "sum"});
    EXPECT_EQ(value, 6);
    kolo::shutdown();
  }, options);
  ::unlink(path.c_str());  // ranks end with _exit, which skips rank 0's cleanup
}

TEST(RendezvousFile, RefusesAFileOthersCouldRead) {
  const std::string path = fresh_path();
  {
    std::ofstream out(path);
    out << "kolo-rendezvous 1\nslurm-4242-0\n127.0.0.1:1\nsecret\n";
  }
  ::chmod(path.c_str(), 0644);
  auto env = slurm_env(1, 2, "1(x2)", 1, 2);
  env["KOLO_RENDEZVOUS_FILE"] = path;
  in_child(env, [] {
    try {
      topology_from_env();
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("mode 0600"), std::string::npos) << e.what();
    }
  });
  ::unlink(path.c_str());
}

TEST(RendezvousFile, MissingRankZeroIsATimeoutNamingTheFile) {
  const std::string path = fresh_path();
  auto env = slurm_env(1, 2, "1(x2)", 1, 2);
  env["KOLO_RENDEZVOUS_FILE"] = path;
  env["KOLO_START_TIMEOUT"] = "0.5";
  in_child(env, [&] {
    try {
      topology_from_env();
      ADD_FAILURE() << "no error";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace kolo
