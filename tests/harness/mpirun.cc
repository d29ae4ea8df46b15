#include "harness/mpirun.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace kolo::testing {
namespace {

std::string self_path() {
  char buf[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

}  // namespace

bool in_mpi_worker() { return std::getenv("KOLO_MPI_WORKER") != nullptr && std::getenv("OMPI_COMM_WORLD_RANK"); }

MpirunResult run_under_mpirun(int ranks, const std::string& filter, const std::string& extra_env) {
  // One host's transports only (shared memory and loopback): the machine may
  // have no other network, and the ranks are on this host anyway.
  const std::string command = "timeout -s KILL 120 mpirun --allow-run-as-root --oversubscribe "
                              "--mca btl self,vader --mca btl_vader_single_copy_mechanism none "
                              "--mca oob_tcp_if_include lo -x KOLO_MPI_WORKER=1 " +
                              extra_env + " -np " + std::to_string(ranks) + " " + self_path() +
                              " --gtest_color=no --gtest_filter='" + filter + "' 2>&1";
  MpirunResult run;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return run;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe)) run.output += buf.data();
  run.status = ::pclose(pipe);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) ++n;
  return n;
}

}  // namespace kolo::testing
